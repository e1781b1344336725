"""The connection task writes deliveries to a plain TCP socket itself while its writer has
nothing queued, and hands the writer only what the socket does not take at once
(connection/writer.rs, `Direct`). A consumer that does not read while megabytes are delivered
to it fills its socket: the rest waits in the writer, and when the consumer reads, everything
arrives once, in order, with delivery tags counting up without gaps.
"""

import time

from pamqp import commands
from pamqp import frame as pframe

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
    connection, a large batch at a time (no prefetch limit): when a batch does not fit the
    room left after another one already encoded, the connection writes the earlier output
    first and replaces an empty buffer rather than growing it (methods/events.rs). Every
    delivery arrives once, each channel's in order with its tags counting up, bodies intact."""
    n, size = 2500, 1024
    qs = [f"{uniq()}-b2b-{i}" for i in range(2)]
    with RawClient(broker.host, broker.port) as consumer, \
            RawClient(broker.host, broker.port) as publisher:
        publisher.handshake()
        publisher.open_channel(1)
        for q in qs:
            # auto-delete: removed once its consumer goes (it never had one before).
            publisher.send_frame(commands.Queue.Declare(queue=q, auto_delete=True), 1)
            publisher.expect_method(commands.Queue.DeclareOk)
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
            if depths == [n, n] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert depths == [n, n]
        consumer.handshake()
        for ch in (1, 2):
            consumer.open_channel(ch)
        # Both consumers in one write: both queues start sending their backlogs at once.
        consumer.send(b"".join(
            pframe.marshal(commands.Basic.Consume(queue=q, consumer_tag=f"c{ch}", no_ack=True), ch)
            for ch, q in enumerate(qs, start=1)
        ))
        got, other = read_deliveries(consumer, [1, 2], n, timeout=120.0)
        assert sorted((f.channel, type(f.method).__name__) for f in other) == \
            [(1, "ConsumeOk"), (2, "ConsumeOk")]
        for ch, q in enumerate(qs, start=1):
            msgs = got[ch]
            assert [t for t, _, _ in msgs] == list(range(1, n + 1))
            assert [b[:9] for _, _, b in msgs] == [f"{q[-1]}{k:08d}".encode() for k in range(n)]
            assert all(len(b) == size for _, _, b in msgs)
