"""Page-out backpressure (RabbitMQ's credit flow idea, for paging): a queue whose page-out lags
behind its publishers throttles the connections publishing to it — they are not read, and
/api/connections shows them in state "flow" as RabbitMQ does — instead of letting memory grow
to the memory alarm. The page-out is made to lag with the test-only knob
`page_out_test_delay_ms` (one page-out pass per queue per 10 minutes: after the first pass,
written bodies never leave memory by paging), so nothing here depends on the machine's speed:
the publisher is throttled whatever its pace, and only a consumer taking the backlog lets it
go on."""

import base64
import json
import threading
import time
import urllib.request

import pytest

import conftest

pytestmark = pytest.mark.charon_only

MIB = 1 << 20


def body(i, size):
    head = b"%08d" % i
    return head + bytes([i % 251]) * (size - len(head))


def connections(b):
    req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}/api/connections")
    token = base64.b64encode(b"guest:guest").decode()
    req.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def states(b):
    return {c["client_properties"].get("connection_name"): c["state"] for c in connections(b)}


def wait_until(cond, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def test_a_lagging_page_out_throttles_its_publishers_in_state_flow(tmp_path):
    cfg = conftest.CONFIG_TOML.replace(
        "heartbeat = 60\n",
        "heartbeat = 60\nmessage_memory_budget = 1048576\npage_out_flow_bytes = 2097152\n"
        "page_out_test_delay_ms = 600000\n", 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    size, n = 128 << 10, 120  # 15 MiB of transient bodies, 7.5 times the flow bound
    published = []
    errors = []
    finished, release = threading.Event(), threading.Event()

    def publish():
        try:
            with b.connect(client_properties={"connection_name": "publisher"},
                           blocked_connection_timeout=None) as c:
                ch = c.channel()
                for i in range(n):
                    ch.basic_publish("", "lagging", body(i, size))
                    published.append(i)
                finished.set()
                while not release.is_set():
                    c.process_data_events(0.1)
        except Exception as e:  # reported below
            errors.append(e)
        finally:
            finished.set()

    t = None
    try:
        with b.connect(client_properties={"connection_name": "consumer"}) as c:
            ch = c.channel()
            ch.queue_declare("lagging")
            t = threading.Thread(target=publish, daemon=True)
            t.start()
            # Page-out is held back: once 2 MiB of written bodies wait, the publisher is
            # throttled and stays so (nothing else lowers the flag while nobody consumes).
            wait_until(lambda: states(b).get("publisher") == "flow",
                       "the publisher's connection in state flow")
            stalled = ch.queue_declare("lagging", passive=True).method.message_count
            assert stalled < n, "the publisher was not held back"
            assert states(b).get("consumer") == "running", "a consumer is never throttled"
            time.sleep(1.0)
            assert ch.queue_declare("lagging", passive=True).method.message_count == stalled, \
                "a throttled connection's publishes must wait"
            assert states(b).get("publisher") == "flow"
            # Taking the backlog lowers the flag: the publisher goes on, nothing is lost.
            got = 0
            deadline = time.monotonic() + 120
            while got < n and time.monotonic() < deadline:
                m, _, data = ch.basic_get("lagging", auto_ack=True)
                if m is None:
                    time.sleep(0.05)
                    continue
                assert data == body(got, size), f"message {got} came back different"
                got += 1
            assert got == n, f"only {got} of {n} messages arrived"
            assert finished.wait(60) and not errors, errors
            assert published == list(range(n))
            wait_until(lambda: states(b).get("publisher") == "running",
                       "the publisher back to running")
            release.set()
            t.join(60)
        log = b.log_path.read_text(errors="replace")
        assert "memory alarm set" not in log
    finally:
        release.set()
        conftest.stop_charon(b)
