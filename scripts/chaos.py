#!/usr/bin/env python3
"""Chaos test: kill -9 cycles under load, then proof that nothing confirmed was lost or
duplicated.

Publishers (persistent messages, publisher confirms) feed a durable queue `chaos.work` whose
dead-letter target is the durable queue `chaos.dlq`. Consumers ack or reject (requeue=false,
so into the DLQ) each message, the choice a fixed function of its id, so a message delivered
again after a crash gets the same treatment. Every `--cycle-seconds` the broker is killed with
SIGKILL and restarted on the same data directory; clients reconnect. At the end the load stops,
the work queue is drained, the DLQ read, and every confirmed message must be in exactly one
place: acked (ids meant for ack: delivered and acked, in no queue) or dead-lettered (ids meant
for reject: exactly once in the DLQ, not in the work queue). Also measured: acks that were sent
before a kill and not applied after it (the message came back), and how long before the kill
they were sent (the redelivery-after-crash window).

Exit status 0 when the proof holds. Usage: scripts/chaos.sh [--cycles N] [--publishers N] ...
"""

import argparse
import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pika

WORK, DLQ = "chaos.work", "chaos.dlq"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("broker did not listen")


def meant_for_reject(mid: str) -> bool:
    return hashlib.sha256(mid.encode()).digest()[0] < 52  # about 20 %


class Broker:
    def __init__(self, binary, data_dir, log):
        self.binary, self.data_dir, self.log = binary, data_dir, log
        self.port = free_port()
        self.proc = None
        self.generation = 0  # which start of the broker a connection talks to

    def start(self):
        # The port may have been taken while the broker was down (the machine is shared):
        # then start again on another one; clients read `self.port` on every reconnect.
        self.generation += 1
        for attempt in range(10):
            self.proc = subprocess.Popen(
                [self.binary, "server", "--amqp-listen", f"127.0.0.1:{self.port}",
                 "--http-listen", "127.0.0.1:0", "--data-dir", str(self.data_dir),
                 "--log-level", "warn"],
                stdout=self.log, stderr=subprocess.STDOUT)
            try:
                wait_port(self.port, self.proc)
                return
            except RuntimeError:
                if self.proc.poll() is None:
                    raise
                self.port = free_port()
        raise RuntimeError("broker did not start in 10 attempts (see its log)")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def connect(self):
        return pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", self.port, connection_attempts=1, socket_timeout=5,
            blocked_connection_timeout=60, heartbeat=0))


