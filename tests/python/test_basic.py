import re
import time

import pika
import pika.exceptions as pe
import pytest

from test_exchanges import expect_channel_error


def then_sync(ch, send):
    """`send` (an asynchronous method: publish, ack, reject) followed by a synchronous call.

    pika may see the broker's channel.close while it flushes `send`'s frame (a fast broker) or
    only at the next synchronous call: the returned callable raises it in either case."""
    def call():
        send()
        ch.queue_declare("", exclusive=True)
    return call


def make_queue(ch, n=0, prefix=b"m"):
    """Exclusive server-named queue pre-filled (with confirms) with n messages."""
    q = ch.queue_declare("", exclusive=True).method.queue
    if n:
        pub = ch.connection.channel()
        pub.confirm_delivery()
        for i in range(n):
            pub.basic_publish("", q, prefix + b"%d" % i)
        pub.close()
    return q


def collect(conn, ch, q, n, auto_ack=False, timeout=60.0, **kw):
    got = []
    tag = ch.basic_consume(q, lambda c, m, p, b: got.append((m, p, b)), auto_ack=auto_ack, **kw)
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    return tag, got


def drain(ch, q):
    out = []
    while True:
        m, p, b = ch.basic_get(q, auto_ack=False)
        if m is None:
            return out
        out.append((m, b))


# ---------------------------------------------------------------- mandatory / return

def test_mandatory_unroutable_is_returned_312_no_route(conn, ch, uniq):
    returned = []
    ch.add_on_return_callback(lambda c, m, p, b: returned.append((m, p, b)))
    ch.basic_publish("amq.direct", uniq("nobody"), b"lost", pika.BasicProperties(message_id="r1"),
                     mandatory=True)
    deadline = time.monotonic() + 60
    while not returned and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert len(returned) == 1
    m, p, b = returned[0]
    assert m.reply_code == 312
    assert m.reply_text == "NO_ROUTE"
    assert m.exchange == "amq.direct"
    assert b == b"lost" and p.message_id == "r1"


def test_non_mandatory_unroutable_is_dropped_silently(conn, ch, uniq):
    returned = []
    ch.add_on_return_callback(lambda *a: returned.append(a))
    ch.basic_publish("amq.direct", uniq("nobody"), b"lost")
    conn.process_data_events(0.3)
    assert returned == [] and ch.is_open


def test_mandatory_with_confirms_returns_before_ack(conn, uniq):
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(pe.UnroutableError) as ei:
        ch.basic_publish("amq.direct", uniq("nobody"), b"lost", mandatory=True)
    msgs = ei.value.messages
    assert len(msgs) == 1
    assert msgs[0].method.reply_code == 312 and msgs[0].method.reply_text == "NO_ROUTE"


def test_publish_to_missing_exchange_is_404(ch, uniq):
    x = uniq("nox")
    expect_channel_error(then_sync(ch, lambda: ch.basic_publish(x, "k", b"x")), 404,
                         f"NOT_FOUND - no exchange '{x}' in vhost '/'")


# ---------------------------------------------------------------- consume

def test_server_generated_consumer_tag(broker):
    # pika always picks its own tag, so speak the protocol directly
    from amqp_raw import RawClient
    from pamqp import commands
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect_method(commands.Queue.DeclareOk).method.queue
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag=""), 1)
        tag = c.expect_method(commands.Basic.ConsumeOk).method.consumer_tag
        assert re.fullmatch(r"amq\.ctag-[A-Za-z0-9_\-]{22}", tag), tag
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag=""), 1)
        tag2 = c.expect_method(commands.Basic.ConsumeOk).method.consumer_tag
        assert tag2 != tag


def test_client_consumer_tag_is_used_in_deliveries(conn, ch):
    q = make_queue(ch, 2)
    tag, got = collect(conn, ch, q, 2, consumer_tag="my-tag")
    assert tag == "my-tag"
    assert [m.consumer_tag for m, _, _ in got] == ["my-tag", "my-tag"]
    assert [m.delivery_tag for m, _, _ in got] == [1, 2]
    assert [b for _, _, b in got] == [b"m0", b"m1"]
    assert all(not m.redelivered for m, _, _ in got)
    assert all(m.routing_key == q and m.exchange == "" for m, _, _ in got)


