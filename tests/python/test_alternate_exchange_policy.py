"""Alternate exchanges set by policy (RabbitMQ's guide, "Alternate Exchanges": "an AE can be
defined by clients using policies … In the case where both policy and arguments specify an AE,
the one specified by arguments overrides the one specified by policy"; `rabbit_exchange`'s
`process_alternate` reads it with `rabbit_policy:get_arg/3`). A message an exchange cannot route
goes to the alternate exchange its policy names; a policy set, changed or cleared applies at once
(also to a connection that published to the same exchange and key before: its route cache);
a policy applies to exchanges declared after it and after a restart; the exchange's own
`alternate-exchange` argument wins; a policy that applies to queues only sets nothing on
exchanges; a definition whose value is not a string is refused with RabbitMQ's message."""

import pika
import pytest

import conftest
from dlx_helpers import api, clear_policy, count, eventually, set_policy

PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def publisher(confirm_publisher):
    """conftest's confirm-mode channel."""
    return confirm_publisher[1]


def unroutable(pch, exchange, key="k"):
    """Whether a mandatory publish to `exchange` comes back (no queue and no AE took it)."""
    try:
        pch.basic_publish(exchange, key, b"m", PERSISTENT, mandatory=True)
        return False
    except pika.exceptions.UnroutableError:
        return True


def ae_with_queue(ch, uniq, prefix):
    """A fanout exchange with one queue bound; returns (exchange, queue)."""
    ae, q = uniq(prefix), uniq(prefix + "-q")
    ch.exchange_declare(ae, "fanout", durable=True)
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, ae)
    return ae, q


def exchange_policy(broker, name):
    status, body = api(broker, "GET", f"/api/exchanges/%2f/{name}")
    assert status == 200, (status, body)
    return body.get("policy")  # RabbitMQ leaves it out when no policy applies


def test_policy_alternate_exchange_takes_what_the_exchange_cannot_route(broker, ch, uniq, publisher):
    ae, q = ae_with_queue(ch, uniq, "aep-ae")
    x, pol = uniq("aep-x"), uniq("aep-pol")
    ch.exchange_declare(x, "direct", durable=True)
    assert unroutable(publisher, x)
    set_policy(broker, pol, f"^{x}$", {"alternate-exchange": ae}, apply_to="exchanges")
    try:
        # The same connection, exchange and key as the refused publish just before.
        assert not unroutable(publisher, x)
        assert count(ch, q) == 1
        assert exchange_policy(broker, x) == pol
    finally:
        clear_policy(broker, pol)
    assert unroutable(publisher, x)
    assert count(ch, q) == 1
    assert exchange_policy(broker, x) is None


def test_policy_changed_to_another_alternate_exchange(broker, ch, uniq, publisher):
    ae1, q1 = ae_with_queue(ch, uniq, "aep-one")
    ae2, q2 = ae_with_queue(ch, uniq, "aep-two")
    x, pol = uniq("aep-x"), uniq("aep-pol")
    ch.exchange_declare(x, "topic", durable=True)
    set_policy(broker, pol, f"^{x}$", {"alternate-exchange": ae1}, apply_to="all")
    try:
        assert not unroutable(publisher, x)
        set_policy(broker, pol, f"^{x}$", {"alternate-exchange": ae2}, apply_to="all")
        assert not unroutable(publisher, x)
        assert [count(ch, q1), count(ch, q2)] == [1, 1]
        # A binding that matches: the AE is not used.
        bound = uniq("aep-bound")
        ch.queue_declare(bound, durable=True)
        ch.queue_bind(bound, x, "k")
        assert not unroutable(publisher, x)
        assert [count(ch, q1), count(ch, q2), count(ch, bound)] == [1, 1, 1]
    finally:
        clear_policy(broker, pol)


def test_policy_applies_to_an_exchange_declared_after_it(broker, ch, uniq, publisher):
    ae, q = ae_with_queue(ch, uniq, "aep-ae")
    x, pol = uniq("aep-later"), uniq("aep-pol")
    set_policy(broker, pol, f"^{x}$", {"alternate-exchange": ae}, apply_to="exchanges")
    try:
        ch.exchange_declare(x, "direct")
        assert not unroutable(publisher, x)
        assert count(ch, q) == 1
        assert exchange_policy(broker, x) == pol
    finally:
        clear_policy(broker, pol)


