"""Many small frames in one write, both ways: publishes pipelined in one sendall on several
channels (the broker's publish fast path), deliveries for several channels written in batches
(one socket write per batch), acks/nacks/rejects pipelined (their fast decoders). Checked with a
raw-socket client so the exact frame order on the wire is visible: per channel, every
basic.deliver is followed by its content header and body on that channel, delivery tags count up
from 1 without gaps, bodies arrive in publish order, other channels' frames may come in between.
"""

from pamqp import commands, frame as pframe, header as pheader
from pamqp import body as pbody

from amqp_raw import FRAME_BODY, FRAME_HEADER, FRAME_METHOD, RawClient


def publish_frames(channel, exchange, routing_key, body, mandatory=False):
    return (
        pframe.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                              mandatory=mandatory), channel)
        + pframe.marshal(pheader.ContentHeader(0, len(body), commands.Basic.Properties()), channel)
        + pframe.marshal(pbody.ContentBody(body), channel)
    )


def declare(c, ch, name, arguments=None):
    c.send_frame(commands.Queue.Declare(queue=name, exclusive=True, arguments=arguments), ch)
    c.expect_method(commands.Queue.DeclareOk)


def read_deliveries(c, channels, per_channel, timeout=60.0):
    """Reads frames until `per_channel` deliveries arrived on each of `channels`; returns
    {channel: [(delivery_tag, redelivered, body)]} and checks each message's frames are
    consecutive on its channel (deliver, header, body)."""
    got = {ch: [] for ch in channels}
    pending = {}  # channel -> [deliver method, header, body bytes]
    other = []
    while any(len(got[ch]) < per_channel for ch in channels):
        f = c.read_frame_skip_heartbeats(timeout)
        if f.type == FRAME_METHOD and isinstance(f.method, commands.Basic.Deliver):
            assert f.channel not in pending, f"deliver on ch {f.channel} before the last one's body"
            pending[f.channel] = [f.method, None]
        elif f.type == FRAME_HEADER:
            assert f.channel in pending and pending[f.channel][1] is None, f"stray header {f!r}"
            pending[f.channel][1] = f.method
            if f.method.body_size == 0:
                m = pending.pop(f.channel)[0]
                got[f.channel].append((m.delivery_tag, m.redelivered, b""))
        elif f.type == FRAME_BODY:
            assert f.channel in pending and pending[f.channel][1] is not None, f"stray body {f!r}"
            m = pending.pop(f.channel)[0]
            got[f.channel].append((m.delivery_tag, m.redelivered, f.method.value))
        else:
            other.append(f)
    assert not pending, pending
    return got, other


def test_pipelined_publishes_and_batched_deliveries_keep_order_and_tags(broker, uniq):
    n = 400
    channels = [1, 2, 3]
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        queues = {}
        for ch in channels:
            c.open_channel(ch)
            q = f"{uniq()}-frames-{ch}"
            declare(c, ch, q)
            c.send_frame(commands.Basic.Consume(queue=q, consumer_tag=f"ctag-{ch}"), ch)
            c.expect_method(commands.Basic.ConsumeOk)
            queues[ch] = q
        # Every publish of every channel, interleaved, in one write: channel ch publishes to the
        # queue consumed on the next channel, so deliveries and publishes cross channels.
        data = b"".join(
            publish_frames(ch, "", queues[channels[(i + k) % len(channels)]],
                           f"{channels[(i + k) % len(channels)]}:{k}".encode())
            for k in range(n) for i, ch in enumerate(channels)
        )
        c.send(data)
        got, other = read_deliveries(c, channels, n)
        assert other == [], other
        for ch in channels:
            tags = [t for t, _, _ in got[ch]]
            assert tags == list(range(1, n + 1)), (ch, tags[:10])
            bodies = [b.decode() for _, _, b in got[ch]]
            assert bodies == [f"{ch}:{k}" for k in range(n)], (ch, bodies[:5])
            assert not any(r for _, r, _ in got[ch])
        # Acks of all channels pipelined in one write: multiple in steps, then the rest one by
        # one; nothing may come back (no redelivery, no error).
        acks = b""
        for ch in channels:
            acks += pframe.marshal(commands.Basic.Ack(delivery_tag=100, multiple=True), ch)
            acks += pframe.marshal(commands.Basic.Ack(delivery_tag=250, multiple=True), ch)
            for t in range(251, n + 1):
                acks += pframe.marshal(commands.Basic.Ack(delivery_tag=t), ch)
        c.send(acks)
        for ch in channels:
            c.send_frame(commands.Basic.Cancel(consumer_tag=f"ctag-{ch}"), ch)
            f = c.expect_method(commands.Basic.CancelOk)
            assert f.channel == ch
            # Every message was acked: the queue is empty, nothing to redeliver.
            c.send_frame(commands.Queue.Declare(queue=queues[ch], passive=True), ch)
            ok = c.expect_method(commands.Queue.DeclareOk)
            assert ok.method.message_count == 0, (ch, ok.method)


