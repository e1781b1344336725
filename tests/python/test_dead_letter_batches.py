"""Dead letters leaving a queue together (one nack of many, one mass expiry) are dead-lettered
as a batch, and alike messages share one dead-lettered copy of their properties (issue 13). Each
message must still get the copy and the routing of its own properties and routing keys."""

from dlx_helpers import count, get_n, get_within, props


def test_batch_of_mixed_messages_each_keeps_its_own_headers_and_routing(conn, ch, uniq):
    dlx, dlq, cc_q = uniq("dlx"), uniq("dlq"), uniq("ccq")
    ch.exchange_declare(dlx, "topic")
    ch.queue_declare(dlq)
    ch.queue_declare(cc_q)
    ch.queue_bind(dlq, dlx, "#")
    ch.queue_bind(cc_q, dlx, "cc-key")
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": dlx})
    sent = [
        (b"a1", props(delivery_mode=1)),
        (b"a2", props(delivery_mode=1)),
        (b"h1", props(delivery_mode=1, headers={"k": "one"})),
        (b"a3", props(delivery_mode=1)),
        (b"cc", props(delivery_mode=1, headers={"CC": ["cc-key"]})),
        (b"p1", props(delivery_mode=2, content_type="text/plain")),
        (b"a4", props(delivery_mode=1)),
    ]
    for body, p in sent:
        ch.basic_publish("", q, body, p)
    c = conn.channel()
    tags = []
    c.basic_consume(q, lambda _c, m, _p, _b: tags.append(m.delivery_tag))
    while len(tags) < len(sent):
        conn.process_data_events(0.05)
    # One nack for all of them: one batch of dead letters.
    c.basic_nack(tags[-1], multiple=True, requeue=False)

    got = get_n(ch, dlq, len(sent), timeout=60)
    assert [g[2] for g in got] == [b for b, _ in sent]
    by_body = {g[2]: g[1] for g in got}
    for body, p in sent:
        d = by_body[body]
        assert d.delivery_mode == p.delivery_mode, body
        assert d.content_type == p.content_type, body
        death = d.headers["x-death"]
        assert len(death) == 1 and death[0]["reason"] == "rejected" and death[0]["queue"] == q
        own = {k: v for k, v in d.headers.items() if not k.startswith("x-")}
        assert own == (p.headers or {}), body
        keys = [q] + list((p.headers or {}).get("CC", []))
        assert [bytes(k).decode() if isinstance(k, bytes) else k for k in death[0]["routing-keys"]] == keys
    # Only the message with the CC header was routed by it too.
    cc_got = get_n(ch, cc_q, 2, timeout=5)
    assert [g[2] for g in cc_got] == [b"cc"]
    assert count(ch, dlq) == 0


def test_mass_expiry_dead_letters_every_message_once(ch, uniq):
    dlx, dlq = uniq("dlx"), uniq("dlq")
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, dlx)
    q = uniq("src")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": dlx, "x-message-ttl": 300})
    n = 10_000  # more than one expiry batch (4096)
    for i in range(n):
        p = props(headers={"odd": True}) if i % 1000 == 7 else None
        ch.basic_publish("", q, b"%d" % i, p)
    deadline = ch.connection.sleep
    for _ in range(1200):
        if count(ch, dlq) >= n:
            break
        deadline(0.1)
    assert count(ch, dlq) == n
    assert count(ch, q) == 0
    got = get_n(ch, dlq, n, timeout=120)
    assert [int(g[2]) for g in got] == list(range(n))
    for g in got:
        i = int(g[2])
        assert g[1].headers["x-death"][0]["reason"] == "expired"
        assert ("odd" in g[1].headers) == (i % 1000 == 7)


def test_a_message_in_two_queues_dead_letters_from_each_with_its_whole_body(conn, ch, uniq):
    """One publish fanned out to two queues, each dead-lettering to the same DLQ: the queues
    share the message, so the first copy is made while the other queue still holds it and the
    last one when nothing else does (the body then moves into the copy instead of being
    shared). Every copy and the still-queued original carry the whole body; transient and
    persistent (durable queues: the store records the move) alike."""
    for mode, durable in ((1, False), (2, True)):
        dlx, dlq, fan = uniq("dlx"), uniq("dlq"), uniq("fan")
        ch.exchange_declare(dlx, "fanout", durable=durable)
        ch.queue_declare(dlq, durable=durable)
        ch.queue_bind(dlq, dlx)
        ch.exchange_declare(fan, "fanout", durable=durable)
        q1, q2 = uniq("src1"), uniq("src2")
        for q in (q1, q2):
            ch.queue_declare(q, durable=durable, arguments={"x-dead-letter-exchange": dlx})
            ch.queue_bind(q, fan)
        bodies = [b"shared-%d-" % i + bytes(range(256)) * (i + 1) for i in range(3)]
        for b in bodies:
            ch.basic_publish(fan, "", b, props(delivery_mode=mode))
        # Rejected from the first queue while the second still holds every message, then
        # from the second, now the only holder.
        for q in (q1, q2):
            got = [get_within(ch, q, 30, auto_ack=False) for _ in bodies]
            assert None not in got and [g[2] for g in got] == bodies
            for m, _p, _b in got:
                ch.basic_reject(m.delivery_tag, requeue=False)
            copies = get_n(ch, dlq, 3, timeout=30)
            assert [g[2] for g in copies] == bodies, (mode, q)
            assert all(g[1].headers["x-death"][0]["queue"] == q for g in copies)
            assert all(g[1].headers["x-death"][0]["reason"] == "rejected" for g in copies)
            assert all(g[1].delivery_mode == mode for g in copies)
        assert count(ch, dlq) == 0 and count(ch, q1) == 0 and count(ch, q2) == 0
