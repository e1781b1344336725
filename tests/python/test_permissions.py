"""Resource permissions (configure/write/read) of the read-only user 'reader'.

Written from RabbitMQ 3.10.8's rabbit_channel / rabbit_access_control
semantics (which permission each method needs, "amq.default" for the default
exchange); not yet run against a RabbitMQ node. The read-only user from
conftest.CONFIG_TOML has configure "^$", write "^$", read ".*" on "/".
"""
import time
import pika.exceptions as pe
import pytest

pytestmark = pytest.mark.needs_users


def refused(kind, name, user="reader"):
    return f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user '{user}'"


def expect_403(fn, text):
    with pytest.raises(pe.ChannelClosedByBroker) as ei:
        fn()
    assert (ei.value.reply_code, ei.value.reply_text) == (403, text)


@pytest.fixture
def admin_queue(broker, uniq):
    """A queue with one message, declared by guest; deleted afterwards."""
    q = uniq("permq")
    with broker.connect() as c:
        ch = c.channel()
        ch.queue_declare(q)
        ch.confirm_delivery()
        ch.basic_publish("", q, b"m")
    yield q
    with broker.connect() as c:
        c.channel().queue_delete(q)


@pytest.fixture
def reader(broker):
    c = broker.connect(user="reader", password="reader")
    yield c
    if c.is_open:
        c.close()


def test_server_named_queue_needs_configure_on_the_generated_name(reader):
    with pytest.raises(pe.ChannelClosedByBroker) as ei:
        reader.channel().queue_declare("", exclusive=True)
    assert ei.value.reply_code == 403
    assert ei.value.reply_text.startswith("ACCESS_REFUSED - access to queue 'amq.gen-")


def test_passive_declare_needs_no_permission(reader, admin_queue):
    ok = reader.channel().queue_declare(admin_queue, passive=True)
    assert ok.method.message_count == 1


def test_publish_to_default_exchange_is_checked_as_amq_default(reader, admin_queue):
    ch = reader.channel()
    ch.confirm_delivery()
    expect_403(lambda: ch.basic_publish("", admin_queue, b"x"),
               refused("exchange", "amq.default"))


def test_queue_bind_needs_write_on_the_queue(reader, admin_queue):
    expect_403(lambda: reader.channel().queue_bind(admin_queue, "amq.direct", "k"),
               refused("queue", admin_queue))


def test_exchange_bind_needs_write_on_the_destination(reader):
    expect_403(lambda: reader.channel().exchange_bind("amq.fanout", "amq.direct", "k"),
               refused("exchange", "amq.fanout"))


def test_queue_delete_needs_configure(reader, admin_queue):
    expect_403(lambda: reader.channel().queue_delete(admin_queue),
               refused("queue", admin_queue))


def test_exchange_delete_needs_configure(broker, reader, uniq):
    x = uniq("permx")
    with broker.connect() as c:
        c.channel().exchange_declare(x, "direct")
    try:
        expect_403(lambda: reader.channel().exchange_delete(x), refused("exchange", x))
    finally:
        with broker.connect() as c:
            c.channel().exchange_delete(x)


def test_read_permission_allows_consume_and_purge(reader, admin_queue):
    ch = reader.channel()
    got = []
    ch.basic_consume(admin_queue, lambda c, m, p, b: got.append(b), auto_ack=True)
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        reader.process_data_events(0.1)
    assert got == [b"m"]
    assert ch.queue_purge(admin_queue).method.message_count == 0