def test_duplicate_consumer_tag_on_channel_is_530(conn, ch):
    q = make_queue(ch)
    ch.basic_consume(q, lambda *a: None, consumer_tag="dup")
    with pytest.raises(pe.ConnectionClosedByBroker) as ei:
        # pika refuses duplicate tags itself; use a raw publish of the method
        ch._impl._send_method(pika.spec.Basic.Consume(queue=q, consumer_tag="dup"))
        conn.process_data_events(1)
        conn.channel()
    assert ei.value.reply_code == 530
    assert ei.value.reply_text == "NOT_ALLOWED - attempt to reuse consumer tag 'dup'"


def test_exclusive_consumer_blocks_other_consumers_403(broker, conn, ch):
    q = make_queue(ch)
    ch.basic_consume(q, lambda *a: None, exclusive=True)
    ch2 = conn.channel()
    expect_channel_error(lambda: ch2.basic_consume(q, lambda *a: None), 403,
                         f"ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use")


def test_exclusive_consume_on_queue_with_consumers_is_403(conn, ch):
    q = make_queue(ch)
    ch.basic_consume(q, lambda *a: None)
    ch2 = conn.channel()
    expect_channel_error(lambda: ch2.basic_consume(q, lambda *a: None, exclusive=True), 403,
                         f"ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use")


def test_consume_missing_queue_is_404(ch, uniq):
    q = uniq("noq")
    expect_channel_error(lambda: ch.basic_consume(q, lambda *a: None), 404,
                         f"NOT_FOUND - no queue '{q}' in vhost '/'")


def test_cancel_stops_deliveries(conn, ch):
    q = make_queue(ch)
    got = []
    tag = ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    ch.basic_publish("", q, b"1")
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    ch.basic_cancel(tag)
    ch.basic_publish("", q, b"2")
    conn.process_data_events(0.3)
    assert got == [b"1"]
    assert ch.basic_get(q, auto_ack=True)[2] == b"2"


def test_cancel_unknown_consumer_tag_is_ok(ch):
    # RabbitMQ replies cancel-ok for unknown tags
    r = ch._impl  # pika won't cancel unknown tags; go through the wire
    ch._impl._send_method(pika.spec.Basic.Cancel(consumer_tag="never-existed"))
    ch.connection.process_data_events(0.3)
    assert ch.is_open


def test_server_sends_basic_cancel_when_consumed_queue_is_deleted(broker, conn, uniq):
    q = uniq("q")
    ch = conn.channel()
    ch.queue_declare(q)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = ch.basic_consume(q, lambda *a: None)
    with broker.connect() as other:
        other.channel().queue_delete(q)
    deadline = time.monotonic() + 60
    while not cancelled and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert len(cancelled) == 1
    assert isinstance(cancelled[0], pika.spec.Basic.Cancel)
    assert cancelled[0].consumer_tag == tag
    assert ch.is_open


def test_no_ack_consumer_gets_messages_without_acking(conn, ch):
    q = make_queue(ch, 3)
    tag, got = collect(conn, ch, q, 3, auto_ack=True)
    assert [b for _, _, b in got] == [b"m0", b"m1", b"m2"]
    ch.basic_cancel(tag)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


# ---------------------------------------------------------------- get

def test_basic_get_returns_message_count_remaining(ch):
    q = make_queue(ch, 3)
    m, p, b = ch.basic_get(q, auto_ack=True)
    assert b == b"m0"
    assert m.message_count == 2
    assert m.delivery_tag == 1
    assert m.redelivered is False
    assert m.exchange == "" and m.routing_key == q


def test_basic_get_empty(ch):
    q = make_queue(ch)
    m, p, b = ch.basic_get(q, auto_ack=True)
    assert m is None and p is None and b is None


def test_basic_get_missing_queue_is_404(ch, uniq):
    q = uniq("noq")
    expect_channel_error(lambda: ch.basic_get(q), 404, f"NOT_FOUND - no queue '{q}' in vhost '/'")


# ---------------------------------------------------------------- ack / nack / reject

def test_ack_multiple(ch):
    q = make_queue(ch, 5)
    msgs = drain(ch, q)
    assert [m.delivery_tag for m, _ in msgs] == [1, 2, 3, 4, 5]
    ch.basic_ack(3, multiple=True)
    ch.basic_nack(0, multiple=True, requeue=True)  # requeue 4,5
    again = drain(ch, q)
    assert [b for _, b in again] == [b"m3", b"m4"]
    assert all(m.redelivered for m, _ in again)


