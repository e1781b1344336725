#!/usr/bin/env bash
# Instructions per record of the broker's archive phase (docs/archive.md "Eighth round"): runs the
# release broker under `valgrind --tool=callgrind`, zeroes its counters before `charon bench
# --scenario archive` publishes, and dumps them once the archive holds all N records (the replay
# and queries that follow are not counted). Read with `callgrind_annotate --inclusive=yes OUT.<pid>.1`
# and divide by N. Needs valgrind, curl, python3.
#
# Usage: scripts/callgrind-archive.sh [N=5000] [OUT=/tmp/callgrind-archive]   BIN=target/release/charon
set -u
N=${1:-5000}; OUT=${2:-/tmp/callgrind-archive}; BIN=${BIN:-target/release/charon}
W=$(mktemp -d /tmp/callgrind-archive.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P=$(free_port); H=$(free_port)
printf 'heartbeat = 60\narchive_max_bytes = 0\n[[users]]\nname = "guest"\npassword = "guest"\ntags = ["administrator"]\n' > "$W/charon.toml"
valgrind --tool=callgrind --callgrind-out-file="$OUT.%p" "$BIN" server --amqp-listen 127.0.0.1:$P \
  --http-listen 127.0.0.1:$H --data-dir "$W/data" --config "$W/charon.toml" --log-level warn > "$W/log" 2>&1 &
VPID=$!
for _ in $(seq 600); do (echo > /dev/tcp/127.0.0.1/$P) 2>/dev/null && break; sleep 0.2; done
# The archive is created and migrated by a one-message run first (WARM=0 skips it): otherwise the
# migrations, the schema loads and every connection's first statements fall inside the window
# (at N=5000 they were ~20 % of the counted instructions).
if [ "${WARM:-1}" != 0 ]; then
  "$BIN" bench --uri "amqp://guest:guest@127.0.0.1:$P/%2f" --http-url "http://127.0.0.1:$H" \
    --scenario archive --pmessages 1 --size 16 --quiet --queue-prefix warm > "$W/warm.log" 2>&1
  WARMED=1  # its record is counted by the poll below
fi
callgrind_control -z $VPID >/dev/null
"$BIN" bench --uri "amqp://guest:guest@127.0.0.1:$P/%2f" --http-url "http://127.0.0.1:$H" \
  --scenario archive --pmessages "$N" --size 1024 --quiet > "$W/bench.log" 2>&1 &
BPID=$!
c=0
for _ in $(seq 3000); do
  c=$(curl -s -u guest:guest "http://127.0.0.1:$H/api/dead-letters/groups?by=queue" \
    | python3 -c 'import sys,json; print(sum(g["count"] for g in json.load(sys.stdin)))' 2>/dev/null || echo 0)
  [ "${c:-0}" -ge "$((N + ${WARMED:-0}))" ] && break; sleep 0.2
done
callgrind_control -d $VPID >/dev/null
echo "archived $c records; archive phase in $OUT.$VPID.1"
kill $BPID 2>/dev/null; kill $VPID; wait $VPID 2>/dev/null
rm -rf "$W"
