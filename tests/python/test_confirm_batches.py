"""Publisher confirms sent in batches (issue 13): queue actors answer a whole batch of publishes
per publishing channel at once, the commit waiter a whole group commit. Whatever the batching,
every publish of a channel is confirmed exactly once, in sequence order, acks coalesced with
`multiple`, refused ones nacked alone — through a real socket, counted from the frames."""

import time

from pamqp import commands

from amqp_raw import RawClient


def _confirmed(c, channels, total, timeout=120):
    """Reads basic.ack/nack frames until `total` publishes of each channel in `channels` are
    confirmed; returns {channel: [(tag, 'ack'|'nack'), ...]} with every tag once, and checks
    confirms never go backwards or twice."""
    last = {ch: 0 for ch in channels}
    got = {ch: [] for ch in channels}
    while any(last[ch] < total[ch] for ch in channels):
        f = c.read_frame_skip_heartbeats(timeout=timeout)
        if f.type != 1:
            continue
        m = f.method
        if isinstance(m, commands.Basic.Ack):
            kind = "ack"
        elif isinstance(m, commands.Basic.Nack):
            kind = "nack"
        else:
            continue
        ch = f.channel
        tag = m.delivery_tag
        assert tag > last[ch], f"channel {ch}: confirm {tag} after {last[ch]}"
        assert tag <= total[ch], f"channel {ch}: confirm of unknown publish {tag}"
        first = last[ch] + 1 if m.multiple else tag
        # Without `multiple`, nothing may be skipped.
        assert first == last[ch] + 1, f"channel {ch}: publishes {last[ch] + 1}..{tag - 1} skipped"
        got[ch].extend((t, kind) for t in range(first, tag + 1))
        last[ch] = tag
    return got


def _confirming(c, channels):
    """Handshake, then open `channels` in confirm mode."""
    c.handshake()
    for ch in channels:
        c.open_channel(ch)
        c.send_frame(commands.Confirm.Select(), ch)
        c.expect_method(commands.Confirm.SelectOk)


def _declare(c, ch, name, arguments=None):
    c.send_frame(commands.Queue.Declare(queue=name, durable=True, arguments=arguments or {}), ch)
    c.expect_method(commands.Queue.DeclareOk)


def _publish_many(c, plan, n, body):
    persistent = commands.Basic.Properties(delivery_mode=2)
    for i in range(n):
        for ch, exchange, key in plan:
            c.publish(ch, exchange, key, body + b"-%d" % i, properties=persistent)


def test_batched_confirms_cover_every_publish_once_in_order(broker, uniq):
    q1, q2 = uniq("cb1"), uniq("cb2")
    n = 3000
    with RawClient(broker.host, broker.port) as c:
        _confirming(c, (1, 2))
        _declare(c, 1, q1)
        _declare(c, 1, q2)
        c.send_frame(commands.Queue.Bind(queue=q1, exchange="amq.fanout"), 1)
        c.expect_method(commands.Queue.BindOk)
        c.send_frame(commands.Queue.Bind(queue=q2, exchange="amq.fanout"), 1)
        c.expect_method(commands.Queue.BindOk)
        # Channel 1: each publish waits for two queues and the store commit; channel 2: one
        # queue and the commit. Interleaved on one connection.
        _publish_many(c, [(1, "amq.fanout", ""), (2, "", q1)], n, b"x" * 200)
        got = _confirmed(c, (1, 2), {1: n, 2: n})
        for ch in (1, 2):
            assert got[ch] == [(t, "ack") for t in range(1, n + 1)]
        # Every confirmed message is there.
        for q, want in ((q1, 2 * n), (q2, n)):
            c.send_frame(commands.Queue.Declare(queue=q, passive=True), 1)
            ok = c.expect_method(commands.Queue.DeclareOk)
            assert ok.method.message_count == want
        for q in (q1, q2):
            c.send_frame(commands.Queue.Delete(queue=q), 1)
            c.expect_method(commands.Queue.DeleteOk)


def test_refused_publishes_in_a_batch_are_nacked_alone_in_order(broker, uniq):
    q = uniq("cbr")
    n = 600
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Confirm.Select(), 1)
        c.expect_method(commands.Confirm.SelectOk)
        _declare(c, 1, q, {"x-max-length": 250, "x-overflow": "reject-publish"})
        _publish_many(c, [(1, "", q)], n, b"y" * 100)
        got = _confirmed(c, (1,), {1: n})[1]
        assert [t for t, _ in got] == list(range(1, n + 1))
        assert got[:250] == [(t, "ack") for t in range(1, 251)]
        assert got[250:] == [(t, "nack") for t in range(251, n + 1)]
        c.send_frame(commands.Queue.Declare(queue=q, passive=True), 1)
        assert c.expect_method(commands.Queue.DeclareOk).method.message_count == 250
        c.send_frame(commands.Queue.Delete(queue=q), 1)
        c.expect_method(commands.Queue.DeleteOk)


def test_confirms_keep_coming_after_each_wait_ends(broker, uniq):
    """A persistent publisher that waits for each confirm before the next publish: the connection
    stops waiting for a commit after every confirm and starts again with the next publish (its
    wait for the next group commit is made again each time). Every publish is acked, one by one,
    also after a pause with nothing waiting; then a burst on a second channel of the same
    connection is confirmed in full."""
    q = uniq("cbw")
    rounds = 40
    persistent = commands.Basic.Properties(delivery_mode=2)
    with RawClient(broker.host, broker.port) as c:
        _confirming(c, (1, 2))
        _declare(c, 1, q)
        for i in range(1, rounds + 1):
            c.publish(1, "", q, b"w-%d" % i, properties=persistent)
            f = c.expect_method(commands.Basic.Ack, timeout=30)
            assert f.channel == 1
            assert f.method.delivery_tag == i and not f.method.multiple
            if i == rounds // 2:
                # Nothing waits for a commit for a while; the next publish must still be acked.
                time.sleep(0.5)
        _publish_many(c, [(2, "", q)], 500, b"v")
        got = _confirmed(c, (2,), {2: 500})
        assert got[2] == [(t, "ack") for t in range(1, 501)]
        c.send_frame(commands.Queue.Declare(queue=q, passive=True), 1)
        assert c.expect_method(commands.Queue.DeclareOk).method.message_count == rounds + 500
        c.send_frame(commands.Queue.Delete(queue=q), 1)
        c.expect_method(commands.Queue.DeleteOk)
