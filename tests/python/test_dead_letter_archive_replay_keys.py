"""Replay to the origin re-publishes with every routing key RabbitMQ's dead-lettering kept in the
`x-death` entry (issue 9, docs/archive.md "Replay"): the routing key and the `CC` keys, BCC
excluded (seed 004: "The routing keys (including CC but excluding BCC)"). A message published
with CC to two queues and dead-lettered from one reaches both again; the BCC queue does not."""

import time

import pika
import pytest

import conftest
from archive_helpers import Api, queue_depth, wait_until

pytestmark = pytest.mark.charon_only


@pytest.fixture
def broker(tmp_path):
    b = conftest.start_charon(tmp_path)
    yield b
    conftest.stop_charon(b)


def drain(ch, queue, timeout=30):
    """Every message in `queue` (body, headers), waiting up to `timeout` for the first."""
    out = []
    deadline = time.monotonic() + timeout
    while True:
        m, props, body = ch.basic_get(queue, auto_ack=True)
        if m is None:
            if out or time.monotonic() > deadline:
                return out
            time.sleep(0.1)
            continue
        out.append((body, dict(props.headers or {})))


def test_replay_to_the_origin_reaches_the_routing_key_and_cc_queues_again(broker):
    api = Api(broker)
    with broker.connect(user="alice", password="secret") as c:
        ch = c.channel()
        ch.exchange_declare("shop", "direct", durable=True)
        ch.queue_declare("shop.dlq", durable=True, arguments={"x-dead-letter-archive": True})
        ch.queue_declare("billing", durable=True, arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "shop.dlq"})
        for q in ("audit", "secret"):
            ch.queue_declare(q, durable=True)
        ch.queue_bind("billing", "shop", "order.billing")
        ch.queue_bind("audit", "shop", "order.audit")
        ch.queue_bind("secret", "shop", "order.secret")
        ch.confirm_delivery()
        ch.basic_publish("shop", "order.billing", b"order 42", pika.BasicProperties(
            delivery_mode=2, message_id="o-42",
            headers={"CC": ["order.audit"], "BCC": ["order.secret"]}))
        assert [b for b, _ in drain(ch, "audit")] == [b"order 42"]
        assert [b for b, _ in drain(ch, "secret")] == [b"order 42"]
        m = None
        while m is None or m[0] is None:
            m = ch.basic_get("billing")
        ch.basic_reject(m[0].delivery_tag, requeue=False)

        rec = api.wait_records(1)["items"][0]
        assert rec["original_queue"] == "billing" and rec["original_exchange"] == "shop"
        # x-death's routing-keys: the routing key and CC, not BCC.
        assert rec["original_routing_keys"] == ["order.billing", "order.audit"]
        assert rec["headers"]["x-death"][0]["routing-keys"] == ["order.billing", "order.audit"]
        assert "BCC" not in rec["headers"]

        status, r = api.call("POST", "/api/dead-letters/replay", {"ids": [rec["id"]]})
        assert status == 202, r
        info = api.wait_job(r["job"])
        assert info["replayed"] == 1 and info["failed"] == 0, info
        billing = drain(ch, "billing")
        audit = drain(ch, "audit")
        assert [b for b, _ in billing] == [b"order 42"]
        assert [b for b, _ in audit] == [b"order 42"]
        assert billing[0][1]["x-replay-count"] == 1
        wait_until(lambda: queue_depth(broker, "secret") == 0, what="secret stays empty")
        time.sleep(0.5)
        assert ch.basic_get("secret", auto_ack=True)[0] is None
        assert drain(ch, "billing", timeout=0) == [] and drain(ch, "audit", timeout=0) == []

        # A given routing key replaces the original ones: only that route.
        status, r = api.call("POST", "/api/dead-letters/replay",
                             {"ids": [rec["id"]], "routing_key": "order.audit"})
        assert api.wait_job(r["job"])["replayed"] == 1
        assert [b for b, _ in drain(ch, "audit")] == [b"order 42"]
        assert drain(ch, "billing", timeout=0) == []
