#!/usr/bin/env bash
# Is a scenario client-bound? Issue 13 asks for throughput at least LavinMQ's "wherever the client
# is not the bottleneck (use several client processes to find out)". One amqp-load process is
# single-threaded (amqprs, tokio current_thread) and saturates a core on b and d against both
# Charon and LavinMQ. This runs PROCS amqp-load processes at once against one broker, each in its
# own vhost (so each has its own queues and loss accounting), brokers alternating per repetition,
# and prints the summed consume rate, loss, and the broker's CPU per published message (/proc).
#
# Usage: scripts/bench-multiclient.sh [path/to/charon]       (default target/release/charon)
# Env:
#   SCENARIOS  default "b d"; PROCS client processes (default 2); DUR seconds (default 10);
#   REPS       repetitions (default 2); LAVINMQ_BIN adds LavinMQ (built outside the repository);
#   AMQP_LOAD_DIR as in bench-matrix.sh; PORT_OFFSET shifts the ports (Charon 5750, LavinMQ 5751).
# Note: d's "CPU per published message" is not comparable between brokers when one of them
# dead-letters slower than it accepts publishes (its backlog grows during the run): compare the
# consume rate there.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHARON=${1:-$ROOT/target/release/charon}
LOAD_DIR=${AMQP_LOAD_DIR:-$ROOT/../shared/tools/amqp-load}
if [ -z "${AMQP_LOAD_DIR:-}" ] && [ ! -d "$LOAD_DIR" ]; then
    LOAD_DIR=$(cd "$(git -C "$ROOT" rev-parse --git-common-dir)/../.." && pwd)/shared/tools/amqp-load
fi
LOAD=$LOAD_DIR/target/release/amqp-load
[ -x "$LOAD" ] || (cd "$LOAD_DIR" && cargo build --release >&2) || exit 1
[ -x "$CHARON" ] || { echo "no Charon binary at $CHARON" >&2; exit 1; }
SCENARIOS=${SCENARIOS:-"b d"}; PROCS=${PROCS:-2}; DUR=${DUR:-10}; REPS=${REPS:-2}
OFF=${PORT_OFFSET:-0}
C_PORT=$((5750 + OFF)); L_PORT=$((5751 + OFF))
WORK=$(mktemp -d /tmp/bench-multiclient.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM
wait_port() { local i; for ((i = 0; i < $2 * 10; i++)); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# vhosts v1..vN with guest's permissions, through the management API both brokers speak
add_vhosts() {
    local http=$1 i
    for ((i = 1; i <= PROCS; i++)); do
        curl -sf -u guest:guest -X PUT -H 'content-type: application/json' "http://127.0.0.1:$http/api/vhosts/v$i" -d '{}' >/dev/null &&
            curl -sf -u guest:guest -X PUT -H 'content-type: application/json' "http://127.0.0.1:$http/api/permissions/v$i/guest" \
                -d '{"configure":".*","write":".*","read":".*"}' >/dev/null || { echo "vhost v$i on :$http failed" >&2; exit 1; }
    done
}

mkdir -p "$WORK/charon"
"$CHARON" server --amqp-listen 127.0.0.1:$C_PORT --http-listen 127.0.0.1:$((C_PORT + 10000)) --data-dir "$WORK/charon" \
    >"$WORK/charon.log" 2>&1 &
PIDS+=($!); BROKERS=("charon|$C_PORT|$!")
wait_port $C_PORT 30 && wait_port $((C_PORT + 10000)) 30 || { echo "Charon did not start" >&2; exit 1; }
add_vhosts $((C_PORT + 10000))
if [ -n "${LAVINMQ_BIN:-}" ]; then
    printf '[main]\ntcp_nodelay = true\n' >"$WORK/lavinmq.ini"
    "$LAVINMQ_BIN" -c "$WORK/lavinmq.ini" -D "$WORK/lavinmq" -b 127.0.0.1 -p $L_PORT --http-port $((L_PORT + 10000)) -l warn \
        >"$WORK/lavinmq.log" 2>&1 &
    PIDS+=($!); BROKERS+=("lavinmq|$L_PORT|$!")
    wait_port $L_PORT 30 && wait_port $((L_PORT + 10000)) 30 || { echo "LavinMQ did not start" >&2; exit 1; }
    add_vhosts $((L_PORT + 10000))
fi

n=${#BROKERS[@]}
for rep in $(seq 1 "$REPS"); do
    for sc in $SCENARIOS; do
        for ((k = 0; k < n; k++)); do
            IFS='|' read -r name port pid <<<"${BROKERS[$(((k + rep - 1) % n))]}"
            ticks0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
            cps=()
            for ((i = 1; i <= PROCS; i++)); do
                "$LOAD" --url "amqp://guest:guest@127.0.0.1:$port/v$i" --scenario "$sc" --duration "$DUR" \
                    --label "$name" >"$WORK/out.$i" 2>>"$WORK/load.stderr" &
                cps+=($!)
            done
            wait "${cps[@]}"
            ticks1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
            python3 - "$name" "$sc" "$rep" "$((ticks1 - ticks0))" "$(getconf CLK_TCK)" "$WORK"/out.* <<'PY'
import json, sys
name, sc, rep, ticks, hz = sys.argv[1:6]
runs = [json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[6:]]
con = sum(r.get("con_rate", 0) for r in runs)
pub = sum(r.get("published", 0) for r in runs)
lost = sum(r.get("lost", 0) for r in runs); dup = sum(r.get("duplicated", 0) for r in runs)
cpu = int(ticks) / int(hz)
each = " + ".join(f"{r.get('con_rate', 0) / 1e3:.1f}k" for r in runs)
print(f"{sc} rep {rep} {name}: consume {con / 1e3:.1f}k/s ({each}); lost {lost}, duplicated {dup}; "
      f"broker CPU {cpu:.1f} s, {cpu * 1e6 / max(pub, 1):.2f} µs per published message ({pub} published)")
PY
            sleep 2
        done
    done
done
