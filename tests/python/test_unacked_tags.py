"""A channel's unacked deliveries by delivery tag (charon-core `tag_ring`: a ring for recent tags,
a map for stragglers), and a queue's unacked messages by id (the same structure), seen through a
real client: a delivery left unacked while thousands after it are settled stays settleable
exactly once; `multiple` settles take stragglers and recent tags together, in order; gaps in the
tags (no-ack deliveries on the same channel) and redeliveries of requeued messages (ids below the
newest) settle as before; a tag settled twice is refused with RabbitMQ's 406.
"""

import random
import time

from test_basic import collect, make_queue
from test_exchanges import expect_channel_error


def ready_count(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def wait_ready(ch, q, n, timeout=60.0):
    deadline = time.monotonic() + timeout
    while ready_count(ch, q) != n and time.monotonic() < deadline:
        time.sleep(0.05)
    return ready_count(ch, q)


def test_an_old_unacked_delivery_outlives_thousands_of_later_acks(broker, conn, ch):
    n = 3000
    q = make_queue(ch, n)
    _, got = collect(conn, ch, q, n)
    assert len(got) == n
    tags = [m.delivery_tag for m, _, _ in got]
    assert tags == list(range(1, n + 1))
    # Everything but the first and one in the middle, acked one by one in a shuffled order.
    keep = {1, 1500}
    rest = [t for t in tags if t not in keep]
    random.Random(7).shuffle(rest)
    for t in rest:
        ch.basic_ack(t)
    assert ready_count(ch, q) == 0
    # The two stragglers are still unacked: one nack with multiple requeues both (and only
    # them), and the running consumer gets them again in queue order.
    ch.basic_nack(1500, multiple=True, requeue=True)
    deadline = time.monotonic() + 60
    while len(got) < n + 2 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    again = got[n:]
    assert [(m.redelivered, b) for m, _, b in again] == [(True, b"m0"), (True, b"m1499")]
    assert [m.delivery_tag for m, _, _ in again] == [n + 1, n + 2]
    ch.basic_ack(n + 2, multiple=True)
    # A tag settled before is unknown now.
    expect_channel_error(
        lambda: (ch.basic_ack(1500), ch.queue_declare(q, passive=True)),
        406,
        "PRECONDITION_FAILED - unknown delivery tag 1500",
    )
    ch2 = conn.channel()
    assert ready_count(ch2, q) == 0


def test_multiple_settles_take_stragglers_and_recent_tags_in_order(broker, conn, ch, uniq):
    dlq = f"{uniq()}-tags-dlq"
    src = f"{uniq()}-tags-src"
    ch.queue_declare(dlq, exclusive=True)
    ch.queue_declare(
        src,
        exclusive=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq},
    )
    pub = conn.channel()
    pub.confirm_delivery()
    n = 2000
    for i in range(n):
        pub.basic_publish("", src, b"%d" % i)
    _, got = collect(conn, ch, src, n)
    assert len(got) == n
    # Tags 1 and 2 stay; the next 1,900 are acked singly (the ring moves past the stragglers).
    for t in range(3, 1903):
        ch.basic_ack(t)
    # One nack with multiple: the stragglers and tags 1903..1950, dead-lettered in tag order.
    ch.basic_nack(1950, multiple=True, requeue=False)
    assert wait_ready(pub, dlq, 2 + 48) == 50
    dead = []
    while True:
        m, _, b = pub.basic_get(dlq, auto_ack=True)
        if m is None:
            break
        dead.append(b)
    assert dead == [b"0", b"1"] + [b"%d" % i for i in range(1902, 1950)]
    # What is left (1951..2000) is acked with multiple=true, tag 0 meaning "all".
    ch.basic_ack(0, multiple=True)
    ch.close()
    assert ready_count(pub, src) == 0


def test_tag_gaps_from_no_ack_deliveries_and_redeliveries_settle(broker, conn, ch):
    noack_q = make_queue(ch, 500, prefix=b"n")
    ack_q = make_queue(ch, 300, prefix=b"a")
    # One channel: 500 no-ack deliveries take tags without unacked entries, between gets.
    m1, _, b1 = ch.basic_get(ack_q, auto_ack=False)
    _, got = collect(conn, ch, noack_q, 500, auto_ack=True)
    assert len(got) == 500
    m2, _, b2 = ch.basic_get(ack_q, auto_ack=False)
    assert (b1, b2) == (b"a0", b"a1")
    assert m2.delivery_tag == m1.delivery_tag + 501
    # Requeue the first: the queue delivers an old id again (below its newest unacked one).
    ch.basic_nack(m1.delivery_tag, requeue=True)
    m3, _, b3 = ch.basic_get(ack_q, auto_ack=False)
    assert (b3, m3.redelivered) == (b"a0", True)
    ch.basic_ack(m2.delivery_tag)
    ch.basic_ack(m3.delivery_tag)
    expect_channel_error(
        lambda: (ch.basic_reject(m1.delivery_tag, requeue=False), ch.queue_declare(ack_q, passive=True)),
        406,
        f"PRECONDITION_FAILED - unknown delivery tag {m1.delivery_tag}",
    )
    ch2 = conn.channel()
    assert ready_count(ch2, ack_q) == 298
    assert ready_count(ch2, noack_q) == 0
