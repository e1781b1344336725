"""The capped `total` of `error=`/`body=` lists (issue 9, docs/archive.md "API"): over 10,000
matches such a list answers `"total": 10000, "total_relation": "gte"` (a true lower bound), at or
under it the exact count with `"eq"`; every other list answers `"eq"` and its exact count;
`exact_total=true` counts every match. The page of items stays exact and in order (the newest
page, a page past the 10,000th match, other sorts), and `charon ctl dlq list` shows "10000+".
10,050 dead letters archived with pika, read with requests, on SQLite and on a real PostgreSQL."""


import pika
import pytest

from archive_helpers import Api, ctl_ok as ctl, plain_node  # noqa: F401 (fixture)

pytestmark = pytest.mark.charon_only

N = 10_050
RARE = 37  # every RARE-th message's error says "rare case"


def publish(b):
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("cap-q", durable=True, arguments={"x-dead-letter-archive": True})
        for i in range(N):
            err = f"order {i} failed: rare case" if i % RARE == 0 else f"order {i} failed: cause {i % 3}"
            ch.basic_publish("", "cap-q", b"payload %d" % i, pika.BasicProperties(
                delivery_mode=2, message_id=f"m-{i}", headers={"x-exception-message": err}))


def ids(body):
    return [r["id"] for r in body["items"]]


@pytest.mark.parametrize("plain_node", ["sqlite", "postgres"], indirect=True)
def test_text_filter_totals_over_the_cap_are_lower_bounds(plain_node):
    api = Api(plain_node)
    publish(plain_node)
    every = api.wait_records(N, timeout=180)
    assert (every["total"], every["total_relation"]) == (N, "eq")
    rare = (N + RARE - 1) // RARE

    # Every record matches `body=payload` and `error=failed`: a lower bound at the cap.
    for params in ({"body": "payload"}, {"error": "failed"}, {"error": "failed", "status": "PENDING"},
                   {"error": "failed", "body": "payload"}):
        body = api.records(page_size=100, **params)
        assert (body["total"], body["total_relation"]) == (10_000, "gte"), params
        plain = api.records(page_size=100)
        assert ids(body) == ids(plain) and len(ids(body)) == 100, params
        # A page past the 10,000th match: exact and in order.
        deep = api.records(page_size=100, page=101, **params)
        assert ids(deep) == ids(api.records(page_size=100, page=101)) and len(ids(deep)) == 50, params
        # Oldest first and by time: the same records as the unfiltered list's.
        for sort in ("id", "-created_at"):
            assert ids(api.records(page_size=100, sort=sort, **params)) == \
                ids(api.records(page_size=100, sort=sort)), (params, sort)
        # Forced exact.
        exact = api.records(page_size=1, exact_total="true", **params)
        assert (exact["total"], exact["total_relation"]) == (N, "eq"), params
        assert api.records(page_size=1, exact_total="false", **params)["total_relation"] == "gte"

    # Under the cap: exact, "eq", the very records.
    body = api.records(error="rare case")
    assert (body["total"], body["total_relation"]) == (rare, "eq")
    assert sorted(int(r["message_id"][2:]) for r in body["items"]) == list(range(0, N, RARE))
    # One in three: 3,350 matches, exact.
    body = api.records(page_size=1, error="cause 1")
    want = sum(1 for i in range(N) if i % RARE != 0 and i % 3 == 1)
    assert (body["total"], body["total_relation"]) == (want, "eq")
    # No text term: never capped.
    body = api.records(page_size=1, queue="cap-q")
    assert (body["total"], body["total_relation"]) == (N, "eq")

    status, err = api.get("/api/dead-letters", body="payload", exact_total="perhaps")
    assert status == 400, err

    # The CLI shows the lower bound as "10000+", and the exact count when asked.
    out = ctl(plain_node, "dlq", "list", "--body", "payload", "--page-size", "5")
    assert "(5 of 10000+, page 1)" in out, out
    out = ctl(plain_node, "dlq", "list", "--body", "payload", "--page-size", "5", "--exact-total")
    assert f"(5 of {N}, page 1)" in out, out

    # A job by filter acts on every match, its total counted by the job.
    status, res = api.call("POST", "/api/dead-letters/skip", {"filter": {"body": "payload"}, "reason": "cap"})
    assert status == 200 and res["skipped"] == N, res
    body = api.records(page_size=1, exact_total="true", status="SKIPPED", body="payload")
    assert (body["total"], body["total_relation"]) == (N, "eq")
