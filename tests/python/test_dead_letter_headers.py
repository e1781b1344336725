"""Dead-lettered messages (spec 004 "Routing Dead-Lettered Messages" and "Dead-Lettered
Messages"): routing keys with and without a dead-letter routing key, CC/BCC, the x-death
header with exact AMQP types, x-first-death-*, x-last-death-*, original-expiration."""

import pytest

from amqp_typed import Typed, raw_get, untyped
from dlx_helpers import assert_empty_for, get_within, props


def setup_direct(ch, uniq, dlrk=None):
    """src queue dead-lettering to a direct DLX; returns (src, dlx)."""
    x = uniq("dlx")
    ch.exchange_declare(x, "direct")
    args = {"x-dead-letter-exchange": x}
    if dlrk:
        args["x-dead-letter-routing-key"] = dlrk
    q = uniq("src")
    ch.queue_declare(q, arguments=args)
    return q, x


def bound(ch, uniq, x, key):
    q = uniq("dlq")
    ch.queue_declare(q)
    ch.queue_bind(q, x, key)
    return q


def reject_one(ch, q):
    m = get_within(ch, q, auto_ack=False)
    assert m
    ch.basic_reject(m[0].delivery_tag, requeue=False)


def test_dead_letter_routing_key_routes_by_it_only_and_removes_cc(ch, uniq):
    q, x = setup_direct(ch, uniq, dlrk="dl-key")
    by_dlrk = bound(ch, uniq, x, "dl-key")
    by_cc = bound(ch, uniq, x, "cc-key")
    by_orig = bound(ch, uniq, x, q)
    ch.basic_publish("", q, b"m", props(headers={"CC": ["cc-key"]}))
    reject_one(ch, q)
    got = get_within(ch, by_dlrk)
    assert got
    m, p, _ = got
    assert (m.exchange, m.routing_key) == (x, "dl-key")
    assert "CC" not in p.headers
    assert_empty_for(ch, by_cc, 0.1)
    assert_empty_for(ch, by_orig, 0.0)


def test_without_dead_letter_routing_key_all_original_routing_keys_route_including_cc_and_bcc(ch, uniq):
    q, x = setup_direct(ch, uniq)
    by_orig = bound(ch, uniq, x, q)
    by_cc = bound(ch, uniq, x, "cc-key")
    by_bcc = bound(ch, uniq, x, "bcc-key")
    ch.basic_publish("", q, b"m", props(headers={"CC": ["cc-key"], "BCC": ["bcc-key"]}))
    reject_one(ch, q)
    for target in (by_orig, by_cc, by_bcc):
        got = get_within(ch, target)
        assert got, f"dead letter should reach {target}"
        m, p, _ = got
        assert (m.exchange, m.routing_key) == (x, q)
        assert p.headers["CC"] == ["cc-key"]
        assert "BCC" not in p.headers


def test_bcc_never_reaches_a_consumer_on_normal_delivery(ch, uniq):
    q = uniq("plain")
    other = uniq("bcc-target")
    ch.queue_declare(q)
    ch.queue_declare(other)
    ch.basic_publish("", q, b"m", props(headers={"BCC": [other], "keep": "yes"}))
    for target in (q, other):
        got = get_within(ch, target)
        assert got, f"BCC routing should reach {target}"
        assert "BCC" not in got[1].headers
        assert got[1].headers["keep"] == "yes"


def test_dead_lettered_message_exchange_is_the_dlx_and_routing_key_the_dead_letter_one(ch, uniq):
    q, x = setup_direct(ch, uniq, dlrk="k2")
    d = bound(ch, uniq, x, "k2")
    ch.basic_publish("", q, b"m")
    reject_one(ch, q)
    m, _, _ = get_within(ch, d)
    assert (m.exchange, m.routing_key) == (x, "k2")


