"""Protocol behaviours found by client libraries' own suites (issue 8): update-secret,
recover-async, crossing channel.close, teardown before connection.close-ok, reading on after
close-ok, coalesced publisher confirms, a message dead-lettered back into its own queue,
server-properties. Raw frames where a client cannot produce the exchange."""

import time

import pika
import pytest
from pamqp import commands

from amqp_raw import RawClient, FRAME_METHOD

# Generous bound for anything the broker does in the background: never a rate.
BOUND = 60.0


# ------------------------------------------------------------ connection.update-secret

def test_update_secret_is_answered_and_the_connection_keeps_working(broker, uniq):
    c = broker.connect()
    try:
        c.update_secret("guest", "token refresh")
        ch = c.channel()
        q = uniq("us")
        ch.queue_declare(q, auto_delete=True)
        ch.basic_publish("", q, b"after update-secret")
        deadline = time.monotonic() + BOUND
        while True:
            _, _, body = ch.basic_get(q, auto_ack=True)
            if body is not None or time.monotonic() > deadline:
                break
        assert body == b"after update-secret"
    finally:
        c.close()


def test_update_secret_raw_frames_get_update_secret_ok_on_channel_0(broker):
    with RawClient(broker.host, broker.port, timeout=BOUND) as c:
        assert isinstance(c.handshake().method, commands.Connection.OpenOk)
        c.send_frame(commands.Connection.UpdateSecret(new_secret="guest", reason="refresh"))
        f = c.expect_method(commands.Connection.UpdateSecretOk, timeout=BOUND)
        assert f.channel == 0
        c.open_channel(1)


# ------------------------------------------------------------ basic.recover-async

def test_recover_async_requeue_true_redelivers_and_sends_nothing_back(broker, uniq):
    q = uniq("ra")
    with RawClient(broker.host, broker.port, timeout=BOUND) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Queue.Declare(queue=q, auto_delete=True), 1)
        c.expect_method(commands.Queue.DeclareOk)
        c.publish(1, "", q, b"m1")
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag="ct"), 1)
        c.expect_method(commands.Basic.ConsumeOk, timeout=BOUND)
        d = c.expect_method(commands.Basic.Deliver, timeout=BOUND)
        assert d.method.redelivered is False
        c.read_frame(BOUND)  # header
        c.read_frame(BOUND)  # body
        c.send_frame(commands.Basic.RecoverAsync(requeue=True), 1)
        # Nothing answers recover-async: the next frame is the redelivery.
        d2 = c.expect_method(commands.Basic.Deliver, timeout=BOUND)
        assert d2.method.redelivered is True
        assert d2.method.delivery_tag > d.method.delivery_tag
        c.read_frame(BOUND)
        c.read_frame(BOUND)
        # The connection and channel still work.
        c.send_frame(commands.Basic.Ack(delivery_tag=d2.method.delivery_tag), 1)
        c.send_frame(commands.Queue.Declare(queue=q, passive=True), 1)
        ok = c.expect_method(commands.Queue.DeclareOk, timeout=BOUND)
        assert ok.method.consumer_count == 1


# ------------------------------------------------------------ crossing channel.close

def test_crossing_channel_close_waits_for_the_clients_close_ok(broker, uniq):
    """amqp091-go TestChannelExceptionWithCloseIssue43: the broker closes a channel (404) while
    the client's own channel.close is on its way; the client answers the broker's close with
    close-ok after getting close-ok for its own. Nothing of that is an error."""
    with RawClient(broker.host, broker.port, timeout=BOUND) as c:
        c.handshake()
        c.open_channel(1)
        # One write: a passive declare that fails (404), then the client's own close.
        c.send(b"".join([
            pframe_bytes(commands.Queue.Declare(queue=uniq("missing"), passive=True), 1),
            pframe_bytes(commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 1),
        ]))
        f = c.expect_method(commands.Channel.Close, timeout=BOUND)
        assert f.method.reply_code == 404
        c.expect_method(commands.Channel.CloseOk, timeout=BOUND)
        c.send_frame(commands.Channel.CloseOk(), 1)
        # The connection is fine: channel 1 can be opened again and used.
        c.open_channel(1)
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        c.expect_method(commands.Queue.DeclareOk, timeout=BOUND)


