"""Limits with RabbitMQ's names, codes and texts, through real clients: max_message_size,
overlong bodies, connection_max, vhost and user limits, consumer_timeout."""

import re
import time

import pika
import pytest
from pamqp import commands, header as pheader, body as pbody

import conftest
from amqp_raw import RawClient

pytestmark = pytest.mark.charon_only

LIMITS = """
max_message_size = 1000
connection_max = 4
consumer_timeout = 1000

[[users]]
name = "lim"
password = "lim"

[[vhosts]]
name = "limited"

[[permissions]]
user = "lim"
vhost = "/"

[[permissions]]
user = "guest"
vhost = "limited"

[vhost_limits.limited]
max-connections = 1
max-queues = 2

[user_limits.lim]
max-connections = 1
max-channels = 2
"""


@pytest.fixture
def limited(tmp_path):
    b = conftest.start_charon(tmp_path, config_text=LIMITS)
    yield b
    conftest.stop_charon(b)


def refused(connect):
    """The (code, text) a refused pika connection was closed with."""
    with pytest.raises(pika.exceptions.AMQPConnectionError) as e:
        connect()
    text = str(e.value)
    code = int(re.search(r"\((\d{3})\)", text).group(1))
    return code, text


def closed_with(exc_info):
    args = exc_info.value.args
    return args[0], args[1]


def test_message_over_max_message_size_closes_channel_with_406(limited):
    with limited.connect() as c:
        ch = c.channel()
        ch.queue_declare("sized")
        ch.basic_publish("", "sized", b"x" * 1000)
        ch.basic_publish("", "sized", b"x" * 1001)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            ch.queue_declare("sized", passive=True)
        assert closed_with(e) == (
            406, "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000")
        ch2 = c.channel()
        m, _, body = ch2.basic_get("sized", auto_ack=True)
        assert body == b"x" * 1000
        assert ch2.basic_get("sized")[0] is None, "the oversized message must not be stored"


def test_header_announcing_huge_body_is_refused_before_the_body(private_charon):
    """Default limit 128 MiB: a header announcing 200 MiB gets 406 at once (no body sent),
    and the connection keeps working; one announcing more than 512 MiB is a frame error."""
    b = private_charon
    with RawClient(b.host, b.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send_frame(commands.Basic.Publish(exchange="", routing_key="nowhere"), 1)
        raw.send_frame(pheader.ContentHeader(0, 200 << 20, commands.Basic.Properties()), 1)
        f = raw.expect_method(commands.Channel.Close)
        assert f.method.reply_code == 406
        assert f.method.reply_text == (
            "PRECONDITION_FAILED - message size 209715200 is larger than configured max size 134217728")
        assert (f.method.class_id, f.method.method_id) == (60, 40)
        # Body frames still in flight are dropped; the channel closes normally.
        raw.send_frame(pbody.ContentBody(b"y" * 1000), 1)
        raw.send_frame(commands.Channel.CloseOk(), 1)
        raw.open_channel(2)
    with RawClient(b.host, b.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send_frame(commands.Basic.Publish(exchange="", routing_key="nowhere"), 1)
        raw.send_frame(pheader.ContentHeader(0, 4 << 30, commands.Basic.Properties()), 1)
        f = raw.expect_method(commands.Connection.Close)
        assert f.method.reply_code == 501
        assert f.method.reply_text == (
            "FRAME_ERROR - content body size 4294967296 exceeds maximum allowed size 536870912")


def test_body_longer_than_announced_closes_connection_with_501(private_charon):
    b = private_charon
    with b.connect() as c:
        c.channel().queue_declare("overlong")
    with RawClient(b.host, b.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send_frame(commands.Basic.Publish(exchange="", routing_key="overlong"), 1)
        raw.send_frame(pheader.ContentHeader(0, 10, commands.Basic.Properties()), 1)
        raw.send_frame(pbody.ContentBody(b"z" * 100), 1)
        f = raw.expect_method(commands.Connection.Close)
        assert f.method.reply_code == 501
        assert f.method.reply_text == "FRAME_ERROR - content body frame exceeds remaining content size"
        assert (f.method.class_id, f.method.method_id) == (60, 40)
    with b.connect() as c:
        assert c.channel().basic_get("overlong")[0] is None, "nothing of it was stored"


def test_connection_max(limited):
    conns = [limited.connect() for _ in range(4)]
    try:
        code, text = refused(limited.connect)
        assert code == 530
        assert "'NOT_ALLOWED - connection refused: node connection limit (4) is reached'" in text
        conns.pop().close()
        deadline = time.monotonic() + 60
        while True:
            try:
                conns.append(limited.connect())
                break
            except pika.exceptions.AMQPConnectionError:
                assert time.monotonic() < deadline, "a closed connection's slot never came back"
                time.sleep(0.1)
    finally:
        for c in conns:
            c.close()


def test_vhost_max_connections_and_max_queues(limited):
    with limited.connect(vhost="limited") as c:
        code, text = refused(lambda: limited.connect(vhost="limited"))
        assert code == 530
        assert ("NOT_ALLOWED - access to vhost 'limited' refused for user 'guest': "
                "connection limit (1) is reached") in text
        ch = c.channel()
        ch.queue_declare("q1")
        ch.queue_declare("q2")
        ch.queue_declare("q1")  # redeclaring an existing queue is not a new one
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            ch.queue_declare("q3")
        assert closed_with(e) == (
            406, "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost "
                 "'limited' (2) is reached")
        ch = c.channel()
        ch.queue_delete("q2")
        ch.queue_declare("q3")
    # the default vhost has no limits
    with limited.connect() as c1, limited.connect() as c2:
        c1.channel().queue_declare("a")
        c2.channel().queue_declare("b")


def test_user_max_connections_and_max_channels(limited):
    with limited.connect(user="lim", password="lim") as c:
        code, text = refused(lambda: limited.connect(user="lim", password="lim"))
        assert code == 530
        assert ("NOT_ALLOWED - connection refused for user 'lim': user connection limit (1) "
                "is reached") in text
        a = c.channel()
        b = c.channel()
        a.close()
        b2 = c.channel()  # a closed channel's slot comes back
        assert b.is_open and b2.is_open
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
            c.channel()
        assert closed_with(e) == (
            530, "NOT_ALLOWED - number of channels opened for user 'lim' has reached the "
                 "maximum allowed user limit of (2)")


def test_consumer_timeout_closes_channel_and_requeues(limited):
    with limited.connect() as c:
        ch = c.channel()
        ch.queue_declare("slow")
        ch.basic_publish("", "slow", b"held")
        m, _, body = ch.basic_get("slow", auto_ack=False)
        assert body == b"held"
        deadline = time.monotonic() + 60
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            while time.monotonic() < deadline:
                time.sleep(0.2)
                ch.queue_declare("slow", passive=True)
        code, text = closed_with(e)
        assert code == 406
        assert text == (
            f"PRECONDITION_FAILED - delivery acknowledgement on channel {ch.channel_number} "
            "timed out. Timeout value used: 1000 ms. This timeout value can be configured, "
            "see consumers doc guide to learn more")
        ch2 = c.channel()
        m, _, body = ch2.basic_get("slow", auto_ack=True)
        assert body == b"held" and m.redelivered, "the timed-out delivery went back to its queue"
