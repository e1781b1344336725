"""Error codes and texts, as RabbitMQ 3.10.8 sends them."""
import struct
import time

import pika
import pika.exceptions as pe
import pytest
from pamqp import commands, frame as pframe, header as ph, body as pb

from amqp_raw import RawClient


def raw_open(broker, **kw):
    c = RawClient(broker.host, broker.port)
    f = c.handshake(**kw)
    assert isinstance(f.method, commands.Connection.OpenOk), f
    c.open_channel(1)
    return c


def expect_connection_close(c, code, text=None, class_id=None, method_id=None):
    f = c.read_frame_skip_heartbeats()
    assert isinstance(f.method, commands.Connection.Close), f
    assert f.channel == 0
    assert f.method.reply_code == code, f.method.reply_text
    if text is not None:
        assert f.method.reply_text == text
    if class_id is not None:
        assert (f.method.class_id, f.method.method_id) == (class_id, method_id)
    return f.method


def expect_channel_close(c, ch, code, text=None, class_id=None, method_id=None):
    f = c.read_frame_skip_heartbeats()
    assert isinstance(f.method, commands.Channel.Close), f
    assert f.channel == ch
    assert f.method.reply_code == code, f.method.reply_text
    if text is not None:
        assert f.method.reply_text == text
    if class_id is not None:
        assert (f.method.class_id, f.method.method_id) == (class_id, method_id)
    return f.method


def other_connection_still_works(broker):
    with broker.connect() as c:
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.confirm_delivery()
        ch.basic_publish("", q, b"alive")
        assert ch.basic_get(q, auto_ack=True)[2] == b"alive"


# ---------------------------------------------------------------- 403

@pytest.mark.needs_users
def test_403_configure_permission_denied_on_queue_declare(broker):
    with raw_open(broker, user="reader", password="reader") as c:
        c.send_frame(commands.Queue.Declare(queue="rq1"), 1)
        expect_channel_close(c, 1, 403,
                             "ACCESS_REFUSED - access to queue 'rq1' in vhost '/' refused for user 'reader'",
                             50, 10)


@pytest.mark.needs_users
def test_403_write_permission_denied_on_publish(broker):
    with raw_open(broker, user="reader", password="reader") as c:
        c.publish(1, "amq.direct", "k", b"x")
        expect_channel_close(c, 1, 403,
                             "ACCESS_REFUSED - access to exchange 'amq.direct' in vhost '/' refused for user 'reader'",
                             60, 40)


@pytest.mark.needs_users
def test_403_configure_permission_denied_on_exchange_declare(broker):
    with raw_open(broker, user="reader", password="reader") as c:
        c.send_frame(commands.Exchange.Declare(exchange="rx1", exchange_type="direct"), 1)
        expect_channel_close(c, 1, 403,
                             "ACCESS_REFUSED - access to exchange 'rx1' in vhost '/' refused for user 'reader'",
                             40, 10)


@pytest.mark.needs_users
def test_read_permission_allows_basic_get(broker, uniq):
    q = uniq("rq")
    with broker.connect() as admin:
        ach = admin.channel()
        ach.queue_declare(q)
        ach.confirm_delivery()
        ach.basic_publish("", q, b"readable")
    with broker.connect(user="reader", password="reader") as c:
        ch = c.channel()
        assert ch.basic_get(q, auto_ack=True)[2] == b"readable"
    with broker.connect() as admin:
        admin.channel().queue_delete(q)


# ---------------------------------------------------------------- 406 misc

def test_406_user_id_mismatch(broker):
    with raw_open(broker) as c:
        c.publish(1, "", "x", b"a", commands.Basic.Properties(user_id="bob"))
        expect_channel_close(c, 1, 406,
                             "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'guest'",
                             60, 40)


def test_user_id_matching_authenticated_user_is_accepted(ch):
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.confirm_delivery()
    ch.basic_publish("", q, b"a", pika.BasicProperties(user_id="guest"))
    m, p, b = ch.basic_get(q, auto_ack=True)
    assert p.user_id == "guest"


def test_406_invalid_expiration(broker):
    with raw_open(broker) as c:
        c.publish(1, "", "x", b"a", commands.Basic.Properties(expiration="abc"))
        expect_channel_close(c, 1, 406, "PRECONDITION_FAILED - invalid expiration 'abc': no_integer",
                             60, 40)


