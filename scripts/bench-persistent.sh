#!/usr/bin/env bash
# Persistent scenarios of issue 13 (amqp-load b and f) against several Charon builds and LavinMQ,
# alternating brokers in every repetition, each on a fresh data directory; prints broker CPU per
# message (user+sys from /proc, what a busy shared machine cannot distort) beside the rates.
#
# Usage: scripts/bench-persistent.sh NAME=path/to/charon [NAME=path ...]
# Env: LAVINMQ_BIN (adds LavinMQ), SCENARIOS (default "b f"), REPS (default 2), DUR (b seconds,
#      default 15), MESSAGES (f, default 1000000), OUT (jsonl, default /tmp/bench-persistent-<t>.jsonl),
#      AMQP_LOAD_DIR (default ../shared/tools/amqp-load, else /work/shared/tools/amqp-load). Ports 5861.. (loopback).
set -uo pipefail
cd "$(dirname "$0")/.."
DEFAULT_LOAD_DIR=$(pwd)/../shared/tools/amqp-load
[ -d "$DEFAULT_LOAD_DIR" ] || DEFAULT_LOAD_DIR=/work/shared/tools/amqp-load
LOAD=${AMQP_LOAD_DIR:-$DEFAULT_LOAD_DIR}/target/release/amqp-load
[ -x "$LOAD" ] || { echo "build amqp-load first (cargo build --release in its dir)" >&2; exit 1; }
SCENARIOS=${SCENARIOS:-"b f"}; REPS=${REPS:-2}; DUR=${DUR:-15}; MESSAGES=${MESSAGES:-1000000}
OUT=${OUT:-/tmp/bench-persistent-$(date +%Y%m%d-%H%M%S).jsonl}
WORK=$(mktemp -d /tmp/bench-persistent.XXXXXX)
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM
wait_port() { local i; for ((i = 0; i < 300; i++)); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

BROKERS=("$@")
[ -n "${LAVINMQ_BIN:-}" ] && BROKERS+=("lavinmq=$LAVINMQ_BIN")
start() { # name path port -> sets PID
    local name=$1 bin=$2 port=$3 dir=$WORK/$1-$RANDOM
    mkdir -p "$dir"
    if [ "$name" = lavinmq ]; then
        printf '[main]\ntcp_nodelay = true\n' >"$dir/lavinmq.ini"
        "$bin" -c "$dir/lavinmq.ini" -D "$dir/data" -b 127.0.0.1 -p "$port" --http-port $((port + 10000)) -l warn >"$dir/log" 2>&1 &
    else
        "$bin" server --amqp-listen "127.0.0.1:$port" --http-listen "127.0.0.1:$((port + 10000))" --data-dir "$dir" >"$dir/log" 2>&1 &
    fi
    PID=$!
    wait_port "$port" || { echo "$name did not start" >&2; tail -5 "$dir/log" >&2; return 1; }
}
for ((rep = 0; rep < REPS; rep++)); do
    for sc in $SCENARIOS; do
        n=${#BROKERS[@]}
        for ((k = 0; k < n; k++)); do
            b=${BROKERS[$(((k + rep) % n))]}
            name=${b%%=*}; bin=${b#*=}; port=$((5861 + k))
            start "$name" "$bin" "$port" || continue
            args=(--url "amqp://guest:guest@127.0.0.1:$port/%2f" --scenario "$sc" --broker-pid "$PID" --label "$name")
            [ "$sc" = f ] && args+=(--messages "$MESSAGES") || args+=(--duration "$DUR")
            echo "==> rep $rep $sc $name (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
            line=$("$LOAD" "${args[@]}" 2>/dev/null | tail -1)
            echo "$line" | python3 -c 'import json,sys; d=json.load(sys.stdin); d["loadavg"]=open("/proc/loadavg").read().split()[:3]; print(json.dumps(d))' >>"$OUT" 2>/dev/null || echo "$line" >>"$OUT"
            kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=""
            rm -rf "$WORK"/"$name"-*
        done
    done
done
python3 - "$OUT" <<'PY'
import json, sys, statistics
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    try: d = json.loads(line)
    except Exception: continue
    runs[(d.get("scenario"), d.get("label"))].append(d)
print("| scenario | broker | runs | pub msg/s | con msg/s | broker CPU µs/msg (each run) | lost | dup | load avg |")
print("|---|---|---|---|---|---|---|---|---|")
for (sc, lb), rs in sorted(runs.items()):
    pub = statistics.median([r.get("pub_rate") or 0 for r in rs])
    con = statistics.median([r.get("con_rate") or 0 for r in rs])
    per = [1e6 * r["broker_cpu_s"] / max(1, r.get("published") or r.get("confirmed") or 1) for r in rs if r.get("broker_cpu_s")]
    print(f"| {sc} | {lb} | {len(rs)} | {pub:,.0f} | {con:,.0f} | {statistics.median(per) if per else 0:.2f} ({', '.join(f'{p:.2f}' for p in per)}) | "
          f"{sum(r.get('lost') or 0 for r in rs)} | {sum(r.get('duplicated') or 0 for r in rs)} | {'; '.join(' '.join(r.get('loadavg', [])) for r in rs)} |")
print(f"(results: {sys.argv[1]})")
PY
