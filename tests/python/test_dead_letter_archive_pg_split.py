"""PostgreSQL: the archiver copies a batch of 1,000 records or more by two backends at once (docs/archive.md
"Eighteenth round"), end to end with pika: a backlog of 8,000 messages is archived in big batches, each record
once, ids in the order of the queue, the summary exact — and again across a kill -9 in the middle of it."""

import subprocess
import time

import pika
import pytest

from archive_helpers import Api, node, pg_cluster, queue_depth, restart, stop_pg_cluster, wait_until

pytestmark = pytest.mark.charon_only

N = 8000


@pytest.fixture(scope="module", autouse=True)
def _pg_cleanup():
    yield
    stop_pg_cluster()


def sql(box, query):
    """`query` on the box's archive database (psql, unaligned): its rows."""
    url = box["cfg"].split('archive_url = "', 1)[1].split('"', 1)[0]
    pg = pg_cluster()
    out = subprocess.run([f"{pg.bin}/psql", "-qAt", "-d", url, "-c", query], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    return [line for line in out.splitlines() if line]


def backlog_then_archive(box):
    """N persistent messages into `arch` (confirmed), then the policy that makes it an archive queue: the
    archiver starts with the whole backlog, so its batches are big (up to 4,000 records)."""
    b = box["b"]
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("arch", durable=True)
        ch.confirm_delivery()
        for i in range(N):
            ch.basic_publish("", "arch", b"x" * 1024,
                             pika.BasicProperties(delivery_mode=2, message_id=f"k-{i}",
                                                  headers={"x-exception-message": f"cause {i % 7}"}))
    status, _ = Api(b).call("PUT", "/api/policies/%2f/archive-arch",
                            {"pattern": "^arch$", "definition": {"dead-letter-archive": True}, "apply-to": "queues"})
    assert status in (201, 204), status


def check_archive(box, api):
    """Every message archived once, ids in the queue's order, the summary exact (API and SQL)."""
    body = api.wait_records(N, timeout=120)
    assert body["total"] == N, "no duplicate record"
    ids = sql(box, "SELECT message_id FROM dead_letters ORDER BY id")
    assert len(ids) == N
    assert sorted(ids) == sorted(f"k-{i}" for i in range(N)), "each message once"
    status, groups = api.get("/api/dead-letters/groups")
    assert status == 200
    assert sum(g["count"] for g in groups) == N
    recount = sql(box, "SELECT COUNT(*) FROM (SELECT vhost, queue, original_queue, reason, error_fingerprint, "
                       "content_type, original_exchange, status, COUNT(*) n, MIN(created_at) o, MAX(created_at) w, "
                       "SUM(payload_bytes) b FROM dead_letters GROUP BY 1, 2, 3, 4, 5, 6, 7, 8) d FULL JOIN "
                       "dead_letter_groups g ON g.vhost = d.vhost AND g.queue = d.queue AND g.original_queue "
                       "IS NOT DISTINCT FROM d.original_queue AND g.reason IS NOT DISTINCT FROM d.reason AND "
                       "g.error_fingerprint IS NOT DISTINCT FROM d.error_fingerprint AND g.content_type IS NOT "
                       "DISTINCT FROM d.content_type AND g.original_exchange IS NOT DISTINCT FROM "
                       "d.original_exchange AND g.status = d.status WHERE g.records IS DISTINCT FROM d.n OR "
                       "g.oldest IS DISTINCT FROM d.o OR g.newest IS DISTINCT FROM d.w OR g.payload_bytes IS "
                       "DISTINCT FROM d.b")
    assert recount == ["0"], "the summary equals a recount"
    return ids


@pytest.mark.parametrize("node", ["postgres"], indirect=True)
def test_a_backlog_is_archived_by_two_backends_in_order(node):
    backlog_then_archive(node)
    api = Api(node["b"])
    ids = check_archive(node, api)
    assert ids == [f"k-{i}" for i in range(N)], "ids follow the queue's order"
    # The second connection copied the first half of each big batch, in transactions of its own.
    assert sql(node, "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'charon archive copy'") == ["1"]
    wait_until(lambda: queue_depth(node["b"], "arch") == 0, what="the queue drained")


@pytest.mark.parametrize("node", ["postgres"], indirect=True)
def test_kill_9_while_big_batches_are_copied_by_two_backends_loses_and_duplicates_nothing(node):
    backlog_then_archive(node)
    api = Api(node["b"])
    wait_until(lambda: api.records(page_size=1)["total"] > 0, what="archiving started")
    b = restart(node, hard=True)
    api = Api(b)
    check_archive(node, api)
    wait_until(lambda: queue_depth(b, "arch") == 0, what="the queue drained")
    time.sleep(1)
    assert api.records(page_size=1)["total"] == N
