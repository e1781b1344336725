#!/usr/bin/env python3
"""Scale figures (issue 13): memory per idle queue (with one consumer) and per idle connection,
and the broker's CPU per message when publishing round-robin to 1 queue vs to all the queues.
Works against any AMQP 0-9-1 broker (Charon, RabbitMQ, LavinMQ); RSS and CPU from /proc/PID.

  scripts/scale-idle.py --url amqp://guest:guest@127.0.0.1:5672/%2f --pid BROKER_PID \
      [--queues 10000] [--connections 10000] [--messages 200000] [--label charon]

Needs aiormq (the test venv has it) and `ulimit -n` above the connection count for both the
broker and this script. Prints one JSON line. Queues are declared non-durable and auto-delete,
deleted at the end; connections are closed.
"""

import argparse
import asyncio
import json
import os
import resource
import sys
import time

import aiormq

CLK = os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


async def settle(pid, seconds=3.0):
    """RSS once it stops moving (brokers free lazily): the smallest of a few samples."""
    samples = []
    for _ in range(int(seconds / 0.5)):
        await asyncio.sleep(0.5)
        samples.append(rss_kib(pid))
    return min(samples[-3:])


async def gather_limited(coros, limit=64):
    sem = asyncio.Semaphore(limit)

    async def run(c):
        async with sem:
            return await c

    return await asyncio.gather(*(run(c) for c in coros))


async def publish_round_robin(ch, names, n, pid, got, want):
    """Publish n 16-byte messages round-robin over `names`; wait until consumers got them all."""
    body = b"x" * 16
    c0, t0 = cpu_s(pid), time.monotonic()
    for i in range(n):
        await ch.basic_publish(body, routing_key=names[i % len(names)])
    deadline = time.monotonic() + 120
    while got[0] < want and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    t1, c1 = time.monotonic(), cpu_s(pid)
    return {"msgs": n, "received": got[0] - (want - n), "wall_s": round(t1 - t0, 2),
            "rate": round(n / (t1 - t0)), "broker_cpu_us_per_msg": round((c1 - c0) * 1e6 / n, 2)}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--queues", type=int, default=10000)
    ap.add_argument("--connections", type=int, default=10000)
    ap.add_argument("--messages", type=int, default=200000)
    ap.add_argument("--label", default="")
    ap.add_argument("--channels", type=int, default=10, help="channels declaring the queues")
    ap.add_argument("--declare-concurrency", type=int, default=256,
                    help="declare+consume calls in flight (LavinMQ 1.0 stalls with many)")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    out = {"label": a.label, "queues": a.queues, "connections": a.connections}
    pid = a.pid

    base_conn = await aiormq.connect(a.url + ("&" if "?" in a.url else "?") + "heartbeat=0")
    idle = await settle(pid)
    out["idle_rss_mib"] = round(idle / 1024, 1)

    # 1. Queues, one consumer each (no-ack), --channels channels on one connection.
    got = [0]

    async def on_message(_msg):
        got[0] += 1

    tag = f"scale{os.getpid()}"
    names = [f"{tag}-q{i}" for i in range(a.queues)]
    chans = [await base_conn.channel() for _ in range(a.channels)]

    async def declare(i, name):
        ch = chans[i % len(chans)]
        await ch.queue_declare(name, auto_delete=True)
        await ch.basic_consume(name, on_message, no_ack=True)

    t0 = time.monotonic()
    await gather_limited([declare(i, n) for i, n in enumerate(names)], a.declare_concurrency)
    out["declare_consume_s"] = round(time.monotonic() - t0, 1)
    with_queues = await settle(pid)
    out["rss_with_queues_mib"] = round(with_queues / 1024, 1)
    out["per_queue_kib"] = round((with_queues - idle) / a.queues, 2)

    # 2. Throughput: 1 queue vs round-robin over all of them (broker CPU per message).
    #    (--messages 0 skips it: LavinMQ 1.0 stalls there with this client.)
    print(json.dumps(out), file=sys.stderr, flush=True)
    if a.messages > 0:
        pub = await base_conn.channel()
        out["one_queue"] = await publish_round_robin(pub, names[:1], a.messages, pid, got, a.messages)
        out["all_queues"] = await publish_round_robin(pub, names, a.messages, pid, got, 2 * a.messages)
        print(json.dumps(out), file=sys.stderr, flush=True)

    for ch in chans:
        await ch.close()
    await asyncio.sleep(2)
    before_conns = await settle(pid)

    # 3. Idle connections with one channel each.
    conns = []

    url = a.url + ("&" if "?" in a.url else "?") + "heartbeat=0"
    failed = [0]

    async def connect():
        for _ in range(3):
            try:
                c = await asyncio.wait_for(aiormq.connect(url), 60)
                await c.channel()
                conns.append(c)
                return
            except Exception:  # noqa: BLE001 - a busy machine: try again, count failures
                await asyncio.sleep(1)
        failed[0] += 1

    t0 = time.monotonic()
    await gather_limited([connect() for _ in range(a.connections)], 32)
    out["connect_s"] = round(time.monotonic() - t0, 1)
    with_conns = await settle(pid)
    out["rss_with_connections_mib"] = round(with_conns / 1024, 1)
    out["connections_open"] = len(conns)
    out["connections_failed"] = failed[0]
    out["per_connection_kib"] = round((with_conns - before_conns) / max(1, len(conns)), 2)
    await gather_limited([c.close() for c in conns], 256)
    out["note"] = "client: one Python process (aiormq); rates are client-bound, compare broker CPU per message"
    await base_conn.close()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
