"""Transient bodies smaller than a store index entry (41 bytes) are counted against
message_memory_budget but never paged out: paging one would add an index entry larger than
the body it frees (docs/performance.md, "Expiry at 10M"). Larger transient bodies behind them
in the same queue are still paged out, and everything comes back byte for byte."""

import base64
import json
import urllib.request

import pytest

import conftest
from mgmt_helpers import wait_for

pytestmark = pytest.mark.charon_only

BUDGET = 256 << 10
# A queue tracks its transient bodies for paging once it holds 4 MiB of ready bodies
# (queue::stored::TRACK_BACKLOG): with 40-byte bodies, from its 104,858th message on.
TINY, TINY_N, UNTRACKED = 40, 150_000, (4 << 20) // 40
LARGE, LARGE_N = 48, 4_000


def body(i, size):
    head = b"%08d:" % i
    return head + bytes([i % 251]) * (size - len(head))


def memory(b):
    auth = "Basic " + base64.b64encode(b"guest:guest").decode()

    def get(path):
        req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}{path}")
        req.add_header("Authorization", auth)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    name = get("/api/nodes")[0]["name"]
    return get(f"/api/nodes/{name}/memory")["memory"]


def ready(ch, queue):
    return ch.queue_declare(queue, passive=True).method.message_count


def test_tiny_transient_bodies_are_counted_but_never_paged_and_larger_ones_behind_them_are(tmp_path):
    cfg = conftest.CONFIG_TOML.replace(
        "heartbeat = 60\n", f"heartbeat = 60\nmessage_memory_budget = {BUDGET}\n", 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        with b.connect() as c:
            ch = c.channel()
            ch.queue_declare("tiny")
            for i in range(TINY_N):
                ch.basic_publish("", "tiny", body(i, TINY))
            wait_for(lambda: ready(ch, "tiny") == TINY_N, timeout=300, what="tiny bodies queued")
            tracked = TINY * (TINY_N - UNTRACKED)
            assert tracked > 4 * BUDGET
            # counted: every tracked tiny body, well over the budget
            assert memory(b)["message_bodies"] == tracked
            # larger bodies behind them: over the budget, so they are paged out (all of them,
            # as the tiny ones keep the budget exceeded), and the tiny ones stay counted
            for i in range(LARGE_N):
                ch.basic_publish("", "tiny", body(TINY_N + i, LARGE))
            wait_for(lambda: ready(ch, "tiny") == TINY_N + LARGE_N, timeout=300,
                     what="larger bodies queued")
            wait_for(lambda: memory(b)["message_bodies"] == tracked, timeout=300,
                     what=f"held bodies back to the tiny ones' {tracked} bytes (larger ones paged out)")
            # everything comes back in order, byte for byte
            ch.basic_qos(prefetch_count=2000)
            n = 0
            for method, _props, data in ch.consume("tiny", inactivity_timeout=60.0):
                assert method is not None, f"only {n} delivered"
                size = TINY if n < TINY_N else LARGE
                assert data == body(n, size), f"message {n} came back different"
                n += 1
                if n % 1000 == 0 or n == TINY_N + LARGE_N:
                    ch.basic_ack(method.delivery_tag, multiple=True)
                if n == TINY_N + LARGE_N:
                    break
            ch.cancel()
        wait_for(lambda: memory(b)["message_bodies"] == 0, timeout=120, what="held bodies released")
    finally:
        conftest.stop_charon(b)
