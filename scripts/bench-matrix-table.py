#!/usr/bin/env python3
"""The issue-13 table from amqp-load JSON lines (scripts/bench-matrix.sh): one row per scenario, medians per
broker, Charon's ratios to LavinMQ and RabbitMQ. Broker CPU µs/msg = broker user+sys CPU over the whole run
/ messages published (amqp-load's summarize.py convention). Usage: bench-matrix-table.py FILE.jsonl [...]"""
import json
import statistics
import sys
from collections import defaultdict

runs = defaultdict(list)
for path in sys.argv[1:]:
    for line in open(path):
        line = line.strip()
        if line:
            d = json.loads(line)
            if "error" not in d:
                runs[(d.get("scenario_tag", d.get("scenario")), d.get("label"))].append(d)


def med(rs, f):
    v = [f(r) for r in rs]
    v = [x for x in v if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return statistics.median(v) if v else None


def cpu(r):
    return r["broker_cpu_s"] * 1e6 / r["published"] if r.get("broker_cpu_s") and r.get("published") else None


def lat(k):
    return lambda r: (r.get("latency") or {}).get(k)


def k(x, unit=""):
    if x is None:
        return "–"
    return f"{x / 1000:.1f}k{unit}" if x >= 1000 else f"{x:.1f}{unit}"


def cell(sc, rs):
    if not rs:
        return "–"
    if "@" in sc:
        return f"p50 {med(rs, lat('p50_us')) / 1000:.2f} / p99 {med(rs, lat('p99_us')) / 1000:.2f} ms; {med(rs, cpu):.1f} µs"
    if sc.startswith("e"):
        return (f"{med(rs, lambda r: r.get('t_all_in_dlq_s')) or 0:.1f} s to all in DLQ; "
                f"{k(med(rs, lambda r: r.get('expiry_rate')), '/s')}; {med(rs, cpu):.1f} µs; "
                f"RSS {med(rs, lambda r: r.get('broker_rss_max_mib')):.0f} MiB")
    extra = ""
    if sc.startswith("f"):
        extra = f"; RSS {med(rs, lambda r: r.get('broker_rss_max_mib')):.0f} MiB"
    return (f"{k(med(rs, lambda r: r.get('pub_rate')))} / {k(med(rs, lambda r: r.get('con_rate')))}; "
            f"{med(rs, cpu):.1f} µs; lost {med(rs, lambda r: r.get('lost'))}{extra}")


def ratio(sc, c, o):
    if not c or not o:
        return "–"
    if "@" in sc:
        return f"p99 {med(c, lat('p99_us')) / med(o, lat('p99_us')):.2f}×"
    cr, orr = med(c, cpu), med(o, cpu)
    key = "expiry_rate" if sc.startswith("e") else "con_rate"
    rc, ro = med(c, lambda r: r.get(key)), med(o, lambda r: r.get(key))
    rate = f"{rc / ro:.2f}×" if rc and ro else "–"
    return f"{rate}; CPU {cr / orr:.2f}×" if cr and orr else rate


scen = sorted({s for s, _ in runs}, key=lambda s: (s[0], "@" in s))
print("| scenario | RabbitMQ | LavinMQ | Charon | Charon / LavinMQ | Charon / RabbitMQ |")
print("| --- | --- | --- | --- | --- | --- |")
for sc in scen:
    r, l, c = (runs.get((sc, b), []) for b in ("rabbitmq", "lavinmq", "charon"))
    print(f"| {sc} | {cell(sc, r)} | {cell(sc, l)} | {cell(sc, c)} | {ratio(sc, c, l)} | {ratio(sc, c, r)} |")
print("\ncells: pub / con msg/s; broker CPU µs per published message; lost. Ratios: throughput (higher is better)"
      " and CPU (lower is better); latency rows compare p99 (lower is better).")
