import socket
import time

import pika
import pika.exceptions as pe
import pytest
from pamqp import commands

from amqp_raw import RawClient, PROTOCOL_HEADER, FRAME_HEARTBEAT


# ---------------------------------------------------------------- protocol header

@pytest.mark.parametrize("header", [
    b"AMQP\x00\x00\x09\x00",   # wrong revision
    b"AMQP\x01\x01\x00\x0a",   # AMQP 0-10 style
    b"AMQP\x00\x01\x00\x00",   # AMQP 1.0
])
def test_wrong_protocol_header_gets_supported_header_and_close(broker, header):
    with RawClient(broker.host, broker.port) as c:
        c.send(header)
        data = c.recv_bytes_until_close()
        assert data == PROTOCOL_HEADER


def test_http_request_gets_amqp_protocol_header_and_close(broker):
    with RawClient(broker.host, broker.port) as c:
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = c.recv_bytes_until_close()
        assert data == PROTOCOL_HEADER


def test_correct_header_gets_connection_start(broker):
    with RawClient(broker.host, broker.port) as c:
        c.send(PROTOCOL_HEADER)
        f = c.expect_method(commands.Connection.Start)
        assert f.channel == 0
        assert f.method.version_major == 0
        assert f.method.version_minor == 9
        mechs = f.method.mechanisms.split()
        assert "PLAIN" in mechs and "AMQPLAIN" in mechs
        assert "en_US" in f.method.locales.split()


def test_server_properties_advertise_capabilities(broker):
    with RawClient(broker.host, broker.port) as c:
        c.send(PROTOCOL_HEADER)
        f = c.expect_method(commands.Connection.Start)
        props = f.method.server_properties
        caps = props["capabilities"]
        for cap in ["publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                    "consumer_cancel_notify", "connection.blocked",
                    "authentication_failure_close", "per_consumer_qos"]:
            assert caps.get(cap) is True, cap
        assert "product" in props and "version" in props


# ---------------------------------------------------------------- auth

