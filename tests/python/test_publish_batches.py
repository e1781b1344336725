"""Publishes handed to queues per read batch (issue 13 b, `connection/publish_batch.rs`): the
single-target publishes of one socket read reach each queue as one command. Whatever the
gathering, each queue gets its publishes in publish order, a multi-target publish and any other
method (here queue.declare passive, answered by the queue itself) come after every publish
before them, and every confirm is sent once, in order. One socket write carries everything, so
the broker reads it in a few large reads."""

import pika
from pamqp import commands, frame as pframe, header as pheader
from pamqp import body as pbody

from amqp_raw import RawClient


def _publish_bytes(ch, exchange, key, body, persistent):
    props = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    return (pframe.marshal(commands.Basic.Publish(exchange=exchange, routing_key=key), ch)
            + pframe.marshal(pheader.ContentHeader(0, len(body), props), ch)
            + pframe.marshal(pbody.ContentBody(body), ch))


def _drain(broker, queue, n):
    """The bodies of the first `n` messages of `queue`, in order (pika, acked)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
    try:
        ch = conn.channel()
        got = []
        for _, _, body in ch.consume(queue, inactivity_timeout=60):
            assert body is not None, f"{queue}: only {len(got)} of {n} messages"
            got.append(body.decode())
            if len(got) == n:
                break
        ch.cancel()
        ch.basic_ack(multiple=True, delivery_tag=0)
        return got
    finally:
        conn.close()


def test_gathered_publishes_keep_order_and_go_before_other_methods(broker, uniq):
    qa, qb, fan = uniq("pba"), uniq("pbb"), uniq("pbx")
    n = 1200
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Confirm.Select(), 1)
        c.expect_method(commands.Confirm.SelectOk)
        c.open_channel(2)
        for q in (qa, qb):
            c.send_frame(commands.Queue.Declare(queue=q, durable=True), 2)
            c.expect_method(commands.Queue.DeclareOk)
        c.send_frame(commands.Exchange.Declare(exchange=fan, exchange_type="fanout"), 2)
        c.expect_method(commands.Exchange.DeclareOk)
        for q in (qa, qb):
            c.send_frame(commands.Queue.Bind(queue=q, exchange=fan), 2)
            c.expect_method(commands.Queue.BindOk)

        # Channel 1 confirms, channel 2 does not; both publish to both queues, persistent and
        # transient, every 100th through the fanout exchange (both queues: not gathered); a
        # passive declare of each queue halfway.
        blob = bytearray()
        want = {qa: [], qb: []}
        confirms = 0
        halfway = None
        for i in range(n):
            ch = 1 + i % 2
            persistent = i % 3 != 0
            if i % 100 == 99:
                body = b"f-%d" % i
                blob += _publish_bytes(ch, fan, "", body, persistent)
                want[qa].append(body.decode())
                want[qb].append(body.decode())
            else:
                q = qa if i % 5 < 3 else qb
                body = b"%s-%d" % (q[-3:].encode(), i)
                blob += _publish_bytes(ch, "", q, body, persistent)
                want[q].append(body.decode())
            confirms += ch == 1
            if i == n // 2:
                halfway = {q: len(w) for q, w in want.items()}
                for q in (qa, qb):
                    blob += pframe.marshal(commands.Queue.Declare(queue=q, passive=True), 2)
        c.send(bytes(blob))

        # The passive declares count every publish before them (and none after); channel 1's
        # confirms cover each of its publishes once, in order.
        counts = []
        acked = 0
        while len(counts) < 2 or acked < confirms:
            f = c.read_frame_skip_heartbeats(timeout=120)
            assert f.type == 1, f
            m = f.method
            if isinstance(m, commands.Queue.DeclareOk):
                assert f.channel == 2
                counts.append((m.queue, m.message_count))
                continue
            assert isinstance(m, commands.Basic.Ack) and f.channel == 1, f
            assert m.delivery_tag > acked and (m.multiple or m.delivery_tag == acked + 1), m
            acked = m.delivery_tag
        assert acked == confirms
        assert counts == [(qa, halfway[qa]), (qb, halfway[qb])]

    for q in (qa, qb):
        assert _drain(broker, q, len(want[q])) == want[q]
