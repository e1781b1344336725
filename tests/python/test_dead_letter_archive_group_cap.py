"""`/groups` of `error=`/`body=` requests over their newest 10,000 matches (issue 9, docs/archive.md
"API", `count_relation`): over 10,000 matches the groups are those of the newest 10,000 (by id),
each `"count_relation": "gte"` with its count, oldest and newest among them and the message of its
newest match; at or under 10,000 every match is grouped (`"eq"`); `exact_total=true` groups every
match; any other `exact_total` is a 400. `charon ctl dlq groups` shows a lower bound as "N+".
10,050 dead letters archived with pika (one in seven then skipped, so that groups differ), read
with requests, expected groups computed from the records themselves; SQLite and PostgreSQL."""


import pika
import pytest

from archive_helpers import Api, ctl_ok as ctl, plain_node  # noqa: F401 (fixture)

pytestmark = pytest.mark.charon_only

N = 10_050
CAP = 10_000


def publish(b):
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("gcap-q", durable=True, arguments={"x-dead-letter-archive": True})
        for i in range(N):
            ch.basic_publish("", "gcap-q", b"payload %d" % i, pika.BasicProperties(
                delivery_mode=2, message_id=f"m-{i}",
                headers={"x-exception-message": f"order {i} failed: cause {i % 3}"}))


def all_records(api):
    out, page = [], 1
    while True:
        items = api.records(page_size=1000, page=page, exact_total="true")["items"]
        out += items
        if len(items) < 1000:
            return out
        page += 1


def expected(records, match, cap):
    """The groups by status of the newest `cap` matches (all when at most `cap`), keyed by status:
    (count, oldest, newest, message of the greatest id), and the relation."""
    rows = sorted((r for r in records if match(r)), key=lambda r: -r["id"])
    relation = "gte" if len(rows) > cap else "eq"
    groups = {}
    for r in rows[:cap]:
        g = groups.get(r["status"])
        if g is None:
            groups[r["status"]] = [1, r["created_at"], r["created_at"], r["error_message"]]
        else:
            g[0] += 1
            g[1] = min(g[1], r["created_at"])
            g[2] = max(g[2], r["created_at"])
    return {k: tuple(v) for k, v in groups.items()}, relation


def groups(api, **params):
    status, body = api.get("/api/dead-letters/groups", by="status", **params)
    assert status == 200, body
    return body


def as_expected(body):
    return ({g["status"]: (g["count"], g["oldest"], g["newest"], g["error_message"]) for g in body},
            sorted({g["count_relation"] for g in body}))


@pytest.mark.parametrize("plain_node", ["sqlite", "postgres"], indirect=True)
def test_text_filter_groups_cover_the_newest_matches(plain_node):
    api = Api(plain_node)
    publish(plain_node)
    api.wait_records(N, timeout=180)
    every = all_records(api)
    skip = [r["id"] for r in every if int(r["message_id"][2:]) % 7 == 0]
    status, res = api.call("POST", "/api/dead-letters/skip", {"ids": skip, "reason": "groups"})
    assert status == 200 and res["skipped"] == len(skip), res
    every = all_records(api)
    assert len(every) == N

    def failed(r):
        return "failed" in (r["error_message"] or "")

    def cause_1(r):
        return "cause 1" in (r["error_message"] or "")

    # Every record matches: the newest 10,000's groups, each a lower bound.
    for params in ({"error": "failed"}, {"body": "payload"}):
        want, rel = expected(every, failed, CAP)
        assert rel == "gte"
        body = groups(api, **params)
        assert as_expected(body) == (want, ["gte"]), params
        assert sum(g["count"] for g in body) == CAP
        # Largest count first.
        assert [g["count"] for g in body] == sorted((g["count"] for g in body), reverse=True)
        # Every match, exactly, when asked.
        exact = groups(api, exact_total="true", **params)
        assert {g["status"]: g["count"] for g in exact} == \
            {k: v[0] for k, v in expected(every, failed, N + 1)[0].items()}, params
        assert {g["count_relation"] for g in exact} == {"eq"}
        assert as_expected(groups(api, exact_total="false", **params))[1] == ["gte"]

    # With a status term: 8,614 PENDING matches, under the cap: every one, exactly.
    body = groups(api, error="failed", status="PENDING")
    want, rel = expected(every, lambda r: failed(r) and r["status"] == "PENDING", CAP)
    assert rel == "eq" and as_expected(body) == (want, ["eq"])

    # Under the cap (3,350 matches): every match, exactly.
    want, rel = expected(every, cause_1, CAP)
    assert rel == "eq"
    assert as_expected(groups(api, error="cause 1")) == (want, ["eq"])
    # No text term: exact.
    assert {g["count_relation"] for g in groups(api, queue="gcap-q")} == {"eq"}
    assert sum(g["count"] for g in groups(api, queue="gcap-q")) == N

    status, err = api.get("/api/dead-letters/groups", body="payload", exact_total="perhaps")
    assert status == 400, err

    # The CLI: "N+" and the note; exact counts with --exact-total.
    out = ctl(plain_node, "dlq", "groups", "--body", "payload", "--by", "status")
    want, _ = expected(every, failed, CAP)
    assert f"PENDING\t{want['PENDING'][0]}+\t" in out, out
    assert "newest 10,000 matches" in out, out
    out = ctl(plain_node, "dlq", "groups", "--body", "payload", "--by", "status", "--exact-total")
    assert f"PENDING\t{N - len(skip)}\t" in out and "newest 10,000" not in out, out
