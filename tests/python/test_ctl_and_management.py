"""`charon ctl` (a client of the management API, rabbitmqctl-style) and the management API's
queue listing, including the per-queue count of dead letters dropped for a missing DLX."""

import subprocess

import pytest

from conftest import find_binary
from dlx_helpers import api, assert_empty_for, eventually, get_within

pytestmark = pytest.mark.charon_only


def ctl(broker, *args):
    return subprocess.run(
        [find_binary(), "ctl", "--url", f"http://127.0.0.1:{broker.http_port}", *args],
        capture_output=True, text=True, timeout=20)


def test_ctl_set_policy_applies_to_queues_and_list_and_clear_policies(broker, ch, uniq):
    x, d, q = uniq("dlx"), uniq("dlq"), uniq("ctlq")
    ch.exchange_declare(x, "fanout")
    ch.queue_declare(d)
    ch.queue_bind(d, x)
    ch.queue_declare(q)
    name = uniq("DLX")
    r = ctl(broker, "set_policy", name, f"^{q}$", f'{{"dead-letter-exchange":"{x}"}}',
            "--apply-to", "queues", "--priority", "7")
    assert r.returncode == 0, r.stderr
    assert f'Setting policy "{name}"' in r.stdout
    listed = ctl(broker, "list_policies")
    assert listed.returncode == 0 and name in listed.stdout and f"^{q}$" in listed.stdout
    ch.basic_publish("", q, b"m")
    m = get_within(ch, q, auto_ack=False)
    ch.basic_reject(m[0].delivery_tag, requeue=False)
    assert get_within(ch, d) is not None
    r = ctl(broker, "clear_policy", name)
    assert r.returncode == 0, r.stderr
    assert name not in ctl(broker, "list_policies").stdout
    ch.basic_publish("", q, b"m2")
    m = get_within(ch, q, auto_ack=False)
    ch.basic_reject(m[0].delivery_tag, requeue=False)
    assert_empty_for(ch, d, 0.2)


def test_ctl_reports_api_errors(broker):
    r = ctl(broker, "set_policy", "bad", ".*", '{"message-ttl": -1}')
    assert r.returncode != 0
    assert "400" in r.stderr
    r = ctl(broker, "--password", "wrong", "list_policies")
    assert r.returncode != 0 and "401" in r.stderr


def test_missing_dlx_drops_are_counted_per_queue(broker, ch, uniq):
    q = uniq("nodlx")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": uniq("absent")})
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    for _ in range(3):
        m = get_within(ch, q, auto_ack=False)
        ch.basic_reject(m[0].delivery_tag, requeue=False)
    eventually(lambda: api(broker, "GET", f"/api/queues/%2f/{q}")[1]
               .get("dead_letters_dropped_no_dlx") == 3, "3 dropped", conn=ch.connection)
    status, info = api(broker, "GET", f"/api/queues/%2f/{q}")
    assert status == 200
    assert info["dead_letters_dropped_no_dlx"] == 3
    assert (info["messages_ready"], info["consumers"]) == (0, 0)
    listed = ctl(broker, "list_queues")
    assert listed.returncode == 0 and q in listed.stdout
    logs = broker.log_path.read_text(errors="replace").splitlines()
    warned = [line for line in logs if "dead-letter exchange does not exist" in line and q in line]
    assert len(warned) == 1, "logged once per queue, not per message"
