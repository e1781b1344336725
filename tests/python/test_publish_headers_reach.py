"""A publish's headers reach the exchanges that read them however it gets there: a headers
exchange bound (exchange-to-exchange) behind a direct exchange, or an alternate exchange, matches
on them; CC/BCC among other headers still route (the broker reads headers lazily, see
connection/methods/publish.rs)."""

import time

import pika


def get_all(ch, q):
    out = []
    while True:
        m, p, b = ch.basic_get(q, auto_ack=True)
        if m is None:
            return out
        out.append((p.headers, b))


def wait_count(ch, q, n, timeout=60.0):
    deadline = time.monotonic() + timeout
    got = []
    while time.monotonic() < deadline:
        got += get_all(ch, q)
        if len(got) >= n:
            return got
        time.sleep(0.05)
    return got


def headers_queue(ch, x, match):
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, x, arguments=match)
    return q


def test_headers_exchange_behind_direct_exchange_matches(ch, uniq):
    src, hx = uniq("direct"), uniq("headers")
    ch.exchange_declare(src, "direct", auto_delete=True)
    ch.exchange_declare(hx, "headers", auto_delete=True)
    ch.exchange_bind(hx, src, routing_key="k")
    q = headers_queue(ch, hx, {"x-match": "all", "a": 1, "b": "x"})
    ch.confirm_delivery()
    hit = {"a": 1, "b": "x", "x-exception-type": "boom"}
    ch.basic_publish(src, "k", b"hit", pika.BasicProperties(headers=hit))
    ch.basic_publish(src, "k", b"miss", pika.BasicProperties(headers={"a": 2, "b": "x"}))
    ch.basic_publish(src, "other", b"wrong-key", pika.BasicProperties(headers=hit))
    got = wait_count(ch, q, 1)
    time.sleep(0.2)
    got += get_all(ch, q)
    assert got == [(hit, b"hit")]


def test_headers_exchange_bound_after_first_publish_matches(ch, uniq):
    src, hx = uniq("direct"), uniq("headers")
    ch.exchange_declare(src, "direct", auto_delete=True)
    plain = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(plain, src, routing_key="k")
    ch.confirm_delivery()
    hit = {"a": 1}
    ch.basic_publish(src, "k", b"before", pika.BasicProperties(headers=hit))
    assert wait_count(ch, plain, 1) == [(hit, b"before")]
    ch.exchange_declare(hx, "headers", auto_delete=True)
    ch.exchange_bind(hx, src, routing_key="k")
    q = headers_queue(ch, hx, {"x-match": "any", "a": 1})
    ch.basic_publish(src, "k", b"after", pika.BasicProperties(headers=hit))
    assert wait_count(ch, q, 1) == [(hit, b"after")]
    assert wait_count(ch, plain, 1) == [(hit, b"after")]


def test_alternate_headers_exchange_matches(ch, uniq):
    src, hx = uniq("direct"), uniq("alt")
    ch.exchange_declare(hx, "headers", auto_delete=True)
    ch.exchange_declare(src, "direct", auto_delete=True,
                        arguments={"alternate-exchange": hx})
    q = headers_queue(ch, hx, {"x-match": "all", "a": 1})
    ch.confirm_delivery()
    ch.basic_publish(src, "nobody", b"alt", pika.BasicProperties(headers={"a": 1, "z": "y"}))
    assert wait_count(ch, q, 1) == [({"a": 1, "z": "y"}, b"alt")]


def test_cc_and_bcc_among_other_headers_route_through_direct(ch, uniq):
    x = uniq("direct")
    ch.exchange_declare(x, "direct", auto_delete=True)
    qs = {}
    for k in ("main", "cc", "bcc"):
        qs[k] = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(qs[k], x, routing_key=k)
    ch.confirm_delivery()
    headers = {"x-exception-type": "boom", "CC": ["cc"], "BCC": ["bcc"], "n": 3}
    ch.basic_publish(x, "main", b"m", pika.BasicProperties(headers=headers))
    seen = {"x-exception-type": "boom", "CC": ["cc"], "n": 3}
    for k in ("main", "cc", "bcc"):
        assert wait_count(ch, qs[k], 1) == [(seen, b"m")], k
