"""Quorum queues and policies as RabbitMQ 4.x (where 3.10.8 differs, 4.x wins; docs/dead-lettering.md):
x-delivery-count only once above 0; only failed deliveries (reject/nack requeue=true) count towards
the delivery limit, not returns by a closed channel; delivery-limit defaults to 20, negative is
unlimited, argument vs policy the smaller unless one is negative; a policy with a key the queue's type
does not support does not match it; for quorum queues the policy's overflow wins and
reject-publish-dlx acts as drop-head; apply-to classic_queues / quorum_queues / streams."""

import pytest

from dlx_helpers import clear_policy, count, eventually, get_within, set_policy

pytestmark = pytest.mark.spec_4_0


def reason_of(props):
    return props.headers["x-death"][0]["reason"]


def qq(ch, q, **args):
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum", **args})


@pytest.fixture
def dlq(ch, uniq):
    x, d = uniq("dlx"), uniq("dlq")
    ch.exchange_declare(x, "fanout", auto_delete=True)
    ch.queue_declare(d, auto_delete=True)
    ch.queue_bind(d, x)
    return x, d


def test_x_delivery_count_is_absent_on_the_first_delivery_for_get_and_consume(conn, ch, uniq):
    q = uniq("qq")
    qq(ch, q)
    ch.basic_publish("", q, b"m")
    m = get_within(ch, q, auto_ack=False)
    assert "x-delivery-count" not in (m[1].headers or {})
    ch.basic_nack(m[0].delivery_tag, requeue=True)
    m = get_within(ch, q, auto_ack=False)
    assert m[1].headers["x-delivery-count"] == 1
    ch.basic_ack(m[0].delivery_tag)
    ch.basic_publish("", q, b"c")
    got = []
    ch.basic_consume(q, lambda c, mm, p, b: got.append((mm, p)))
    eventually(lambda: len(got) == 1, "delivered", conn=conn)
    assert "x-delivery-count" not in (got[0][1].headers or {})
    ch.basic_reject(got[0][0].delivery_tag, requeue=True)
    eventually(lambda: len(got) == 2, "redelivered", conn=conn)
    assert got[1][1].headers["x-delivery-count"] == 1
    ch.basic_ack(got[1][0].delivery_tag)
    ch.queue_delete(q)