def test_406_invalid_queue_argument_type(broker):
    with raw_open(broker) as c:
        c.send_frame(commands.Queue.Declare(queue="argq", exclusive=True,
                                            arguments={"x-max-length": "abc"}), 1)
        expect_channel_close(
            c, 1, 406,
            "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue 'argq' in vhost '/': "
            "\"expected integer, got longstr\"", 50, 10)


def test_404_publish_to_missing_exchange_reports_class_and_method(broker):
    with raw_open(broker) as c:
        c.publish(1, "amq.default", "x", b"a")
        expect_channel_close(c, 1, 404, "NOT_FOUND - no exchange 'amq.default' in vhost '/'", 60, 40)


# ---------------------------------------------------------------- 501 frame errors

def test_501_bad_frame_end_octet(broker):
    with raw_open(broker) as c:
        payload = pframe.marshal(commands.Queue.Declare(queue="", exclusive=True), 1)[7:-1]
        c.send_raw_frame(1, 1, payload, end=0x00)
        m = expect_connection_close(c, 501)
        assert m.reply_text.startswith("FRAME_ERROR - type 1, all octets = <<0,50,0,10,")
        assert "invalid_frame_end_marker" in m.reply_text
    other_connection_still_works(broker)


def test_501_unknown_frame_type(broker):
    with raw_open(broker) as c:
        c.send_raw_frame(9, 1, b"abc")
        expect_connection_close(c, 501, 'FRAME_ERROR - type 9, all octets = <<"abc">>: unknown_frame')
    other_connection_still_works(broker)


def test_501_truncated_method_arguments(broker):
    with raw_open(broker) as c:
        c.send_raw_frame(1, 1, struct.pack(">HH", 50, 10) + b"\x00")
        expect_connection_close(c, 501, "FRAME_ERROR - cannot decode <<0>>", 50, 10)
    other_connection_still_works(broker)


def test_501_publish_with_a_routing_key_that_is_not_utf8(broker, uniq):
    # A channel that just published with valid names: the next publish's names differ from
    # them and are checked; one that is not UTF-8 is a frame error, and nothing is routed.
    q = uniq("utf8")
    with broker.connect() as conn:
        conn.channel().queue_declare(q)
    with raw_open(broker) as c:
        c.publish(1, "", q, b"first")
        args = struct.pack(">HHH", 60, 40, 0) + b"\x00" + bytes([2, 0xFF, 0xFE]) + b"\x00"
        c.send_raw_frame(1, 1, args)
        m = expect_connection_close(c, 501, None, 60, 40)
        assert m.reply_text.startswith("FRAME_ERROR"), m.reply_text
    with broker.connect() as conn:
        ch = conn.channel()
        assert ch.basic_get(q, auto_ack=True)[2] == b"first"
        assert ch.basic_get(q, auto_ack=True)[0] is None


def test_unknown_method_class_kills_only_that_connection(broker):
    with broker.connect() as bystander:
        bch = bystander.channel()
        with raw_open(broker) as c:
            c.send_raw_frame(1, 1, struct.pack(">HH", 77, 10))
            # RabbitMQ 3.10.8 drops the socket without a connection.close
            assert c.wait_closed(60)
        q = bch.queue_declare("", exclusive=True).method.queue
        assert q.startswith("amq.gen-")
    other_connection_still_works(broker)


def test_garbage_after_handshake_kills_only_that_connection(broker):
    with broker.connect() as bystander:
        bch = bystander.channel()
        with raw_open(broker) as c:
            c.send(b"\xff" * 64)
            assert c.wait_closed(60)
        assert bch.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")


# ---------------------------------------------------------------- 503 / 504 / 505

def test_503_connection_method_on_channel(broker):
    with raw_open(broker) as c:
        c.send_frame(commands.Connection.Open(virtual_host="/"), 1)
        expect_connection_close(c, 503, "COMMAND_INVALID - unimplemented method", 10, 40)


def test_504_channel_method_on_channel_zero(broker):
    with raw_open(broker) as c:
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 0)
        expect_connection_close(c, 504, "CHANNEL_ERROR - unexpected method in connection state running",
                                50, 10)


