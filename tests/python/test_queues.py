import time
import re

import pika
import pika.exceptions as pe
import pytest

from test_exchanges import expect_channel_error


def test_server_named_queue_has_amq_gen_prefix(ch):
    r = ch.queue_declare("", exclusive=True)
    assert re.fullmatch(r"amq\.gen-[A-Za-z0-9_\-]{22}", r.method.queue), r.method.queue
    assert r.method.message_count == 0
    assert r.method.consumer_count == 0


def test_server_named_queues_are_unique(ch):
    names = {ch.queue_declare("", exclusive=True).method.queue for _ in range(20)}
    assert len(names) == 20


def test_declare_ok_reports_message_and_consumer_counts(broker, ch, uniq):
    ch.confirm_delivery()
    q = ch.queue_declare(uniq("q"), exclusive=True).method.queue
    for i in range(3):
        ch.basic_publish("", q, b"m%d" % i)
    c2 = ch.connection.channel()
    c2.basic_qos(prefetch_count=1)
    delivered = []
    c2.basic_consume(q, lambda *a: delivered.append(a), auto_ack=False)
    deadline = time.monotonic() + 60
    while not delivered and time.monotonic() < deadline:
        ch.connection.process_data_events(0.05)
    r = ch.queue_declare(q, passive=True)
    # one message is unacked at the consumer; message_count counts ready msgs only
    assert r.method.consumer_count == 1
    assert r.method.message_count == 2
    r2 = ch.queue_declare(q, exclusive=True)
    assert r2.method.consumer_count == 1


def test_declare_ok_message_count_counts_ready_messages(ch, uniq):
    ch.confirm_delivery()  # publishes are confirmed, so counts are deterministic
    q = ch.queue_declare(uniq("q"), exclusive=True).method.queue
    for i in range(5):
        ch.basic_publish("", q, b"x")
    assert ch.queue_declare(q, passive=True).method.message_count == 5
    ch.basic_get(q, auto_ack=False)
    assert ch.queue_declare(q, passive=True).method.message_count == 4


def test_passive_declare_of_missing_queue_is_404(ch, uniq):
    q = uniq("missing")
    expect_channel_error(lambda: ch.queue_declare(q, passive=True), 404,
                         f"NOT_FOUND - no queue '{q}' in vhost '/'")


def test_amq_prefix_queue_declare_is_refused(ch):
    expect_channel_error(lambda: ch.queue_declare("amq.myqueue"), 403,
                         "ACCESS_REFUSED - queue name 'amq.myqueue' contains reserved prefix 'amq.*'")


def test_durable_queue_declare_and_delete(ch, uniq):
    q = uniq("durable")
    r = ch.queue_declare(q, durable=True)
    assert r.method.queue == q
    ch.queue_declare(q, passive=True)
    r = ch.queue_delete(q)
    assert r.method.message_count == 0
    expect_channel_error(lambda: ch.queue_declare(q, passive=True), 404)


@pytest.mark.parametrize("first,second,arg,received,current", [
    (dict(durable=True), dict(durable=False), "durable", "false", "true"),
    (dict(auto_delete=False), dict(auto_delete=True), "auto_delete", "true", "false"),
])
def test_inequivalent_queue_redeclare_is_406(broker, uniq, first, second, arg, received, current):
    q = uniq("q")
    c = broker.connect()
    try:
        ch = c.channel()
        ch.queue_declare(q, **first)
        expect_channel_error(
            lambda: ch.queue_declare(q, **second), 406,
            f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue '{q}' in vhost '/': "
            f"received '{received}' but current is '{current}'")
        c.channel().queue_delete(q)
    finally:
        c.close()


def test_inequivalent_queue_argument_redeclare_is_406(broker, uniq):
    q = uniq("q")
    c = broker.connect()
    try:
        ch = c.channel()
        ch.queue_declare(q, arguments={"x-max-length": 10})
        expect_channel_error(
            lambda: ch.queue_declare(q, arguments={"x-max-length": 20}), 406,
            f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{q}' in vhost '/': "
            "received '20' but current is '10'")
        ch = c.channel()
        expect_channel_error(
            lambda: ch.queue_declare(q), 406,
            f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{q}' in vhost '/': "
            "received none but current is the value '10' of type 'signedint'")
        c.channel().queue_delete(q)
    finally:
        c.close()


def test_exclusive_queue_from_other_connection_is_405(broker, uniq):
    q = uniq("excl")
    c1 = broker.connect()
    c2 = broker.connect()
    try:
        c1.channel().queue_declare(q, exclusive=True)
        ch2 = c2.channel()
        expect_channel_error(
            lambda: ch2.queue_declare(q, passive=True), 405,
            f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'. "
            "It could be originally declared on another connection or the exclusive property "
            "value does not match that of the original declaration.")
        ch2 = c2.channel()
        expect_channel_error(lambda: ch2.basic_consume(q, lambda *a: None), 405)
        ch2 = c2.channel()
        expect_channel_error(lambda: ch2.queue_delete(q), 405)
        ch2 = c2.channel()
        expect_channel_error(lambda: ch2.queue_purge(q), 405)
        # publishing to it from another connection is allowed
        ch2 = c2.channel()
        ch2.basic_publish("", q, b"hello")
        ch2.queue_declare("", exclusive=True)  # sync
        assert c1.channel().basic_get(q, auto_ack=True)[2] == b"hello"
    finally:
        c1.close()
        c2.close()


def test_exclusive_queue_is_deleted_on_connection_close(broker, uniq):
    q = uniq("excl")
    c1 = broker.connect()
    c1.channel().queue_declare(q, exclusive=True)
    c1.close()
    with broker.connect() as c2:
        expect_channel_error(lambda: c2.channel().queue_declare(q, passive=True), 404)


