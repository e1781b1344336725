"""Priority queues (`x-max-priority`), as RabbitMQ orders them: higher priority first, FIFO within a
priority, no priority = 0, above the maximum = the maximum; requeued messages keep their place;
TTL, max-length, dead-lettering, paging and recovery keep working. Policies cannot set it."""

import signal

import pika
import pytest

import conftest
from dlx_helpers import api, count, eventually, get_n, get_within

BOUND = 60.0


def publish(ch, q, items):
    for body, prio in items:
        props = pika.BasicProperties(priority=prio) if prio is not None else pika.BasicProperties()
        ch.basic_publish("", q, body, props)


def bodies(got):
    return [g[2] for g in got]


MIXED = [(b"n1", None), (b"p1a", 1), (b"p5a", 5), (b"p9", 9), (b"p1b", 1), (b"p0", 0),
         (b"n2", None), (b"p5b", 5)]
ORDERED = [b"p5a", b"p9", b"p5b", b"p1a", b"p1b", b"n1", b"p0", b"n2"]


def test_priority_queue_delivers_highest_first_fifo_within_a_priority(ch, uniq):
    q = uniq("prio")
    ch.queue_declare(q, auto_delete=True, arguments={"x-max-priority": 5})
    ch.confirm_delivery()
    publish(ch, q, MIXED)
    assert bodies(get_n(ch, q, len(MIXED))) == ORDERED


def test_priority_queue_consumer_sees_the_same_order(conn, ch, uniq):
    q = uniq("prio-c")
    ch.queue_declare(q, auto_delete=True, arguments={"x-max-priority": 5})
    ch.confirm_delivery()
    publish(ch, q, MIXED)
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    eventually(lambda: len(got) == len(MIXED), "all delivered", conn=conn)
    assert got == ORDERED


def test_a_requeued_message_keeps_its_place_by_priority(ch, uniq):
    q = uniq("prio-rq")
    ch.queue_declare(q, auto_delete=True, arguments={"x-max-priority": 10})
    ch.confirm_delivery()
    publish(ch, q, [(b"low", 1), (b"hi-1", 7), (b"hi-2", 7)])
    m = get_within(ch, q, auto_ack=False)
    assert m[2] == b"hi-1"
    publish(ch, q, [(b"hi-3", 7)])
    ch.basic_nack(m[0].delivery_tag, requeue=True)
    got = get_n(ch, q, 4)
    assert bodies(got) == [b"hi-1", b"hi-2", b"hi-3", b"low"]
    assert got[0][0].redelivered is True


def test_ttl_max_length_and_dead_lettering_work_on_a_priority_queue(ch, uniq):
    dlq = uniq("prio-dlq")
    ch.queue_declare(dlq, auto_delete=True)
    q = uniq("prio-dl")
    ch.queue_declare(q, auto_delete=True, arguments={
        "x-max-priority": 3, "x-max-length": 2,
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    ch.confirm_delivery()
    # drop-head drops the head: the next message to deliver (highest priority).
    publish(ch, q, [(b"lo", 0), (b"hi", 3), (b"mid", 1)])
    eventually(lambda: count(ch, dlq) == 1, "one dropped into the DLQ", conn=ch.connection)
    dead = get_within(ch, dlq)
    assert dead[2] == b"hi"
    assert dead[1].headers["x-death"][0]["reason"] in ("maxlen", b"maxlen")
    assert dead[1].priority == 3


def test_ttl_and_rejection_dead_letter_from_a_priority_queue(ch, uniq):
    dlq = uniq("prio-dlq")
    ch.queue_declare(dlq, auto_delete=True)
    q = uniq("prio-ttl")
    ch.queue_declare(q, auto_delete=True, arguments={
        "x-max-priority": 3, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    ch.confirm_delivery()
    # A low-priority message with a TTL behind a high-priority one still expires.
    ch.basic_publish("", q, b"hi", pika.BasicProperties(priority=3))
    ch.basic_publish("", q, b"short", pika.BasicProperties(priority=0, expiration="50"))
    eventually(lambda: count(ch, dlq) == 1, "the short one expired", conn=ch.connection)
    dead = get_within(ch, dlq)
    assert dead[2] == b"short"
    assert dead[1].headers["x-death"][0]["reason"] in ("expired", b"expired")
    # Rejecting dead-letters with reason rejected, priority kept.
    m = get_within(ch, q, auto_ack=False)
    assert m[2] == b"hi"
    ch.basic_reject(m[0].delivery_tag, requeue=False)
    dead = get_within(ch, dlq)
    assert dead[2] == b"hi" and dead[1].priority == 3
    assert dead[1].headers["x-death"][0]["reason"] in ("rejected", b"rejected")


def test_x_max_priority_out_of_range_is_refused(ch, uniq):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare(uniq("prio-bad"), arguments={"x-max-priority": 256})
    assert e.value.reply_code == 406


@pytest.mark.charon_only
def test_a_policy_cannot_make_a_queue_a_priority_queue(broker, ch, uniq):
    q = uniq("prio-pol")
    status, _ = api(broker, "PUT", f"/api/policies/%2f/{q}",
                    {"pattern": f"^{q}$", "definition": {"max-priority": 5}, "apply-to": "queues"})
    assert status == 400
    ch.queue_declare(q, auto_delete=True)
    ch.confirm_delivery()
    publish(ch, q, [(b"a", 0), (b"b", 5)])
    assert bodies(get_n(ch, q, 2)) == [b"a", b"b"]


@pytest.mark.charon_only
def test_priority_order_survives_paging_and_kill_9(tmp_path):
    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n",
                                       "heartbeat = 60\nmessage_memory_budget = 1\n", 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        with b.connect() as c:
            ch = c.channel()
            ch.queue_declare("prio-durable", durable=True, arguments={"x-max-priority": 5})
            ch.confirm_delivery()
            for body, prio in MIXED:
                props = pika.BasicProperties(delivery_mode=2, priority=prio)
                ch.basic_publish("", "prio-durable", body, props)
            # Paged out (budget 1 byte) and read back in priority order; the first goes back.
            m = get_within(ch, "prio-durable", auto_ack=False)
            assert m[2] == ORDERED[0]
            ch.basic_nack(m[0].delivery_tag, requeue=True)
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
        b = conftest.start_charon(tmp_path, config_text=cfg)
        with b.connect() as c:
            ch = c.channel()
            n = count(ch, "prio-durable")
            assert n == len(MIXED)
            assert bodies(get_n(ch, "prio-durable", n, BOUND)) == ORDERED
    finally:
        conftest.stop_charon(b)
