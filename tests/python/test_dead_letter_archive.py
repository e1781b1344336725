"""The dead-letter archive (issue 9, docs/archive.md), end to end with pika and requests, on the
embedded SQLite and on a real PostgreSQL server (a private cluster).

A consumer of `orders` fails the way Spring AMQP consumers do: the first time it republishes the
message with `x-exception-message`/`x-exception-stacktrace`, the second time it rejects it; the
dead-letter exchange routes it to `orders.dlq`, an archive queue, which hands it to SQL."""

import base64
import subprocess
import threading
import time

import pika
import pytest

import conftest
from archive_helpers import (Api, config_for, node, own_pg_cluster, queue_depth, restart, take_bodies,  # noqa: F401
                             wait_until)

pytestmark = pytest.mark.charon_only

BACKENDS = ["sqlite", "postgres"]


def topology(ch, archive_by="argument"):
    """orders.x → orders (DLX dlx) ; dlx → orders.dlq (archive queue)."""
    ch.exchange_declare("orders.x", "direct", durable=True)
    ch.exchange_declare("dlx", "fanout", durable=True)
    ch.queue_declare("orders", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    ch.queue_bind("orders", "orders.x", "new")
    args = {"x-dead-letter-archive": True} if archive_by == "argument" else {}
    ch.queue_declare("orders.dlq", durable=True, arguments=args)
    ch.queue_bind("orders.dlq", "dlx")


def failing_consumer(b, n):
    """Consumes `orders` until `n` messages were rejected for good."""
    done = threading.Event()
    rejected = [0]

    def run():
        with b.connect() as c:
            ch = c.channel()

            def on_msg(chan, m, props, body):
                headers = dict(props.headers or {})
                if "x-exception-message" in headers:
                    chan.basic_reject(m.delivery_tag, requeue=False)
                    rejected[0] += 1
                    if rejected[0] >= n:
                        chan.stop_consuming()
                    return
                oid = body.decode(errors="replace")[:20]
                headers["x-exception-message"] = f"Order {props.message_id} not found"
                headers["x-exception-stacktrace"] = (
                    f"com.acme.NotFound: Order {props.message_id} not found\n"
                    f"\tat com.acme.Orders.load(Orders.java:{len(oid) + 40})\n\tat com.acme.Main.run(Main.java:7)")
                props.headers = headers
                chan.basic_publish("orders.x", "new", body, props)
                chan.basic_ack(m.delivery_tag)

            ch.basic_consume("orders", on_msg)
            ch.start_consuming()
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def publish(ch, exchange, key, bodies, **props):
    for i, body in enumerate(bodies):
        p = pika.BasicProperties(delivery_mode=2, message_id=f"m-{i}", correlation_id=f"c-{i}",
                                 content_type="application/json", headers={"tenant": "acme" if i % 2 else "zeta"},
                                 **props)
        ch.basic_publish(exchange, key, body, p)


@pytest.mark.parametrize("node", BACKENDS, indirect=True)
def test_dead_letters_are_archived_with_every_field_filtered_grouped_edited_replayed_skipped_deleted_and_audited(node):
    b = node["b"]
    api = Api(b)
    bodies = [b'{"order": 0}', b'{"order": 1}', b'\xff\x00\x01binary', b'{"order": 3}']
    with b.connect() as c:
        ch = c.channel()
        topology(ch)
        ch.confirm_delivery()
        t = failing_consumer(b, len(bodies))
        publish(ch, "orders.x", "new", bodies)
        t.join(60)
    body = api.wait_records(len(bodies))
    wait_until(lambda: queue_depth(b, "orders.dlq") == 0, what="the archive queue drained")
    recs = {r["message_id"]: r for r in body["items"]}
    assert body["total"] == 4 and body["page"] == 1 and body["page_size"] == 1000
    r0 = recs["m-0"]
    assert r0["vhost"] == "/" and r0["queue"] == "orders.dlq"
    assert r0["original_queue"] == "orders" and r0["original_exchange"] == "orders.x"
    assert r0["original_routing_keys"] == ["new"] and r0["reason"] == "rejected"
    assert r0["death_count"] == 1 and r0["correlation_id"] == "c-0" and r0["key"] == "m-0"
    assert r0["content_type"] == "application/json"
    assert r0["properties"]["delivery_mode"] == 2 and r0["properties"]["message_id"] == "m-0"
    assert r0["headers"]["tenant"] == "zeta"
    assert r0["headers"]["x-death"][0]["queue"] == "orders"
    assert r0["payload"] == '{"order": 0}' and r0["payload_encoding"] == "string"
    assert r0["error_message"] == "Order m-0 not found"
    assert r0["error_stacktrace"].startswith("com.acme.NotFound")
    assert r0["status"] == "PENDING" and r0["replay_count"] == 0 and r0["last_replayed_at"] is None
    assert r0["resolved_by"] is None and r0["created_at"].endswith("Z")
    binary = recs["m-2"]
    assert binary["payload_encoding"] == "base64"
    assert base64.b64decode(binary["payload"]) == b"\xff\x00\x01binary"
    # One cause, one fingerprint (ids and line numbers differ).
    assert len({r["error_fingerprint"] for r in recs.values()}) == 1

    # Filters.
    assert api.records(original_queue="orders")["total"] == 4
    assert api.records(original_queue="nope")["total"] == 0
    assert api.records(**{"header.tenant": "acme"})["total"] == 2
    assert api.records(error="m-3 not")["total"] == 1
    assert api.records(body='"order": 1')["total"] == 1
    assert api.records(key="m-1")["total"] == 1
    assert api.records(status="PENDING", reason="rejected")["total"] == 4
    page = api.records(page=2, page_size=3, sort="id")
    assert page["total"] == 4 and len(page["items"]) == 1
    status, err = api.get("/api/dead-letters", bogus="1")
    assert status == 400 and "bogus" in err["reason"]
    status, groups = api.get("/api/dead-letters/groups", by="original_queue,reason,error_fingerprint,status")
    assert status == 200 and len(groups) == 1
    g = groups[0]
    assert g["count"] == 4 and g["original_queue"] == "orders" and g["status"] == "PENDING"
    assert g["oldest"] <= g["newest"] and "not found" in g["error_message"]

    # Edit m-1's body, replay it to where it came from: orders' consumer gets the edited body.
    rid = recs["m-1"]["id"]
    status, edited = api.call("PUT", f"/api/dead-letters/{rid}", {"payload": '{"order": 1, "fixed": true}',
                                                                  "note": "fix typo"})
    assert status == 200 and edited["payload"] == '{"order": 1, "fixed": true}'
    status, one = api.get(f"/api/dead-letters/{rid}")
    assert one["history"][0]["payload"] == '{"order": 1}' and one["history"][0]["changed_by"] == "alice"
    status, job = api.call("POST", "/api/dead-letters/replay", {"ids": [rid], "note": "retry after fix"})
    assert status == 202 and job["total"] == 1
    info = api.wait_job(job["job"])
    assert info["state"] == "DONE" and info["replayed"] == 1 and info["failed"] == 0
    with b.connect() as c:
        ch = c.channel()
        m, props, got = None, None, None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m, props, got = ch.basic_get("orders", auto_ack=True)
            if m:
                break
            time.sleep(0.05)
        assert got == b'{"order": 1, "fixed": true}'
        assert m.exchange == "orders.x" and m.routing_key == "new"
        assert props.message_id == "m-1" and props.delivery_mode == 2
        assert props.headers["x-replay-count"] == 1 and props.headers["tenant"] == "acme"
        assert "x-death" in props.headers  # kept unless strip_death_headers
    rec = api.get(f"/api/dead-letters/{rid}")[1]
    assert rec["status"] == "REPLAYED" and rec["replay_count"] == 1 and rec["last_replayed_at"]
    assert rec["resolved_by"] == "alice" and rec["resolution_note"] == "retry after fix"

    # Replay to an exchange that does not exist: FAILED with the reason.
    r3 = recs["m-3"]["id"]
    status, job = api.call("POST", "/api/dead-letters/replay", {"ids": [r3], "exchange": "missing.x"})
    info = api.wait_job(job["job"])
    assert info["failed"] == 1 and "no exchange 'missing.x'" in info["errors"][0]["error"]
    rec = api.get(f"/api/dead-letters/{r3}")[1]
    assert rec["status"] == "FAILED" and "missing.x" in rec["resolution_note"]
    # No route: FAILED NO_ROUTE; with strip_death_headers the x-death headers go.
    status, job = api.call("POST", "/api/dead-letters/replay",
                           {"ids": [r3], "exchange": "orders.x", "routing_key": "unbound"})
    assert api.wait_job(job["job"])["errors"][0]["error"] == "NO_ROUTE"

    # Skip and delete leave audit rows with the acting user.
    status, res = api.call("POST", "/api/dead-letters/skip",
                           {"filter": {"header.tenant": "zeta"}, "reason": "obsolete tenant"})
    assert status == 200 and res["skipped"] == 2
    skipped = api.records(status="SKIPPED")["items"]
    assert {r["message_id"] for r in skipped} == {"m-0", "m-2"}
    assert all(r["resolved_by"] == "alice" and r["resolution_note"] == "obsolete tenant" for r in skipped)
    status, res = api.call("POST", "/api/dead-letters/delete", {"ids": [r3], "note": "gone"})
    assert status == 200 and res["deleted"] == 1
    status, res = api.call("POST", "/api/dead-letters/delete", {"filter": {}})
    assert status == 400
    status, audit = api.get("/api/dead-letters/audit")
    actions = [a["action"] for a in audit["items"]]
    assert actions == ["delete", "skip", "replay", "replay", "replay", "edit"], actions
    assert all(a["actor"] == "alice" for a in audit["items"])
    assert audit["items"][0]["ids"] == [r3] and audit["items"][0]["note"] == "gone"
    assert audit["items"][1]["filter"] == {"header.tenant": "zeta"}
    assert audit["items"][1]["result"] == {"skipped": 2}
    assert audit["items"][2]["result"] == {"job": audit["items"][2]["job"], "records": 1, "state": "DONE",
                                           "replayed": 0, "failed": 1, "not_replayed": 0}
    assert audit["items"][4]["note"] == "retry after fix" and audit["items"][4]["result"]["replayed"] == 1
    status, audit = api.get("/api/dead-letters/audit", record_id=str(rid))
    assert [a["action"] for a in audit["items"]] == ["replay", "edit"]
    # A user without a management tag may not act.
    status, _ = Api(b, "reader", "reader").call("POST", "/api/dead-letters/skip", {"ids": [rid], "reason": "x"})
    assert status == 401
    assert api.get("/api/dead-letters/stats")[1]["records"] == 3


def test_archive_queue_by_policy_replay_at_a_rate_and_strip_death_headers(node):
    b = node["b"]
    api = Api(b)
    n = 100
    status, _ = api.call("PUT", "/api/policies/%2f/archive", {"pattern": "^orders\\.dlq$",
                                                               "definition": {"dead-letter-archive": True},
                                                               "apply-to": "queues"})
    assert status in (201, 204)
    with b.connect() as c:
        ch = c.channel()
        topology(ch, archive_by="policy")
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("orders.x", "new", f"msg-{i}".encode(), pika.BasicProperties(message_id=f"m-{i}"))
        ch.queue_purge("orders")  # not dead-lettered
        for i in range(n):
            ch.basic_publish("orders.x", "new", f"msg-{i}".encode(), pika.BasicProperties(message_id=f"m-{i}"))
        for _ in range(n):
            m, _p, _b = ch.basic_get("orders")
            ch.basic_reject(m.delivery_tag, requeue=False)
    api.wait_records(n)
    times = []
    got = []
    with b.connect() as c:
        ch = c.channel()

        def on_msg(chan, m, props, body):
            times.append(time.monotonic())
            got.append((body, props.headers))
            chan.basic_ack(m.delivery_tag)
            if len(got) == n:
                chan.stop_consuming()

        ch.basic_consume("orders", on_msg)
        status, job = api.call("POST", "/api/dead-letters/replay",
                               {"filter": {"original_queue": "orders"}, "rate": 200, "strip_death_headers": True})
        assert status == 202 and job["total"] == n
        c.call_later(120, ch.stop_consuming)
        ch.start_consuming()
    assert len(got) == n
    # 100 publishes spaced 1/200 s apart take at least 99 gaps (a lower bound: the limiter's).
    assert times[-1] - times[0] >= 99 / 200 * 0.9, times[-1] - times[0]
    assert sorted(body for body, _ in got) == sorted(f"msg-{i}".encode() for i in range(n))
    for _, headers in got:
        assert headers["x-replay-count"] == 1
        assert not any(k.startswith("x-death") or k.startswith("x-first-death") or k.startswith("x-last-death")
                       for k in headers)
    info = api.wait_job(job["job"])
    assert info["replayed"] == n and info["state"] == "DONE"


def test_kill_9_during_archiving_loses_and_duplicates_nothing(node):
    b = node["b"]
    api = Api(b)
    n = 3000
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("arch", durable=True, arguments={"x-dead-letter-archive": True})
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", "arch", b"x" * 1024, pika.BasicProperties(delivery_mode=2, message_id=f"k-{i}"))
    # Kill as soon as archiving has started (some, maybe all, batches committed).
    wait_until(lambda: api.records(page_size=1)["total"] > 0, what="archiving started")
    b = restart(node, hard=True)
    api = Api(b)
    api.wait_records(n)
    wait_until(lambda: queue_depth(b, "arch") == 0, what="the archive queue drained")
    time.sleep(1)
    body = api.records(page_size=1000, sort="id")
    assert body["total"] == n, "no duplicate record"
    ids = set()
    for page in range(1, n // 1000 + 2):
        ids |= {r["message_id"] for r in api.records(page=page, page_size=1000)["items"]}
    assert ids == {f"k-{i}" for i in range(n)}


def test_bulk_replay_interrupted_by_kill_9_resumes_without_replaying_a_record_twice(node):
    b = node["b"]
    api = Api(b)
    n = 300
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("work", durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work.dlq"})
        ch.queue_declare("work.dlq", durable=True, arguments={"x-dead-letter-archive": True})
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", "work", f"w-{i}".encode(), pika.BasicProperties(delivery_mode=2, message_id=f"w-{i}"))
        for _ in range(n):
            m, _p, _b = ch.basic_get("work")
            ch.basic_reject(m.delivery_tag, requeue=False)
    api.wait_records(n)
    status, job = api.call("POST", "/api/dead-letters/replay", {"filter": {"original_queue": "work"}, "rate": 150})
    assert status == 202
    wait_until(lambda: api.get(f"/api/dead-letters/jobs/{job['job']}")[1]["replayed"] >= 60,
               what="the replay under way")
    b = restart(node, hard=True)
    api = Api(b)
    info = api.wait_job(job["job"], timeout=120)
    assert info["state"] == "DONE", info
    assert info["replayed"] == n and info["failed"] == 0, info
    bodies = take_bodies(b, "work")
    expected = [f"w-{i}".encode() for i in range(n)]
    missing = sorted(set(expected) - set(bodies))
    assert len(bodies) == n, (f"{len(bodies)} messages for {n} records; missing {missing}; job {info}; "
                              f"records {api.records(status='REPLAYED')['total']} REPLAYED")
    assert sorted(bodies) == sorted(expected)
    assert api.records(status="REPLAYED")["total"] == n


def test_retention_removes_old_rows_and_counts_them(tmp_path):
    cfg = config_for("sqlite", 'archive_retention = "2s"')
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        api = Api(b)
        with b.connect() as c:
            ch = c.channel()
            ch.queue_declare("old.dlq", durable=True, arguments={"x-dead-letter-archive": True})
            for i in range(5):
                ch.basic_publish("", "old.dlq", b"old", pika.BasicProperties(message_id=f"o-{i}"))
        api.wait_records(5)
        time.sleep(2.5)
        status, res = api.call("POST", "/api/dead-letters/retention")
        assert status == 200 and res["retention_deleted"] == 5
        assert api.records()["total"] == 0
        st = api.get("/api/dead-letters/stats")[1]
        assert st["retention_deleted"] == 5
        status, audit = api.get("/api/dead-letters/audit", action="retention")
        assert audit["items"][0]["actor"] == "charon" and audit["items"][0]["result"] == {"deleted": 5}
    finally:
        conftest.stop_charon(b)


def test_ctl_dlq_lists_groups_replays_skips_and_audits_through_the_api(node):
    b = node["b"]
    api = Api(b)
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("back", durable=True)
        ch.queue_declare("c.dlq", durable=True, arguments={"x-dead-letter-archive": True})
        for i in range(3):
            headers = {"x-exception-message": f"Timeout after {100 + i} ms", "x-original-exchange": "",
                       "x-original-routingKey": "back"}
            ch.basic_publish("", "c.dlq", f"c-{i}".encode(), pika.BasicProperties(message_id=f"c-{i}", headers=headers))
    api.wait_records(3)

    def ctl(*args):
        out = subprocess.run([conftest.find_binary(), "ctl", "--url", f"http://127.0.0.1:{b.http_port}",
                              "--username", "alice", "--password", "secret", "dlq", *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    listing = ctl("list", "--error", "Timeout", "--sort", "id")
    rows = [line.split("\t") for line in listing.splitlines()[1:-1]]
    assert [r[4] for r in rows] == ["c-0", "c-1", "c-2"] and all(r[1] == "PENDING" for r in rows)
    groups = ctl("groups", "--by", "error_fingerprint,status").splitlines()
    assert len(groups) == 2 and groups[1].split("\t")[2] == "3", groups
    first = rows[0][0]
    out = ctl("replay", "--ids", first, "--note", "from ctl", "--wait")
    assert '"replayed": 1' in out
    with b.connect() as c:
        m = wait_until(lambda: c.channel().basic_get("back", auto_ack=True)[0], what="replayed via ctl")
        assert m.routing_key == "back"
    assert "Skipped 2 records" in ctl("skip", "--status", "PENDING", "--reason", "flaky downstream")
    audit = ctl("audit").splitlines()
    assert audit[1].split("\t")[1:3] == ["alice", "skip"] and audit[2].split("\t")[2] == "replay"
    assert '"SKIPPED": 2' in ctl("stats")
    out = subprocess.run([conftest.find_binary(), "ctl", "--url", f"http://127.0.0.1:{b.http_port}",
                          "--username", "alice", "--password", "secret", "dlq", "skip", "--reason", "x"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--all" in out.stderr


def test_while_postgres_is_down_messages_wait_in_the_queue_and_are_archived_when_it_returns(tmp_path):
    pg = own_pg_cluster()
    b = None
    try:
        cfg = f'archive_url = "{pg.database()}"\n' + conftest.CONFIG_TOML
        b = conftest.start_charon(tmp_path, config_text=cfg)
        api = Api(b)
        with b.connect() as c:
            ch = c.channel()
            ch.queue_declare("pg.dlq", durable=True, arguments={"x-dead-letter-archive": True})
            ch.confirm_delivery()
            for i in range(5):
                ch.basic_publish("", "pg.dlq", b"before", pika.BasicProperties(message_id=f"b-{i}", delivery_mode=2))
            api.wait_records(5)
            pg.halt()
            for i in range(50):
                ch.basic_publish("", "pg.dlq", b"during", pika.BasicProperties(message_id=f"d-{i}", delivery_mode=2))

            def held():
                status, q = api.get("/api/queues/%2f/pg.dlq")
                return status == 200 and q["messages_ready"] + q["messages_unacknowledged"] == 50
            wait_until(held, what="the 50 messages held by the queue while the archive is down")
            status, err = api.get("/api/dead-letters")
            assert status == 503 and err["error"] == "archive_unavailable"
            time.sleep(1.5)
            assert held(), "nothing is dropped while the archive is down"
            pg.start()
            body = api.wait_records(55)
            assert body["total"] == 55
            assert {r["message_id"] for r in body["items"]} == {f"b-{i}" for i in range(5)} | {f"d-{i}" for i in range(50)}
            wait_until(lambda: queue_depth(b, "pg.dlq") == 0, what="the queue drained")
    finally:
        if b:
            conftest.stop_charon(b)
        pg.stop()
