#!/usr/bin/env bash
# Compare Charon against RabbitMQ (and optionally LavinMQ) with the same load
# tool (`charon bench`, or the charon-bench example until that exists).
#
# Usage: scripts/bench-compare.sh [path/to/charon]     (default target/release/charon)
# Env:
#   BENCH_DURATION   seconds per scenario (default 10)
#   BENCH_PAUSE      seconds to let a broker settle between runs (default 3)
#   EXPIRY_MESSAGES  messages of the mass-expiry row (default 1000000)
#   EXPIRY_TTL_MS    their x-message-ttl (default 15000: longer than publishing them takes)
#   EXPIRY_WAIT      seconds to wait for the DLQ past the last TTL deadline (default 120)
#   SKIP_RABBITMQ=1  do not start/measure RabbitMQ
#   LAVINMQ_URI      amqp URI of an already running LavinMQ (adds a column);
#   LAVINMQ_PID      its PID (for CPU/RSS figures). LavinMQ is never built here.
# RabbitMQ runs as a private node bench-compare@localhost on 5673/15673 with
# its data under a temp dir; Charon runs on 5674/15674. Both are stopped at exit.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CHARON=${1:-$ROOT/target/release/charon}
DURATION=${BENCH_DURATION:-10}
WORK=$(mktemp -d /tmp/bench-compare.XXXXXX)
chmod 755 "$WORK" # the broker may run as another user (rabbitmq)
RMQ_NODE=bench-compare@localhost
RMQ_URI="amqp://guest:guest@127.0.0.1:5673/%2f"
CHARON_URI="amqp://guest:guest@127.0.0.1:5674/%2f"
RMQ_PID="" CHARON_PID=""

log() { echo "==> $*" >&2; }

