#!/bin/bash
# Issue 10 figures: retry cycles/s and broker CPU µs per cycle for Charon's retry policy,
# Charon running seed 003's manual topology and another broker (RabbitMQ) running the same
# manual topology, in one run, alternating.
#
# usage: scripts/retry-compare.sh CHARON_BIN MESSAGES ROUNDS OTHER_AMQP_PORT OTHER_PID [bench args]
# e.g.   scripts/retry-compare.sh target/release/charon 30000 3 5694 "$(pgrep -u rabbitmq beam.smp)" --message-ids
# Starts its own Charon (in-memory data dir under $TMPDIR) on 127.0.0.1:5811; prints one line per
# run: round, target, load average, the bench's JSON report.
set -u
BIN=$1; N=$2; R=$3; OTHER_PORT=$4; OTHER_PID=$5; shift 5
DATA=$(mktemp -d)
"$BIN" server --amqp-listen 127.0.0.1:5811 --http-listen 127.0.0.1:15811 --data-dir "$DATA" >"$DATA.log" 2>&1 &
CPID=$!
for _ in $(seq 1 60); do (echo >/dev/tcp/127.0.0.1/5811) 2>/dev/null && break; sleep 0.5; done
for r in $(seq 1 "$R"); do
    for t in native manual other; do
        case $t in
            native) port=5811; mode=native; pid=$CPID ;;
            manual) port=5811; mode=manual; pid=$CPID ;;
            other) port=$OTHER_PORT; mode=manual; pid=$OTHER_PID ;;
        esac
        out=$("$BIN" bench --uri "amqp://guest:guest@127.0.0.1:$port/%2f" --scenario retry \
            --retry-mode "$mode" --pmessages "$N" --broker-pid "$pid" --json "$@" 2>&1)
        echo "round=$r target=$t load=$(cut -d' ' -f1-3 /proc/loadavg) $out"
    done
done
kill "$CPID"; wait "$CPID" 2>/dev/null
rm -rf "$DATA" "$DATA.log"
