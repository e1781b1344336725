"""Retries with backoff inside a queue (docs/retries.md), through pika over a real socket.

Timing: the broker releases a parked message at (reject received + delay). The client measures
from just before it sends basic.reject to when the redelivery arrives, so every measured delay is
at least the configured one (LOWER_SLACK_S allows for the broker's millisecond clock rounding).
Upper bounds are generous (UPPER_SLACK_S) so a loaded machine cannot fail the tests; they only
catch a message that never comes back on its own.
"""

import decimal
import json
import subprocess
import time

import pika
import pytest

from conftest import find_binary
from dlx_helpers import api, clear_policy, get_within, set_policy

pytestmark = pytest.mark.charon_only

LOWER_SLACK_S = 0.005
UPPER_SLACK_S = 30.0


def fanout_dlq(ch, uniq):
    x, q = uniq("dlx"), uniq("dlq")
    ch.exchange_declare(x, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    return x, q


def publish(ch, q, body, headers=None, persistent=False):
    ch.basic_publish("", q, body, pika.BasicProperties(
        headers=headers, delivery_mode=2 if persistent else None))


def next_delivery(it, timeout):
    """The next (method, properties, body) from a pika consume generator within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m, p, b = next(it)
        if m is not None:
            return m, p, b
    return None


def test_failing_message_returns_at_the_configured_delays_while_others_flow(ch, uniq):
    x, dlq = fanout_dlq(ch, uniq)
    q = uniq("work")
    delays = [300, 600, 900]
    ch.queue_declare(q, arguments={"x-retry-delays": delays, "x-dead-letter-exchange": x})
    publish(ch, q, b"flaky")
    it = ch.consume(q, inactivity_timeout=0.05)
    got = next_delivery(it, 10)
    assert got and got[2] == b"flaky"
    assert (got[1].headers or {}).get("x-retry-count") is None
    received = [b"flaky"]
    counts = []
    for attempt, delay_ms in enumerate(delays, start=1):
        t0 = time.monotonic()
        ch.basic_reject(got[0].delivery_tag, requeue=False)
        # Other messages keep flowing while it is parked (non-blocking retries).
        other = f"other-{attempt}".encode()
        publish(ch, q, other)
        o = next_delivery(it, 10)
        assert o and o[2] == other, "a parked message must not block the queue"
        ch.basic_ack(o[0].delivery_tag)
        got = next_delivery(it, delay_ms / 1000 + UPPER_SLACK_S)
        elapsed = time.monotonic() - t0
        assert got and got[2] == b"flaky"
        assert elapsed >= delay_ms / 1000 - LOWER_SLACK_S, (attempt, elapsed)
        counts.append(got[1].headers.get("x-retry-count"))
        received.append(got[2])
    ch.basic_ack(got[0].delivery_tag)
    ch.cancel()
    assert counts == [1, 2, 3]
    assert len(received) == 4
    assert get_within(ch, dlq, timeout=0.3) is None


def test_after_the_retry_limit_the_message_is_dead_lettered_with_x_death(ch, uniq):
    x, dlq = fanout_dlq(ch, uniq)
    q = uniq("work")
    ch.queue_declare(q, arguments={"x-retry-limit": 2, "x-retry-backoff-initial": 100,
                                   "x-dead-letter-exchange": x})
    publish(ch, q, b"doomed", headers={"app": "kept"})
    seen = []
    for _ in range(3):
        m = get_within(ch, q, timeout=UPPER_SLACK_S, auto_ack=False)
        assert m is not None
        seen.append((m[1].headers or {}).get("x-retry-count"))
        ch.basic_nack(m[0].delivery_tag, requeue=False)
    assert seen == [None, 1, 2]
    d = get_within(ch, dlq, timeout=UPPER_SLACK_S)
    assert d is not None and d[2] == b"doomed"
    h = d[1].headers
    assert h["x-retry-count"] == 2 and h["app"] == "kept"
    (death,) = h["x-death"]
    assert (death["queue"], death["reason"], death["count"], death["exchange"],
            death["routing-keys"]) == (q, "rejected", 1, "", [q])
    assert h["x-first-death-reason"] == "rejected" and h["x-first-death-queue"] == q
    assert get_within(ch, q, timeout=0.3) is None


def test_policy_backoff_with_jitter_stays_in_bounds(broker, ch, uniq):
    q = uniq("jit")
    pol = uniq("pol")
    initial, mult, jitter, limit = 200, 2.0, 0.5, 3
    set_policy(broker, pol, f"^{q}$", {"retry-limit": limit, "retry-backoff-initial": initial,
                                       "retry-backoff-multiplier": mult,
                                       "retry-backoff-jitter": jitter})
    try:
        ch.queue_declare(q)
        publish(ch, q, b"j")
        m = get_within(ch, q, timeout=10, auto_ack=False)
        for attempt in range(1, limit + 1):
            base = initial * mult ** (attempt - 1)
            t0 = time.monotonic()
            ch.basic_reject(m[0].delivery_tag, requeue=False)
            m = get_within(ch, q, timeout=base * (1 + jitter) / 1000 + UPPER_SLACK_S, auto_ack=False)
            elapsed = time.monotonic() - t0
            assert m is not None
            assert m[1].headers["x-retry-count"] == attempt
            assert elapsed >= base * (1 - jitter) / 1000 - LOWER_SLACK_S, (attempt, elapsed)
        ch.basic_ack(m[0].delivery_tag)
    finally:
        clear_policy(broker, pol)


def test_requeue_true_loops_unless_retry_on_requeue(ch, uniq):
    plain, backoff = uniq("plain"), uniq("backoff")
    ch.queue_declare(plain, arguments={"x-retry-limit": 1, "x-retry-backoff-initial": 60000})
    ch.queue_declare(backoff, arguments={"x-retry-limit": 1, "x-retry-backoff-initial": 400,
                                         "x-retry-on-requeue": True})
    for q in (plain, backoff):
        publish(ch, q, b"m")
    m = get_within(ch, plain, timeout=10, auto_ack=False)
    ch.basic_nack(m[0].delivery_tag, requeue=True)
    again = get_within(ch, plain, timeout=10, auto_ack=False)
    assert again is not None and again[0].redelivered  # plain requeue: back at once
    ch.basic_ack(again[0].delivery_tag)
    m = get_within(ch, backoff, timeout=10, auto_ack=False)
    t0 = time.monotonic()
    ch.basic_nack(m[0].delivery_tag, requeue=True)
    assert ch.basic_get(backoff)[0] is None  # parked, not requeued
    again = get_within(ch, backoff, timeout=UPPER_SLACK_S, auto_ack=False)
    assert time.monotonic() - t0 >= 0.4 - LOWER_SLACK_S
    assert again[1].headers["x-retry-count"] == 1
    ch.basic_ack(again[0].delivery_tag)


def test_ordered_retries_hold_exactly_the_same_key(ch, uniq):
    q = uniq("ord")
    ch.queue_declare(q, arguments={"x-retry-limit": 3, "x-retry-backoff-initial": 300,
                                   "x-retry-order-key": "account"})
    for body, key in [(b"A1", "A"), (b"A2", "A"), (b"B1", "B"), (b"A3", "A"), (b"N1", None)]:
        publish(ch, q, body, headers={"account": key} if key else None)
    m = get_within(ch, q, timeout=10, auto_ack=False)
    assert m[2] == b"A1"
    ch.basic_reject(m[0].delivery_tag, requeue=False)
    publish(ch, q, b"A4", headers={"account": "A"})
    publish(ch, q, b"B2", headers={"account": "B"})
    # While A1 waits, only other keys (and keyless messages) are delivered.
    flowing = []
    while True:
        m = get_within(ch, q, timeout=0.05)
        if m is None:
            break
        flowing.append(m[2])
    assert flowing == [b"B1", b"N1", b"B2"]
    # A1 comes back; A2..A4 still wait until it is settled.
    m = get_within(ch, q, timeout=UPPER_SLACK_S, auto_ack=False)
    assert m[2] == b"A1" and m[1].headers["x-retry-count"] == 1
    assert ch.basic_get(q)[0] is None
    ch.basic_ack(m[0].delivery_tag)
    rest = [get_within(ch, q, timeout=10)[2] for _ in range(3)]
    assert rest == [b"A2", b"A3", b"A4"]


def test_queue_stats_show_parked_and_next_due_in_api_and_ctl(broker, ch, uniq):
    q = uniq("stats")
    ch.queue_declare(q, arguments={"x-retry-limit": 1, "x-retry-backoff-initial": 60000})
    publish(ch, q, b"s")
    m = get_within(ch, q, timeout=10, auto_ack=False)
    before = int(time.time() * 1000)
    ch.basic_reject(m[0].delivery_tag, requeue=False)
    deadline = time.monotonic() + UPPER_SLACK_S
    while True:
        status, body = api(broker, "GET", f"/api/queues/%2f/{q}")
        assert status == 200
        if body["messages_parked"] == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert body["messages_parked"] == 1 and body["messages_ready"] == 0
    assert before + 60000 <= body["next_due"] <= int(time.time() * 1000) + 60000 + 1000
    out = subprocess.run([find_binary(), "ctl", "--url", f"http://127.0.0.1:{broker.http_port}",
                          "--formatter", "json", "list_queues", "name", "messages_parked",
                          "messages_held", "next_due"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rec = next(r for r in json.loads(out.stdout) if r["name"] == q)
    assert rec["messages_parked"] == 1 and rec["messages_held"] == 0
    assert rec["next_due"] == body["next_due"]
    ch.queue_purge(q)
    status, body = api(broker, "GET", f"/api/queues/%2f/{q}")
    assert body["messages_parked"] == 0 and body["next_due"] is None


@pytest.mark.parametrize("args,reason", [
    ({"x-retry-limit": -1}, "{value_negative,-1}"),
    ({"x-retry-delays": "5000"}, "{unacceptable_type,longstr}"),
    ({"x-retry-backoff-jitter": decimal.Decimal("1.5")}, "{value_out_of_range,1.5}"),
])
def test_invalid_retry_arguments_are_refused_with_precondition_failed(conn, uniq, args, reason):
    ch = conn.channel()
    q = uniq("bad")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare(q, arguments=args)
    assert e.value.reply_code == 406
    arg = next(iter(args))
    assert e.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{q}' in vhost '/': {reason}")


def test_retry_arguments_are_compared_on_redeclare(conn, uniq):
    """x-retry-* arguments take part in queue equivalence like RabbitMQ's own x- arguments."""
    ch = conn.channel()
    q = uniq("eq")
    args = {"x-retry-limit": 3, "x-retry-delays": [1000, 2000]}
    ch.queue_declare(q, arguments=args)
    ch.queue_declare(q, arguments=args)  # same arguments: fine
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare(q, arguments={"x-retry-limit": 5, "x-retry-delays": [1000, 2000]})
    assert e.value.reply_code == 406
    assert e.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-retry-limit' for queue '{q}' in vhost '/': "
        "received '5' but current is '3'")
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare(q, arguments={"x-retry-limit": 3, "x-retry-delays": [1000, 3000]})
    assert e.value.reply_code == 406
    assert e.value.reply_text.startswith(
        f"PRECONDITION_FAILED - inequivalent arg 'x-retry-delays' for queue '{q}' in vhost '/': ")
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare(q, arguments={"x-retry-delays": [1000, 2000]})
    assert e.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-retry-limit' for queue '{q}' in vhost '/': "
        "received none but current is the value '3' of type 'signedint'")
    ch = conn.channel()
    ch.queue_declare(q, passive=True)  # the queue is unchanged
    ch.queue_delete(q)


