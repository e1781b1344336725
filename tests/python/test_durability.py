"""Durability (issue 4, first part): durable definitions and persistent messages survive a clean
restart and `kill -9`; confirms mean the message is on disk; acked messages stay gone; unacked
ones come back redelivered; transient messages and non-durable queues do not come back."""

import os
import signal
import threading
import time

import pika
import pytest

import conftest
from dlx_helpers import api, get_n, get_within, set_policy

pytestmark = pytest.mark.charon_only


restart = conftest.restart_charon


publish_persistent = conftest.publish_persistent


@pytest.fixture
def node(tmp_path):
    box = {"b": conftest.start_charon(tmp_path)}
    yield box
    conftest.stop_charon(box["b"])


def test_durable_definitions_survive_a_restart(tmp_path, node):
    b = node["b"]
    with b.connect() as c:
        ch = c.channel()
        ch.exchange_declare("dx", "topic", durable=True)
        ch.exchange_declare("tx", "fanout", durable=False)
        ch.queue_declare("dq", durable=True, arguments={"x-max-length": 10})
        ch.queue_declare("tq", durable=False)
        ch.queue_bind("dq", "dx", "a.#")
    set_policy(b, "DLX", "^dq$", {"dead-letter-exchange": "dx"}, priority=3)
    b = node["b"] = restart(tmp_path, b)
    with b.connect() as c:
        ch = c.channel()
        ch.exchange_declare("dx", "topic", durable=True, passive=True)
        ch.queue_declare("dq", durable=True, passive=True, arguments={"x-max-length": 10})
        ch.confirm_delivery()
        ch.basic_publish("dx", "a.b", b"routed", pika.BasicProperties(delivery_mode=2))
        assert get_within(ch, "dq")[2] == b"routed"
        for gone in (lambda: ch.exchange_declare("tx", "fanout", passive=True),):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker):
                gone()
    status, pol = api(b, "GET", "/api/policies/%2f/DLX")
    assert status == 200 and pol["definition"] == {"dead-letter-exchange": "dx"}


def test_persistent_messages_survive_kill_9_transient_ones_do_not(tmp_path, node):
    b = node["b"]
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("pq", durable=True)
        ch.confirm_delivery()
        for i in range(100):
            ch.basic_publish("", "pq", b"p%d" % i, pika.BasicProperties(delivery_mode=2))
            ch.basic_publish("", "pq", b"t%d" % i, pika.BasicProperties(delivery_mode=1))
    b = node["b"] = restart(tmp_path, b, hard=True)
    with b.connect() as c:
        ch = c.channel()
        got = drain_bodies(ch, "pq")
    assert got == [b"p%d" % i for i in range(100)]