def test_auto_delete_queue_deleted_after_last_consumer_cancels(ch, uniq):
    q = uniq("ad")
    ch.queue_declare(q, auto_delete=True)
    tag = ch.basic_consume(q, lambda *a: None)
    ch.queue_declare(q, passive=True)
    ch.basic_cancel(tag)
    expect_channel_error(lambda: ch.queue_declare(q, passive=True), 404)


def test_auto_delete_queue_without_consumers_survives(ch, uniq):
    q = uniq("ad")
    ch.queue_declare(q, auto_delete=True)
    ch.queue_declare(q, passive=True)
    ch.queue_delete(q)


def test_queue_bind_to_missing_exchange_is_404(ch, uniq):
    q = ch.queue_declare("", exclusive=True).method.queue
    x = uniq("nox")
    expect_channel_error(lambda: ch.queue_bind(q, x, routing_key="k"), 404,
                         f"NOT_FOUND - no exchange '{x}' in vhost '/'")


def test_queue_bind_missing_queue_is_404(ch, uniq):
    q = uniq("noq")
    expect_channel_error(lambda: ch.queue_bind(q, "amq.direct", routing_key="k"), 404,
                         f"NOT_FOUND - no queue '{q}' in vhost '/'")


def test_bind_unbind_with_routing_key(ch, uniq):
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.direct", routing_key=q + ".k")
    ch.basic_publish("amq.direct", q + ".k", b"1")
    ch.queue_unbind(q, "amq.direct", routing_key=q + ".k")
    ch.basic_publish("amq.direct", q + ".k", b"2")
    assert ch.basic_get(q, auto_ack=True)[2] == b"1"
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_purge_returns_message_count(ch, uniq):
    ch.confirm_delivery()
    q = ch.queue_declare("", exclusive=True).method.queue
    for i in range(7):
        ch.basic_publish("", q, b"x")
    r = ch.queue_purge(q)
    assert r.method.message_count == 7
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    assert ch.queue_purge(q).method.message_count == 0


def test_purge_does_not_remove_unacked_messages(ch, uniq):
    ch.confirm_delivery()
    q = ch.queue_declare("", exclusive=True).method.queue
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    m, _, _ = ch.basic_get(q, auto_ack=False)
    assert ch.queue_purge(q).method.message_count == 2
    ch.basic_nack(m.delivery_tag, requeue=True)
    m2, _, b2 = ch.basic_get(q, auto_ack=True)
    assert b2 == b"0" and m2.redelivered and m2.message_count == 0


def test_purge_missing_queue_is_404(ch, uniq):
    q = uniq("noq")
    expect_channel_error(lambda: ch.queue_purge(q), 404, f"NOT_FOUND - no queue '{q}' in vhost '/'")


def test_delete_returns_message_count(ch, uniq):
    ch.confirm_delivery()
    q = ch.queue_declare(uniq("q")).method.queue
    for i in range(4):
        ch.basic_publish("", q, b"x")
    assert ch.queue_delete(q).method.message_count == 4


def test_delete_if_empty_on_nonempty_queue_is_406(ch, uniq):
    q = ch.queue_declare(uniq("q"), exclusive=True).method.queue
    ch.basic_publish("", q, b"x")
    expect_channel_error(lambda: ch.queue_delete(q, if_empty=True), 406,
                         f"PRECONDITION_FAILED - queue '{q}' in vhost '/' not empty")


def test_delete_if_unused_on_consumed_queue_is_406(broker, uniq):
    q = uniq("q")
    with broker.connect() as c:
        ch = c.channel()
        ch.queue_declare(q, exclusive=True)
        ch.basic_consume(q, lambda *a: None)
        ch2 = c.channel()
        expect_channel_error(lambda: ch2.queue_delete(q, if_unused=True), 406,
                             f"PRECONDITION_FAILED - queue '{q}' in vhost '/' in use")


def test_delete_if_unused_and_if_empty_on_idle_empty_queue_succeeds(ch, uniq):
    q = ch.queue_declare(uniq("q")).method.queue
    assert ch.queue_delete(q, if_unused=True, if_empty=True).method.message_count == 0


def test_delete_missing_queue_is_ok(ch, uniq):
    r = ch.queue_delete(uniq("missing"))
    assert r.method.message_count == 0


def test_queue_deletion_removes_bindings(ch, uniq):
    x = uniq("x")
    ch.exchange_declare(x, "fanout")
    q = uniq("q")
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    ch.queue_delete(q)
    ch.queue_declare(q)
    ch.basic_publish(x, "", b"m")
    assert ch.basic_get(q, auto_ack=True)[0] is None
    ch.queue_delete(q)
    ch.exchange_delete(x)


def test_queue_max_length_drops_head(ch, uniq):
    ch.confirm_delivery()
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-length": 2}).method.queue
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    got = [ch.basic_get(q, auto_ack=True)[2] for _ in range(2)]
    assert got == [b"3", b"4"]
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_per_queue_message_ttl_expires_messages(ch, uniq):
    import time
    q = ch.queue_declare("", exclusive=True, arguments={"x-message-ttl": 100}).method.queue
    ch.basic_publish("", q, b"short-lived")
    time.sleep(0.4)
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_queue_name_too_long_is_rejected(broker):
    # shortstr limit: 255 bytes is fine
    with broker.connect() as c:
        ch = c.channel()
        name = "q" * 255
        assert ch.queue_declare(name, exclusive=True).method.queue == name
