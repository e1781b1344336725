#!/usr/bin/env bash
# The durability backlog benchmark (issue 4): N x 1 KiB persistent messages published with
# confirms into one durable queue (rate, peak RSS), kill -9, restart (time until the AMQP port
# accepts again), then the backlog consumed. Runs Charon, then RabbitMQ 3.10.8 (unless
# SKIP_RABBITMQ=1), with the same load tool.
#
# Usage: scripts/bench-backlog.sh [path/to/charon]   (default target/release/charon)
# Env: BACKLOG_MESSAGES (default 1000000)
set -u
cd "$(dirname "$0")/.."
BIN=${1:-$(pwd)/target/release/charon}
N=${BACKLOG_MESSAGES:-1000000}
W=$(mktemp -d /tmp/bench-backlog.XXXXXX); chmod 755 "$W"
now() { date +%s.%N; }
wait_port() { until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do sleep 0.05; done; }
publish() { "$BIN" bench --uri "$1" -x 1 -y 0 -s 1024 --persistent --confirm 1000 --pmessages "$N" -z 0 --keep-queues --quiet --broker-pid "$2" --queue-prefix backlog; }
consume() { "$BIN" bench --uri "$1" -x 0 -y 1 -s 1024 --persistent --pmessages "$N" -z 60 --keep-queues --broker-pid "$2" --queue-prefix backlog 2>&1 | grep -v "received: 0 msg/s"; }

echo "== Charon"
start_charon() { "$BIN" server --amqp-listen 127.0.0.1:5830 --http-listen 127.0.0.1:15830 --data-dir "$W/charon" >>"$W/charon.log" 2>&1 & CP=$!; wait_port 5830; }
start_charon
U=amqp://guest:guest@127.0.0.1:5830/%2f
publish "$U" "$CP"
kill -9 "$CP"; wait "$CP" 2>/dev/null
T0=$(now); start_charon; T1=$(now)
echo "restart after kill -9: $(echo "$T1 - $T0" | bc) s until the AMQP port accepts (recovery included)"
consume "$U" "$CP"
kill "$CP"

if [ -z "${SKIP_RABBITMQ:-}" ] && command -v rabbitmq-server >/dev/null; then
    echo "== RabbitMQ"
    mkdir -p "$W/rmq"; echo '[].' >"$W/rmq/enabled_plugins"; chown -R rabbitmq:rabbitmq "$W/rmq" 2>/dev/null
    start_rmq() {
        RABBITMQ_NODENAME=backlog@localhost RABBITMQ_NODE_PORT=5831 RABBITMQ_DIST_PORT=25831 \
            RABBITMQ_MNESIA_BASE=$W/rmq/mnesia RABBITMQ_LOG_BASE=$W/rmq/log \
            RABBITMQ_ENABLED_PLUGINS_FILE=$W/rmq/enabled_plugins setsid rabbitmq-server >>"$W/rmq/out" 2>&1 &
        wait_port 5831
        RP=$(rabbitmqctl -n backlog@localhost status 2>/dev/null | sed -n 's/^OS PID: *//p')
    }
    start_rmq
    U=amqp://guest:guest@127.0.0.1:5831/%2f
    publish "$U" "$RP"
    kill -9 "$RP"; sleep 1; pkill -9 -f "rabbitmq.*backlog@localhost"
    until ! (exec 3<>/dev/tcp/127.0.0.1/5831) 2>/dev/null; do sleep 0.1; done
    T0=$(now); start_rmq; T1=$(now)
    echo "restart after kill -9: $(echo "$T1 - $T0" | bc) s until the AMQP port accepts (queue recovery goes on after)"
    consume "$U" "$RP"
    rabbitmqctl -n backlog@localhost stop >/dev/null 2>&1
fi
rm -rf "$W"