cleanup() {
    if [ -n "$RMQ_PID" ]; then
        log "stopping RabbitMQ"
        rabbitmqctl -n "$RMQ_NODE" stop >/dev/null 2>&1 || kill "$RMQ_PID" 2>/dev/null
    fi
    if [ -n "$CHARON_PID" ]; then
        log "stopping Charon"
        kill "$CHARON_PID" 2>/dev/null
        wait "$CHARON_PID" 2>/dev/null
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

wait_port() { # host port seconds [pid that must stay alive]
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
        if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then return 1; fi
        sleep 0.1
    done
    return 1
}

# --- the load tool -----------------------------------------------------------
if [ -x "$CHARON" ] && "$CHARON" bench --help >/dev/null 2>&1; then
    BENCH=("$CHARON" bench)
else
    EXAMPLE=$ROOT/target/release/examples/bench
    if [ ! -x "$EXAMPLE" ]; then
        log "building the charon-bench example"
        cargo build --release -p charon-bench --example bench >&2 || exit 1
    fi
    BENCH=("$EXAMPLE")
fi
log "load tool: ${BENCH[*]}"

# --- brokers -----------------------------------------------------------------
start_rabbitmq() {
    command -v rabbitmq-server >/dev/null || { log "rabbitmq-server not installed: skipping"; return 1; }
    mkdir -p "$WORK/rmq"
    echo '[].' >"$WORK/rmq/enabled_plugins"
    # The Debian wrapper drops privileges to the rabbitmq user.
    if [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1; then chown -R rabbitmq:rabbitmq "$WORK/rmq"; fi
    log "starting RabbitMQ ($RMQ_NODE on 5673)"
    RABBITMQ_NODENAME=$RMQ_NODE RABBITMQ_NODE_PORT=5673 RABBITMQ_DIST_PORT=25674 \
        RABBITMQ_MNESIA_BASE=$WORK/rmq/mnesia RABBITMQ_LOG_BASE=$WORK/rmq/log \
        RABBITMQ_PID_FILE=$WORK/rmq/pid RABBITMQ_ENABLED_PLUGINS_FILE=$WORK/rmq/enabled_plugins \
        RABBITMQ_SERVER_START_ARGS="-rabbitmq_management listener [{port,15673}]" \
        rabbitmq-server >"$WORK/rmq/stdout" 2>&1 &
    if ! wait_port 127.0.0.1 5673 120 $!; then
        log "RabbitMQ did not start:"
        tail -5 "$WORK/rmq/stdout" >&2
        rabbitmqctl -n "$RMQ_NODE" stop >/dev/null 2>&1
        return 1
    fi
    RMQ_PID=$(rabbitmqctl -n "$RMQ_NODE" status 2>/dev/null | sed -n 's/^OS PID: *//p')
    if [ -z "$RMQ_PID" ]; then RMQ_PID=$(cat "$WORK/rmq/pid" 2>/dev/null); fi
    if [ -z "$RMQ_PID" ]; then
        log "cannot find the RabbitMQ PID; stopping it"
        rabbitmqctl -n "$RMQ_NODE" stop >/dev/null 2>&1
        return 1
    fi
}

start_charon() {
    if [ ! -x "$CHARON" ]; then
        log "Charon binary $CHARON not found: skipping Charon"
        return 1
    fi
    mkdir -p "$WORK/charon"
    log "starting Charon on 5674"
    "$CHARON" server --amqp-listen 127.0.0.1:5674 --http-listen 127.0.0.1:15674 \
        --data-dir "$WORK/charon" >"$WORK/charon/stdout" 2>&1 &
    CHARON_PID=$!
    if ! wait_port 127.0.0.1 5674 30 "$CHARON_PID"; then
        log "Charon did not start; see output below"
        tail -5 "$WORK/charon/stdout" >&2
        kill "$CHARON_PID" 2>/dev/null
        CHARON_PID=""
        return 1
    fi
}

HAVE_RMQ=0 HAVE_CHARON=0 HAVE_LAVIN=0
if [ -z "${SKIP_RABBITMQ:-}" ] && start_rabbitmq; then HAVE_RMQ=1; fi
if start_charon; then HAVE_CHARON=1; fi
if [ -n "${LAVINMQ_URI:-}" ]; then HAVE_LAVIN=1; fi

# --- scenarios ---------------------------------------------------------------
NAMES=(
    "transient 1->1 16B"
    "transient 4->4q->4 16B"
    "persistent+confirm 1p 1KiB"
    "persistent+confirm 4p 1KiB"
    "dead-letter 1p->nack->DLQ 16B"
    "expiry ${EXPIRY_MESSAGES:-1000000} -> DLQ 16B"
)
ARGS=(
    "-x 1 -y 1 --queues 1 -s 16"
    "-x 4 -y 4 --queues 4 -s 16"
    "-x 1 -y 1 --queues 1 -s 1024 --persistent --confirm 100"
    "-x 4 -y 4 --queues 4 -s 1024 --persistent --confirm 100"
    "--scenario dead-letter -x 1 -y 1 --queues 1 -s 16"
    "--scenario expiry -x 1 -y 1 --queues 1 -s 16 --pmessages ${EXPIRY_MESSAGES:-1000000} --ttl-ms ${EXPIRY_TTL_MS:-15000} -z ${EXPIRY_WAIT:-120}"
)

# run_one URI PID ARGS -> "rate cpu" (or "- -")
run_one() {
    local uri=$1 pid=$2 args=$3 out pidarg=()
    sleep "${BENCH_PAUSE:-3}"
    [ -n "$pid" ] && pidarg=(--broker-pid "$pid")
    # shellcheck disable=SC2086
    local zarg=(-z "$DURATION")
    [[ " $args " == *" -z "* ]] && zarg=()
    if out=$("${BENCH[@]}" --uri "$uri" "${zarg[@]}" --json "${pidarg[@]}" $args); then
        echo "$out" >>"$WORK/results.jsonl"
        # expiry: the figure is the mass-expiry time (seconds, lower is better), shown as "Ns",
        # or "incomplete" if the DLQ did not get every message within EXPIRY_WAIT seconds
        jq -r '[(if .scenario == "expiry" then (if .expiry_drain_s != null then "\(.expiry_drain_s * 100 | round / 100)s" else "incomplete" end) else (.consume_rate // .publish_rate | floor) end), (.broker_cpu_us_per_msg // "-" | if type == "number" then (. * 100 | round / 100) else . end), (.broker_peak_rss_kib // "-" | if type == "number" then (. / 1024 | round) else . end)] | @tsv' <<<"$out" | tail -1
    else
        echo "- - -"
    fi
}

ratio() { # a b -> b/a (rates), or a/b for drain times ("1.5s": lower is better)
    if [[ $1 =~ ^[0-9]+$ && $2 =~ ^[0-9]+$ && $1 -gt 0 ]]; then
        awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", b / a }'
    elif [[ $1 =~ ^[0-9.]+s$ && $2 =~ ^[0-9.]+s$ ]]; then
        awk -v a="${1%s}" -v b="${2%s}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'
    else
        echo "-"
    fi
}

ROWS=()
for i in "${!NAMES[@]}"; do
    r_rate="-" r_cpu="-" c_rate="-" c_cpu="-" l_rate="-" l_cpu="-" r_rss="-" c_rss="-" l_rss="-"
    if [ $HAVE_RMQ = 1 ]; then
        log "RabbitMQ: ${NAMES[$i]}"
        read -r r_rate r_cpu r_rss < <(run_one "$RMQ_URI" "$RMQ_PID" "${ARGS[$i]}")
    fi
    if [ $HAVE_CHARON = 1 ]; then
        log "Charon: ${NAMES[$i]}"
        read -r c_rate c_cpu c_rss < <(run_one "$CHARON_URI" "$CHARON_PID" "${ARGS[$i]}")
    fi
    if [ $HAVE_LAVIN = 1 ]; then
        log "LavinMQ: ${NAMES[$i]}"
        read -r l_rate l_cpu l_rss < <(run_one "$LAVINMQ_URI" "${LAVINMQ_PID:-}" "${ARGS[$i]}")
    fi
    row="${NAMES[$i]}|$r_rate|$c_rate|$(ratio "$r_rate" "$c_rate")|$r_cpu|$c_cpu|$r_rss|$c_rss"
    [ $HAVE_LAVIN = 1 ] && row+="|$l_rate|$l_cpu|$l_rss"
    ROWS+=("$row")
done

# --- table -------------------------------------------------------------------
header="scenario|RabbitMQ msg/s|Charon msg/s|Charon/RabbitMQ|RabbitMQ CPU us/msg|Charon CPU us/msg|RabbitMQ peak MiB|Charon peak MiB"
[ $HAVE_LAVIN = 1 ] && header+="|LavinMQ msg/s|LavinMQ CPU us/msg|LavinMQ peak MiB"
echo
printf '%s\n' "$header" "${ROWS[@]}" | column -t -s '|'
echo
echo "(msg/s = consume rate over ${DURATION}s, from the DLQ in dead-letter rows; expiry row: seconds from the"
echo " last message's TTL deadline until all reached the DLQ, ratio = RabbitMQ/Charon; CPU = broker user+sys / messages)"
if [ -f "$WORK/results.jsonl" ]; then
    cp "$WORK/results.jsonl" /tmp/bench-compare-last.jsonl
    echo "raw JSON reports: /tmp/bench-compare-last.jsonl"
fi