def test_returns_by_a_closed_channel_do_not_count_towards_the_delivery_limit(broker, ch, uniq, dlq):
    x, d = dlq
    q = uniq("qq")
    qq(ch, q, **{"x-delivery-limit": 0, "x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"held")
    for _ in range(3):
        with broker.connect() as c2:
            assert get_within(c2.channel(), q, auto_ack=False) is not None
    m = get_within(ch, q, auto_ack=False)
    assert m is not None, "returned by closed channels, not dead-lettered"
    assert m[0].redelivered is True
    assert "x-delivery-count" not in (m[1].headers or {})
    assert count(ch, d) == 0
    ch.basic_nack(m[0].delivery_tag, requeue=True)  # a failed delivery: over the limit of 0
    got = get_within(ch, d)
    assert got and reason_of(got[1]) in ("delivery_limit", b"delivery_limit")
    ch.queue_delete(q)


def test_quorum_delivery_limit_defaults_to_20(ch, uniq, dlq):
    x, d = dlq
    q = uniq("qq")
    qq(ch, q, **{"x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"poison")
    for i in range(20):
        m = get_within(ch, q, auto_ack=False)
        assert m, f"still there after {i} returns"
        ch.basic_nack(m[0].delivery_tag, requeue=True)
    m = get_within(ch, q, auto_ack=False)
    assert m[1].headers["x-delivery-count"] == 20
    ch.basic_nack(m[0].delivery_tag, requeue=True)
    got = get_within(ch, d)
    assert got and got[2] == b"poison"
    ch.queue_delete(q)


@pytest.mark.charon_only
def test_delivery_limit_negative_is_unlimited_and_policy_vs_argument(broker, ch, uniq, dlq):
    x, d = dlq
    q = uniq("qq-neg")
    qq(ch, q, **{"x-dead-letter-exchange": x, "x-delivery-limit": -1})
    ch.basic_publish("", q, b"forever")
    for _ in range(25):
        m = get_within(ch, q, auto_ack=False)
        assert m
        ch.basic_nack(m[0].delivery_tag, requeue=True)
    assert count(ch, d) == 0
    ch.queue_delete(q)
    # argument 1, policy -1 (unlimited): one is negative, so the larger (1) applies.
    q = uniq("qq-pol")
    pol = uniq("pol")
    set_policy(broker, pol, f"^{q}$", {"delivery-limit": -1}, apply_to="quorum_queues")
    try:
        qq(ch, q, **{"x-dead-letter-exchange": x, "x-delivery-limit": 1})
        ch.basic_publish("", q, b"twice")
        for _ in range(2):
            m = get_within(ch, q, auto_ack=False)
            assert m
            ch.basic_nack(m[0].delivery_tag, requeue=True)
        got = get_within(ch, d)
        assert got and got[2] == b"twice"
    finally:
        clear_policy(broker, pol)
        ch.queue_delete(q)


@pytest.mark.charon_only
def test_a_policy_with_a_key_the_queue_type_does_not_support_does_not_match_it(broker, ch, uniq):
    base = uniq("pk")
    classic, quorum = base + "-c", base + "-q"
    pol = uniq("pol")
    # queue-mode is a classic-queue key: the whole policy then skips quorum queues.
    set_policy(broker, pol, f"^{base}", {"max-length": 1, "queue-mode": "lazy"})
    try:
        ch.queue_declare(classic, auto_delete=True)
        qq(ch, quorum)
        for q in (classic, quorum):
            for i in range(3):
                ch.basic_publish("", q, b"%d" % i)
        eventually(lambda: count(ch, classic) == 1 and count(ch, quorum) == 3,
                   "max-length applied to the classic queue only", conn=ch.connection)
    finally:
        clear_policy(broker, pol)
        ch.queue_delete(quorum)


@pytest.mark.charon_only
def test_apply_to_quorum_queues_and_classic_queues(broker, ch, uniq):
    base = uniq("at")
    classic, quorum = base + "-c", base + "-q"
    p1, p2 = uniq("pol"), uniq("pol")
    set_policy(broker, p1, f"^{base}", {"max-length": 1}, apply_to="quorum_queues")
    set_policy(broker, p2, f"^{base}", {"max-length": 2}, apply_to="classic_queues")
    try:
        ch.queue_declare(classic, auto_delete=True)
        qq(ch, quorum)
        for q in (classic, quorum):
            for i in range(4):
                ch.basic_publish("", q, b"%d" % i)
        eventually(lambda: count(ch, classic) == 2 and count(ch, quorum) == 1,
                   "each policy applied to its queue type", conn=ch.connection)
    finally:
        clear_policy(broker, p1)
        clear_policy(broker, p2)
        ch.queue_delete(quorum)


@pytest.mark.charon_only
def test_quorum_policy_overflow_wins_over_the_argument(broker, ch, uniq):
    base = uniq("ov")
    classic, quorum = base + "-c", base + "-q"
    pol = uniq("pol")
    set_policy(broker, pol, f"^{base}", {"overflow": "drop-head"})
    try:
        ch.queue_declare(classic, auto_delete=True,
                         arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        qq(ch, quorum, **{"x-max-length": 1, "x-overflow": "reject-publish"})
        for q in (classic, quorum):
            ch.basic_publish("", q, b"first")
            ch.basic_publish("", q, b"second")
        eventually(lambda: count(ch, classic) == 1 and count(ch, quorum) == 1, "limits hold",
                   conn=ch.connection)
        assert get_within(ch, classic)[2] == b"first"  # argument wins: reject-publish
        assert get_within(ch, quorum)[2] == b"second"  # policy wins: drop-head
    finally:
        clear_policy(broker, pol)
        ch.queue_delete(quorum)


def test_quorum_reject_publish_dlx_acts_as_drop_head(ch, uniq, dlq):
    x, d = dlq
    q = uniq("qq-rpd")
    qq(ch, q, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx",
                 "x-dead-letter-exchange": x})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"first")
    ch.basic_publish("", q, b"second")  # confirmed: not rejected
    got = get_within(ch, d)
    assert got[2] == b"first" and reason_of(got[1]) in ("maxlen", b"maxlen")
    assert get_within(ch, q)[2] == b"second"
    ch.queue_delete(q)