def test_release_lateness_of_parked_messages_is_shown_per_queue(broker, ch, uniq):
    """The queue measures release lateness (release time − due time) where it releases a
    parked message and shows count/p50/p99/max (ms) in its details."""
    q = uniq("lat")
    ch.queue_declare(q, arguments={"x-retry-delays": [150, 300]})
    status, body = api(broker, "GET", f"/api/queues/%2f/{q}")
    assert status == 200 and body["release_lateness_ms"] is None
    publish(ch, q, b"a")
    publish(ch, q, b"b")
    for _ in range(2):
        m = get_within(ch, q, timeout=10, auto_ack=False)
        ch.basic_reject(m[0].delivery_tag, requeue=False)
    back = [get_within(ch, q, timeout=UPPER_SLACK_S, auto_ack=True) for _ in range(2)]
    assert sorted(m[2] for m in back) == [b"a", b"b"]
    lat = api(broker, "GET", f"/api/queues/%2f/{q}")[1]["release_lateness_ms"]
    assert lat["count"] == 2
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"] < UPPER_SLACK_S * 1000
    ch.queue_delete(q)


def test_invalid_retry_policy_is_refused_with_400(broker, uniq):
    status, body = api(broker, "PUT", f"/api/policies/%2f/{uniq('bad')}",
                       {"pattern": "^x$", "definition": {"retry-delays": [5000, -1]},
                        "apply-to": "queues"})
    assert status == 400
    assert "retry-delays should be a non-empty list" in body["reason"]


