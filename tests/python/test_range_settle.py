"""Multiple acks settled as runs (issue 13 b, branch b13q, docs/performance.md part 17): the queue
takes a multi-ack's ids from its unacked ring in one pass (`TagRing::remove_each`) and the store
index drops a settle record's members with one trim (`Index::settle`). Through a real socket: one
channel consumes two durable queues (its delivery tags interleave them), one tag inside the acked
range was nacked with requeue first (a gap in the range, redelivered under a new tag), then a
multiple ack covers the rest; after kill -9 every acked message stays gone and every confirmed
unacked one — the requeued one too — comes back, in order per queue."""

import pika
import pytest
from pamqp import commands
from pamqp import frame as pframe

import conftest
from amqp_raw import RawClient
from test_durability import drain, settle_store
from test_framing_batches import read_deliveries

pytestmark = pytest.mark.charon_only

N = 200  # messages a queue


@pytest.fixture
def node(tmp_path):
    box = {"b": conftest.start_charon(tmp_path)}
    yield box
    conftest.stop_charon(box["b"])


def test_multiple_ack_over_two_queues_with_a_requeued_tag_inside_survives_kill_9(tmp_path, node):
    b = node["b"]
    queues = ["range-a", "range-b"]
    with b.connect() as pc:
        for q in queues:
            pc.channel().queue_declare(q, durable=True)
    with RawClient(b.host, b.port) as c:
        c.handshake()
        c.open_channel(1)
        for q in queues:
            c.send_frame(commands.Basic.Consume(queue=q, consumer_tag=q), 1)
            c.expect_method(commands.Basic.ConsumeOk)
        # Interleaved confirmed publishes to the consuming queues: the consumer's delivery tags
        # alternate between the queues.
        with b.connect() as pc:
            pch = pc.channel()
            pch.confirm_delivery()
            for i in range(N):
                for q in queues:
                    pch.basic_publish("", q, f"{q}-{i:04}".encode(),
                                      pika.BasicProperties(delivery_mode=2))
        got, _ = read_deliveries(c, [1], 2 * N)
        by_tag = {t: body for t, _, body in got[1]}
        assert sorted(by_tag) == list(range(1, 2 * N + 1))
        switches = sum(by_tag[t][:7] != by_tag[t + 1][:7] for t in range(1, 2 * N))
        assert switches > N // 2, f"tags not interleaved between the queues ({switches})"
        # A tag inside the range to be acked goes back first (redelivered under tag 2N+1).
        gap = 51
        c.send_frame(commands.Basic.Nack(delivery_tag=gap, multiple=False, requeue=True), 1)
        again, _ = read_deliveries(c, [1], 1)
        (tag, redelivered, body), = again[1]
        assert (tag, redelivered, body) == (2 * N + 1, True, by_tag[gap])
        # One multiple ack over both queues' tags, across the requeued one: 1..upto but `gap`.
        upto = 3 * N // 2
        c.send(pframe.marshal(commands.Basic.Ack(delivery_tag=upto, multiple=True), 1))
        acked = {by_tag[t] for t in range(1, upto + 1) if t != gap}
        unacked = {by_tag[t] for t in range(upto + 1, 2 * N + 1)} | {by_tag[gap]}
        # A round trip on the acking channel: the ack reached its queues before the barrier.
        for q in queues:
            c.send_frame(commands.Queue.Declare(queue=q, durable=True, passive=True), 1)
            c.expect_method(commands.Queue.DeclareOk)
        with b.connect() as sc:
            sch = sc.channel()
            for q in queues:
                settle_store(b, sch, q)  # the ack above is on disk
        b = node["b"] = conftest.restart_charon(tmp_path, b, hard=True)
    with b.connect() as c:
        ch = c.channel()
        back = {q: [g[2] for g in drain(ch, q)] for q in queues}
    for q in queues:
        # Order per queue: what comes back is the queue's unacked messages in publish order.
        want = sorted(x for x in unacked if x.startswith(q.encode()))
        assert back[q] == want, f"{q}: {len(back[q])} back, {len(want)} expected"
    assert not (set(back[queues[0]]) | set(back[queues[1]])) & acked
