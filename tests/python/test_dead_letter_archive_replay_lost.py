"""A bulk replay whose last publish the crash lost (docs/archive.md, "Replay"): the replay item
recorded the store index of a publish that never reached the disk, and the restarted broker
gives that same index to a record of its own (the topology it rewrites at start). The item must
be published again, not taken as replayed: every record's message is in the queue exactly once.

The lost write is made the way a power cut makes it: after kill -9, the last record of the
newest store segment (the replay's publish) is cut off, as if it had never been written."""

import signal
import sqlite3
import struct
import time

import pika

import conftest
from archive_helpers import Api, node, take_bodies  # noqa: F401 (fixture)

SEGMENT_HEADER = 24  # docs/storage-format.md §2.1
RECORD_HEADER = 28  # §2.2: len u32, crc u32, index u64, term u64, kind u8, flags, reserved


def last_record(segment):
    """(offset, index, kind) of the last record in a segment file (records are followed by the
    preallocated zeros, §2.5)."""
    data = segment.read_bytes()
    pos, last = SEGMENT_HEADER, None
    while pos + RECORD_HEADER <= len(data):
        length, = struct.unpack_from("<I", data, pos)
        if length == 0:
            break
        index, = struct.unpack_from("<Q", data, pos + 8)
        last = (pos, index, data[pos + 24])
        pos += 8 + length
    return last


def inflight_with_index(db):
    """The INFLIGHT replay item with the highest recorded store index: (record id, index)."""
    c = sqlite3.connect(db)
    try:
        return c.execute(
            "SELECT record_id, store_index FROM replay_items WHERE state = 'INFLIGHT' "
            "AND store_index IS NOT NULL ORDER BY store_index DESC LIMIT 1").fetchone()
    finally:
        c.close()


def archive_and_replay(b, n, queue, vhost=None):
    """Archives `n` dead letters rejected from `queue` (in `vhost`) and starts replaying them at 50
    a second: batches of 10, 20 ms between publishes, each item INFLIGHT with its store index
    recorded from its publish until its batch is confirmed. Returns the job id."""
    api = Api(b)
    with b.connect(vhost=vhost) as c:
        ch = c.channel()
        ch.queue_declare(queue, durable=True,
                         arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{queue}.dlq"})
        ch.queue_declare(f"{queue}.dlq", durable=True, arguments={"x-dead-letter-archive": True})
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", queue, f"{queue}-{i}".encode(),
                             pika.BasicProperties(delivery_mode=2, message_id=f"{queue}-{i}"))
        for _ in range(n):
            m, _p, _b = ch.basic_get(queue)
            ch.basic_reject(m.delivery_tag, requeue=False)
    api.wait_records(n)
    status, job = api.call("POST", "/api/dead-letters/replay", {"filter": {"original_queue": queue}, "rate": 50})
    assert status == 202
    return job["job"]


def kill_while_inflight(b, db):
    """kill -9 as soon as an INFLIGHT item has its store index recorded."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and inflight_with_index(db) is None:
        time.sleep(0.002)
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)


def replay_until_a_publish_is_torn(node, n, queue):
    """[`archive_and_replay`], then kill -9s the broker until the newest store record is an
    INFLIGHT item's publish, which it then cuts off. Returns (job id, the torn item)."""
    job = archive_and_replay(node["b"], n, queue)
    db = node["b"].data_dir / "archive.db"
    for _attempt in range(20):
        kill_while_inflight(node["b"], db)
        item = inflight_with_index(db)
        segment = sorted((node["b"].data_dir / "store").glob("*.wal"))[-1]
        last = last_record(segment)
        if item is not None and last is not None and last[1] == item[1] and last[2] == 1:
            # The newest record is that INFLIGHT item's publish (kind 1): cut it off.
            with open(segment, "r+b") as f:
                f.seek(last[0])
                f.write(b"\0" * (segment.stat().st_size - last[0]))
            return job, item
        # The kill fell elsewhere (between batches): start again on the same data and retry.
        node["b"] = conftest.start_charon(node["tmp"], config_text=node["cfg"])
    raise AssertionError("the kill never fell on an INFLIGHT publish")


def assert_replayed_once(node, job, n, queue, torn):
    b = node["b"]
    info = Api(b).wait_job(job, timeout=180)
    assert info["state"] == "DONE" and info["replayed"] == n and info["failed"] == 0, info
    bodies = take_bodies(b, queue)
    expected = sorted(f"{queue}-{i}".encode() for i in range(n))
    missing = sorted(set(expected) - set(bodies))
    assert sorted(bodies) == expected, (f"{len(bodies)} messages for {n} records; missing {missing}; "
                                        f"the torn publish was record {torn[0]} at index {torn[1]}")


def test_a_replay_publish_lost_in_a_crash_is_published_again_though_its_index_was_reused(node):
    n = 200
    job, torn = replay_until_a_publish_is_torn(node, n, "lost")
    node["b"] = conftest.start_charon(node["tmp"], config_text=node["cfg"])
    assert_replayed_once(node, job, n, "lost", torn)


def test_a_lost_replay_publish_is_decided_by_the_first_restart_even_if_the_archive_was_down_then(node):
    """The first start after the crash cannot open the archive (here: its file is in the way),
    writes new records over the lost index (a queue declared, publishes confirmed) and is killed
    too. The start after it must decide with the first one's recovered index (the floor kept in
    `<data_dir>/recovered-floor`), not its own."""
    n = 100
    job, torn = replay_until_a_publish_is_torn(node, n, "down")
    data = node["b"].data_dir
    aside = node["tmp"] / "archive-aside"
    aside.mkdir()
    for f in data.glob("archive.db*"):
        f.rename(aside / f.name)
    (data / "archive.db").mkdir()  # the archive cannot be opened
    b = node["b"] = conftest.start_charon(node["tmp"], config_text=node["cfg"])
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("other", durable=True)
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish("", "other", f"o-{i}".encode(), pika.BasicProperties(delivery_mode=2))
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)
    (data / "archive.db").rmdir()
    for f in aside.iterdir():
        f.rename(data / f.name)
    node["b"] = conftest.start_charon(node["tmp"], config_text=node["cfg"])
    assert_replayed_once(node, job, n, "down", torn)
    with node["b"].connect() as c:
        ch = c.channel()
        assert ch.queue_declare("other", passive=True).method.message_count == 20
    assert not (data / "recovered-floor").exists()


def test_an_interrupted_replay_resumes_exactly_once_when_the_default_vhost_was_deleted(node):
    """The store is the broker's, not vhost "/"'s: with "/" deleted (RabbitMQ allows it), a replay
    in another vhost interrupted by kill -9 is still resolved against the recovered index."""
    b = node["b"]
    api = Api(b)
    assert api.call("PUT", "/api/vhosts/other")[0] in (201, 204)
    assert api.call("PUT", "/api/permissions/other/guest",
                    {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)
    assert api.call("DELETE", "/api/vhosts/%2F")[0] == 204
    n = 150
    job = archive_and_replay(b, n, "nv", vhost="other")
    db = b.data_dir / "archive.db"
    kill_while_inflight(b, db)
    assert inflight_with_index(db) is not None, "the kill fell between batches"
    b = node["b"] = conftest.start_charon(node["tmp"], config_text=node["cfg"])
    info = Api(b).wait_job(job, timeout=180)
    assert info["state"] == "DONE" and info["replayed"] == n and info["failed"] == 0, info
    bodies = take_bodies(b, "nv", vhost="other")
    assert sorted(bodies) == sorted(f"nv-{i}".encode() for i in range(n)), f"{len(bodies)} messages for {n}"