def pframe_bytes(method, channel):
    from pamqp import frame as pframe
    return pframe.marshal(method, channel)


# ------------------------------------------------------------ connection.close teardown

def _publishes(q, n):
    from pamqp import header as pheader, body as pbody
    return b"".join(
        pframe_bytes(commands.Basic.Publish(exchange="", routing_key=q), 1)
        + pframe_bytes(pheader.ContentHeader(0, 1, commands.Basic.Properties()), 1)
        + pframe_bytes(pbody.ContentBody(b"x"), 1)
        for _ in range(n))


def _close_busy_consumer(broker, q, exclusive):
    """A raw connection consumes `q` (auto-delete or exclusive), leaves a backlog of publishes
    in the queue's command channel and closes the connection in the same write; returns once
    close-ok has arrived."""
    a = RawClient(broker.host, broker.port, timeout=BOUND)
    a.handshake()
    a.open_channel(1)
    a.send_frame(commands.Queue.Declare(queue=q, auto_delete=not exclusive, exclusive=exclusive), 1)
    a.expect_method(commands.Queue.DeclareOk, timeout=BOUND)
    a.send_frame(commands.Basic.Qos(prefetch_count=1), 1)
    a.expect_method(commands.Basic.QosOk, timeout=BOUND)
    a.send_frame(commands.Basic.Consume(queue=q, consumer_tag="busy"), 1)
    a.expect_method(commands.Basic.ConsumeOk, timeout=BOUND)
    a.send(_publishes(q, 6000) + pframe_bytes(
        commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0))
    while True:
        f = a.read_frame_skip_heartbeats(BOUND)
        if isinstance(f.method, commands.Connection.CloseOk):
            return a


def test_connection_close_ok_comes_after_consumers_and_auto_delete_queues_are_gone(broker, uniq):
    """The consumer's auto-delete queue is busy (a backlog of publishes) when its connection
    closes; close-ok must still come only once the queue is gone, so a declare right after it
    creates a fresh queue and never gets 404 (RabbitMQ tears down before close-ok)."""
    with RawClient(broker.host, broker.port, timeout=BOUND) as b:
        b.handshake()
        b.open_channel(1)
        for i in range(5):
            q = uniq("ad")
            a = _close_busy_consumer(broker, q, exclusive=False)
            b.send_frame(commands.Queue.Declare(queue=q, auto_delete=True), 1)
            f = b.read_frame_skip_heartbeats(BOUND)
            a.close()
            assert isinstance(f.method, commands.Queue.DeclareOk), f"round {i}: {f.method!r}"
            assert f.method.consumer_count == 0, f"round {i}: old consumer still there"
            assert f.method.message_count == 0, f"round {i}: old queue still there"
            b.send_frame(commands.Queue.Delete(queue=q), 1)
            b.expect_method(commands.Queue.DeleteOk, timeout=BOUND)


def test_exclusive_queue_is_gone_when_close_ok_arrives(broker, uniq):
    with RawClient(broker.host, broker.port, timeout=BOUND) as b:
        b.handshake()
        for i in range(5):
            q = uniq("ex")
            a = _close_busy_consumer(broker, q, exclusive=True)
            ch = i + 1
            b.open_channel(ch)
            b.send_frame(commands.Queue.Declare(queue=q, passive=True), ch)
            f = b.read_frame_skip_heartbeats(BOUND)
            a.close()
            assert isinstance(f.method, commands.Channel.Close), f"round {i}: {f.method!r}"
            assert f.method.reply_code == 404, f"round {i}: {f.method!r}"
            b.send_frame(commands.Channel.CloseOk(), ch)


