"""Runtime settings (`runtime_flavor`, `runtime_event_interval`, `runtime_global_queue_interval`;
`charon-server` `runtime_settings.rs`, the binary's `runtime.rs`): the broker runs every
connection and queue on one thread (`current_thread`) or on work-stealing workers with the
scheduler's intervals set. Whatever the placement, many connections publishing and consuming at
once each get their own messages whole and in order, and a fanout queue fed by every publisher
keeps each publisher's order. Invalid settings are refused at start with a clear message.
Nothing here depends on speed: consumers wait with a generous bound.
"""

import threading
import time

import pika
import pytest

from conftest import CONFIG_TOML, start_charon, stop_charon

pytestmark = pytest.mark.charon_only

PAIRS = 6
PER_PUBLISHER = 2000


def _consume(broker, queue, n, out, errors):
    """Consumes `n` messages from `queue` on a connection of its own (up to 120 s)."""
    try:
        conn = broker.connect()
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        deadline = time.monotonic() + 120
        for method, _, body in ch.consume(queue, inactivity_timeout=1):
            if method is not None:
                out.append(body)
                ch.basic_ack(method.delivery_tag)
            if len(out) == n or time.monotonic() > deadline:
                break
        ch.cancel()
        conn.close()
    except Exception as e:  # reported by the test thread
        errors.append(e)


def _publish(broker, i, queue, fan, errors):
    try:
        conn = broker.connect()
        ch = conn.channel()
        for k in range(PER_PUBLISHER):
            body = f"p{i}-{k}".encode()
            ch.basic_publish("", queue, body)
            ch.basic_publish(fan, "", body)
        conn.close()
    except Exception as e:
        errors.append(e)


@pytest.mark.parametrize("settings", [
    'runtime_flavor = "current_thread"\n',
    'worker_threads = 2\nruntime_event_interval = 1\nruntime_global_queue_interval = 1\n',
], ids=["current_thread", "two_workers_intervals_1"])
def test_many_connections_deliver_in_order(tmp_path, uniq, settings):
    b = start_charon(tmp_path, config_text=settings + CONFIG_TOML)
    try:
        setup = b.connect()
        ch = setup.channel()
        fan, all_q = uniq("fan"), uniq("all")
        queues = [uniq(f"q{i}") for i in range(PAIRS)]
        ch.exchange_declare(fan, "fanout")
        ch.queue_declare(all_q)
        ch.queue_bind(all_q, fan)
        for q in queues:
            ch.queue_declare(q)
        errors = []
        got = [[] for _ in range(PAIRS)]
        got_all = []
        consumers = [threading.Thread(target=_consume, args=(b, q, PER_PUBLISHER, got[i], errors))
                     for i, q in enumerate(queues)]
        consumers.append(threading.Thread(
            target=_consume, args=(b, all_q, PAIRS * PER_PUBLISHER, got_all, errors)))
        publishers = [threading.Thread(target=_publish, args=(b, i, q, fan, errors))
                      for i, q in enumerate(queues)]
        for t in consumers + publishers:
            t.start()
        for t in consumers + publishers:
            t.join(180)
        assert not errors, errors
        for i in range(PAIRS):
            assert got[i] == [f"p{i}-{k}".encode() for k in range(PER_PUBLISHER)], f"queue {i}"
        assert len(got_all) == PAIRS * PER_PUBLISHER
        for i in range(PAIRS):
            mine = [m for m in got_all if m.startswith(f"p{i}-".encode())]
            assert mine == [f"p{i}-{k}".encode() for k in range(PER_PUBLISHER)], f"fanout, publisher {i}"
        for q in queues + [all_q]:
            ch.queue_delete(q)
        ch.exchange_delete(fan)
        setup.close()
    finally:
        stop_charon(b)


@pytest.mark.parametrize("settings,message", [
    ("runtime_event_interval = 0\n", "runtime_event_interval must be at least 1"),
    ("runtime_global_queue_interval = 0\n", "runtime_global_queue_interval must be at least 1"),
    ('runtime_flavor = "current_thread"\nworker_threads = 2\n',
     "worker_threads above 1 needs runtime_flavor multi_thread"),
    ('runtime_flavor = "single"\n', "unknown variant `single`"),
])
def test_invalid_runtime_settings_are_refused(tmp_path, settings, message):
    with pytest.raises(RuntimeError, match=message):
        b = start_charon(tmp_path, config_text=settings + CONFIG_TOML)
        stop_charon(b)


def test_the_flavor_flag_is_read_and_checked(tmp_path):
    with pytest.raises(RuntimeError, match="unknown runtime_flavor 'single'"):
        b = start_charon(tmp_path, extra_args=("--runtime-flavor", "single"))
        stop_charon(b)
    b = start_charon(tmp_path / "ok", extra_args=("--runtime-flavor", "current_thread"))
    try:
        conn = b.connect()
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"hello")
        deadline = time.monotonic() + 60
        while True:
            method, _, body = ch.basic_get(q, auto_ack=True)
            if method is not None:
                break
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert body == b"hello"
        conn.close()
    finally:
        stop_charon(b)