def test_pipelined_nack_reject_and_ack_settle_exactly(broker, uniq):
    # basic.nack and basic.reject go through the framer's fast decoders: requeue, dead-letter
    # and multiple must mean exactly what they say.
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        dlq = f"{uniq()}-frames-dlq"
        q = f"{uniq()}-frames-src"
        declare(c, 1, dlq)
        declare(c, 1, q, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        c.send(b"".join(publish_frames(1, "", q, f"m{k}".encode()) for k in range(1, 11)))
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag="src"), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        got, _ = read_deliveries(c, [1], 10)
        assert [b for _, _, b in got[1]] == [f"m{k}".encode() for k in range(1, 11)]
        settle = b"".join([
            pframe.marshal(commands.Basic.Nack(delivery_tag=2, multiple=False, requeue=False), 1),
            pframe.marshal(commands.Basic.Reject(delivery_tag=3, requeue=True), 1),
            pframe.marshal(commands.Basic.Reject(delivery_tag=4, requeue=False), 1),
            pframe.marshal(commands.Basic.Nack(delivery_tag=6, multiple=True, requeue=False), 1),
            pframe.marshal(commands.Basic.Ack(delivery_tag=10, multiple=True), 1),
        ])
        c.send(settle)
        # m3 comes back, redelivered, with the next tag.
        again, _ = read_deliveries(c, [1], 1)
        assert again[1] == [(11, True, b"m3")], again
        c.send_frame(commands.Basic.Ack(delivery_tag=11), 1)
        c.send_frame(commands.Basic.Cancel(consumer_tag="src"), 1)
        c.expect_method(commands.Basic.CancelOk)
        # Dead-lettered: m2 (nack), m4 (reject), m1 and m5, m6 (nack multiple up to 6), in order.
        c.send_frame(commands.Basic.Consume(queue=dlq, consumer_tag="dlq", no_ack=True), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        dead, _ = read_deliveries(c, [1], 5)
        assert sorted(b for _, _, b in dead[1]) == [b"m1", b"m2", b"m4", b"m5", b"m6"], dead
        c.send_frame(commands.Queue.Declare(queue=q, passive=True), 1)
        assert c.expect_method(commands.Queue.DeclareOk).method.message_count == 0


def test_a_failing_channel_in_a_pipelined_batch_leaves_the_others_intact(broker, uniq):
    # A publish to a missing exchange in the middle of one write closes only its channel (404);
    # the other channel's publishes before and after it all arrive, in order.
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.open_channel(2)
        q = f"{uniq()}-frames-ok"
        declare(c, 1, q)
        data = b"".join(publish_frames(1, "", q, f"a{k}".encode()) for k in range(50))
        data += publish_frames(2, f"{uniq()}-no-such-exchange", "x", b"lost")
        data += publish_frames(2, "", q, b"ignored: channel 2 is closing")
        data += b"".join(publish_frames(1, "", q, f"b{k}".encode()) for k in range(50))
        c.send(data)
        f = c.expect_method(commands.Channel.Close)
        assert f.channel == 2 and f.method.reply_code == 404, f.method
        c.send_frame(commands.Channel.CloseOk(), 2)
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag="ok", no_ack=True), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        got, other = read_deliveries(c, [1], 100)
        assert [b.decode() for _, _, b in got[1]] == [f"a{k}" for k in range(50)] + [
            f"b{k}" for k in range(50)]
        assert [t for t, _, _ in got[1]] == list(range(1, 101))
        assert other == []
