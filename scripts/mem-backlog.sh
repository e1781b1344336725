#!/usr/bin/env bash
# Memory of a persistent backlog (issue 13): peak RSS (VmHWM) while publishing + consuming N x 1 KiB
# persistent messages (amqp-load scenario f), RSS after the drain (and after the allocator's purge),
# and peak RSS of recovery after kill -9 with N messages in a durable queue.
#   scripts/mem-backlog.sh [N] [CHARON_BIN] [DATA_DIR]
# Needs amqp-load (AMQP_LOAD, default /work/shared/tools/amqp-load/target/release/amqp-load).
# Prints one line per phase; deletes DATA_DIR at the end. SKIP_F=1: only the backlog and recovery.
set -euo pipefail
N=${1:-1000000}
BIN=${2:-target/release/charon}
DATA=${3:-$(mktemp -d /tmp/charon-mem.XXXXXX)}
LOAD=${AMQP_LOAD:-/work/shared/tools/amqp-load/target/release/amqp-load}
PORT=${PORT:-5941}
URL="amqp://guest:guest@127.0.0.1:$PORT/%2f"
pid=""
start() {
  "$BIN" server --amqp-listen 127.0.0.1:$PORT --http-listen 127.0.0.1:$((PORT + 10000)) \
    --prometheus-listen "" --data-dir "$DATA" --log-level warn >"$DATA.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return 0
    sleep 0.2
  done
  echo "broker did not start" >&2; exit 1
}
# Broker CPU seconds so far (user + system, /proc/PID/stat), load-independent unlike wall time.
cpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / t }' /proc/$pid/stat; }
kib() { awk -v k="$1:" '$1 == k { print $2 }' /proc/$pid/status; }
mib() { echo $(( $(kib "$1") / 1024 )); }
cleanup() { [ -n "$pid" ] && kill -9 $pid 2>/dev/null || true; rm -rf "$DATA" "$DATA.log"; }
trap cleanup EXIT
rm -rf "$DATA"; mkdir -p "$DATA"
start
sleep 1
echo "idle: rss $(mib VmRSS) MiB"
if [ -z "${SKIP_F:-}" ]; then
"$LOAD" --url "$URL" --scenario f --messages "$N" --broker-pid $pid --max-seconds 1200 >"$DATA.f.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('scenario f: pub %.0f/s con %.0f/s, broker cpu %.1f us/msg, rss after publish %.0f MiB, peak (sampled) %.0f MiB, lost %d dup %d' % (d['pub_rate'], d['con_rate'], d['broker_cpu_s']*1e6/d['published'], d['broker_rss_after_publish_mib'], d['broker_rss_max_mib'], d['lost'], d['duplicated']))" "$DATA.f.json"
rm -f "$DATA.f.json"
echo "after f: peak (VmHWM) $(mib VmHWM) MiB, rss right after drain $(mib VmRSS) MiB"
sleep 12
echo "after drain + 12 s (purge): rss $(mib VmRSS) MiB"
fi
# A backlog that stays: N persistent messages into a durable queue, no consumer.
"$BIN" bench --uri "$URL" -x 1 -y 0 --persistent -c 1000 -s 1024 --pmessages "$N" -z 3600 --keep-queues --quiet --json >/dev/null
# Live heap bytes counted by the broker's allocator (crates/charon/src/alloc_count.rs), MiB.
alloc() { curl -s -u guest:guest "http://127.0.0.1:$((PORT + 10000))/api/nodes" | python3 -c "import json,sys; print(json.load(sys.stdin)[0].get('mem_allocated', 0) // 1048576)"; }
count() { curl -s -u guest:guest "http://127.0.0.1:$((PORT + 10000))/api/queues" | python3 -c "import json,sys; print(sum(q['messages'] for q in json.load(sys.stdin)))"; }
echo "backlog of $(count) messages: rss $(mib VmRSS) MiB, peak $(mib VmHWM) MiB, heap $(alloc) MiB"
kill -9 $pid; wait $pid 2>/dev/null || true
t0=$(date +%s.%N)
start
t1=$(date +%s.%N)
echo "recovery after kill -9: $(python3 -c "print(round($t1-$t0,1))") s to listen (broker cpu $(cpu) s), peak (VmHWM) $(mib VmHWM) MiB, rss $(mib VmRSS) MiB"
sleep 6
echo "recovered + 6 s: rss $(mib VmRSS) MiB, heap $(alloc) MiB, peak (VmHWM) $(mib VmHWM) MiB, $(count) messages in the queue"
