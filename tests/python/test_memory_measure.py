"""Memory measured from the allocator and the resident set: `/api/nodes` shows RabbitMQ's
`mem_used` (the figure `vm_memory_calculation_strategy` names: `rss` by default, or `allocated`,
the live heap the global allocator counts) beside both measurements; `/api/nodes/{name}/memory`
breaks it down (message bodies held, the rest of the heap, resident memory that is not live heap,
mimalloc's own figures); `ctl status` and Prometheus show them. With `allocated`, the live heap
drives the memory alarm."""

import base64
import json
import socket
import subprocess
import time
import urllib.request

import pika
import pytest
from pamqp import commands

import conftest
from amqp_raw import RawClient, publish_until_blocked
from mgmt_helpers import wait_for

pytestmark = pytest.mark.charon_only


def get(b, path):
    req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}{path}")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
        return json.loads(body) if path.startswith("/api") else body.decode()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def test_nodes_show_rss_and_allocator_and_breakdown_follows_messages(private_charon):
    b = private_charon
    n = get(b, "/api/nodes")[0]
    assert n["mem_calculation_strategy"] == "rss"
    assert n["mem_used"] == n["mem_rss"] > 0
    assert n["mem_allocator"].startswith("mimalloc ")
    base_alloc = n["mem_allocated"]
    assert base_alloc > 0
    name = n["name"]
    m = get(b, f"/api/nodes/{name}/memory")["memory"]
    assert m["strategy"] == "rss" and m["total"]["rss"] > 0 and m["total"]["allocated"] > 0
    assert m["reserved_unallocated"] == m["total"]["rss"] - m["total"]["allocated"]
    assert m["allocator"].startswith("mimalloc ") and m["allocator_reserved"] >= m["allocator_committed"] > 0
    assert m["message_bodies"] == 0
    # 48 MiB of persistent bodies held by a durable queue: counted as message bodies and in the
    # allocator's committed memory
    body = b"x" * (256 << 10)
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare("mem-held", durable=True)
        ch.confirm_delivery()
        for _ in range(192):
            ch.basic_publish("", "mem-held", body, pika.BasicProperties(delivery_mode=2))
    m = get(b, f"/api/nodes/{name}?memory=true")["memory"]
    assert m["message_bodies"] >= 192 * len(body), m
    assert m["total"]["allocated"] >= base_alloc + 192 * len(body), (base_alloc, m)
    assert m["heap_other"] == m["total"]["allocated"] - m["message_bodies"]
    # Prometheus: both measurements
    text = get(b, "/metrics")
    assert metric(text, "charon_allocated_bytes") >= 192 * len(body)
    # mimalloc's own figures are refreshed every few seconds (live bytes above are read fresh)
    deadline = time.monotonic() + 60
    while metric(text, "charon_allocator_committed_bytes") < 192 * len(body) and time.monotonic() < deadline:
        time.sleep(0.5)
        text = get(b, "/metrics")
    assert metric(text, "charon_allocator_committed_bytes") >= 192 * len(body)
    assert metric(text, "rabbitmq_process_resident_memory_bytes") > 0
    assert metric(text, "charon_message_bodies_memory_bytes") >= 192 * len(body)
    assert metric(text, "charon_allocator_reserved_bytes") >= metric(text, "charon_allocator_committed_bytes")
    # ctl status shows both
    out = subprocess.run(
        [conftest.find_binary(), "ctl", "--url", f"http://127.0.0.1:{b.http_port}",
         "--username", "guest", "--password", "guest", "status"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Calculation strategy: rss" in out.stdout
    assert "Resident set (rss): " in out.stdout and "Allocator (mimalloc " in out.stdout
    # deleting the queue frees the bodies (live heap down) and the allocator returns their pages
    # (resident set down)
    full_rss = get(b, "/api/nodes")[0]["mem_rss"]
    with b.connect() as c:
        c.channel().queue_delete("mem-held")
    wait_for(lambda: get(b, f"/api/nodes/{name}/memory")["memory"]["message_bodies"] == 0,
             what="message bodies released")
    wait_for(lambda: get(b, "/api/nodes")[0]["mem_allocated"] < base_alloc + 96 * len(body),
             timeout=120, what="live heap down")
    wait_for(lambda: get(b, "/api/nodes")[0]["mem_rss"] < full_rss - 96 * len(body),
             timeout=120, what="resident set down")


def test_allocated_strategy_drives_the_memory_alarm(tmp_path):
    cfg = conftest.CONFIG_TOML.replace(
        "heartbeat = 60\n",
        'heartbeat = 60\nvm_memory_high_watermark = "96MiB"\n'
        'vm_memory_calculation_strategy = "allocated"\n', 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        n = get(b, "/api/nodes")[0]
        assert n["mem_calculation_strategy"] == "allocated"
        assert n["mem_used"] == n["mem_allocated"] < 96 << 20
        with b.connect() as admin:
            admin.channel().queue_declare("memq")
        body = b"m" * (256 << 10)
        with RawClient(b.host, b.port) as pub:
            pub.handshake(capabilities={"connection.blocked": True})
            pub.open_channel(1)
            blocked, sent = publish_until_blocked(pub, 1, "memq", body, 4096)
            assert blocked is not None and blocked.reason == "low on memory", sent
            log = b.log_path.read_text(errors="replace")
            assert "memory alarm set" in log and 'strategy="allocated"' in log
            n = get(b, "/api/nodes")[0]
            assert n["mem_alarm"] is True and n["mem_used"] == n["mem_allocated"]
            with b.connect() as admin:
                admin.channel().queue_delete("memq")
            pub.expect_method(commands.Connection.Unblocked, timeout=120)
            assert get(b, "/api/nodes")[0]["mem_alarm"] is False
    finally:
        conftest.stop_charon(b)
