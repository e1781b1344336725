"""Dead-lettering triggers (spec 004 "What is Dead Lettering"): rejection, TTL, length limits
with each overflow mode, delivery limit; and what does not dead-letter (x-expires, purge).
Each test is named after the rule it checks."""

import time
import pika
import pika.exceptions as pe
import pytest

from dlx_helpers import api, assert_empty_for, count, eventually, get_n, get_within, props


@pytest.fixture
def dlq(ch, uniq):
    """A fanout DLX bound to a DLQ; returns (dlx, dlq)."""
    x, q = uniq("dlx"), uniq("dlq")
    ch.exchange_declare(x, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    return x, q


def reason_of(p):
    return p.headers["x-death"][0]["reason"]


def test_basic_reject_requeue_false_dead_letters_with_reason_rejected(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"r")
    m, _, _ = get_within(ch, q, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)
    got = get_within(ch, d)
    assert got and got[2] == b"r" and reason_of(got[1]) == "rejected"
    assert count(ch, q) == 0


def test_basic_nack_requeue_false_single_dead_letters(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"n")
    m, _, _ = get_within(ch, q, auto_ack=False)
    ch.basic_nack(m.delivery_tag, multiple=False, requeue=False)
    got = get_within(ch, d)
    assert got and reason_of(got[1]) == "rejected"


def test_basic_nack_multiple_requeue_false_after_consume_dead_letters_all(conn, ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x})
    for i in range(5):
        ch.basic_publish("", q, b"m%d" % i)
    c = conn.channel()
    tags = []
    c.basic_consume(q, lambda _c, m, _p, _b: tags.append(m.delivery_tag))
    while len(tags) < 5:
        conn.process_data_events(0.05)
    c.basic_nack(tags[-1], multiple=True, requeue=False)
    got = get_n(ch, d, 5)
    assert [g[2] for g in got] == [b"m%d" % i for i in range(5)]
    assert all(reason_of(g[1]) == "rejected" for g in got)


def test_requeue_true_does_not_dead_letter(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"k")
    m, _, _ = get_within(ch, q, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=True)
    again = get_within(ch, q)
    assert again and again[0].redelivered
    assert_empty_for(ch, d, 0.1)


def test_per_message_ttl_dead_letters_with_reason_expired(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"t", props(expiration="100"))
    got = get_within(ch, d)
    assert got and reason_of(got[1]) == "expired"
    assert count(ch, q) == 0


def test_queue_ttl_dead_letters_with_reason_expired(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, "x-message-ttl": 100})
    ch.basic_publish("", q, b"t")
    got = get_within(ch, d)
    assert got and reason_of(got[1]) == "expired"


def test_smaller_of_queue_ttl_and_message_ttl_wins(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, "x-message-ttl": 60000})
    ch.basic_publish("", q, b"short", props(expiration="100"))
    assert get_within(ch, d) is not None
    q2 = uniq("src")
    ch.queue_declare(q2, arguments={"x-dead-letter-exchange": x, "x-message-ttl": 100})
    ch.basic_publish("", q2, b"long", props(expiration="60000"))
    assert get_within(ch, d) is not None


def test_expiration_zero_expires_unless_deliverable_at_once(conn, ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"zero", props(expiration="0"))
    got = get_within(ch, d)
    assert got and got[2] == b"zero" and reason_of(got[1]) == "expired"
    # with a consumer ready, it is delivered
    c = conn.channel()
    seen = []
    c.basic_consume(q, lambda _c, m, _p, b: seen.append(b), auto_ack=True)
    conn.process_data_events(0.1)
    ch.basic_publish("", q, b"zero2", props(expiration="0"))
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert seen == [b"zero2"]
    assert_empty_for(ch, d, 0.1)


def test_expired_messages_are_never_delivered(ch, uniq):
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-message-ttl": 50})
    ch.basic_publish("", q, b"old")
    ch.connection.sleep(0.2)
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_max_length_drop_head_dead_letters_the_head_with_reason_maxlen(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, "x-max-length": 2})
    for b in (b"a", b"b", b"c"):
        ch.basic_publish("", q, b)
    got = get_within(ch, d)
    assert got and got[2] == b"a" and reason_of(got[1]) == "maxlen"
    assert count(ch, q) == 2


def test_max_length_bytes_drop_head_dead_letters_with_reason_maxlen(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, "x-max-length-bytes": 10})
    for b in (b"aaaa", b"bbbb", b"cccc"):
        ch.basic_publish("", q, b)
    got = get_within(ch, d)
    assert got and got[2] == b"aaaa" and reason_of(got[1]) == "maxlen"


