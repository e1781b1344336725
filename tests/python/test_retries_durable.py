"""Durable retries (docs/retries.md, docs/storage-format.md v2 `Park`): a persistent message
parked in a durable queue survives a clean restart and kill -9, comes back no earlier than its
due time with its x-retry-count, exactly once; one whose due time passed while the broker was down
comes back at once. Lower bounds on delays are strict; upper bounds generous (UPPER_SLACK_S)."""

import time

import pika
import pytest

import conftest
from dlx_helpers import api, get_within

pytestmark = pytest.mark.charon_only

UPPER_SLACK_S = 60.0


@pytest.fixture
def node(tmp_path):
    box = {"b": conftest.start_charon(tmp_path)}
    yield box
    conftest.stop_charon(box["b"])


restart = conftest.restart_charon


def wait_parked(b, q, n):
    deadline = time.monotonic() + UPPER_SLACK_S
    while time.monotonic() < deadline:
        status, body = api(b, "GET", f"/api/queues/%2f/{q}")
        if status == 200 and body["messages_parked"] == n:
            return body
        time.sleep(0.05)
    raise AssertionError(f"{q} never had {n} parked")


def barrier(b, uniq):
    """A confirmed persistent publish: everything the broker appended before it is on disk."""
    with b.connect() as c:
        ch = c.channel()
        q = uniq("barrier")
        ch.queue_declare(q, durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", q, b"x", pika.BasicProperties(delivery_mode=2))


@pytest.mark.parametrize("hard", [False, True], ids=["restart", "kill9"])
def test_parked_persistent_messages_come_back_on_time_after_restart(tmp_path, node, uniq, hard):
    b = node["b"]
    q_long, q_short = uniq("dur-long"), uniq("dur-short")
    long_ms, short_ms = 6000, 300
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare(q_long, durable=True, arguments={"x-retry-delays": [long_ms],
                                                          "x-retry-order-key": "k"})
        ch.queue_declare(q_short, durable=True, arguments={"x-retry-delays": [short_ms]})
        for body, key in [(b"long", "L"), (b"other", "O"), (b"held", "L")]:
            ch.basic_publish("", q_long, body,
                             pika.BasicProperties(delivery_mode=2, headers={"k": key}))
        ch.basic_publish("", q_short, b"short", pika.BasicProperties(delivery_mode=2))
        m = get_within(ch, q_long, timeout=10, auto_ack=False)
        assert m[2] == b"long"
        t_long = time.monotonic()
        ch.basic_reject(m[0].delivery_tag, requeue=False)
        wait_parked(b, q_long, 1)
        # "held" (key L) waits behind "long"; "other" flows.
        m = get_within(ch, q_long, timeout=10)
        assert m[2] == b"other"
        assert ch.basic_get(q_long)[0] is None
        m = get_within(ch, q_short, timeout=10, auto_ack=False)
        ch.basic_nack(m[0].delivery_tag, requeue=False)
        wait_parked(b, q_short, 1)
    barrier(b, uniq)
    b = node["b"] = restart(tmp_path, b, hard)
    with b.connect() as c:
        ch = c.channel()
        # Its due time passed while the broker was down (or comes within short_ms): back at once.
        m = get_within(ch, q_short, timeout=short_ms / 1000 + UPPER_SLACK_S)
        assert m is not None and m[2] == b"short" and m[1].headers["x-retry-count"] == 1
        got = []
        deadline = time.monotonic() + long_ms / 1000 + UPPER_SLACK_S
        while len(got) < 2 and time.monotonic() < deadline:
            m = get_within(ch, q_long, timeout=0.2)
            if m is not None:
                got.append((m[2], m[1].headers.get("x-retry-count"), time.monotonic()))
        assert [(g[0], g[1]) for g in got] == [(b"long", 1), (b"held", None)], got
        assert got[0][2] - t_long >= long_ms / 1000 - 0.005
        time.sleep(0.5)
        assert ch.basic_get(q_long)[0] is None and ch.basic_get(q_short)[0] is None  # never twice
    for q in (q_long, q_short):
        status, body = api(b, "GET", f"/api/queues/%2f/{q}")
        assert body["messages_parked"] == 0 and body["messages_held"] == 0