def test_socket_stays_open_after_close_ok_until_the_client_closes(broker):
    with RawClient(broker.host, broker.port, timeout=BOUND) as c:
        c.handshake(heartbeat=0)
        c.open_channel(1)
        c.send_frame(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        c.expect_method(commands.Connection.CloseOk, timeout=BOUND)
        # A client still flushing frames it queued before its close must not get EPIPE/RST.
        for _ in range(50):
            c.send_frame(commands.Basic.Publish(exchange="", routing_key="x"), 1)
        # The broker does not close first (it waits up to 30 s for the client).
        assert c.wait_closed(timeout=1.0) is False
        c.send_frame(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1)


def test_after_close_ok_the_broker_closes_after_the_heartbeat_timeout(broker):
    with RawClient(broker.host, broker.port, timeout=BOUND) as c:
        c.handshake(heartbeat=1)
        c.send_frame(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        c.expect_method(commands.Connection.CloseOk, timeout=BOUND)
        assert c.wait_closed(timeout=BOUND) is True


# ------------------------------------------------------------ coalesced confirms

def test_pipelined_publishes_get_coalesced_multiple_acks(broker, uniq):
    q = uniq("cf")
    n = 2000
    with RawClient(broker.host, broker.port, timeout=BOUND) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Queue.Declare(queue=q, auto_delete=True), 1)
        c.expect_method(commands.Queue.DeclareOk, timeout=BOUND)
        c.send_frame(commands.Confirm.Select(), 1)
        c.expect_method(commands.Confirm.SelectOk, timeout=BOUND)
        from pamqp import header as pheader, body as pbody
        chunk = b"".join(
            pframe_bytes(commands.Basic.Publish(exchange="", routing_key=q), 1)
            + pframe_bytes(pheader.ContentHeader(0, 3, commands.Basic.Properties()), 1)
            + pframe_bytes(pbody.ContentBody(b"abc"), 1)
            for _ in range(n))
        c.send(chunk)
        acked = 0
        frames = 0
        multiples = 0
        while acked < n:
            f = c.read_frame_skip_heartbeats(BOUND)
            assert f.type == FRAME_METHOD
            assert isinstance(f.method, commands.Basic.Ack), f
            frames += 1
            tag = f.method.delivery_tag
            if f.method.multiple:
                multiples += 1
                assert tag > acked
            else:
                assert tag == acked + 1, "a single ack must be the next tag"
            acked = tag
        assert acked == n
        assert multiples >= 1
        assert frames < n, f"{frames} acks for {n} publishes: not coalesced"


# ------------------------------------------------------------ dead-lettered back into itself

def test_message_dead_lettered_back_into_its_own_queue_reaches_its_consumer(ch, uniq):
    q = uniq("self-dlx")
    ch.queue_declare(q, auto_delete=True, arguments={"x-dead-letter-exchange": ""})
    seen = []

    def on_message(chan, method, props, body):
        seen.append((method.redelivered, props.headers))
        if len(seen) == 1:
            chan.basic_reject(method.delivery_tag, requeue=False)
        else:
            chan.basic_ack(method.delivery_tag)

    ch.basic_consume(q, on_message)
    ch.basic_publish("", q, b"loop")
    deadline = time.monotonic() + BOUND
    while len(seen) < 2 and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.2)
    assert len(seen) == 2, "the dead-lettered copy never reached the consumer"
    headers = seen[1][1]
    death = headers["x-death"][0]
    assert death["reason"] == b"rejected" or death["reason"] == "rejected"
    assert death["queue"] in (q, q.encode())
    assert death["count"] == 1


# ------------------------------------------------------------ server-properties

@pytest.mark.charon_only
def test_server_properties_name_charon_with_the_capabilities_clients_check(broker):
    with RawClient(broker.host, broker.port, timeout=BOUND) as c:
        c.handshake()
        props = c.server_properties
        assert props["product"] in ("Charon", b"Charon")
        assert props["version"]
        caps = props["capabilities"]
        for cap in ["publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                    "consumer_cancel_notify", "connection.blocked",
                    "authentication_failure_close", "per_consumer_qos"]:
            assert caps.get(cap) is True, cap