def test_alternate_exchange_argument_wins_over_the_policy(broker, ch, uniq, publisher):
    by_policy, q_policy = ae_with_queue(ch, uniq, "aep-pae")
    by_arg, q_arg = ae_with_queue(ch, uniq, "aep-aae")
    x, pol = uniq("aep-args"), uniq("aep-pol")
    ch.exchange_declare(x, "direct", durable=True, arguments={"alternate-exchange": by_arg})
    set_policy(broker, pol, f"^{x}$", {"alternate-exchange": by_policy}, apply_to="exchanges")
    try:
        assert not unroutable(publisher, x)
        assert [count(ch, q_arg), count(ch, q_policy)] == [1, 0]
    finally:
        clear_policy(broker, pol)


def test_highest_priority_policy_gives_the_alternate_exchange(broker, ch, uniq, publisher):
    low_ae, q_low = ae_with_queue(ch, uniq, "aep-low")
    high_ae, q_high = ae_with_queue(ch, uniq, "aep-high")
    x, low, high = uniq("aep-prio"), uniq("aep-lowpol"), uniq("aep-highpol")
    ch.exchange_declare(x, "direct")
    set_policy(broker, low, f"^{x}$", {"alternate-exchange": low_ae}, priority=1,
               apply_to="exchanges")
    set_policy(broker, high, f"^{x}$", {"alternate-exchange": high_ae}, priority=7,
               apply_to="exchanges")
    try:
        assert not unroutable(publisher, x)
        assert [count(ch, q_low), count(ch, q_high)] == [0, 1]
        clear_policy(broker, high)
        assert not unroutable(publisher, x)
        assert [count(ch, q_low), count(ch, q_high)] == [1, 1]
    finally:
        clear_policy(broker, high)
        clear_policy(broker, low)


def test_policy_for_queues_sets_no_alternate_exchange(broker, ch, uniq, publisher):
    ae, q = ae_with_queue(ch, uniq, "aep-ae")
    x, pol = uniq("aep-qonly"), uniq("aep-pol")
    ch.exchange_declare(x, "direct")
    set_policy(broker, pol, f"^{x}$", {"alternate-exchange": ae}, apply_to="queues")
    try:
        assert unroutable(publisher, x)
        assert count(ch, q) == 0
    finally:
        clear_policy(broker, pol)


def test_alternate_exchange_policy_value_must_be_a_string(broker):
    status, body = api(broker, "PUT", "/api/policies/%2f/aep-bad",
                       {"pattern": "^x", "definition": {"alternate-exchange": 5},
                        "apply-to": "exchanges"})
    assert status == 400, (status, body)
    assert "5 is not a valid alternate exchange name" in body["reason"]
    status, _ = api(broker, "GET", "/api/policies/%2f/aep-bad")
    assert status == 404


@pytest.mark.charon_only
def test_policy_alternate_exchange_after_a_restart(tmp_path):
    b = conftest.start_charon(tmp_path)
    try:
        with b.connect() as c:
            ch = c.channel()
            ch.exchange_declare("aep-ae", "fanout", durable=True)
            ch.queue_declare("aep-ae-q", durable=True)
            ch.queue_bind("aep-ae-q", "aep-ae")
            ch.exchange_declare("aep-x", "direct", durable=True)
        set_policy(b, "aep", "^aep-x$", {"alternate-exchange": "aep-ae"}, apply_to="exchanges")
        b = conftest.restart_charon(tmp_path, b, hard=True)
        with b.connect() as c:
            ch = c.channel()
            pch = c.channel()
            pch.confirm_delivery()
            assert not unroutable(pch, "aep-x")
            eventually(lambda: count(ch, "aep-ae-q") == 1, "the restarted broker used the AE")
            assert exchange_policy(b, "aep-x") == "aep"
    finally:
        conftest.stop_charon(b)
