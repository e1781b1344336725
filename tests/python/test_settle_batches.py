"""Settles pipelined in one write: the broker gathers consecutive basic.ack/nack/reject into one
command per queue and kind (connection/methods/settles.rs). Checked with a raw-socket client so
the batch really arrives in one read: dead letters keep the order of the nacks, acks and nacks
on two queues of one channel each reach their own queue, and an unknown delivery tag in the
middle of a batch closes the channel (406) after the settles before it took effect, while
the messages not settled go back to their queue.
"""

import time

from pamqp import commands
from pamqp import frame as pframe

from amqp_raw import RawClient
from test_framing_batches import declare, publish_frames, read_deliveries


def wait_count(c, ch, queue, count, timeout=60.0):
    """Polls a passive declare until `queue` holds `count` ready messages; returns the count."""
    deadline = time.monotonic() + timeout
    while True:
        c.send_frame(commands.Queue.Declare(queue=queue, passive=True), ch)
        n = c.expect_method(commands.Queue.DeclareOk).method.message_count
        if n == count or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


def test_pipelined_single_nacks_dead_letter_in_nack_order(broker, uniq):
    n = 300
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        dlq = f"{uniq()}-settle-dlq"
        q = f"{uniq()}-settle-src"
        declare(c, 1, dlq)
        declare(c, 1, q, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        c.send(b"".join(publish_frames(1, "", q, f"m{k}".encode()) for k in range(1, n + 1)))
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag="src"), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        got, _ = read_deliveries(c, [1], n)
        tags = [t for t, _, _ in got[1]]
        # Nacked one by one, in an order that is not the delivery order: odd tags, then even.
        order = tags[0::2] + tags[1::2]
        c.send(b"".join(
            pframe.marshal(commands.Basic.Nack(delivery_tag=t, requeue=False), 1) for t in order
        ))
        assert wait_count(c, 1, dlq, n) == n
        c.send_frame(commands.Basic.Consume(queue=dlq, consumer_tag="dlq", no_ack=True), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        dead, _ = read_deliveries(c, [1], n)
        by_tag = {t: b for t, _, b in got[1]}
        assert [b for _, _, b in dead[1]] == [by_tag[t] for t in order]


def test_acks_and_nacks_of_two_queues_in_one_batch_reach_each_queue(broker, uniq):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        dlq = f"{uniq()}-settle-dlq2"
        qa = f"{uniq()}-settle-a"
        qb = f"{uniq()}-settle-b"
        declare(c, 1, dlq)
        for q in (qa, qb):
            declare(c, 1, q, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        c.send(b"".join(publish_frames(1, "", qa, f"a{k}".encode()) for k in range(1, 5)))
        c.send_frame(commands.Basic.Consume(queue=qa, consumer_tag="a"), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        got_a, _ = read_deliveries(c, [1], 4)
        c.send(b"".join(publish_frames(1, "", qb, f"b{k}".encode()) for k in range(1, 5)))
        c.send_frame(commands.Basic.Consume(queue=qb, consumer_tag="b"), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        got_b, _ = read_deliveries(c, [1], 4)
        ta = {b.decode(): t for t, _, b in got_a[1]}
        tb = {b.decode(): t for t, _, b in got_b[1]}
        # Interleaved: ack a1, nack b1, nack b2, ack b3, nack a2, reject a3 (requeue), ack a4.
        batch = [
            commands.Basic.Ack(delivery_tag=ta["a1"]),
            commands.Basic.Nack(delivery_tag=tb["b1"], requeue=False),
            commands.Basic.Nack(delivery_tag=tb["b2"], requeue=False),
            commands.Basic.Ack(delivery_tag=tb["b3"]),
            commands.Basic.Nack(delivery_tag=ta["a2"], requeue=False),
            commands.Basic.Reject(delivery_tag=ta["a3"], requeue=True),
            commands.Basic.Ack(delivery_tag=ta["a4"]),
        ]
        c.send(b"".join(pframe.marshal(m, 1) for m in batch))
        # a3 comes back redelivered with the next tag; b4 stays unacked.
        again, _ = read_deliveries(c, [1], 1)
        assert [(r, b) for _, r, b in again[1]] == [(True, b"a3")]
        assert wait_count(c, 1, dlq, 3) == 3
        c.send_frame(commands.Basic.Consume(queue=dlq, consumer_tag="dlq", no_ack=True), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        dead, _ = read_deliveries(c, [1], 3)
        assert sorted(b for _, _, b in dead[1]) == [b"a2", b"b1", b"b2"]


def test_an_unknown_tag_mid_batch_closes_the_channel_after_the_settles_before_it(broker, uniq):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.open_channel(2)
        dlq = f"{uniq()}-settle-dlq3"
        q = f"{uniq()}-settle-src3"
        declare(c, 2, dlq)
        declare(c, 2, q, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        c.send(b"".join(publish_frames(1, "", q, f"m{k}".encode()) for k in range(1, 7)))
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag="src"), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        got, _ = read_deliveries(c, [1], 6)
        assert [t for t, _, _ in got[1]] == [1, 2, 3, 4, 5, 6]
        batch = [
            commands.Basic.Nack(delivery_tag=1, requeue=False),
            commands.Basic.Nack(delivery_tag=2, requeue=False),
            commands.Basic.Ack(delivery_tag=3),
            commands.Basic.Nack(delivery_tag=99, requeue=False),
            commands.Basic.Nack(delivery_tag=4, requeue=False),
        ]
        c.send(b"".join(pframe.marshal(m, 1) for m in batch))
        f = c.expect_method(commands.Channel.Close)
        assert f.channel == 1 and f.method.reply_code == 406, f.method
        assert f.method.reply_text == "PRECONDITION_FAILED - unknown delivery tag 99"
        c.send_frame(commands.Channel.CloseOk(), 1)
        # m1, m2 dead-lettered; m3 acked; m4..m6 back in the queue (the nack after the error
        # was ignored with the closing channel).
        assert wait_count(c, 2, dlq, 2) == 2
        assert wait_count(c, 2, q, 3) == 3
        c.send_frame(commands.Basic.Consume(queue=dlq, consumer_tag="dlq", no_ack=True), 2)
        c.expect_method(commands.Basic.ConsumeOk)
        dead, _ = read_deliveries(c, [2], 2)
        assert [b for _, _, b in dead[2]] == [b"m1", b"m2"]
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag="back", no_ack=True), 2)
        c.expect_method(commands.Basic.ConsumeOk)
        back, _ = read_deliveries(c, [2], 3)
        assert [(r, b) for _, r, b in back[2]] == [(True, b"m4"), (True, b"m5"), (True, b"m6")]
