"""Dead-letter topologies (spec 004 "Routing Dead-Lettered Messages", "Dead-Lettering and
Cycles", seed 003's retry queues): DLX kinds, internal DLX, alternate exchange,
exchange-to-exchange bindings, a missing DLX, cycles, the retry topology, and the permission
checks at declare time."""

import pika
import pika.exceptions as pe
import pytest

from dlx_helpers import assert_empty_for, eventually, get_n, get_within, props


def reject_one(ch, q):
    m = get_within(ch, q, auto_ack=False)
    assert m, f"nothing in {q}"
    ch.basic_reject(m[0].delivery_tag, requeue=False)


def src(ch, uniq, x, **extra):
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, **extra})
    return q


def test_topic_dlx_routes_dead_letters_by_pattern(ch, uniq):
    x = uniq("topic-dlx")
    ch.exchange_declare(x, "topic")
    d = uniq("dlq")
    ch.queue_declare(d)
    ch.queue_bind(d, x, "#.dl.routing.key")
    q = src(ch, uniq, x, **{"x-dead-letter-routing-key": "orders.dl.routing.key"})
    ch.basic_publish("", q, b"t")
    reject_one(ch, q)
    assert get_within(ch, d) is not None


def test_headers_dlx_routes_dead_letters_by_headers(ch, uniq):
    x = uniq("hdr-dlx")
    ch.exchange_declare(x, "headers")
    d = uniq("dlq")
    ch.queue_declare(d)
    ch.queue_bind(d, x, arguments={"x-match": "all", "kind": "bad"})
    q = src(ch, uniq, x)
    ch.basic_publish("", q, b"h", props(headers={"kind": "bad"}))
    reject_one(ch, q)
    assert get_within(ch, d) is not None


def test_headers_exchange_behind_the_dlx_matches_the_dead_letters_headers(ch, uniq):
    # A fanout DLX bound to a headers exchange (and a direct DLX whose alternate exchange is a
    # headers exchange): the dead letter's headers, x-death included, still reach the match.
    hx = uniq("hdr")
    ch.exchange_declare(hx, "headers")
    keep, skip = uniq("dlq-keep"), uniq("dlq-skip")
    ch.queue_declare(keep)
    ch.queue_declare(skip)
    ch.queue_bind(keep, hx, arguments={"x-match": "all", "kind": "bad"})
    ch.queue_bind(skip, hx, arguments={"x-match": "all", "kind": "other"})
    fan = uniq("fan-dlx")
    ch.exchange_declare(fan, "fanout")
    ch.exchange_bind(destination=hx, source=fan)
    direct = uniq("direct-dlx")
    ch.exchange_declare(direct, "direct", arguments={"alternate-exchange": hx})
    for x in (fan, direct):
        q = src(ch, uniq, x)
        ch.basic_publish("", q, b"h", props(headers={"kind": "bad"}))
        reject_one(ch, q)
        m = get_within(ch, keep)
        assert m is not None, x
        deaths = m[1].headers["x-death"]
        assert deaths[0]["queue"] == q and deaths[0]["reason"] == "rejected"
    assert_empty_for(ch, skip)


def test_internal_dlx_receives_dead_letters(ch, uniq):
    x = uniq("internal-dlx")
    ch.exchange_declare(x, "fanout", internal=True)
    d = uniq("dlq")
    ch.queue_declare(d)
    ch.queue_bind(d, x)
    q = src(ch, uniq, x)
    ch.basic_publish("", q, b"i")
    reject_one(ch, q)
    assert get_within(ch, d) is not None


def test_dlx_alternate_exchange_takes_unroutable_dead_letters(ch, uniq):
    ae = uniq("ae")
    ch.exchange_declare(ae, "fanout")
    d = uniq("ae-q")
    ch.queue_declare(d)
    ch.queue_bind(d, ae)
    x = uniq("dlx")
    ch.exchange_declare(x, "direct", arguments={"alternate-exchange": ae})
    q = src(ch, uniq, x)
    ch.basic_publish("", q, b"a")
    reject_one(ch, q)
    assert get_within(ch, d) is not None


def test_dlx_exchange_to_exchange_bindings_are_followed(ch, uniq):
    x, x2 = uniq("dlx"), uniq("dlx2")
    ch.exchange_declare(x, "fanout")
    ch.exchange_declare(x2, "fanout")
    ch.exchange_bind(destination=x2, source=x)
    d = uniq("dlq")
    ch.queue_declare(d)
    ch.queue_bind(d, x2)
    q = src(ch, uniq, x)
    ch.basic_publish("", q, b"e2e")
    reject_one(ch, q)
    assert get_within(ch, d) is not None


def test_missing_dlx_drops_the_message_silently(ch, uniq):
    q = src(ch, uniq, uniq("never-declared"))
    ch.basic_publish("", q, b"lost-by-spec")
    reject_one(ch, q)
    ch.connection.sleep(0.1)
    assert ch.is_open
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_cycle_without_rejection_is_dropped(ch, uniq):
    a, b = uniq("cyc-a"), uniq("cyc-b")
    ch.queue_declare(a, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b,
                                   "x-message-ttl": 50})
    ch.queue_declare(b, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": a,
                                   "x-message-ttl": 50})
    ch.basic_publish("", a, b"spin")
    eventually(lambda: ch.queue_declare(a, passive=True).method.message_count == 0
               and ch.queue_declare(b, passive=True).method.message_count == 0,
               "the cycle dropped the message", conn=ch.connection)


