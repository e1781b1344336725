"""The archive's direct hand-over (docs/archive.md, "Sixteenth round, ingest"): an empty archive
queue whose archiver keeps up passes routed messages to it without queueing them. Real client over
a real socket, on SQLite and on a private PostgreSQL cluster: kill -9 while messages go direct
(publishes with confirms, and dead letters from rejects) — every confirmed publish archived
exactly once, nothing doubled; the archive down (messages wait in the queue) then back (direct
again); a length-limited archive queue is never direct, so its limit stays exact.

`archived_direct` (queue details) counts messages archived this way: the tests assert the direct
path was taken, so they fail if it silently never is."""

import threading
import time

import pika
import pytest

import conftest
from archive_helpers import Api, node, own_pg_cluster, queue_depth, restart, wait_until  # noqa: F401 (fixture)

pytestmark = pytest.mark.charon_only

BACKENDS = ["sqlite", "postgres"]


def queue_info(api, name):
    status, q = api.get(f"/api/queues/%2f/{name}")
    assert status == 200, q
    return q


def archiver_attached(api, name):
    wait_until(lambda: queue_info(api, name)["consumers"] == 1, what=f"the archiver consuming {name}")


def archived(api):
    """Records in the archive now (0 while it is still being opened and migrated)."""
    status, body = api.get("/api/dead-letters", page_size=1)
    return body["total"] if status == 200 else 0


