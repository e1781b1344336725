"""The connection task writes deliveries to a plain TCP socket itself while its writer has
nothing queued, and hands the writer only what the socket does not take at once
(connection/writer.rs, `Direct`). A consumer that does not read while megabytes are delivered
to it fills its socket: the rest waits in the writer, and when the consumer reads, everything
arrives once, in order, with delivery tags counting up without gaps.
"""

import time

from pamqp import commands

from amqp_raw import RawClient
from test_framing_batches import publish_frames, read_deliveries


def test_deliveries_beyond_a_full_socket_arrive_complete_and_in_order(broker, uniq):
    n, size = 3000, 4096  # 12 MiB: more than loopback socket buffers hold
    q = f"{uniq()}-direct"
    with RawClient(broker.host, broker.port) as consumer, \
            RawClient(broker.host, broker.port) as publisher:
        consumer.handshake()
        consumer.open_channel(1)
        # Not exclusive: the publisher's connection polls its depth (auto-delete cleans up).
        consumer.send_frame(commands.Queue.Declare(queue=q, auto_delete=True), 1)
        consumer.expect_method(commands.Queue.DeclareOk)
        consumer.send_frame(commands.Basic.Consume(queue=q, consumer_tag="c", no_ack=True), 1)
        consumer.expect_method(commands.Basic.ConsumeOk)
        publisher.handshake()
        publisher.open_channel(1)
        publisher.send(b"".join(
            publish_frames(1, "", q, f"{k:08d}".encode().ljust(size, b".")) for k in range(n)
        ))
        # Not reading on the consumer side: once the queue is empty every message was handed
        # to the consumer's connection, most of it beyond what its socket took.
        deadline = time.monotonic() + 120
        while True:
            publisher.send_frame(commands.Queue.Declare(queue=q, passive=True), 1)
            left = publisher.expect_method(commands.Queue.DeclareOk).method.message_count
            if left == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert left == 0
        got, other = read_deliveries(consumer, [1], n, timeout=120.0)
        assert other == []
        assert [t for t, _, _ in got[1]] == list(range(1, n + 1))
        assert [b[:8] for _, _, b in got[1]] == [f"{k:08d}".encode() for k in range(n)]
        assert all(len(b) == size for _, _, b in got[1])


def test_batches_of_several_queues_back_to_back_arrive_complete_and_in_order(broker, uniq):
    """Two queues with a backlog each start delivering at once to two channels of one
    connection, a large batch at a time (prefetch 0): when a batch does not fit the room left
    after another one already encoded, the connection writes the earlier output first
    (methods/events.rs) instead of copying it into a larger buffer. Every delivery arrives
    once, each channel's in order with its tags counting up, bodies intact."""
    n, size = 2500, 1024
    qs = [f"{uniq()}-b2b-{i}" for i in range(2)]
    with RawClient(broker.host, broker.port) as consumer, \
            RawClient(broker.host, broker.port) as publisher:
        publisher.handshake()
        publisher.open_channel(1)
        for q in qs:
            publisher.send_frame(commands.Queue.Declare(queue=q, auto_delete=True), 1)
            publisher.expect_method(commands.Queue.DeclareOk)
        consumer.handshake()
        for ch, q in enumerate(qs, start=1):
            consumer.open_channel(ch)
            # Consuming first keeps the auto-delete queues alive; the backlog builds while the
            # consumers are held back by basic.qos 1 and no acks.
            consumer.send_frame(commands.Basic.Qos(prefetch_count=1), ch)
            consumer.expect_method(commands.Basic.QosOk)
            consumer.send_frame(commands.Basic.Consume(queue=q, consumer_tag=f"c{ch}"), ch)
            consumer.expect_method(commands.Basic.ConsumeOk)
        publisher.send(b"".join(
            publish_frames(1, "", q, f"{q[-1]}{k:08d}".encode().ljust(size, b"."))
            for k in range(n) for q in qs
        ))
        deadline = time.monotonic() + 120
        while True:
            depths = []
            for q in qs:
                publisher.send_frame(commands.Queue.Declare(queue=q, passive=True), 1)
                depths.append(publisher.expect_method(commands.Queue.DeclareOk).method.message_count)
            if all(d == n - 1 for d in depths) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert depths == [n - 1, n - 1]
        first, other = read_deliveries(consumer, [1, 2], 1, timeout=60.0)
        assert other == []
        # Unlimited prefetch on both channels at once: each queue sends the rest in large
        # batches, which the connection encodes back to back. Acking the first delivery
        # releases each queue.
        for ch in (1, 2):
            consumer.send_frame(commands.Basic.Qos(prefetch_count=0), ch)
            consumer.send_frame(commands.Basic.Ack(delivery_tag=1), ch)
        got, other = read_deliveries(consumer, [1, 2], n - 1, timeout=120.0)
        # Deliveries may come before the second qos-ok.
        assert sorted((f.channel, type(f.method).__name__) for f in other) == \
            [(1, "QosOk"), (2, "QosOk")]
        for ch, q in enumerate(qs, start=1):
            msgs = first[ch] + got[ch]
            assert [t for t, _, _ in msgs] == list(range(1, n + 1))
            assert [b[:9] for _, _, b in msgs] == [f"{q[-1]}{k:08d}".encode() for k in range(n)]
            assert all(len(b) == size for _, _, b in msgs)