def declare(ch):
    ch.queue_declare(DLQ, durable=True)
    ch.queue_declare(WORK, durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": DLQ})


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.confirmed = set()
        self.acked = {}          # id -> (last time an ack was sent, broker generation)
        self.rejected = set()
        self.deliveries = 0
        self.late_acks = []      # (ack sent at, generation) for acks the next start did not apply
        self.stop = threading.Event()
        self.pause = threading.Event()


def publisher(broker, st, n, stop_publishing):
    seq = 0
    while not stop_publishing.is_set():
        try:
            c = broker.connect()
            ch = c.channel()
            ch.confirm_delivery()
            while not stop_publishing.is_set():
                mid = f"p{n}-{seq}"
                ch.basic_publish("", WORK, mid.encode(),
                                 pika.BasicProperties(delivery_mode=2, message_id=mid))
                with st.lock:
                    st.confirmed.add(mid)
                seq += 1
            c.close()
        except Exception:
            seq += 1  # the in-flight one is unconfirmed: never reuse its id
            time.sleep(0.1)


def consumer(broker, st):
    while not st.stop.is_set():
        try:
            c = broker.connect()
            gen = broker.generation  # read after connecting: the broker that accepted us
            ch = c.channel()
            ch.basic_qos(prefetch_count=50)
            for method, props, body in ch.consume(WORK, inactivity_timeout=0.5):
                if st.stop.is_set():
                    break
                if method is None:
                    continue
                mid = body.decode()
                now = time.monotonic()
                with st.lock:
                    st.deliveries += 1
                    if method.redelivered and mid in st.acked:
                        st.late_acks.append(st.acked[mid])
                if meant_for_reject(mid):
                    ch.basic_reject(method.delivery_tag, requeue=False)
                    with st.lock:
                        st.rejected.add(mid)
                else:
                    ch.basic_ack(method.delivery_tag)
                    with st.lock:
                        st.acked[mid] = (time.monotonic(), gen)
            try:
                c.close()
            except Exception:
                pass
        except Exception:
            time.sleep(0.1)


def count(broker, queue):
    c = broker.connect()
    try:
        return c.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        c.close()


def drain(broker, queue):
    got = []
    c = broker.connect()
    ch = c.channel()
    while True:
        m, _, body = ch.basic_get(queue, auto_ack=False)
        if m is None:
            break
        got.append(body.decode())
    ch.basic_ack(0, multiple=True) if got else None
    c.close()
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--publishers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--cycle-seconds", type=float, default=3.0)
    ap.add_argument("--binary", default=os.environ.get("CHARON_BIN", "target/debug/charon"))
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="charon-chaos-"))
    log = open(tmp / "charon.log", "ab")
    broker = Broker(args.binary, tmp / "data", log)
    (tmp / "data").mkdir()
    broker.start()
    c = broker.connect()
    declare(c.channel())
    c.close()
    st = State()
    stop_publishing = threading.Event()
    threads = [threading.Thread(target=publisher, args=(broker, st, n, stop_publishing), daemon=True)
               for n in range(args.publishers)]
    threads += [threading.Thread(target=consumer, args=(broker, st), daemon=True)
                for _ in range(args.consumers)]
    for t in threads:
        t.start()
    kills = []
    t0 = time.monotonic()
    try:
        for cycle in range(args.cycles):
            time.sleep(args.cycle_seconds * (0.5 + rnd.random()))
            kills.append(time.monotonic())
            broker.kill9()
            broker.start()
            with st.lock:
                print(f"cycle {cycle + 1}/{args.cycles}: confirmed {len(st.confirmed)}, "
                      f"acked {len(st.acked)}, rejected {len(st.rejected)}", flush=True)
        stop_publishing.set()
        # Let the consumers drain the work queue (bounded generously, not a speed check).
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if count(broker, WORK) == 0:
                    break
            except Exception:
                pass
            time.sleep(0.5)
        time.sleep(1.0)
        st.stop.set()
        for t in threads:
            t.join(30)
        left = drain(broker, WORK)
        dlq = drain(broker, DLQ)
    finally:
        broker.stop()
        log.close()

    with st.lock:
        confirmed = set(st.confirmed)
        acked = set(st.acked)
        late = list(st.late_acks)
        deliveries = st.deliveries
    dlq_once = set(dlq)
    dups = len(dlq) - len(dlq_once)
    lost, misplaced = [], []
    for mid in confirmed:
        if meant_for_reject(mid):
            if mid not in dlq_once:
                lost.append(mid)
            if mid in left:
                misplaced.append(mid)
        else:
            if mid not in acked:
                lost.append(mid)
            if mid in dlq_once or mid in left:
                misplaced.append(mid)
    # The redelivery window: how long before the kill of the broker it was sent to an ack was
    # sent that the restart undid. Acks written after that kill (into a dead socket) never
    # reached a broker and are counted apart.
    windows, into_dead = [], 0
    for sent, gen in late:
        if gen - 1 < len(kills):
            w = kills[gen - 1] - sent
            if w >= 0:
                windows.append(w)
            else:
                into_dead += 1
    print(f"\ncycles: {args.cycles} kill -9, {time.monotonic() - t0:.0f} s")
    print(f"confirmed: {len(confirmed)}; deliveries: {deliveries}; acked: {len(acked)}; "
          f"dead-lettered (in DLQ): {len(dlq)}; left in work: {len(left)}")
    print(f"lost: {len(lost)}; duplicated in DLQ: {dups}; misplaced: {len(misplaced)}")
    if windows:
        windows.sort()
        print(f"acks undone by a kill: {len(windows)}; sent before the kill by max "
              f"{max(windows) * 1000:.1f} ms, median {windows[len(windows) // 2] * 1000:.1f} ms")
    else:
        print("acks undone by a kill: 0")
    print(f"acks written after their broker was killed (never arrived): {into_dead}")
    ok = not lost and not dups and not misplaced and confirmed
    if not ok:
        print(f"FAILED; examples lost={lost[:5]} misplaced={misplaced[:5]}; log in {tmp}")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("OK: every confirmed message is in exactly one place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
