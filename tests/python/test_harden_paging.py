"""Transient bodies are paged out to disk past message_memory_budget, so a long transient
backlog does not raise the memory alarm; they come back intact on delivery and do not survive
a restart (the page-out area is purged at start)."""

import signal

import pika
import pytest

import conftest

pytestmark = pytest.mark.charon_only

MIB = 1 << 20


def rss_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def body(i, size):
    head = b"%08d" % i
    return head + bytes([i % 251]) * (size - len(head))


def test_transient_backlog_is_paged_out_without_alarm_and_not_recovered(tmp_path):
    cfg = conftest.CONFIG_TOML.replace(
        "heartbeat = 60\n",
        'heartbeat = 60\nmessage_memory_budget = 8388608\nvm_memory_high_watermark = "200MiB"\n', 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    size, n = 128 << 10, 3200  # 400 MiB of transient bodies, twice the mark
    blocked = []
    try:
        with b.connect() as c:
            c.add_on_connection_blocked_callback(lambda *a: blocked.append(a))
            ch = c.channel()
            ch.queue_declare("backlog", durable=True)
            ch.queue_declare("backlog-nd")
            ch.confirm_delivery()
            for i in range(n):
                ch.basic_publish("", "backlog" if i % 2 else "backlog-nd", body(i, size))
            peak = rss_of(b.proc.pid)
            assert not blocked, "a paged transient backlog must not raise the memory alarm"
            assert peak < 200 * MIB, f"RSS {peak / MIB:.0f} MiB with bodies paged out"
            assert "memory alarm set" not in b.log_path.read_text(errors="replace")
            for q, parity in (("backlog", 1), ("backlog-nd", 0)):
                got = 0
                for i in range(parity, n, 2):
                    m, _, data = ch.basic_get(q, auto_ack=True)
                    assert data == body(i, size), f"message {i} of {q} came back different"
                    got += 1
                assert got == n // 2
            ch.basic_publish("", "backlog", body(7, size))
        # kill -9 and restart: transient messages (and the page-out area) are gone
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait()
        b = conftest.start_charon(tmp_path, config_text=cfg)
        with b.connect() as c:
            ch = c.channel()
            assert ch.queue_declare("backlog", durable=True, passive=True).method.message_count == 0
    finally:
        conftest.stop_charon(b)
