"""Configuring dead-lettering with policies (spec 004 "Configuring a Dead Letter Exchange"):
the management API's /api/policies, priority, precedence of queue arguments, and policies
taking effect on existing queues at once. Needs the management API (Charon's own, or
CHARON_TEST_HTTP_URL for an external broker)."""

import pytest

from dlx_helpers import api, assert_empty_for, clear_policy, count, eventually, get_within, set_policy


@pytest.fixture
def policy(broker):
    names = []

    def make(name, *a, **kw):
        names.append(name)
        set_policy(broker, name, *a, **kw)

    yield make
    for n in names:
        clear_policy(broker, n)


def fanout_dlq(ch, uniq):
    x, q = uniq("dlx"), uniq("dlq")
    ch.exchange_declare(x, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    return x, q


def reject_one(ch, q):
    m = get_within(ch, q, auto_ack=False)
    assert m
    ch.basic_reject(m[0].delivery_tag, requeue=False)


def test_policy_http_api_put_get_delete(broker, uniq):
    name = uniq("pol")
    status, _ = api(broker, "PUT", f"/api/policies/%2f/{name}",
                    {"pattern": "^nomatch-", "definition": {"dead-letter-exchange": "my-dlx"},
                     "priority": 7, "apply-to": "queues"})
    assert status == 201
    status, body = api(broker, "GET", f"/api/policies/%2f/{name}")
    assert status == 200
    assert (body["name"], body["vhost"], body["pattern"], body["apply-to"], body["priority"],
            body["definition"]) == (name, "/", "^nomatch-", "queues", 7,
                                    {"dead-letter-exchange": "my-dlx"})
    status, listed = api(broker, "GET", "/api/policies/%2f")
    assert status == 200 and any(p["name"] == name for p in listed)
    status, _ = api(broker, "PUT", f"/api/policies/%2f/{name}",
                    {"pattern": "^nomatch-", "definition": {"dead-letter-exchange": "other"},
                     "priority": 7, "apply-to": "queues"})
    assert status == 204
    assert api(broker, "DELETE", f"/api/policies/%2f/{name}")[0] == 204
    assert api(broker, "GET", f"/api/policies/%2f/{name}")[0] == 404


def test_policy_with_invalid_definition_is_refused_with_400(broker, uniq):
    status, body = api(broker, "PUT", f"/api/policies/%2f/{uniq('bad')}",
                       {"pattern": ".*", "definition": {"message-ttl": -5}, "apply-to": "queues"})
    assert status == 400
    assert body["error"] == "bad_request"


def test_policy_api_requires_authentication(broker):
    assert api(broker, "GET", "/api/policies", user="guest", password="wrong")[0] == 401


def test_policy_sets_dead_letter_exchange_of_matching_queues(ch, uniq, policy):
    x, d = fanout_dlq(ch, uniq)
    q = uniq("polq")
    policy(uniq("pol"), f"^{q}$", {"dead-letter-exchange": x}, priority=7)
    ch.queue_declare(q)
    ch.basic_publish("", q, b"via-policy")
    reject_one(ch, q)
    got = get_within(ch, d)
    assert got and got[2] == b"via-policy"


def test_policy_takes_effect_on_existing_queues_at_once(ch, uniq, policy):
    x, d = fanout_dlq(ch, uniq)
    q = uniq("existing")
    ch.queue_declare(q)
    ch.basic_publish("", q, b"before-policy")
    ch.connection.sleep(0.05)
    policy(uniq("pol"), f"^{q}$", {"dead-letter-exchange": x})
    ch.connection.sleep(0.1)
    reject_one(ch, q)
    got = get_within(ch, d)
    assert got and got[2] == b"before-policy"


def test_changed_policy_takes_effect_on_existing_queues(broker, ch, uniq, policy):
    x1, d1 = fanout_dlq(ch, uniq)
    x2, d2 = fanout_dlq(ch, uniq)
    q = uniq("changing")
    name = uniq("pol")
    policy(name, f"^{q}$", {"dead-letter-exchange": x1})
    ch.queue_declare(q)
    set_policy(broker, name, f"^{q}$", {"dead-letter-exchange": x2})
    ch.connection.sleep(0.1)
    ch.basic_publish("", q, b"m")
    reject_one(ch, q)
    assert get_within(ch, d2) is not None
    assert_empty_for(ch, d1, 0.1)


def test_cleared_policy_stops_dead_lettering_of_existing_queues(broker, ch, uniq):
    x, d = fanout_dlq(ch, uniq)
    q = uniq("cleared")
    name = uniq("pol")
    set_policy(broker, name, f"^{q}$", {"dead-letter-exchange": x})
    ch.queue_declare(q)
    clear_policy(broker, name)
    ch.connection.sleep(0.1)
    ch.basic_publish("", q, b"m")
    reject_one(ch, q)
    assert_empty_for(ch, d, 0.3)


def test_highest_priority_matching_policy_applies(ch, uniq, policy):
    xl, dl = fanout_dlq(ch, uniq)
    xh, dh = fanout_dlq(ch, uniq)
    q = uniq("prio")
    policy(uniq("low"), f"^{q}", {"dead-letter-exchange": xl}, priority=1)
    policy(uniq("high"), f"^{q}$", {"dead-letter-exchange": xh}, priority=9)
    ch.queue_declare(q)
    ch.basic_publish("", q, b"m")
    reject_one(ch, q)
    assert get_within(ch, dh) is not None
    assert_empty_for(ch, dl, 0.1)


def test_queue_argument_overrides_policy_dead_letter_exchange(ch, uniq, policy):
    xp, dp = fanout_dlq(ch, uniq)
    xa, da = fanout_dlq(ch, uniq)
    q = uniq("argwins")
    policy(uniq("pol"), f"^{q}$", {"dead-letter-exchange": xp}, priority=5)
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": xa})
    ch.basic_publish("", q, b"m")
    reject_one(ch, q)
    assert get_within(ch, da) is not None
    assert_empty_for(ch, dp, 0.1)


def test_smaller_of_policy_and_argument_max_length_applies(ch, uniq, policy):
    q = uniq("minlen")
    policy(uniq("pol"), f"^{q}$", {"max-length": 2})
    ch.queue_declare(q, arguments={"x-max-length": 5})
    for i in range(4):
        ch.basic_publish("", q, b"%d" % i)
    eventually(lambda: count(ch, q) == 2, "max-length applied", conn=ch.connection)
    assert count(ch, q) == 2


def test_smaller_of_policy_and_argument_message_ttl_applies(ch, uniq, policy):
    x, d = fanout_dlq(ch, uniq)
    q = uniq("minttl")
    policy(uniq("pol"), f"^{q}$", {"message-ttl": 100})
    ch.queue_declare(q, arguments={"x-message-ttl": 60000, "x-dead-letter-exchange": x})
    ch.basic_publish("", q, b"m")
    assert get_within(ch, d) is not None


def test_policy_max_length_applies_to_existing_queue_at_once(ch, uniq, policy):
    x, d = fanout_dlq(ch, uniq)
    q = uniq("shrink")
    ch.queue_declare(q)
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    ch.connection.sleep(0.05)
    policy(uniq("pol"), f"^{q}$", {"max-length": 1, "dead-letter-exchange": x})
    eventually(lambda: count(ch, q) == 1, "the policy's max-length applied", conn=ch.connection)
    assert get_within(ch, d) is not None


def test_policy_applying_to_exchanges_does_not_apply_to_queues(ch, uniq, policy):
    x, d = fanout_dlq(ch, uniq)
    q = uniq("xonly")
    policy(uniq("pol"), f"^{q}$", {"dead-letter-exchange": x}, apply_to="exchanges")
    ch.queue_declare(q)
    ch.basic_publish("", q, b"m")
    reject_one(ch, q)
    assert_empty_for(ch, d, 0.3)