def test_504_channel_open_on_channel_zero(broker):
    with raw_open(broker) as c:
        c.send_frame(commands.Channel.Open(), 0)
        expect_connection_close(c, 504, "CHANNEL_ERROR - unexpected method in connection state running",
                                20, 10)


def test_504_using_a_closed_channel_via_pika(conn):
    ch = conn.channel()
    n = ch.channel_number
    ch.close()
    # sending on a closed channel number through the wire
    with pytest.raises(pe.ConnectionClosedByBroker) as ei:
        conn._impl._send_method(n, pika.spec.Queue.Declare(queue="", exclusive=True))
        conn.process_data_events(2)
        conn.channel()
    assert ei.value.reply_code == 504
    assert ei.value.reply_text == "CHANNEL_ERROR - expected 'channel.open'"


def test_505_body_without_header(broker):
    with raw_open(broker) as c:
        c.send_raw_frame(3, 1, b"abc")
        expect_connection_close(c, 505, "UNEXPECTED_FRAME - expected method frame, got non method frame instead")
    other_connection_still_works(broker)


def test_505_header_without_publish(broker):
    with raw_open(broker) as c:
        c.send_frame(ph.ContentHeader(0, 3, commands.Basic.Properties()), 1)
        expect_connection_close(c, 505, "UNEXPECTED_FRAME - expected method frame, got non method frame instead")


def test_505_method_instead_of_content_header(broker):
    with raw_open(broker) as c:
        c.send_frame(commands.Basic.Publish(exchange="", routing_key="x"), 1)
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        expect_connection_close(
            c, 505, "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
            60, 40)


def test_505_content_header_for_wrong_class(broker):
    with raw_open(broker) as c:
        c.send_frame(commands.Basic.Publish(exchange="", routing_key="x"), 1)
        c.send_raw_frame(2, 1, struct.pack(">HHQH", 40, 0, 3, 0))
        expect_connection_close(
            c, 505, "UNEXPECTED_FRAME - expected content header for class 60, got one for class 40 instead",
            60, 40)


def test_505_method_instead_of_content_body(broker):
    with raw_open(broker) as c:
        c.send_frame(commands.Basic.Publish(exchange="", routing_key="x"), 1)
        c.send_frame(ph.ContentHeader(0, 3, commands.Basic.Properties()), 1)
        c.send_frame(commands.Basic.Publish(exchange="", routing_key="x"), 1)
        expect_connection_close(
            c, 505, "UNEXPECTED_FRAME - expected content body, got non content body frame instead", 60, 40)


def test_505_heartbeat_on_nonzero_channel(broker):
    with raw_open(broker) as c:
        c.send_raw_frame(8, 1, b"")
        expect_connection_close(c, 505, "UNEXPECTED_FRAME - type 8, all octets = <<>>")


def test_505_content_header_on_channel_zero(broker):
    with raw_open(broker) as c:
        c.send_frame(ph.ContentHeader(0, 3, commands.Basic.Properties()), 0)
        expect_connection_close(
            c, 505, "UNEXPECTED_FRAME - type 2, all octets = <<0,60,0,0,0,0,0,0,0,0,0,3,0,0>>")


def test_connection_close_ok_after_server_close_ends_connection(broker):
    with raw_open(broker) as c:
        c.send_raw_frame(3, 1, b"abc")
        expect_connection_close(c, 505)
        c.send_frame(commands.Connection.CloseOk(), 0)
        assert c.wait_closed(60)


# ---------------------------------------------------------------- 540

def test_540_prefetch_size(broker):
    with raw_open(broker) as c:
        c.send_frame(commands.Basic.Qos(prefetch_size=1), 1)
        expect_connection_close(c, 540, "NOT_IMPLEMENTED - prefetch_size!=0 (1)", 60, 10)


def test_recover_async_is_not_implemented_540(broker):
    with raw_open(broker) as c:
        c.send_frame(commands.Basic.RecoverAsync(requeue=False), 1)
        f = c.read_frame_skip_heartbeats()
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 540
        assert f.method.reply_text == "NOT_IMPLEMENTED - requeue=false"
