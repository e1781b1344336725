"""Memory alarm (vm_memory_high_watermark): past the mark a publishing connection gets
connection.blocked and is paused, consumers keep going; when memory comes back (the queue
is deleted and the allocator returns its pages) it is unblocked."""

import base64
import json
import socket
import time
import urllib.request

import pytest
from pamqp import commands

import conftest
from amqp_raw import RawClient, publish_until_blocked

pytestmark = pytest.mark.charon_only


def rss_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def node(b):
    req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}/api/nodes")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)[0]


def test_memory_alarm_blocks_publisher_consumers_go_on_and_clears_after_delete(tmp_path):
    cfg = conftest.CONFIG_TOML.replace(
        "heartbeat = 60\n", 'heartbeat = 60\nvm_memory_high_watermark = "120MiB"\n', 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        assert rss_of(b.proc.pid) < 100 << 20, "baseline must be under the mark for this test"
        with b.connect() as admin:
            admin.channel().queue_declare("memq")
        body = b"m" * (256 << 10)
        with RawClient(b.host, b.port) as pub:
            pub.handshake(capabilities={"connection.blocked": True})
            pub.open_channel(1)
            # Up to 1 GiB: far past the mark; the alarm must come long before.
            blocked, sent = publish_until_blocked(pub, 1, "memq", body, 4096)
            assert blocked is not None, f"no connection.blocked after {sent} x 256 KiB"
            assert blocked.reason == "low on memory"
            assert "memory alarm set" in b.log_path.read_text(errors="replace")
            n = node(b)
            assert n["mem_alarm"] is True and n["mem_limit"] == 120 << 20, n
            # Consumers keep going while publishers are blocked.
            with b.connect() as consumer:
                m, _, got = consumer.channel().basic_get("memq", auto_ack=True)
                assert got == body
            # Deleting the backlog returns the memory: the publisher is unblocked.
            with b.connect() as admin:
                admin.channel().queue_delete("memq")
            f = pub.expect_method(commands.Connection.Unblocked, timeout=120)
            assert "memory alarm cleared" in b.log_path.read_text(errors="replace")
            assert node(b)["mem_alarm"] is False
            assert rss_of(b.proc.pid) < 120 << 20
    finally:
        conftest.stop_charon(b)