def test_reject_publish_dlx_nacks_the_publisher_and_dead_letters(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, "x-max-length": 1,
                                   "x-overflow": "reject-publish-dlx"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"first")
    with pytest.raises(pe.NackError):
        ch.basic_publish("", q, b"second")
    got = get_within(ch, d)
    assert got and got[2] == b"second" and reason_of(got[1]) == "maxlen"
    assert count(ch, q) == 1


def test_reject_publish_nacks_and_does_not_dead_letter(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, "x-max-length": 1,
                                   "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"first")
    with pytest.raises(pe.NackError):
        ch.basic_publish("", q, b"second")
    ch.basic_publish("", d, b"probe")  # the DLQ gets only what we put there
    got = get_within(ch, d)
    assert got and got[2] == b"probe"
    assert_empty_for(ch, d, 0.2)


def test_delivery_limit_dead_letters_quorum_message_with_reason_delivery_limit(ch, uniq, dlq):
    x, d = dlq
    q = uniq("qq")
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 1,
                                                 "x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"poison")
    for _ in range(2):
        m = get_within(ch, q, auto_ack=False)
        assert m, "message should be redelivered up to the limit"
        ch.basic_nack(m[0].delivery_tag, requeue=True)
    got = get_within(ch, d)
    assert got and got[2] == b"poison" and reason_of(got[1]) == "delivery_limit"
    assert ch.basic_get(q, auto_ack=True)[0] is None
    ch.queue_delete(q)


@pytest.mark.spec_4_0
def test_quorum_deliveries_carry_x_delivery_count_and_the_dead_letter_does_not(ch, uniq, dlq):
    from dlx_helpers import is_long
    x, d = dlq
    q = uniq("qq")
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 1,
                                                 "x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"counted")
    counts = []
    for _ in range(2):
        m = get_within(ch, q, auto_ack=False)
        assert m
        v = (m[1].headers or {}).get("x-delivery-count")
        assert v is None or is_long(v)
        counts.append(v)
        ch.basic_nack(m[0].delivery_tag, requeue=True)
    # RabbitMQ 4.x: absent on the first delivery (3.10.8's basic.get sent 0).
    assert counts == [None, 1]
    got = get_within(ch, d)
    assert got and "x-delivery-count" not in got[1].headers
    ch.queue_delete(q)


@pytest.mark.spec_4_0
def test_delivery_limit_does_not_count_returns_by_channel_close(broker, ch, uniq, dlq):
    # RabbitMQ 4.x: a closed channel's messages go back without a failed delivery (3.10.8
    # counted them); see test_quorum_4x.py for the full set.
    x, d = dlq
    q = uniq("qq")
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 0,
                                                 "x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"held")
    with broker.connect() as c2:
        ch2 = c2.channel()
        assert get_within(ch2, q, auto_ack=False) is not None
    m = get_within(ch, q, auto_ack=False)
    assert m is not None and m[0].redelivered
    assert get_within(ch, d, 0.2) is None
    ch.basic_reject(m[0].delivery_tag, requeue=True)
    got = get_within(ch, d)
    assert got and reason_of(got[1]) == "delivery_limit"
    ch.queue_delete(q)


def test_queue_expiry_x_expires_does_not_dead_letter_its_messages(broker, ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, "x-expires": 200})
    ch.basic_publish("", q, b"in-expiring-queue")
    # Polled through the management API: a passive declare would renew the lease.
    eventually(lambda: api(broker, "GET", f"/api/queues/%2f/{q}")[0] == 404,
               "the queue expired", conn=ch.connection)
    with pytest.raises(pe.ChannelClosedByBroker) as ei:
        ch.queue_declare(q, passive=True)
    assert ei.value.reply_code == 404


def test_queue_expiry_drops_messages_without_dead_lettering(broker, conn, uniq):
    ch = conn.channel()
    x, d = uniq("dlx"), uniq("dlq")
    ch.exchange_declare(x, "fanout")
    ch.queue_declare(d)
    ch.queue_bind(d, x)
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, "x-expires": 200})
    ch.basic_publish("", q, b"gone")

    eventually(lambda: api(broker, "GET", f"/api/queues/%2f/{q}")[0] == 404,
               "the queue expired", conn=conn)
    assert_empty_for(ch, d, 0.1)


def test_purge_does_not_dead_letter(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"p")
    ch.connection.sleep(0.05)
    assert ch.queue_purge(q).method.message_count == 1
    assert_empty_for(ch, d, 0.2)


@pytest.mark.spec_4_0
def test_message_expires_when_its_ttl_passes_even_when_not_at_the_head(ch, uniq, dlq):
    x, d = dlq
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"head", props(expiration="60000"))
    ch.basic_publish("", q, b"second", props(expiration="100"))
    got = get_within(ch, d)
    assert got and got[2] == b"second"
    assert count(ch, q) == 1