def test_seed_003_manual_retry_topology_still_works(ch, uniq):
    """Seed 003's hand-built retries: Main → Retry queue (TTL + DLX) → Main, N times, then the
    consumer sends it to a DLQ with a TTL and max-length (drop-head)."""
    main_x, retry_x, dlq_x = uniq("main.exchange"), uniq("retry.exchange"), uniq("dlq.exchange")
    main_q, retry_q, dlq = uniq("main"), uniq("retry"), uniq("dlq")
    ch.exchange_declare(main_x, "direct")
    ch.exchange_declare(retry_x, "fanout")
    ch.exchange_declare(dlq_x, "fanout")
    ch.queue_declare(main_q, arguments={"x-dead-letter-exchange": retry_x})
    ch.queue_bind(main_q, main_x, "work")
    ch.queue_declare(retry_q, arguments={"x-message-ttl": 300, "x-dead-letter-exchange": main_x})
    ch.queue_bind(retry_q, retry_x)
    ch.queue_declare(dlq, arguments={"x-message-ttl": 604800000, "x-max-length": 2,
                                     "x-overflow": "drop-head"})
    ch.queue_bind(dlq, dlq_x)
    n = 3
    for i in range(3):
        ch.basic_publish(main_x, "work", f"job-{i}".encode())
    attempts = {}
    done = 0
    deadline = time.monotonic() + 120
    while done < 3 and time.monotonic() < deadline:
        m = get_within(ch, main_q, timeout=1.0, auto_ack=False)
        if m is None:
            continue
        deaths = (m[1].headers or {}).get("x-death", [])
        retries = next((d["count"] for d in deaths if d["queue"] == retry_q), 0)
        attempts.setdefault(m[2], []).append(retries)
        if retries < n:  # retry < N → retry
            ch.basic_reject(m[0].delivery_tag, requeue=False)
        else:  # retry ≥ N → DLQ
            ch.basic_publish(dlq_x, "", m[2], pika.BasicProperties(headers=m[1].headers))
            ch.basic_ack(m[0].delivery_tag)
            done += 1
    assert attempts == {f"job-{i}".encode(): [0, 1, 2, 3] for i in range(3)}
    # max-length 2 with drop-head keeps the DLQ bounded: the oldest was dropped.
    got = [get_within(ch, dlq, timeout=10) for _ in range(2)]
    assert sorted(g[2] for g in got) == [b"job-1", b"job-2"]
    assert ch.basic_get(dlq)[0] is None
    death = {d["queue"]: d for d in got[0][1].headers["x-death"]}
    assert death[retry_q]["reason"] == "expired" and death[main_q]["reason"] == "rejected"
    assert death[retry_q]["count"] == n and death[main_q]["count"] == n
