"""Who sees which dead letters (issue 9, docs/archive.md "Who sees what"): the archive API shows a
user only the records, jobs and audit rows of the vhosts the user has permissions on, as
RabbitMQ's management API shows queues (monitoring and administrator users see every vhost), and
changes (edit, replay, skip, delete, cancel) reach only records of vhosts the user may change.

Two vhosts (`/` and `other`), one dead letter archived in each; `pa` (policymaker, permissions on
`/`), `pb` (policymaker, permissions on `other`), `mon` (monitoring + policymaker, permissions on
`/` only)."""

import pytest

import conftest
from archive_helpers import Api, config_for

pytestmark = pytest.mark.charon_only

USERS = """
[[users]]
name = "pa"
password = "pa"
tags = ["policymaker"]

[[users]]
name = "pb"
password = "pb"
tags = ["policymaker"]

[[users]]
name = "mon"
password = "mon"
tags = ["monitoring", "policymaker"]

[[permissions]]
user = "pa"
vhost = "/"
configure = ".*"
write = ".*"
read = ".*"

[[permissions]]
user = "pb"
vhost = "other"
configure = ".*"
write = ".*"
read = ".*"

[[permissions]]
user = "mon"
vhost = "/"
configure = ".*"
write = ".*"
read = ".*"
"""


@pytest.fixture(params=["sqlite", "postgres"])
def broker(tmp_path, request):
    b = conftest.start_charon(tmp_path, config_text=config_for(request.param) + USERS)
    yield b
    conftest.stop_charon(b)


def dead_letter(b, vhost, body):
    """work (DLX → work.dlq, an archive queue) ; one message rejected into it."""
    with b.connect(user="alice", password="secret", vhost=vhost) as c:
        ch = c.channel()
        ch.queue_declare("work.dlq", durable=True, arguments={"x-dead-letter-archive": True})
        ch.queue_declare("work", durable=True, arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work.dlq"})
        ch.confirm_delivery()
        ch.basic_publish("", "work", body)
        m = None
        while m is None or m[0] is None:
            m = ch.basic_get("work")
        ch.basic_reject(m[0].delivery_tag, requeue=False)


def ids(body):
    return sorted(r["id"] for r in body["items"])


def test_dead_letters_api_shows_and_changes_only_records_of_the_users_vhosts(broker):
    admin, pa, pb, mon = (Api(broker), Api(broker, "pa", "pa"), Api(broker, "pb", "pb"),
                          Api(broker, "mon", "mon"))
    dead_letter(broker, "/", b"root letter")
    dead_letter(broker, "other", b"other letter")
    every = admin.wait_records(2)
    by_vhost = {r["vhost"]: r["id"] for r in every["items"]}
    root, other = by_vhost["/"], by_vhost["other"]

    # Listing, one record, groups: each sees its own vhost; monitoring and administrator all.
    assert ids(pa.records()) == [root] and pa.records()["total"] == 1
    assert ids(pb.records()) == [other]
    assert ids(mon.records()) == sorted([root, other])
    assert pa.records(vhost="other")["total"] == 0
    assert pa.records(body="other letter")["total"] == 0
    assert pa.get(f"/api/dead-letters/{other}")[0] == 404
    status, rec = pa.get(f"/api/dead-letters/{root}")
    assert status == 200 and rec["payload"] == "root letter"
    status, groups = pa.get("/api/dead-letters/groups", by="vhost")
    assert status == 200 and [(g["vhost"], g["count"]) for g in groups] == [("/", 1)]
    status, groups = mon.get("/api/dead-letters/groups", by="vhost")
    assert sorted((g["vhost"], g["count"]) for g in groups) == [("/", 1), ("other", 1)]

    # Changes: another vhost's record is as if it did not exist (404 / not selected) ...
    assert pa.call("PUT", f"/api/dead-letters/{other}", {"payload": "x"})[0] == 404
    assert pa.call("DELETE", f"/api/dead-letters/{other}")[0] == 404
    status, r = pa.call("POST", "/api/dead-letters/skip", {"ids": [other, root], "reason": "mine only"})
    assert status == 200 and r == {"skipped": 1}
    status, r = pa.call("POST", "/api/dead-letters/delete", {"filter": {"all": True}})
    assert status == 200 and r == {"deleted": 1}
    status, r = pa.call("POST", "/api/dead-letters/replay", {"ids": [other]})
    assert status == 202 and r["total"] == 0
    # ... and one it sees but may not change is refused (monitoring sees every vhost).
    status, r = mon.call("PUT", f"/api/dead-letters/{other}", {"payload": "x"})
    assert status == 401 and "Access refused" in r["reason"]
    status, r = mon.call("POST", "/api/dead-letters/skip", {"filter": {"vhost": "other"}, "reason": "no"})
    assert status == 200 and r == {"skipped": 0}
    status, rec = admin.get(f"/api/dead-letters/{other}")
    assert rec["status"] == "PENDING" and rec["payload"] == "other letter"
    assert admin.records()["total"] == 1

    # pb replays its record: a job only pb, monitoring and administrators see.
    status, r = pb.call("POST", "/api/dead-letters/replay", {"ids": [other], "note": "pb's"})
    assert status == 202 and r["total"] == 1
    job = r["job"]
    assert pb.wait_job(job)["replayed"] == 1
    assert pa.get(f"/api/dead-letters/jobs/{job}")[0] == 404
    assert job not in [j["id"] for j in pa.get("/api/dead-letters/jobs")[1]]
    assert job in [j["id"] for j in pb.get("/api/dead-letters/jobs")[1]]
    assert mon.get(f"/api/dead-letters/jobs/{job}")[0] == 200
    assert pa.call("DELETE", f"/api/dead-letters/jobs/{job}")[0] == 404

    # Audit rows: one's own actions and those on one's vhosts' records.
    def actions(api):
        status, body = api.get("/api/dead-letters/audit")
        assert status == 200, body
        return sorted((a["actor"], a["action"]) for a in body["items"])

    pa_rows = actions(pa)
    assert ("pa", "skip") in pa_rows and ("pa", "delete") in pa_rows
    assert not [a for a in pa_rows if a[0] == "pb"]
    assert ("pb", "replay") in actions(pb) and not [a for a in actions(pb) if a[0] == "pa"]
    assert ("pb", "replay") in actions(mon) and ("pa", "delete") in actions(mon)
    assert ("pb", "replay") in actions(admin)

    # Archive-wide figures and retention are node-wide: monitoring / administrator.
    assert pa.get("/api/dead-letters/stats")[0] == 401
    assert mon.get("/api/dead-letters/stats")[0] == 200
    assert mon.call("POST", "/api/dead-letters/retention")[0] == 401
    assert admin.call("POST", "/api/dead-letters/retention")[0] == 200