def test_queue_dead_lettering_to_itself_by_ttl_is_a_cycle(ch, uniq):
    a = uniq("self")
    ch.queue_declare(a, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": a,
                                   "x-message-ttl": 50})
    ch.basic_publish("", a, b"self")
    ch.connection.sleep(0.1)
    eventually(lambda: ch.queue_declare(a, passive=True).method.message_count == 0,
               "the self-cycle dropped the message", conn=ch.connection)


def test_cycle_with_rejection_continues(ch, uniq):
    work, retry = uniq("work"), uniq("retry")
    ch.queue_declare(work, arguments={"x-dead-letter-exchange": "",
                                      "x-dead-letter-routing-key": retry})
    ch.queue_declare(retry, arguments={"x-dead-letter-exchange": "",
                                       "x-dead-letter-routing-key": work, "x-message-ttl": 50})
    ch.basic_publish("", work, b"again")
    for attempt in range(1, 4):
        m = get_within(ch, work, 3.0, auto_ack=False)
        assert m, f"attempt {attempt} never came back"
        if attempt > 1:
            deaths = {(e["queue"], e["reason"]): e["count"] for e in m[1].headers["x-death"]}
            assert deaths[(work, "rejected")] == attempt - 1
            assert deaths[(retry, "expired")] == attempt - 1
        ch.basic_reject(m[0].delivery_tag, requeue=False)


def test_seed_003_retry_topology_with_parking_lot(ch, uniq):
    """main -> reject -> retry (TTL, DLX back to main) -> main; after N attempts the consumer
    publishes to a parking-lot queue bounded with x-max-length + drop-head and x-message-ttl."""
    main_x = uniq("main-x")
    ch.exchange_declare(main_x, "direct")
    retry_x = uniq("retry-x")
    ch.exchange_declare(retry_x, "direct")
    main, retry, parking = uniq("main"), uniq("retry"), uniq("parking")
    ch.queue_declare(main, arguments={"x-dead-letter-exchange": retry_x})
    ch.queue_bind(main, main_x, "job")
    ch.queue_declare(retry, arguments={"x-dead-letter-exchange": main_x, "x-message-ttl": 50})
    ch.queue_bind(retry, retry_x, "job")
    ch.queue_declare(parking, arguments={"x-max-length": 2, "x-overflow": "drop-head",
                                         "x-message-ttl": 60000})
    max_attempts = 3
    for i in range(3):
        ch.basic_publish(main_x, "job", b"job-%d" % i)
    parked = 0
    handled = 0
    while parked < 3:
        m = get_within(ch, main, 5.0, auto_ack=False)
        assert m, "a job got lost"
        method, p, body = m
        deaths = (p.headers or {}).get("x-death", [])
        attempts = 1 + sum(e["count"] for e in deaths if e["queue"] == main and e["reason"] == "rejected")
        handled += 1
        if attempts >= max_attempts:
            ch.basic_publish("", parking, body, p)
            ch.basic_ack(method.delivery_tag)
            parked += 1
        else:
            ch.basic_reject(method.delivery_tag, requeue=False)
    assert handled == 3 * max_attempts
    got = get_n(ch, parking, 2)
    assert [g[2] for g in got] == [b"job-1", b"job-2"]  # bounded: the oldest was dropped
    assert get_within(ch, parking, 0.3) is None


@pytest.mark.needs_users
def test_declaring_a_queue_with_a_dlx_needs_write_on_the_dlx(broker, uniq):
    with broker.connect(user="dlxuser", password="dlxuser") as c:
        ch = c.channel()
        with pytest.raises(pe.ChannelClosedByBroker) as ei:
            ch.queue_declare(uniq("q"), arguments={"x-dead-letter-exchange": "forbidden-dlx"})
        assert ei.value.reply_code == 403
        assert "exchange 'forbidden-dlx'" in ei.value.reply_text


@pytest.mark.needs_users
def test_declaring_a_queue_with_an_allowed_dlx_succeeds(broker, uniq):
    with broker.connect(user="dlxuser", password="dlxuser") as c:
        ch = c.channel()
        q = uniq("q")
        ch.queue_declare(q, arguments={"x-dead-letter-exchange": "allowed-dlx"})
        ch.queue_delete(q)


@pytest.mark.needs_users
def test_declaring_a_queue_with_a_dlx_needs_read_on_the_queue(broker, uniq):
    with broker.connect(user="dlxnoread", password="dlxnoread") as c:
        ch = c.channel()
        with pytest.raises(pe.ChannelClosedByBroker) as ei:
            ch.queue_declare(uniq("q"), arguments={"x-dead-letter-exchange": "any-dlx"})
        assert ei.value.reply_code == 403
        assert "queue '" in ei.value.reply_text