def test_acked_messages_stay_gone_and_unacked_come_back_redelivered_in_order(tmp_path, node):
    b = node["b"]
    c = b.connect()
    ch = c.channel()
    ch.queue_declare("aq", durable=True)
    ch.confirm_delivery()
    for i in range(6):
        ch.basic_publish("", "aq", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    m0 = get_within(ch, "aq", auto_ack=False)
    ch.basic_ack(m0[0].delivery_tag)
    held = [get_within(ch, "aq", auto_ack=False) for _ in range(2)]
    assert [h[2] for h in held] == [b"m1", b"m2"]
    settle_store(b, ch, "aq")  # the ack and delivery marks are on disk
    b = node["b"] = restart(tmp_path, b, hard=True)
    with b.connect() as c:
        ch = c.channel()
        got = drain(ch, "aq")
    assert [g[2] for g in got] == [b"m1", b"m2", b"m3", b"m4", b"m5"]
    assert [g[0].redelivered for g in got[:2]] == [True, True]


def test_every_confirmed_message_survives_kill_9_mid_stream(tmp_path, node):
    """Several publishers with confirms; kill -9 mid-stream; every confirmed message is there after
    restart (duplicates allowed only among unconfirmed ones). Repeated at several kill points."""
    for kill_after in (0.3, 0.8, 1.5):
        b = node["b"]
        with b.connect() as c:
            c.channel().queue_declare("cq", durable=True)
            c.channel().queue_purge("cq")
        confirmed = {i: [] for i in range(3)}
        stop = threading.Event()

        def publisher(k):
            try:
                with b.connect() as c:
                    ch = c.channel()
                    ch.confirm_delivery()
                    n = 0
                    while not stop.is_set():
                        body = f"{k}-{n}".encode()
                        ch.basic_publish("", "cq", body, pika.BasicProperties(delivery_mode=2))
                        confirmed[k].append(body)
                        n += 1
            except Exception:
                pass  # the broker died under us

        threads = [threading.Thread(target=publisher, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        # The kill point counts from the first confirm of every publisher, however long
        # connecting takes on a busy machine.
        wait_until(lambda: all(confirmed[k] for k in confirmed), "a confirm for every publisher")
        time.sleep(kill_after)
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
        stop.set()
        for t in threads:
            t.join(10)
        b = node["b"] = conftest.start_charon(tmp_path)
        with b.connect() as c:
            ch = c.channel()
            n = ch.queue_declare("cq", durable=True, passive=True).method.message_count
            got = set(g[2] for g in get_n(ch, "cq", n, 120.0))
        expected = set(x for k in confirmed for x in confirmed[k])
        assert expected, "publishers confirmed nothing before the kill"
        missing = expected - got
        assert not missing, f"kill after {kill_after}s lost {len(missing)} confirmed messages"


def count_q(ch, q):
    return ch.queue_declare(q, durable=True, passive=True).method.message_count


def drain(ch, q):
    """Every message of `q`: as many as the queue itself counts, however long that takes."""
    n = count_q(ch, q)
    got = get_n(ch, q, n, 120.0)
    assert len(got) == n, f"{q}: got {len(got)} of the {n} it counts"
    return got


def drain_bodies(ch, q):
    return [g[2] for g in drain(ch, q)]


def wait_until(cond, what, bound=120.0):
    deadline = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < deadline, f"not within {bound}s: {what}"
        time.sleep(0.05)


def settle_store(b, ch, q):
    """Makes what `q` did so far durable: two stats round trips (the queue's store writes of
    one batch go out at its end), then a confirmed persistent publish elsewhere (the log
    commits in order)."""
    count_q(ch, q)
    count_q(ch, q)
    with b.connect() as c:
        sch = c.channel()
        sch.queue_declare("sync-marker", durable=True)
        sch.confirm_delivery()
        sch.basic_publish("", "sync-marker", b"sync", pika.BasicProperties(delivery_mode=2))


def test_rejecting_into_a_dlq_across_kill_9_leaves_every_message_in_exactly_one_place(tmp_path, node):
    b = node["b"]
    n = 400
    c = b.connect()
    ch = c.channel()
    ch.queue_declare("rdlq", durable=True)
    ch.queue_declare("rsrc", durable=True, arguments={"x-dead-letter-exchange": "",
                                                      "x-dead-letter-routing-key": "rdlq"})
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", "rsrc", b"r%d" % i, pika.BasicProperties(delivery_mode=2))
    consumer = b.connect()
    cch = consumer.channel()
    cch.basic_qos(prefetch_count=50)
    rejected = []

    def on_msg(chan, m, _p, body):
        chan.basic_reject(m.delivery_tag, requeue=False)
        rejected.append(body)

    cch.basic_consume("rsrc", on_msg)
    deadline = time.monotonic() + 60
    while len(rejected) < n // 2 and time.monotonic() < deadline:
        consumer.process_data_events(0.01)
    b = node["b"] = restart(tmp_path, b, hard=True)
    with b.connect() as c2:
        ch2 = c2.channel()
        src = drain_bodies(ch2, "rsrc")
        dlq = drain_bodies(ch2, "rdlq")
    assert len(rejected) > 0
    assert sorted(src + dlq) == sorted(b"r%d" % i for i in range(n)), \
        f"src {len(src)} + dlq {len(dlq)} != {n} (lost or duplicated)"


def test_mass_expiry_into_a_dlq_across_kill_9_leaves_every_message_in_exactly_one_place(tmp_path, node):
    b = node["b"]
    n = 3000
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("edlq", durable=True)
        ch.queue_declare("esrc", durable=True, arguments={"x-dead-letter-exchange": "",
                                                          "x-dead-letter-routing-key": "edlq",
                                                          "x-message-ttl": 300})
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", "esrc", b"e%d" % i, pika.BasicProperties(delivery_mode=2))
    time.sleep(0.3)  # expiry is under way
    b = node["b"] = restart(tmp_path, b, hard=True)
    with b.connect() as c2:
        ch2 = c2.channel()
        # Anything left expires on recovery (wall-clock TTL) and is dead-lettered.
        wait_until(lambda: count_q(ch2, "esrc") == 0 and count_q(ch2, "edlq") == n,
                   "every message expired into the DLQ")
        src = drain_bodies(ch2, "esrc")
        dlq = drain_bodies(ch2, "edlq")
    assert src == []
    assert sorted(dlq) == sorted(b"e%d" % i for i in range(n)), f"dlq has {len(dlq)} of {n}"
    assert len(set(dlq)) == len(dlq)


def test_a_corrupt_log_tail_is_truncated_and_the_rest_recovered(tmp_path, node):
    b = node["b"]
    publish_persistent(b, "ctq", [b"c%d" % i for i in range(10)])
    conftest.stop_charon(b)
    segs = sorted((b.data_dir / "store").glob("*.wal"))
    assert segs
    # The newest segment is preallocated (docs/storage-format.md §2.5): its records are
    # followed by zeros, which recovery cuts off quietly; the last record is the last publish.
    data = segs[-1].read_bytes().rstrip(b"\0")
    assert data.endswith(b"c9")
    segs[-1].write_bytes(data[:-7])  # tear the last record
    b = node["b"] = conftest.start_charon(tmp_path)
    with b.connect() as c:
        ch = c.channel()
        got = drain_bodies(ch, "ctq")
    assert got == [b"c%d" % i for i in range(9)]
    assert "torn tail: truncating the log" in b.log_path.read_text(errors="replace")


def test_corruption_in_an_older_segment_stops_startup_instead_of_dropping_data(tmp_path, node):
    """A bad record in a sealed segment cannot come from a crash (it was synced before the
    next segment got a byte): recovery refuses to start rather than serve a log with a hole."""
    b = node["b"]
    publish_persistent(b, "oldq", [b"old-%d" % i for i in range(10)])
    conftest.stop_charon(b)
    b = conftest.start_charon(tmp_path)  # a restart seals that segment and opens a new one
    conftest.stop_charon(b)
    segs = sorted((b.data_dir / "store").glob("*.wal"))
    assert len(segs) >= 2
    data = bytearray(segs[0].read_bytes())
    at = data.find(b"old-5")
    assert at > 0
    data[at] ^= 0xFF  # bit rot inside a record of a sealed segment
    segs[0].write_bytes(bytes(data))
    with pytest.raises(RuntimeError):
        conftest.start_charon(tmp_path)
    log = (tmp_path / "charon.log").read_text(errors="replace")
    assert "corrupt" in log and "opening the store" in log
    # Nothing was cut: repairing the byte brings every message back.
    data[at] ^= 0xFF
    segs[0].write_bytes(bytes(data))
    b = node["b"] = conftest.start_charon(tmp_path)
    with b.connect() as c:
        got = drain_bodies(c.channel(), "oldq")
    assert got == [b"old-%d" % i for i in range(10)]


def test_disk_alarm_blocks_publishers_with_connection_blocked_and_consumers_keep_working(tmp_path):
    """disk_free_limit above the free space of any disk: the alarm is on. A publishing
    connection gets connection.blocked and is paused (its next publish is not taken); a
    consuming connection still works."""
    from pamqp import commands

    from amqp_raw import RawClient

    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n",
                                       "heartbeat = 60\ndisk_free_limit = 18000000000000000000\n", 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        with b.connect() as admin:
            admin.channel().queue_declare("alarmq")
        with RawClient(b.host, b.port) as pub:
            pub.handshake(capabilities={"connection.blocked": True})
            pub.open_channel(1)
            pub.publish(1, "", "alarmq", b"before")
            f = pub.expect_method(commands.Connection.Blocked)
            assert f.method.reason == "low on disk"
            pub.publish(1, "", "alarmq", b"while-blocked")
            with b.connect() as consumer:
                cch = consumer.channel()
                got = get_within(cch, "alarmq")
                assert got and got[2] == b"before", "consumers keep working under the alarm"
                consumer.sleep(0.3)
                assert cch.basic_get("alarmq", auto_ack=True)[0] is None, \
                    "a blocked publisher's message must not be taken"
        assert "disk alarm set" in b.log_path.read_text(errors="replace")
    finally:
        conftest.stop_charon(b)


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs the test mounts (root needed; skipped otherwise)."""
    import subprocess

    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_really_filling_disk_blocks_publishers_and_loses_no_confirmed_message(tmp_path, small_disk):
    """The data directory on a 64 MiB file system with a 24 MB ballast file: a publisher with
    confirms fills it until free space falls under disk_free_limit (16 MB); publishing
    connections are then paused and get connection.blocked, while a consumer keeps working;
    removing the ballast unblocks them. After kill -9, every confirmed message is there and the
    store was never damaged (no failed write)."""
    from pamqp import commands

    from amqp_raw import RawClient

    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * 24_000_000)
    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n",
                                       "heartbeat = 60\ndisk_free_limit = 16000000\n", 1)
    node_dir = small_disk / "node"
    b = conftest.start_charon(node_dir, config_text=cfg)
    try:
        with b.connect() as c:
            c.channel().queue_declare("fullq", durable=True)
        confirmed, stop = [], threading.Event()
        body = b"x" * 4096

        def publisher():
            try:
                with b.connect() as c:
                    ch = c.channel()
                    ch.confirm_delivery()
                    n = 0
                    while not stop.is_set():
                        ch.basic_publish("", "fullq", b"%08d" % n + body,
                                         pika.BasicProperties(delivery_mode=2))
                        confirmed.append(n)
                        n += 1
            except Exception:
                pass

        t = threading.Thread(target=publisher, daemon=True)
        t.start()
        deadline = time.time() + 120
        while "disk alarm set" not in b.log_path.read_text(errors="replace"):
            assert time.time() < deadline, "the disk alarm never went off"
            time.sleep(0.2)
        # Wait for the publisher to stall (no new confirm for a second).
        deadline = time.monotonic() + 120
        while True:
            before = len(confirmed)
            time.sleep(1.0)
            if len(confirmed) == before:
                break
            assert time.monotonic() < deadline, "the publisher never stalled"
        stalled_at = len(confirmed)
        assert stalled_at > 1000
        with RawClient(b.host, b.port) as raw:
            raw.handshake(capabilities={"connection.blocked": True})
            raw.open_channel(1)
            raw.publish(1, "", "fullq", b"raw")
            f = raw.expect_method(commands.Connection.Blocked)
            assert f.method.reason == "low on disk"
            time.sleep(1.0)
            assert len(confirmed) == stalled_at, "a blocked publisher's messages were still taken"
            assert os.statvfs(small_disk).f_bavail > 0  # never actually ran out of space
            # A consumer keeps working under the alarm.
            with b.connect() as c:
                ch = c.channel()
                got = get_n(ch, "fullq", 50)  # auto-ack
                assert [int(g[2][:8]) for g in got] == list(range(50))
            # Space comes back: publishers go on.
            ballast.unlink()
            raw.expect_method(commands.Connection.Unblocked, timeout=120)
        deadline = time.time() + 120
        while len(confirmed) <= stalled_at and time.time() < deadline:
            time.sleep(0.2)
        assert len(confirmed) > stalled_at, "the publisher stayed blocked after space came back"
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
        stop.set()
        t.join(10)
        assert "poisoned" not in b.log_path.read_text(errors="replace")
        b = conftest.start_charon(node_dir, config_text=cfg)
        with b.connect() as c:
            ch = c.channel()
            left = set(int(x[:8]) for x in drain_bodies(ch, "fullq") if x != b"raw")
        # The 50 acked ones are gone; every other confirmed message is there.
        assert set(confirmed) - set(range(50)) <= left
    finally:
        conftest.stop_charon(b)


def test_a_body_routed_to_several_durable_queues_is_stored_once_and_survives_kill_9_in_each(tmp_path, node):
    b = node["b"]
    marker = b"stored-once-" + os.urandom(8).hex().encode()
    with b.connect() as c:
        ch = c.channel()
        ch.exchange_declare("fan", "fanout", durable=True)
        for q in ("fan-a", "fan-b", "fan-c"):
            ch.queue_declare(q, durable=True)
            ch.queue_bind(q, "fan")
        ch.confirm_delivery()
        ch.basic_publish("fan", "", marker, pika.BasicProperties(delivery_mode=2))
    log = b"".join(p.read_bytes() for p in sorted((b.data_dir / "store").glob("*.wal")))
    assert log.count(marker) == 1
    b = node["b"] = restart(tmp_path, b, hard=True)
    with b.connect() as c:
        ch = c.channel()
        for q in ("fan-a", "fan-b", "fan-c"):
            assert drain_bodies(ch, q) == [marker]


def test_bodies_beyond_the_memory_budget_are_read_back_for_delivery_dead_lettering_and_after_restart(tmp_path):
    """message_memory_budget = 1 byte: every stored body is paged out once durable; consumers,
    basic.get and dead-lettering still see every byte, before and after a kill -9."""
    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n",
                                       "heartbeat = 60\nmessage_memory_budget = 1\n", 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    bodies = [b"%05d-" % i + os.urandom(1000) for i in range(600)]
    try:
        with b.connect() as c:
            ch = c.channel()
            ch.queue_declare("pg-dlq", durable=True)
            ch.queue_declare("pg", durable=True, arguments={"x-dead-letter-exchange": "",
                                                            "x-dead-letter-routing-key": "pg-dlq"})
            ch.confirm_delivery()
            for body in bodies:
                ch.basic_publish("", "pg", body, pika.BasicProperties(delivery_mode=2))
            c.sleep(0.3)
            # 200 through basic.get, 200 rejected into the DLQ, 200 left for after the crash.
            got = [g[2] for g in get_n(ch, "pg", 200, 120.0)]
            assert got == bodies[:200]
            for _ in range(200):
                m = get_within(ch, "pg", auto_ack=False)
                ch.basic_reject(m[0].delivery_tag, requeue=False)
            wait_until(lambda: count_q(ch, "pg-dlq") == 200, "200 dead-lettered")
            assert drain_bodies(ch, "pg-dlq") == bodies[200:400]
            settle_store(b, ch, "pg")  # the gets and dead-letter moves are on disk
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
        b = conftest.start_charon(tmp_path, config_text=cfg)
        with b.connect() as c:
            ch = c.channel()
            seen = []
            for method, _props, body in ch.consume("pg", auto_ack=True, inactivity_timeout=120.0):
                if method is None:
                    break
                seen.append(body)
                if len(seen) == 200:
                    break
            assert seen == bodies[400:]
            ch.cancel()
            assert count_q(ch, "pg") == 0
    finally:
        conftest.stop_charon(b)