def test_ack_zero_multiple_acks_all(ch):
    q = make_queue(ch, 3)
    drain(ch, q)
    ch.basic_ack(0, multiple=True)
    ch.basic_recover(requeue=True)
    assert drain(ch, q) == []


def test_nack_requeue_preserves_original_order(ch):
    q = make_queue(ch, 5)
    msgs = drain(ch, q)
    # nack in reverse order, one by one
    for m, _ in reversed(msgs):
        ch.basic_nack(m.delivery_tag, requeue=True)
    again = drain(ch, q)
    assert [b for _, b in again] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert all(m.redelivered for m, _ in again)


def test_nack_without_requeue_discards(ch):
    q = make_queue(ch, 2)
    msgs = drain(ch, q)
    ch.basic_nack(msgs[0][0].delivery_tag, requeue=False)
    ch.basic_nack(msgs[1][0].delivery_tag, requeue=True)
    again = drain(ch, q)
    assert [b for _, b in again] == [b"m1"]


def test_reject_requeue_and_discard(ch):
    q = make_queue(ch, 2)
    msgs = drain(ch, q)
    ch.basic_reject(msgs[0][0].delivery_tag, requeue=True)
    ch.basic_reject(msgs[1][0].delivery_tag, requeue=False)
    again = drain(ch, q)
    assert [b for _, b in again] == [b"m0"]
    assert again[0][0].redelivered is True


def test_unknown_delivery_tag_ack_is_406(ch):
    make_queue(ch)
    expect_channel_error(then_sync(ch, lambda: ch.basic_ack(42)), 406,
                         "PRECONDITION_FAILED - unknown delivery tag 42")


def test_unknown_delivery_tag_reject_is_406(ch):
    expect_channel_error(then_sync(ch, lambda: ch.basic_reject(7)), 406,
                         "PRECONDITION_FAILED - unknown delivery tag 7")


def test_double_ack_is_406(ch):
    q = make_queue(ch, 1)
    m, _, _ = ch.basic_get(q)
    ch.basic_ack(m.delivery_tag)
    expect_channel_error(then_sync(ch, lambda: ch.basic_ack(m.delivery_tag)), 406,
                         "PRECONDITION_FAILED - unknown delivery tag 1")


def test_ack_of_autoack_delivery_is_406(ch):
    q = make_queue(ch, 1)
    m, _, _ = ch.basic_get(q, auto_ack=True)
    expect_channel_error(then_sync(ch, lambda: ch.basic_ack(m.delivery_tag)), 406,
                         "PRECONDITION_FAILED - unknown delivery tag 1")


def test_delivery_tags_are_per_channel(conn):
    a, b = conn.channel(), conn.channel()
    q = make_queue(a, 4)
    ma, _, _ = a.basic_get(q)
    mb, _, _ = b.basic_get(q)
    ma2, _, _ = a.basic_get(q)
    assert (ma.delivery_tag, mb.delivery_tag, ma2.delivery_tag) == (1, 1, 2)


# ---------------------------------------------------------------- recover / redelivery

def test_recover_requeue_redelivers_with_redelivered_flag(conn, ch):
    q = make_queue(ch, 2)
    tag, got = collect(conn, ch, q, 2)
    assert [m.redelivered for m, _, _ in got] == [False, False]
    ch.basic_recover(requeue=True)
    deadline = time.monotonic() + 60
    while len(got) < 4 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert [b for _, _, b in got] == [b"m0", b"m1", b"m0", b"m1"]
    assert [m.redelivered for m, _, _ in got[2:]] == [True, True]
    assert [m.delivery_tag for m, _, _ in got] == [1, 2, 3, 4]


def test_redelivered_flag_after_channel_close(broker, conn):
    ch = conn.channel()
    q = make_queue(ch, 1)
    ch2 = conn.channel()
    m, _, _ = ch2.basic_get(q)
    assert m.redelivered is False
    ch2.close()
    m, _, b = ch.basic_get(q, auto_ack=True)
    assert b == b"m0" and m.redelivered is True


def test_unacked_messages_return_in_original_order_on_channel_close(conn):
    ch = conn.channel()
    q = make_queue(ch, 6)
    c2 = conn.channel()
    msgs = drain(c2, q)
    assert len(msgs) == 6
    c2.basic_ack(msgs[2][0].delivery_tag)  # ack m2 only
    c2.close()
    again = drain(ch, q)
    assert [b for _, b in again] == [b"m0", b"m1", b"m3", b"m4", b"m5"]
    assert all(m.redelivered for m, _ in again)


