#!/usr/bin/env bash
# The neutral benchmark (issue 13): the shared amqp-load matrix (scenarios a-f and a fixed-rate
# latency run) against Charon, RabbitMQ 3.10.8 and LavinMQ in one run, brokers alternating, then a
# table with ratios. amqp-load is an amqprs client outside this repository (../shared/tools/amqp-load);
# LavinMQ is built outside the repository (../shared/tools/lavinmq/build.sh) and never committed.
#
# Usage: scripts/bench-matrix.sh [path/to/charon]          (default target/release/charon)
# Env:
#   AMQP_LOAD_DIR  amqp-load checkout (default ../shared/tools/amqp-load; built here if needed)
#   LAVINMQ_BIN    LavinMQ binary (adds LavinMQ; e.g. /opt/lavinmq-1.0.0/bin/lavinmq)
#   SKIP_RABBITMQ=1
#   SCENARIOS      default "a a@5000 b d c f"; E_SCENARIO=0 skips scenario e (1M mass expiry)
#   REPS           repetitions (default 1); DUR seconds per a-d run (default 15)
#   OUT            results file (default /tmp/bench-matrix-<time>.jsonl)
# Ports: RabbitMQ 5682, LavinMQ 5702, Charon 5712 (all loopback), each plus PORT_OFFSET (default 0).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CHARON=${1:-$ROOT/target/release/charon}
LOAD_DIR=${AMQP_LOAD_DIR:-$ROOT/../shared/tools/amqp-load}
if [ -z "${AMQP_LOAD_DIR:-}" ] && [ ! -d "$LOAD_DIR" ]; then
    # from a git worktree: the shared tools sit beside the main checkout
    LOAD_DIR=$(cd "$(git -C "$ROOT" rev-parse --git-common-dir)/../.." && pwd)/shared/tools/amqp-load
fi
# PORT_OFFSET shifts every port (and RabbitMQ's node name) so two runs on one machine do not collide
OFF=${PORT_OFFSET:-0}
C_PORT=$((5712 + OFF)); C_HTTP=$((15712 + OFF)); R_PORT=$((5682 + OFF)); R_DIST=$((25682 + OFF))
L_PORT=$((5702 + OFF)); L_HTTP=$((15702 + OFF)); RNODE=bench-matrix$OFF@localhost
SCENARIOS=${SCENARIOS:-"a a@5000 b d c f"}
REPS=${REPS:-1}
OUT=${OUT:-/tmp/bench-matrix-$(date +%Y%m%d-%H%M%S).jsonl}
WORK=$(mktemp -d /tmp/bench-matrix.XXXXXX)
chmod 755 "$WORK"
PIDS=()
log() { echo "==> $*" >&2; }
cleanup() {
    [ -n "${RMQ_UP:-}" ] && RABBITMQ_NODENAME=$RNODE rabbitmqctl -n $RNODE stop >/dev/null 2>&1
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
wait_port() { local i; for ((i = 0; i < $3 * 10; i++)); do (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

LOAD=$LOAD_DIR/target/release/amqp-load
if [ ! -x "$LOAD" ]; then
    log "building amqp-load in $LOAD_DIR"
    (cd "$LOAD_DIR" && cargo build --release >&2) || exit 1
fi
[ -x "$CHARON" ] || { log "no Charon binary at $CHARON (cargo build --release -p charon)"; exit 1; }

BROKERS=()
log "starting Charon on $C_PORT"
mkdir -p "$WORK/charon"
"$CHARON" server --amqp-listen 127.0.0.1:$C_PORT --http-listen 127.0.0.1:$C_HTTP --data-dir "$WORK/charon" \
    >"$WORK/charon.log" 2>&1 &
PIDS+=($!)
wait_port 127.0.0.1 $C_PORT 30 || { log "Charon did not start"; tail "$WORK/charon.log"; exit 1; }
BROKERS+=("charon|amqp://guest:guest@127.0.0.1:$C_PORT/%2f|$!")

if [ -z "${SKIP_RABBITMQ:-}" ] && command -v rabbitmq-server >/dev/null; then
    log "starting RabbitMQ on $R_PORT"
    mkdir -p "$WORK/rmq"; echo '[].' >"$WORK/rmq/enabled_plugins"
    [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1 && chown -R rabbitmq:rabbitmq "$WORK/rmq"
    RABBITMQ_NODENAME=$RNODE RABBITMQ_NODE_PORT=$R_PORT RABBITMQ_DIST_PORT=$R_DIST \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_MNESIA_BASE=$WORK/rmq/mnesia RABBITMQ_LOG_BASE=$WORK/rmq/log \
        RABBITMQ_PID_FILE=$WORK/rmq/pid RABBITMQ_ENABLED_PLUGINS_FILE=$WORK/rmq/enabled_plugins \
        rabbitmq-server >"$WORK/rmq/stdout" 2>&1 &
    if wait_port 127.0.0.1 $R_PORT 120; then
        RMQ_UP=1
        RPID=$(rabbitmqctl -n $RNODE status 2>/dev/null | sed -n 's/^OS PID: *//p')
        [ -z "$RPID" ] && RPID=$(cat "$WORK/rmq/pid" 2>/dev/null)
        BROKERS+=("rabbitmq|amqp://guest:guest@127.0.0.1:$R_PORT/%2f|$RPID")
    else
        log "RabbitMQ did not start"; tail -5 "$WORK/rmq/stdout" >&2
    fi
fi

if [ -n "${LAVINMQ_BIN:-}" ]; then
    log "starting LavinMQ on $L_PORT (tcp_nodelay on, as Charon)"
    printf '[main]\ntcp_nodelay = true\n' >"$WORK/lavinmq.ini"
    "$LAVINMQ_BIN" -c "$WORK/lavinmq.ini" -D "$WORK/lavinmq" -b 127.0.0.1 -p $L_PORT --http-port $L_HTTP -l warn \
        >"$WORK/lavinmq.log" 2>&1 &
    PIDS+=($!)
    if wait_port 127.0.0.1 $L_PORT 30; then
        BROKERS+=("lavinmq|amqp://guest:guest@127.0.0.1:$L_PORT/%2f|$!")
    else
        log "LavinMQ did not start"; tail -5 "$WORK/lavinmq.log" >&2
    fi
fi

log "brokers: ${BROKERS[*]}; results: $OUT"
BIN=$LOAD DUR=${DUR:-15} bash "$LOAD_DIR/scripts/run-matrix.sh" "$OUT" "$SCENARIOS" "$REPS" "${BROKERS[*]}"
if [ "${E_SCENARIO:-1}" != 0 ]; then
    BIN=$LOAD EXTRA="--ttl-ms ${TTL_MS:-30000}" bash "$LOAD_DIR/scripts/run-matrix.sh" "$OUT" e "$REPS" "${BROKERS[*]}"
fi
python3 "$ROOT/scripts/bench-matrix-table.py" "$OUT"
echo "raw results: $OUT"
