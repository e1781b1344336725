"""Small bodies (up to 38 bytes, charon-core's INLINE_MAX) are kept inside the message itself
instead of a buffer of their own (docs/performance.md, part 23). Stored ones must be counted as
held message bodies and paged exactly like larger ones, and come back byte for byte: from memory,
when admitted paged out (a budget of 1 byte), and after kill -9. (Transient ones under 41 bytes
are counted but never paged: test_tiny_bodies_unpaged.py.)"""

import base64
import json
import signal
import urllib.request

import pytest

import conftest
from mgmt_helpers import wait_for

pytestmark = pytest.mark.charon_only

# sizes around the in-place limit (38): 0..60 bytes, each body unique
BODIES = [b"%03d:" % i + bytes([i % 251]) * (i % 57) for i in range(300)]


def memory(b):
    req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}/api/nodes")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=30) as r:
        name = json.loads(r.read())[0]["name"]
    req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}/api/nodes/{name}/memory")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["memory"]


def consume_all(b, queue):
    got = []
    with b.connect() as c:
        ch = c.channel()
        for method, _props, body in ch.consume(queue, inactivity_timeout=60.0):
            assert method is not None, f"only {len(got)} of {len(BODIES)} delivered"
            got.append(body)
            ch.basic_ack(method.delivery_tag)
            if len(got) == len(BODIES):
                break
        ch.cancel()
    return got


def test_small_bodies_are_counted_as_held_bodies_to_the_byte(private_charon):
    b = private_charon
    assert memory(b)["message_bodies"] == 0
    conftest.publish_persistent(b, "inline-held", BODIES)
    # every stored body held in memory counts its own bytes, those kept in place included
    assert memory(b)["message_bodies"] == sum(len(x) for x in BODIES)
    assert consume_all(b, "inline-held") == BODIES
    wait_for(lambda: memory(b)["message_bodies"] == 0, what="held bodies released")


def test_small_bodies_admitted_paged_out_come_back_byte_for_byte_also_after_kill_9(tmp_path):
    # 1 byte: every stored body is over the budget, so every publish is admitted paged out.
    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n", "heartbeat = 60\nmessage_memory_budget = 1\n", 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        conftest.publish_persistent(b, "inline-paged", BODIES)
        with b.connect() as c:
            ch = c.channel()
            got = []
            for body in BODIES[:100]:
                method, _props, body = ch.basic_get("inline-paged", auto_ack=False)
                assert method is not None
                got.append(body)
            assert got == BODIES[:100]
        # not acked: back in the queue; kill -9 and start again with the same budget
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
        b = conftest.start_charon(tmp_path, config_text=cfg)
        assert consume_all(b, "inline-paged") == BODIES
    finally:
        conftest.stop_charon(b)