def test_unacked_messages_return_in_original_order_on_connection_close(broker, uniq):
    q = uniq("q")
    with broker.connect() as c1:
        ch = c1.channel()
        ch.queue_declare(q)
        ch.confirm_delivery()
        for i in range(5):
            ch.basic_publish("", q, b"m%d" % i)
    c2 = broker.connect()
    ch2 = c2.channel()
    ch2.basic_qos(prefetch_count=10)
    tag, got = collect(c2, ch2, q, 5)
    assert len(got) == 5
    c2.close()
    with broker.connect() as c3:
        ch3 = c3.channel()
        again = drain(ch3, q)
        assert [b for _, b in again] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        assert all(m.redelivered for m, _ in again)
        ch3.queue_delete(q)


def test_requeued_messages_go_before_newer_ones(ch):
    q = make_queue(ch, 3)
    m0, _, _ = ch.basic_get(q)
    ch.basic_publish("", q, b"new")
    ch.basic_nack(m0.delivery_tag, requeue=True)
    time.sleep(0.1)
    assert [b for _, b in drain(ch, q)] == [b"m0", b"m1", b"m2", b"new"]


# ---------------------------------------------------------------- qos / round-robin

def test_prefetch_count_limits_unacked_per_consumer(conn, ch):
    q = make_queue(ch, 10)
    ch.basic_qos(prefetch_count=3)
    tag, got = collect(conn, ch, q, 3)
    conn.process_data_events(0.3)
    assert len(got) == 3
    ch.basic_ack(got[-1][0].delivery_tag, multiple=True)
    deadline = time.monotonic() + 60
    while len(got) < 6 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.process_data_events(0.2)
    assert len(got) == 6
    assert [b for _, _, b in got] == [b"m%d" % i for i in range(6)]


def test_prefetch_per_consumer_applies_to_each_consumer(conn, ch):
    q1 = make_queue(ch, 5)
    q2 = make_queue(ch, 5)
    ch.basic_qos(prefetch_count=2)  # per consumer (global=False)
    got = []
    ch.basic_consume(q1, lambda c, m, p, b: got.append(b))
    ch.basic_consume(q2, lambda c, m, p, b: got.append(b))
    deadline = time.monotonic() + 60
    while len(got) < 4 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.process_data_events(0.3)  # nothing beyond the two prefetch windows
    assert len(got) == 4


def test_global_prefetch_is_shared_across_channel_consumers(conn, ch):
    q1 = make_queue(ch, 5)
    q2 = make_queue(ch, 5)
    ch.basic_qos(prefetch_count=3, global_qos=True)
    got = []
    ch.basic_consume(q1, lambda c, m, p, b: got.append(b))
    ch.basic_consume(q2, lambda c, m, p, b: got.append(b))
    deadline = time.monotonic() + 60
    while len(got) < 3 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.process_data_events(0.3)  # nothing beyond the shared window
    assert len(got) == 3


def test_basic_get_ignores_prefetch(ch):
    q = make_queue(ch, 3)
    ch.basic_qos(prefetch_count=1)
    assert len(drain(ch, q)) == 3


def test_round_robin_between_consumers(conn, ch):
    q = make_queue(ch)
    a, b = [], []
    ch.basic_consume(q, lambda c, m, p, body: a.append(body), auto_ack=True)
    ch.basic_consume(q, lambda c, m, p, body: b.append(body), auto_ack=True)
    pub = conn.channel()
    pub.confirm_delivery()
    for i in range(10):
        pub.basic_publish("", q, b"%d" % i)
    deadline = time.monotonic() + 60
    while len(a) + len(b) < 10 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert len(a) == 5 and len(b) == 5
    assert sorted(a + b) == sorted(b"%d" % i for i in range(10))
    assert a == [b"%d" % i for i in (0, 2, 4, 6, 8)] or b == [b"%d" % i for i in (0, 2, 4, 6, 8)]


def test_qos_prefetch_size_nonzero_is_connection_error_540(conn, ch):
    with pytest.raises(pe.ConnectionClosedByBroker) as ei:
        ch.basic_qos(prefetch_size=1)
    assert ei.value.reply_code == 540
    assert ei.value.reply_text == "NOT_IMPLEMENTED - prefetch_size!=0 (1)"