def test_x_death_has_exact_fields_and_amqp_types(broker, ch, uniq):
    q, x = setup_direct(ch, uniq)
    d = bound(ch, uniq, x, q)
    ch.basic_publish("", q, b"typed", props(headers={"CC": ["c1"], "BCC": ["b1"]}))
    reject_one(ch, q)
    got = get_within(ch, q, 0.05)  # nothing left
    assert got is None
    ch.connection.sleep(0.1)
    res = raw_get(broker, d)
    assert res
    _, p, body = res
    assert body == b"typed"
    xd = p["headers"]["x-death"]
    assert xd.tag == "A" and len(xd.value) == 1
    entry = xd.value[0]
    assert entry.tag == "F"
    e = entry.value
    assert e["count"] == Typed("l", 1)
    assert e["queue"] == Typed("S", q)
    assert e["reason"] == Typed("S", "rejected")
    assert e["exchange"] == Typed("S", "")
    assert e["time"].tag == "T" and e["time"].value > 1_600_000_000
    assert e["routing-keys"] == Typed("A", [Typed("S", q), Typed("S", "c1")])
    assert "original-expiration" not in e
    assert p["headers"]["x-first-death-queue"] == Typed("S", q)
    assert p["headers"]["x-first-death-reason"] == Typed("S", "rejected")
    assert p["headers"]["x-first-death-exchange"] == Typed("S", "")


def test_original_expiration_is_recorded_and_expiration_removed(broker, ch, uniq):
    q, x = setup_direct(ch, uniq)
    d = bound(ch, uniq, x, q)
    ch.basic_publish("", q, b"e", props(expiration="60000"))
    reject_one(ch, q)
    ch.connection.sleep(0.1)
    res = raw_get(broker, d)
    assert res
    _, p, _ = res
    assert "expiration" not in p
    assert p["headers"]["x-death"].value[0].value["original-expiration"] == Typed("S", "60000")


def test_other_properties_are_preserved(ch, uniq):
    q, x = setup_direct(ch, uniq)
    d = bound(ch, uniq, x, q)
    ch.basic_publish("", q, b"p", props(content_type="application/json", delivery_mode=2,
                                        priority=3, correlation_id="corr", reply_to="rt",
                                        message_id="mid", timestamp=1234, type="kind",
                                        app_id="app", headers={"app-h": 7}))
    reject_one(ch, q)
    _, p, _ = get_within(ch, d)
    assert (p.content_type, p.delivery_mode, p.priority, p.correlation_id, p.reply_to,
            p.message_id, p.timestamp, p.type, p.app_id) == \
        ("application/json", 2, 3, "corr", "rt", "mid", 1234, "kind", "app")
    assert p.headers["app-h"] == 7


def test_x_death_is_most_recent_first_and_repeated_queue_reason_increments_count(ch, uniq):
    # a --rejected--> b --rejected--> a --rejected--> b
    a, b = uniq("a"), uniq("b")
    ch.queue_declare(b, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": a})
    ch.queue_declare(a, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b})
    ch.basic_publish("", a, b"loop")
    reject_one(ch, a)
    reject_one(ch, b)
    reject_one(ch, a)
    m = get_within(ch, b)
    assert m
    xd = m[1].headers["x-death"]
    assert [(e["queue"], e["reason"], e["count"]) for e in xd] == [(a, "rejected", 2), (b, "rejected", 1)]


def test_x_first_death_headers_are_set_once_and_never_changed(ch, uniq):
    a, b, c = uniq("a"), uniq("b"), uniq("c")
    ch.queue_declare(c)
    ch.queue_declare(b, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": c})
    ch.queue_declare(a, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b,
                                   "x-message-ttl": 50})
    ch.basic_publish("", a, b"m")
    ch.connection.sleep(0.2)
    reject_one(ch, b)
    _, p, _ = get_within(ch, c)
    h = p.headers
    assert (h["x-first-death-queue"], h["x-first-death-reason"], h["x-first-death-exchange"]) == \
        (a, "expired", "")
    assert [(e["queue"], e["reason"]) for e in h["x-death"]] == [(b, "rejected"), (a, "expired")]


@pytest.mark.spec_4_0
def test_x_last_death_headers_follow_every_dead_lettering(broker, ch, uniq):
    a, b, c = uniq("a"), uniq("b"), uniq("c")
    ch.queue_declare(c)
    ch.queue_declare(b, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": c})
    ch.queue_declare(a, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b,
                                   "x-message-ttl": 50})
    ch.basic_publish("", a, b"m")
    ch.connection.sleep(0.2)
    reject_one(ch, b)
    ch.connection.sleep(0.1)
    res = raw_get(broker, c)
    assert res
    h = res[1]["headers"]
    assert h["x-last-death-queue"] == Typed("S", b)
    assert h["x-last-death-reason"] == Typed("S", "rejected")
    assert h["x-last-death-exchange"] == Typed("S", "")
    assert untyped(h["x-first-death-queue"]) == a
