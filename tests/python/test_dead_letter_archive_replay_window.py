"""A replayed message reaches its queues only after its store index is committed to the archive
(issue 9, docs/archive.md "Replay"), so a kill -9 between its store append and that commit can
never be followed by a second copy: before, a consumer could take and ack the message in that
window, the restart found it in no queue and published it again.

The broker is held in that window with `CHARON_TEST_REPLAY_HOLD_MS` (a test-only hook), a consumer
waits on the target queue, and the broker is killed there."""

import signal
import threading
import time

import pika
import pytest

import conftest
from archive_helpers import Api, wait_until

pytestmark = pytest.mark.charon_only


def test_kill_9_between_replay_append_and_index_commit_replays_exactly_once(tmp_path, monkeypatch):
    monkeypatch.setenv("CHARON_TEST_REPLAY_HOLD_MS", "600000")
    b = conftest.start_charon(tmp_path)
    monkeypatch.delenv("CHARON_TEST_REPLAY_HOLD_MS")
    try:
        api = Api(b)
        with b.connect(user="alice", password="secret") as c:
            ch = c.channel()
            ch.queue_declare("work.dlq", durable=True, arguments={"x-dead-letter-archive": True})
            ch.queue_declare("work", durable=True, arguments={
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work.dlq"})
            ch.confirm_delivery()
            ch.basic_publish("", "work", b"once", pika.BasicProperties(delivery_mode=2, message_id="w-1"))
            m = None
            while m is None or m[0] is None:
                m = ch.basic_get("work")
            ch.basic_reject(m[0].delivery_tag, requeue=False)
        rec = api.wait_records(1)["items"][0]

        got = []
        stop = threading.Event()

        def consume():
            try:
                with b.connect(user="alice", password="secret") as c:
                    ch = c.channel()
                    while not stop.is_set():
                        m, _, body = ch.basic_get("work", auto_ack=True)
                        if m is not None:
                            got.append(body)
                        else:
                            time.sleep(0.05)
            except Exception:
                pass  # the broker is killed under it

        t = threading.Thread(target=consume, daemon=True)
        t.start()
        status, r = api.call("POST", "/api/dead-letters/replay", {"ids": [rec["id"]]})
        assert status == 202
        wait_until(lambda: "holding between store append" in b.log_path.read_text(errors="replace"),
                   what="the replay held after its store append")
        time.sleep(1.5)
        assert got == [], "a replayed message reached its queue before its index was recorded"
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
        stop.set()
        t.join(10)
        assert got == []

        b = conftest.start_charon(tmp_path)
        api = Api(b)
        info = api.wait_job(r["job"])
        assert info["state"] == "DONE" and info["replayed"] == 1 and info["failed"] == 0, info
        with b.connect(user="alice", password="secret") as c:
            ch = c.channel()
            bodies = []
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                m, props, body = ch.basic_get("work", auto_ack=True)
                if m is None:
                    time.sleep(0.1)
                    continue
                bodies.append((body, props.headers.get("x-replay-count")))
        assert bodies == [(b"once", 1)]
        status, rec = api.get(f"/api/dead-letters/{rec['id']}")
        assert rec["status"] == "REPLAYED" and rec["replay_count"] == 1
    finally:
        conftest.stop_charon(b)
