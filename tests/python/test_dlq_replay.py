"""`POST /api/queues/{vhost}/{name}/messages/replay` (Charon's extension behind the UI's DLQ
replay): dead letters move inside the broker to their original exchange and routing keys (or a
given exchange and key) with their properties unchanged — the x-death `time` is still an AMQP
timestamp, every header keeps its value and type — leave the DLQ only when routed, and the move
is durable (after kill -9 each message is in exactly one place)."""

import calendar
import datetime
import decimal
import signal

import pika
import pytest

from conftest import start_charon, stop_charon
from mgmt_helpers import Api

pytestmark = [pytest.mark.charon_only, pytest.mark.needs_users]

WHEN = datetime.datetime(2024, 5, 17, 8, 30, 0)


def epoch(dt):
    return calendar.timegm(dt.utctimetuple())


def peek(api, queue):
    return api.ok(f"/queues/%2F/{queue}/messages?offset=0&count=100")


def replay(api, queue, body):
    r = api.post(f"/queues/%2F/{queue}/messages/replay", body)
    assert r.status_code == 200, r.text
    return r.json()


def setup(b):
    c = b.connect()
    ch = c.channel()
    ch.exchange_declare("rp.x", "direct", durable=True)
    ch.exchange_declare("rp.dlx", "fanout", durable=True)
    ch.queue_declare("rp.work", durable=True, arguments={"x-dead-letter-exchange": "rp.dlx"})
    ch.queue_bind("rp.work", "rp.x", "job")
    ch.queue_declare("rp.dlq", durable=True)
    ch.queue_bind("rp.dlq", "rp.dlx")
    ch.queue_declare("rp.parking", durable=True)
    ch.confirm_delivery()
    for i in range(3):
        props = pika.BasicProperties(
            delivery_mode=2, content_type="application/json", message_id=f"id-{i}",
            correlation_id="corr", priority=3, timestamp=1_700_000_000 + i,
            headers={"i": i, "ratio": decimal.Decimal("0.25"), "flag": True, "when": WHEN,
                     "nested": {"k": "v", "n": -7}, "list": [1, "two"]})
        ch.basic_publish("rp.x", "job", f'{{"n":{i}}}'.encode(), props)
    # A consumer rejects all three: they die into rp.dlq.
    for _ in range(3):
        m, _p, _b = ch.basic_get("rp.work")
        ch.basic_reject(m.delivery_tag, requeue=False)
    c.close()


def count(b, queue):
    c = b.connect()
    n = c.channel().queue_declare(queue, passive=True).method.message_count
    c.close()
    return n


def test_replay_moves_dead_letters_keeping_headers_and_types(tmp_path):
    b = start_charon(tmp_path)
    try:
        api = Api(b)
        setup(b)
        peeked = peek(api, "rp.dlq")
        assert [m["properties"]["message_id"] for m in peeked] == ["id-0", "id-1", "id-2"]
        first = peeked[0]
        death = first["properties"]["headers"]["x-death"][0]
        assert (death["reason"], death["queue"], death["exchange"]) == ("rejected", "rp.work", "rp.x")

        # Replay the first to its original exchange (rp.x, key job).
        res = replay(api, "rp.dlq", {"ids": [first["id"]]})
        assert res["replayed"] == [{"id": first["id"], "exchange": "rp.x", "queues": 1}]
        assert res["missing"] == [] and res["failed"] == []
        assert [m["properties"]["message_id"] for m in peek(api, "rp.dlq")] == ["id-1", "id-2"]
        # Again: no longer there.
        assert replay(api, "rp.dlq", {"ids": [first["id"]]})["missing"] == [first["id"]]

        c = b.connect()
        ch = c.channel()
        m, props, body = ch.basic_get("rp.work", auto_ack=True)
        assert body == b'{"n":0}' and m.exchange == "rp.x" and m.routing_key == "job"
        h = props.headers
        xd = h["x-death"][0]
        # The x-death time is still an AMQP timestamp (pika decodes it as a datetime).
        assert isinstance(xd["time"], datetime.datetime), type(xd["time"])
        assert epoch(xd["time"]) == death["time"]
        assert (xd["count"], xd["reason"], xd["queue"], xd["exchange"], xd["routing-keys"]) == \
            (death["count"], "rejected", "rp.work", "rp.x", ["job"])
        # Every header as published, with its type.
        assert h["i"] == 0 and h["flag"] is True and h["ratio"] == decimal.Decimal("0.25")
        assert isinstance(h["when"], datetime.datetime) and h["when"] == WHEN
        assert h["nested"] == {"k": "v", "n": -7} and h["list"] == [1, "two"]
        # The headers are those the DLQ held (peek decodes them the same way).
        assert set(h) == set(first["properties"]["headers"])
        for k in ("x-first-death-queue", "x-first-death-exchange", "x-first-death-reason",
                  "x-last-death-queue", "x-last-death-exchange", "x-last-death-reason"):
            assert h.get(k) == first["properties"]["headers"].get(k), k
        assert (props.message_id, props.correlation_id, props.content_type, props.priority,
                props.delivery_mode, props.timestamp) == ("id-0", "corr", "application/json", 3, 2, 1_700_000_000)

        # Move the second to a given exchange/key (default exchange → rp.parking).
        second = peek(api, "rp.dlq")[0]
        res = replay(api, "rp.dlq", {"ids": [second["id"]], "exchange": "amq.default",
                                     "routing_key": "rp.parking"})
        assert res["replayed"] == [{"id": second["id"], "exchange": "", "queues": 1}]
        m, props, body = ch.basic_get("rp.parking", auto_ack=True)
        assert body == b'{"n":1}' and isinstance(props.headers["x-death"][0]["time"], datetime.datetime)

        # Unroutable or never dead-lettered: it stays, with the reason.
        third = peek(api, "rp.dlq")[0]
        res = replay(api, "rp.dlq", {"ids": [third["id"]], "exchange": "rp.x", "routing_key": "nowhere"})
        assert res["replayed"] == [] and "routed it to no queue" in res["failed"][0]["reason"], (res, third["id"])
        ch.confirm_delivery()
        ch.basic_publish("", "rp.dlq", b"plain", pika.BasicProperties(delivery_mode=2))
        plain = [m for m in peek(api, "rp.dlq") if m["payload"] == "plain"][0]
        res = replay(api, "rp.dlq", {"ids": [plain["id"]]})
        assert "no x-death" in res["failed"][0]["reason"]
        assert len(peek(api, "rp.dlq")) == 2
        # Errors as RabbitMQ would answer them.
        assert api.post("/queues/%2F/nope/messages/replay", {"ids": [1]}).status_code == 404
        assert api.post("/queues/%2F/rp.dlq/messages/replay", {"idz": []}).status_code == 400
        c.close()

        # The third is replayed, then the broker is killed: after the restart it is in rp.work
        # only (the move was durable before the answer).
        assert replay(api, "rp.dlq", {"ids": [third["id"]]})["replayed"][0]["queues"] == 1
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(30)
        b = start_charon(tmp_path)
        api = Api(b)
        assert count(b, "rp.work") == 1
        assert [m["payload"] for m in peek(api, "rp.dlq")] == ["plain"]
        c = b.connect()
        m, props, body = c.channel().basic_get("rp.work", auto_ack=True)
        assert body == b'{"n":2}' and isinstance(props.headers["x-death"][0]["time"], datetime.datetime)
        assert m.redelivered is False
        c.close()
    finally:
        stop_charon(b)