def all_message_ids(api, total):
    """Every record's message_id, duplicates kept."""
    ids = []
    for page in range(1, total // 1000 + 2):
        ids += [r["message_id"] for r in api.records(page=page, page_size=1000, sort="id")["items"]]
    return ids


def settled(b, api, queue, n):
    """Waits until the archive has at least `n` records and `queue` is empty, then a moment more
    (a record written twice would show up now)."""
    api.wait_records(n, timeout=180)
    wait_until(lambda: queue_depth(b, queue) == 0, timeout=120, what=f"{queue} drained")
    time.sleep(1.5)
    return api.records(page_size=1)["total"]


@pytest.mark.parametrize("node", BACKENDS, indirect=True)
def test_kill_9_during_direct_archiving_archives_every_confirmed_publish_exactly_once(node):
    b = node["b"]
    api = Api(b)
    with b.connect() as c:
        c.channel().queue_declare("direct.arch", durable=True, arguments={"x-dead-letter-archive": True})
    archiver_attached(api, "direct.arch")
    confirmed = []
    stop = threading.Event()

    def publish():
        try:
            with b.connect() as c:
                ch = c.channel()
                ch.confirm_delivery()
                for i in range(20000):
                    if stop.is_set():
                        return
                    ch.basic_publish("", "direct.arch", b"x" * 1024,
                                     pika.BasicProperties(delivery_mode=2, message_id=f"d-{i}"))
                    confirmed.append(f"d-{i}")
        except Exception:  # the broker is killed under it
            pass

    t = threading.Thread(target=publish, daemon=True)
    t.start()
    # Kill while messages go direct (some batches archived and settled, others in flight).
    wait_until(lambda: queue_info(api, "direct.arch").get("archived_direct", 0) > 0
               and archived(api) > 300, timeout=120, what="direct archiving under way")
    b = restart(node)
    stop.set()
    t.join(30)
    assert not t.is_alive()
    api = Api(b)
    attempted = {f"d-{i}" for i in range(len(confirmed) + 1)}
    total = settled(b, api, "direct.arch", len(confirmed))
    ids = all_message_ids(api, total)
    assert len(ids) == len(set(ids)), "no message archived twice"
    assert set(confirmed) <= set(ids), "every confirmed publish is archived"
    assert set(ids) <= attempted, "nothing archived that was not published"
    # After the restart the queue is empty again: direct once more.
    before = queue_info(api, "direct.arch").get("archived_direct", 0)
    with b.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(50):
            ch.basic_publish("", "direct.arch", b"after", pika.BasicProperties(delivery_mode=2, message_id=f"a-{i}"))
    api.wait_records(total + 50)
    wait_until(lambda: queue_info(api, "direct.arch")["archived_direct"] > before, what="direct after the restart")


@pytest.mark.parametrize("node", BACKENDS, indirect=True)
def test_dead_letters_from_rejects_go_direct_with_exact_x_death_and_survive_kill_9_once_each(node):
    b = node["b"]
    api = Api(b)
    n = 3000
    with b.connect() as c:
        ch = c.channel()
        ch.exchange_declare("rj.dlx", "fanout", durable=True)
        ch.queue_declare("rj.src", durable=True, arguments={"x-dead-letter-exchange": "rj.dlx"})
        ch.queue_declare("rj.arch", durable=True, arguments={"x-dead-letter-archive": True})
        ch.queue_bind("rj.arch", "rj.dlx")
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", "rj.src", b"y" * 1024, pika.BasicProperties(delivery_mode=2, message_id=f"r-{i}"))
    archiver_attached(api, "rj.arch")

    def reject_all(broker, until_empty):
        """Rejects (requeue=false) what rj.src delivers; stops when the connection dies or, with
        `until_empty`, when the queue is empty and nothing is unacked."""
        try:
            with broker.connect() as c:
                ch = c.channel()
                ch.basic_qos(prefetch_count=100)
                for m, _props, _body in ch.consume("rj.src", inactivity_timeout=1):
                    if m is None:
                        if until_empty and queue_depth(broker, "rj.src") == 0:
                            break
                        continue
                    ch.basic_reject(m.delivery_tag, requeue=False)
        except Exception:  # killed under it
            pass

    t = threading.Thread(target=reject_all, args=(b, False), daemon=True)
    t.start()
    wait_until(lambda: queue_info(api, "rj.arch").get("archived_direct", 0) > 0
               and archived(api) > 300, timeout=120, what="dead letters archived directly")
    b = restart(node)
    t.join(30)
    api = Api(b)
    # What rj.src still holds (its dead-lettering was not on disk) is rejected again.
    reject_all(b, True)
    total = settled(b, api, "rj.arch", n)
    ids = all_message_ids(api, total)
    assert len(ids) == n, "every dead letter archived once"
    assert set(ids) == {f"r-{i}" for i in range(n)}
    rec = api.records(page_size=1, message_id="r-7")["items"][0]
    assert (rec["reason"], rec["original_queue"], rec["death_count"]) == ("rejected", "rj.src", 1)
    deaths = rec["headers"]["x-death"]
    assert len(deaths) == 1
    assert (deaths[0]["queue"], deaths[0]["reason"], deaths[0]["count"]) == ("rj.src", "rejected", 1)
    assert deaths[0]["exchange"] == ""
    assert deaths[0]["routing-keys"] == ["rj.src"]


def test_archive_down_messages_wait_in_the_queue_then_go_direct_again(tmp_path):
    pg = own_pg_cluster()
    b = None
    try:
        cfg = f'archive_url = "{pg.database()}"\n' + conftest.CONFIG_TOML
        b = conftest.start_charon(tmp_path, config_text=cfg)
        api = Api(b)
        with b.connect() as c:
            ch = c.channel()
            ch.queue_declare("down.arch", durable=True, arguments={"x-dead-letter-archive": True})
            archiver_attached(api, "down.arch")
            ch.confirm_delivery()
            for i in range(20):
                ch.basic_publish("", "down.arch", b"before", pika.BasicProperties(message_id=f"b-{i}", delivery_mode=2))
            api.wait_records(20)
            wait_until(lambda: queue_info(api, "down.arch")["archived_direct"] == 20, what="the 20 archived directly")
            pg.halt()
            for i in range(200):
                ch.basic_publish("", "down.arch", b"during", pika.BasicProperties(message_id=f"d-{i}", delivery_mode=2))

            def held():
                q = queue_info(api, "down.arch")
                return q["messages_ready"] + q["messages_unacknowledged"] == 200
            wait_until(held, what="the 200 held by the queue while the archive is down")
            time.sleep(1.5)
            assert held(), "nothing is dropped while the archive is down"
            assert queue_info(api, "down.arch")["archived_direct"] == 20
            pg.start()
            total = settled(b, api, "down.arch", 220)
            # The list's total is the summary's: it counts each record once (a message given back
            # from a failed batch is not put into the next batch twice: docs/archive.md
            # "Sixteenth round").
            assert total == 220
            ids = all_message_ids(api, total)
            assert len(ids) == 220, "the direct batch retried and its messages queued meanwhile: one record each"
            assert set(ids) == {f"b-{i}" for i in range(20)} | {f"d-{i}" for i in range(200)}
            # Drained: direct again.
            for i in range(30):
                ch.basic_publish("", "down.arch", b"after", pika.BasicProperties(message_id=f"a-{i}", delivery_mode=2))
            api.wait_records(250)
            wait_until(lambda: queue_info(api, "down.arch")["archived_direct"] >= 50, what="direct again")
    finally:
        if b:
            conftest.stop_charon(b)
        pg.stop()


@pytest.mark.parametrize("node", ["sqlite"], indirect=True)
def test_a_length_limited_archive_queue_is_not_direct_and_a_policy_limit_ends_direct(node):
    """Max-length counts queued messages: a limited archive queue never hands over directly, so
    its limit and overflow are exactly as before (nothing in flight it would not count)."""
    b = node["b"]
    api = Api(b)
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("lim.arch", durable=True, arguments={
            "x-dead-letter-archive": True, "x-max-length": 100000, "x-overflow": "reject-publish"})
        ch.queue_declare("pol.arch", durable=True, arguments={"x-dead-letter-archive": True})
        archiver_attached(api, "lim.arch")
        archiver_attached(api, "pol.arch")
        ch.confirm_delivery()
        for i in range(200):
            ch.basic_publish("", "lim.arch", b"l", pika.BasicProperties(message_id=f"l-{i}", delivery_mode=2))
            ch.basic_publish("", "pol.arch", b"p", pika.BasicProperties(message_id=f"p-{i}", delivery_mode=2))
        api.wait_records(400)
        wait_until(lambda: queue_info(api, "pol.arch")["archived_direct"] == 200, what="pol.arch direct")
        assert queue_info(api, "lim.arch")["archived_direct"] == 0, "a length-limited queue is never direct"
        status, _ = api.call("PUT", "/api/policies/%2f/lim", {
            "pattern": "^pol\\.arch$", "apply-to": "queues", "definition": {"max-length": 100000}})
        assert status in (201, 204)
        wait_until(lambda: queue_info(api, "pol.arch").get("effective_policy_definition", {}).get("max-length") == 100000,
                   what="the policy applied")
        for i in range(200, 300):
            ch.basic_publish("", "pol.arch", b"p", pika.BasicProperties(message_id=f"p-{i}", delivery_mode=2))
        api.wait_records(500)
        wait_until(lambda: queue_depth(b, "pol.arch") == 0, what="pol.arch drained")
        assert queue_info(api, "pol.arch")["archived_direct"] == 200, "limited by policy: queued again"
    ids = all_message_ids(api, 500)
    assert sorted(ids) == sorted([f"l-{i}" for i in range(200)] + [f"p-{i}" for i in range(300)])