def test_plain_auth_succeeds_and_connection_opens(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(mechanism="PLAIN")
        assert isinstance(f.method, commands.Connection.OpenOk)


def test_amqplain_auth_succeeds(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(mechanism="AMQPLAIN")
        assert isinstance(f.method, commands.Connection.OpenOk), f


def test_bad_password_is_refused_with_403(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(password="wrong-password")
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 403
        assert f.method.reply_text == (
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
            "For details see the broker logfile.")
        assert c.wait_closed(60)


def test_bad_password_amqplain_is_refused_with_403(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(password="nope", mechanism="AMQPLAIN")
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 403
        assert f.method.reply_text.startswith(
            "ACCESS_REFUSED - Login was refused using authentication mechanism AMQPLAIN")


def test_bad_password_pika_raises_authentication_error(broker):
    with pytest.raises(pe.ProbableAuthenticationError) as ei:
        broker.connect(password="wrong-password")
    assert "ACCESS_REFUSED" in str(ei.value)


def test_unknown_user_is_refused_with_403(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(user="no-such-user", password="x")
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 403


def test_unsupported_mechanism_closes_socket_without_reply(broker):
    # RabbitMQ 3.10.8 sends nothing and closes the socket (after ~3 s).
    with RawClient(broker.host, broker.port) as c:
        c.send(PROTOCOL_HEADER)
        c.expect_method(commands.Connection.Start)
        c.send_frame(commands.Connection.StartOk(client_properties={}, mechanism="CRAM-MD5",
                                                 response="x"))
        assert c.recv_bytes_until_close(8) == b""


# ---------------------------------------------------------------- tune

def test_tune_proposes_server_limits(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake(open_vhost=False)
        assert c.tune.channel_max == 2047
        assert c.tune.frame_max == 131072
        assert c.tune.heartbeat == 60


def test_client_smaller_frame_max_and_channel_max_are_honoured(broker):
    conn = broker.connect(frame_max=4096, channel_max=10)
    try:
        assert conn._impl.params.frame_max == 4096
        assert conn._impl.params.channel_max == 10
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        body = bytes(range(256)) * 64  # 16 KiB over 4 KiB frames
        ch.basic_publish("", q, body)
        m, p, b = ch.basic_get(q, auto_ack=True)
        assert b == body
    finally:
        conn.close()


def test_frame_larger_than_negotiated_frame_max_is_rejected(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(frame_max=4096)
        assert isinstance(f.method, commands.Connection.OpenOk)
        c.open_channel(1)
        c.send_frame(commands.Basic.Publish(exchange="", routing_key="x"), 1)
        from pamqp import header as ph, body as pb
        c.send_frame(ph.ContentHeader(0, 10000, commands.Basic.Properties()), 1)
        c.send_frame(pb.ContentBody(b"x" * 10000), 1)
        f = c.read_frame_skip_heartbeats()
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 501
        assert f.method.reply_text == "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,10000,4088}"


def test_opening_more_channels_than_channel_max_is_530(broker):
    # RabbitMQ checks the *count* of open channels, not the channel number.
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(channel_max=3)
        assert isinstance(f.method, commands.Connection.OpenOk)
        for n in (1, 2, 3):
            c.open_channel(n)
        c.send_frame(commands.Channel.Open(), 4)
        f = c.read_frame_skip_heartbeats()
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.channel == 0
        assert f.method.reply_code == 530
        assert f.method.reply_text == (
            "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)")


def test_channel_number_above_channel_max_is_accepted_if_count_below(broker):
    # RabbitMQ 3.10.8 does not check the channel *number* against channel_max.
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(channel_max=5)
        assert isinstance(f.method, commands.Connection.OpenOk)
        f = c.open_channel(6)
        assert f.channel == 6


def test_channel_max_is_usable(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(channel_max=5)
        assert isinstance(f.method, commands.Connection.OpenOk)
        c.open_channel(5)


@pytest.mark.parametrize("tune", [dict(frame_max=1024), dict(frame_max=0),
                                  dict(frame_max=200000), dict(channel_max=4000),
                                  dict(channel_max=0)])
def test_invalid_tune_ok_closes_socket_without_open(broker, tune):
    # frame_max below 4096 / above the server's, or channel_max above the server's:
    # RabbitMQ 3.10.8 closes the socket (after ~3 s) without sending anything.
    with RawClient(broker.host, broker.port) as c:
        c.handshake(open_vhost=False, **tune)
        assert c.recv_bytes_until_close(8) == b""


# ---------------------------------------------------------------- vhosts

def test_open_nonexistent_vhost_is_not_allowed_530(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(vhost="no-such-vhost")
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 530
        assert f.method.reply_text == "NOT_ALLOWED - vhost no-such-vhost not found"
        c.send_frame(commands.Connection.CloseOk(), 0)
        assert c.wait_closed(60)


def test_open_nonexistent_vhost_pika(broker):
    with pytest.raises(pe.ProbableAccessDeniedError) as ei:
        broker.connect(vhost="no-such-vhost")
    assert "(530) 'NOT_ALLOWED - vhost no-such-vhost not found'" in str(ei.value)


@pytest.mark.needs_users
def test_user_without_permissions_on_vhost_is_refused_530(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(user="reader", password="reader", vhost="other")
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 530
        assert f.method.reply_text == "NOT_ALLOWED - access to vhost 'other' refused for user 'reader'"


@pytest.mark.needs_users
def test_configured_user_can_use_other_vhost(broker):
    c = broker.connect(user="alice", password="secret", vhost="other")
    try:
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"hi")
        assert ch.basic_get(q, auto_ack=True)[2] == b"hi"
    finally:
        c.close()


# ---------------------------------------------------------------- heartbeats

def test_client_with_heartbeat_1_stays_alive_while_idle(broker):
    conn = broker.connect(heartbeat=1)
    try:
        assert conn._impl.params.heartbeat == 1
        ch = conn.channel()
        conn.sleep(5)  # pika services heartbeats during sleep
        assert conn.is_open and ch.is_open
        q = ch.queue_declare("", exclusive=True).method.queue
        assert q.startswith("amq.gen-")
    finally:
        conn.close()


def test_server_sends_heartbeats_at_negotiated_interval(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(heartbeat=1)
        assert isinstance(f.method, commands.Connection.OpenOk)
        hb = 0
        deadline = time.monotonic() + 60
        while hb < 2 and time.monotonic() < deadline:
            c.send_raw_frame(FRAME_HEARTBEAT, 0, b"")
            try:
                fr = c.read_frame(0.5)
            except socket.timeout:
                continue
            if fr.type == FRAME_HEARTBEAT:
                assert fr.channel == 0 and fr.payload == b""
                hb += 1
        assert hb >= 2


def test_silent_client_is_disconnected_after_missed_heartbeats(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(heartbeat=1)
        assert isinstance(f.method, commands.Connection.OpenOk)
        t0 = time.monotonic()
        # we never send anything again; the server must drop us
        closed = False
        while time.monotonic() - t0 < 60:
            try:
                c.read_frame(60 - (time.monotonic() - t0))
            except socket.timeout:
                break
            except Exception:
                closed = True
                break
        elapsed = time.monotonic() - t0
        assert closed, "server did not close a silent connection"
        assert 1.5 <= elapsed <= 60, elapsed  # not before two missed heartbeats


def test_heartbeat_zero_disables_heartbeats(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake(heartbeat=0)
        assert isinstance(f.method, commands.Connection.OpenOk)
        with pytest.raises(socket.timeout):
            c.read_frame(3)


# ---------------------------------------------------------------- close

def test_client_connection_close_gets_close_ok(broker):
    with RawClient(broker.host, broker.port) as c:
        f = c.handshake()
        assert isinstance(f.method, commands.Connection.OpenOk)
        c.open_channel(1)
        c.send_frame(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0)
        f = c.expect_method(commands.Connection.CloseOk)
        assert f.channel == 0
        # RabbitMQ leaves closing the socket to the client after close-ok


def test_pika_close_releases_exclusive_queue(broker, uniq):
    q = uniq("excl")
    c1 = broker.connect()
    c1.channel().queue_declare(q, exclusive=True)
    c1.close()
    c2 = broker.connect()
    try:
        ch = c2.channel()
        with pytest.raises(pe.ChannelClosedByBroker) as ei:
            ch.queue_declare(q, passive=True)
        assert ei.value.reply_code == 404
    finally:
        c2.close()


def test_method_before_connection_open_is_rejected(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake(open_vhost=False)
        c.send_frame(commands.Channel.Open(), 1)
        f = c.read_frame_skip_heartbeats()
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 505
        assert f.method.reply_text == "UNEXPECTED_FRAME - type 1, all octets = <<0,20,0,10,1,48>>"


def test_connection_blocked_capability_accepted_by_pika(broker):
    # pika sends client capabilities; connection opens normally
    conn = broker.connect()
    caps = conn._impl.server_capabilities
    assert caps["connection.blocked"] is True
    conn.close()
