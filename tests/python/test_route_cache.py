"""A connection's route cache (issue 13 b, branch b13s, docs/performance.md part 19): a publish to
the same exchange and routing key as the connection's last one takes the queues it reached from
the connection's cache while the vhost's topology has not been written to since. Each test
publishes on one connection, changes the topology from another one (or by a queue's own removal)
and publishes again on the first: the next publish must follow the change — bindings and
unbindings, an exchange deleted and re-declared, a queue deleted and re-declared (by queue.delete,
by its last consumer leaving an auto-delete queue, by its exclusive owner closing), and a policy
set on a queue reached through a cached route."""

import pika
import pytest

from dlx_helpers import clear_policy, count, eventually, set_policy

PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def publisher(confirm_publisher):
    """conftest's confirm-mode connection and channel."""
    return confirm_publisher


def publish(ch, exchange, key, body=b"m", n=1):
    for _ in range(n):
        ch.basic_publish(exchange, key, body, PERSISTENT)


def counts(ch, *queues):
    return [count(ch, q) for q in queues]



def queue_gone(conn, q):
    """Whether a passive declare of `q` on a fresh channel of `conn` is refused (404)."""
    try:
        probe = conn.channel()
        probe.queue_declare(q, passive=True)
        probe.close()
        return False
    except pika.exceptions.ChannelClosedByBroker:
        return True


def redeclared_gets_the_next_publish(ch, pch, q, what, body):
    """Waits until `q` is gone (`what` names why), declares it again (durable) and checks that
    the next publish to it through the default exchange lands in the new queue."""
    eventually(lambda: queue_gone(ch.connection, q), what, conn=ch.connection)
    ch2 = ch.connection.channel()
    ch2.queue_declare(q, durable=True)
    publish(pch, "", q, body)
    assert count(ch2, q) == 1
    assert ch2.basic_get(q, auto_ack=True)[2] == body
    ch2.queue_delete(q)

def test_binding_and_unbinding_change_where_the_next_publish_goes(broker, ch, uniq, publisher):
    _, pch = publisher
    x, a, b, y = uniq("rc-x"), uniq("rc-a"), uniq("rc-b"), uniq("rc-y")
    ch.exchange_declare(x, "direct")
    for q in (a, b):
        ch.queue_declare(q, durable=True)
    ch.queue_bind(a, x, "k")
    publish(pch, x, "k", n=2)
    assert counts(ch, a, b) == [2, 0]
    ch.queue_bind(b, x, "k")
    publish(pch, x, "k")
    assert counts(ch, a, b) == [3, 1]
    ch.queue_unbind(a, x, "k")
    publish(pch, x, "k")
    assert counts(ch, a, b) == [3, 2]
    # An exchange-to-exchange binding added and removed: its queue gets only what came between.
    ch.exchange_declare(y, "fanout")
    c = uniq("rc-c")
    ch.queue_declare(c, durable=True)
    ch.queue_bind(c, y)
    ch.exchange_bind(y, x, "k")
    publish(pch, x, "k")
    assert counts(ch, a, b, c) == [3, 3, 1]
    ch.exchange_unbind(y, x, "k")
    publish(pch, x, "k")
    assert counts(ch, a, b, c) == [3, 4, 1]
    ch.queue_unbind(b, x, "k")
    publish(pch, x, "k")
    assert counts(ch, a, b, c) == [3, 4, 1]
    for q in (a, b, c):
        ch.queue_delete(q)
    ch.exchange_delete(x)
    ch.exchange_delete(y)


def test_deleted_and_redeclared_exchange_routes_by_its_new_bindings(broker, ch, uniq, publisher):
    pc, pch = publisher
    x, a, b = uniq("rc-x"), uniq("rc-a"), uniq("rc-b")
    ch.exchange_declare(x, "direct")
    for q in (a, b):
        ch.queue_declare(q, durable=True)
    ch.queue_bind(a, x, "k")
    publish(pch, x, "k", n=2)
    assert counts(ch, a, b) == [2, 0]
    ch.exchange_delete(x)
    # Publishing to the deleted exchange is refused (404) on that channel, as without a cache.
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        publish(pch, x, "k")
    assert e.value.reply_code == 404
    assert counts(ch, a, b) == [2, 0]
    ch.exchange_declare(x, "direct")
    ch.queue_bind(b, x, "k")
    pch = pc.channel()
    pch.confirm_delivery()
    publish(pch, x, "k")
    assert counts(ch, a, b) == [2, 1]
    # Deleted and re-declared without a publish between: the same connection still follows.
    ch.exchange_delete(x)
    ch.exchange_declare(x, "fanout")
    ch.queue_bind(a, x)
    publish(pch, x, "k")
    assert counts(ch, a, b) == [3, 1]
    for q in (a, b):
        ch.queue_delete(q)
    ch.exchange_delete(x)


def test_deleted_and_redeclared_queue_gets_the_next_publish(broker, ch, uniq, publisher):
    _, pch = publisher
    q = uniq("rc-q")
    ch.queue_declare(q, durable=True)
    publish(pch, "", q, n=3)
    assert count(ch, q) == 3
    ch.queue_delete(q)
    # Unroutable now: a mandatory publish comes back, nothing is kept anywhere.
    with pytest.raises(pika.exceptions.UnroutableError):
        pch.basic_publish("", q, b"lost", PERSISTENT, mandatory=True)
    ch.queue_declare(q, durable=True)
    publish(pch, "", q, b"new", n=2)
    assert count(ch, q) == 2
    got = [ch.basic_get(q, auto_ack=True)[2] for _ in range(2)]
    assert got == [b"new", b"new"]
    ch.queue_delete(q)


def test_queue_removed_by_its_last_consumer_leaving_then_redeclared(broker, ch, uniq, publisher):
    _, pch = publisher
    q = uniq("rc-auto")
    ch.queue_declare(q, auto_delete=True)
    seen = []
    tag = ch.basic_consume(q, lambda c, m, p, body: seen.append(body), auto_ack=True)
    publish(pch, "", q, b"first")
    eventually(lambda: seen == [b"first"], "first delivery", conn=ch.connection)
    ch.basic_cancel(tag)  # the last consumer leaves: the queue deletes itself
    redeclared_gets_the_next_publish(ch, pch, q, "auto-delete queue removed", b"second")


def test_exclusive_queue_removed_with_its_connection_then_redeclared(broker, ch, uniq, publisher):
    _, pch = publisher
    q = uniq("rc-excl")
    owner = broker.connect()
    och = owner.channel()
    och.queue_declare(q, exclusive=True)
    publish(pch, "", q, n=2)
    assert count(och, q) == 2
    owner.close()  # its exclusive queue goes with it
    redeclared_gets_the_next_publish(ch, pch, q, "exclusive queue removed", b"after")


def test_policy_set_on_a_queue_reached_through_a_cached_route_applies(broker, ch, uniq, publisher):
    _, pch = publisher
    q = uniq("rc-pol")
    ch.queue_declare(q, durable=True)
    publish(pch, "", q, n=3)
    assert count(ch, q) == 3
    name = uniq("rc-policy")
    set_policy(broker, name, f"^{q}$", {"max-length": 2})
    try:
        eventually(lambda: count(ch, q) == 2, "max-length policy applied", conn=ch.connection)
        publish(pch, "", q, n=5)
        assert count(ch, q) == 2
        clear_policy(broker, name)
        publish(pch, "", q, n=3)
        assert count(ch, q) == 5
    finally:
        clear_policy(broker, name)
        ch.queue_delete(q)
