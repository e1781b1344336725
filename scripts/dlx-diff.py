#!/usr/bin/env python3
"""Differential check of dead-lettering: runs the same scenarios against two brokers (e.g.
RabbitMQ 3.10.8 and Charon) and diffs what arrives where, with which headers and AMQP types.

Usage:
  .venv/bin/python scripts/dlx-diff.py AMQP_URL_A AMQP_URL_B
  e.g. scripts/dlx-diff.py amqp://guest:guest@127.0.0.1:5703/%2f amqp://guest:guest@127.0.0.1:5672/%2f

Needs pika and pamqp (tests/python/requirements.txt). Queue names get a per-run suffix that is
normalised away, and x-death `time` values are replaced by "<time>", so the two runs compare.
Differences listed in EXPECTED are intended (the 4.0 spec over 3.10.8) and reported as such.
Exit status: 0 when only expected differences remain, 1 otherwise.
"""

import sys
import time
import urllib.parse
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

import pika  # noqa: E402

from amqp_typed import raw_get  # noqa: E402

EXPECTED = {
    "x-last-death-queue", "x-last-death-reason", "x-last-death-exchange",  # 4.0 spec, not 3.10.8
}


class Target:
    def __init__(self, url):
        p = urllib.parse.urlparse(url)
        self.host, self.port = p.hostname, p.port or 5672
        self.user, self.password = p.username or "guest", p.password or "guest"
        self.vhost = urllib.parse.unquote(p.path[1:]) if p.path not in ("", "/") else "/"

    def connect(self):
        return pika.BlockingConnection(pika.ConnectionParameters(
            self.host, self.port, self.vhost, pika.PlainCredentials(self.user, self.password)))


def reject_all(ch, q):
    while True:
        m, _, _ = ch.basic_get(q, auto_ack=False)
        if m is None:
            return
        ch.basic_reject(m.delivery_tag, requeue=False)


def scenarios(ch, n):
    """Each yields the queues whose contents are compared. `n(name)` makes a run-unique name."""
    def reject_to_fanout():
        x, d, q = n("dlx"), n("dlq"), n("src")
        ch.exchange_declare(x, "fanout", auto_delete=True)
        ch.queue_declare(d, auto_delete=True)
        ch.queue_bind(d, x)
        ch.queue_declare(q, auto_delete=True, arguments={"x-dead-letter-exchange": x})
        ch.basic_publish("", q, b"r", pika.BasicProperties(headers={"CC": [d], "BCC": ["b"]},
                                                           expiration="60000"))
        time.sleep(0.05)
        reject_all(ch, q)
        return [d]

    def ttl_with_routing_key():
        x, d, q = n("dlx"), n("dlq"), n("src")
        ch.exchange_declare(x, "direct", auto_delete=True)
        ch.queue_declare(d, auto_delete=True)
        ch.queue_bind(d, x, "dead")
        ch.queue_declare(q, auto_delete=True, arguments={
            "x-dead-letter-exchange": x, "x-dead-letter-routing-key": "dead", "x-message-ttl": 50})
        ch.basic_publish("", q, b"t", pika.BasicProperties(headers={"CC": ["c"]}))
        time.sleep(0.3)
        return [d]

    def maxlen_drop_head():
        x, d, q = n("dlx"), n("dlq"), n("src")
        ch.exchange_declare(x, "fanout", auto_delete=True)
        ch.queue_declare(d, auto_delete=True)
        ch.queue_bind(d, x)
        ch.queue_declare(q, auto_delete=True, arguments={"x-dead-letter-exchange": x, "x-max-length": 1})
        for b in (b"1", b"2", b"3"):
            ch.basic_publish("", q, b)
        time.sleep(0.1)
        return [d, q]

    def two_hops():
        a, b, c = n("a"), n("b"), n("c")
        ch.queue_declare(c, auto_delete=True)
        ch.queue_declare(b, auto_delete=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": c})
        ch.queue_declare(a, auto_delete=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b,
                                                         "x-message-ttl": 50})
        ch.basic_publish("", a, b"h")
        time.sleep(0.3)
        reject_all(ch, b)
        time.sleep(0.1)
        return [c]

    def ttl_cycle():
        a, b = n("a"), n("b")
        ch.queue_declare(a, auto_delete=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b,
                                                         "x-message-ttl": 50})
        ch.queue_declare(b, auto_delete=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": a,
                                                         "x-message-ttl": 50})
        ch.basic_publish("", a, b"cycle")
        time.sleep(0.5)
        return [a, b]

    return {f.__name__: f for f in (reject_to_fanout, ttl_with_routing_key, maxlen_drop_head, two_hops, ttl_cycle)}


def normalise(v, suffix):
    if hasattr(v, "tag"):
        if v.tag == "T":
            return ("T", "<time>")
        return (v.tag, normalise(v.value, suffix))
    if isinstance(v, dict):
        return {k: normalise(x, suffix) for k, x in v.items()}
    if isinstance(v, list):
        return [normalise(x, suffix) for x in v]
    if isinstance(v, str):
        return v.replace(suffix, "")
    return v


def run(target):
    suffix = "-" + uuid.uuid4().hex[:8]
    out = {}
    with target.connect() as c:
        ch = c.channel()
        counter = iter(range(1_000_000))
        for name, scenario in scenarios(ch, lambda s: f"{s}{next(counter)}{suffix}").items():
            result = {}
            for q in scenario():
                msgs = []
                while True:
                    got = raw_get(target, q)
                    if got is None:
                        break
                    m, props, body = got
                    msgs.append({"exchange": m.exchange.replace(suffix, ""),
                                 "routing_key": m.routing_key.replace(suffix, ""),
                                 "properties": normalise(props, suffix), "body": body})
                result[q.replace(suffix, "")] = msgs
            out[name] = result
    return out


def diff(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            yield from diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}/{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield path, a, b


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    ra, rb = run(Target(sys.argv[1])), run(Target(sys.argv[2]))
    unexpected = 0
    for scenario in ra:
        diffs = list(diff(ra[scenario], rb.get(scenario, {})))
        print(f"== {scenario}: {'same' if not diffs else f'{len(diffs)} difference(s)'}")
        for path, x, y in diffs:
            expected = any(e in path for e in EXPECTED)
            unexpected += 0 if expected else 1
            print(f"   {'expected' if expected else 'DIFF    '} {path}: A={x!r} B={y!r}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
