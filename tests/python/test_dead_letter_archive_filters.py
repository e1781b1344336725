"""The archive's text filters (issue 9, docs/archive.md "API"): `error` (contained in the
error message or the stack trace, case-sensitive), `header.NAME` (the header's JSON value as text)
and `body` (bytes contained), through the API with pika publishing and requests reading, on SQLite
and on a real PostgreSQL. Each filter must return exactly the records a reading of what was
published says, with an exact `total`: needles of one and two characters, non-ASCII text, texts
shared by many records, a needle spanning lines of a stack trace, bodies that are not UTF-8 and
header values of different AMQP types; alone and with `queue`, and again after records are
deleted and new ones archived."""

import pika
import pytest

from archive_helpers import Api, plain_node  # noqa: F401 (fixture)

pytestmark = pytest.mark.charon_only

TRACE = "com.acme.Boom: failed\n\tat com.acme.Orders.load(Orders.java:42)\n\tat com.acme.Main.run(Main.java:7)"


def message(i):
    """(queue, error message, stack trace, headers, body) of message i."""
    msg = [f"Order {i} not found", "Zahlung fehlgeschlagen (Ü)", "ab", None, "注文が見つかりません", "timeout"][i % 6]
    trace = [TRACE, f"com.acme.X: order {i}\n\tat com.acme.X.y(X.java:{i})", None][i % 3]
    headers = {
        "tenant": ["acme", "zeta", "ACME"][i % 3],
        "attempt": i % 4,                 # a long (AMQP 'l'/'I'): "0".."3" as text
        "flag": (i % 2 == 0),             # a boolean: "true"/"false"
        "note": "grüße" if i % 5 == 0 else "plain",
    }
    if msg is not None:
        headers["x-exception-message"] = msg
    if trace is not None:
        headers["x-exception-stacktrace"] = trace
    body = [b"{\"order\": %d}" % i, b"\xff\xfe\x00bin\x80ary", "café €".encode(), "caf\xe9".encode("latin-1")][i % 4]
    return ("arch-a" if i % 2 else "arch-b"), msg, trace, headers, body


N = 60


def publish_all(b, rng):
    with b.connect() as c:
        ch = c.channel()
        for q in ("arch-a", "arch-b"):
            ch.queue_declare(q, durable=True, arguments={"x-dead-letter-archive": True})
        for i in rng:
            q, _, _, headers, body = message(i)
            ch.basic_publish("", q, body, pika.BasicProperties(delivery_mode=2, message_id=f"m-{i}", headers=headers))


def header_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def matches(i, key, value):
    q, msg, trace, headers, body = message(i)
    if key == "error":
        return any(t is not None and value in t for t in (msg, trace))
    if key == "body":
        return value.encode() in body
    name = key.removeprefix("header.")
    return name in headers and header_text(headers[name]) == value


CASES = [
    ("error", "a"), ("error", "ab"), ("error", "Ü"), ("error", "見つ"), ("error", "Order 1"),
    ("error", "order 1"), ("error", "ORDER"), ("error", "\n\tat com.acme.Main"), ("error", "nothing"),
    ("body", "bin"), ("body", "é"), ("body", "order"), ("body", "\u20ac"), ("body", "zzz"),
    ("header.tenant", "acme"), ("header.tenant", "ACME"), ("header.attempt", "2"), ("header.flag", "true"),
    ("header.note", "grüße"), ("header.missing", "x"),
]


def check(api, ids_by_mid, present, when):
    for key, value in CASES:
        for queue in (None, "arch-a"):
            params = {key: value}
            if queue:
                params["queue"] = queue
            want = sorted(ids_by_mid[i] for i in present
                          if matches(i, key, value) and (queue is None or message(i)[0] == queue))
            body = api.records(**params)
            have = sorted(r["id"] for r in body["items"])
            assert have == want, f"{params} ({when})"
            assert body["total"] == len(want), f"total of {params} ({when})"
            # The newest page of two: the two highest ids, in order.
            small = api.records(page_size=2, **params)
            assert [r["id"] for r in small["items"]] == sorted(want, reverse=True)[:2], f"{params} ({when})"
    # The cases are not vacuous.
    assert api.records(error="ab")["total"] >= 5 and api.records(body="bin")["total"] >= 5


@pytest.mark.parametrize("plain_node", ["sqlite", "postgres"], indirect=True)
def test_text_filters_return_exactly_the_matching_records(plain_node):
    api = Api(plain_node)
    publish_all(plain_node, range(N))
    api.wait_records(N)

    def ids():
        return {int(r["message_id"][2:]): r["id"] for r in api.records()["items"]}

    ids_by_mid = ids()
    assert len(ids_by_mid) == N
    present = set(range(N))
    check(api, ids_by_mid, present, "archived")

    # Delete some (by filter and by ids), archive more: the filters follow.
    status, _ = api.call("POST", "/api/dead-letters/delete", {"filter": {"error": "timeout"}})
    assert status == 200
    gone = [i for i in present if i % 7 == 1 and i % 6 != 5]
    status, _ = api.call("POST", "/api/dead-letters/delete", {"ids": [ids_by_mid[i] for i in gone]})
    assert status == 200
    present -= {i for i in present if i % 6 == 5} | set(gone)
    publish_all(plain_node, range(N, N + 30))
    api.wait_records(len(present) + 30)
    ids_by_mid = ids()
    present |= set(range(N, N + 30))
    assert set(ids_by_mid) == present
    check(api, ids_by_mid, present, "after deletes and more records")
