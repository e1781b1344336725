#!/usr/bin/env bash
# The dead-letter archive benchmark (issue 9, docs/archive.md "Performance"): starts a broker
# (release build) on SQLite or on a private PostgreSQL 15 cluster (initdb + pg_ctl in a temp dir,
# default fsync), runs `charon bench --scenario archive`, and prints the load average and the CPU
# seconds the broker and PostgreSQL used (from /proc/PID/stat) per archived record.
#
# Usage: scripts/bench-archive.sh sqlite|postgres [N] [extra bench args…, e.g. --archive-preload 1000000]
#   BIN=target/release/charon  CLIENT=BIN (the binary whose `charon bench` is the client; default BIN)
#   PERF=1 (record the broker with perf into $W/perf.data)
#   KEEP=1 (keep the work dir)
#   FILL=N insert N dead-letter rows with SQL before the run (PostgreSQL: generate_series, SQLite:
#   a recursive CTE; 100k per transaction), so that the queries run over a big archive quickly;
#   the summary triggers fire as for any insert
set -euo pipefail
BACKEND=${1:-sqlite}; N=${2:-100000}; shift $(( $# > 2 ? 2 : $# )) || true
BIN=${BIN:-target/release/charon}
W=$(mktemp -d /tmp/bench-archive.XXXXXX); chmod 755 "$W"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P=$(free_port); H=$(free_port)
ticks() { awk '{print $14+$15+$16+$17}' "/proc/$1/stat" 2>/dev/null || echo 0; }
sys_ticks() { awk '{print $15+$17}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_ticks() { # the postmaster (with its reaped children) + live backends
  local pm=$1 t; t=$(ticks "$pm")
  for c in $(grep -l "^PPid:[[:space:]]*$pm\$" /proc/[0-9]*/status 2>/dev/null | cut -d/ -f3); do
    t=$((t + $(awk '{print $14+$15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
  done; echo "$t"; }
PGPID=""; URL=""
cleanup() {
  [ -n "${CPID:-}" ] && kill "$CPID" 2>/dev/null && wait "$CPID" 2>/dev/null || true
  if [ -n "$PGPID" ]; then runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg/data" -m immediate stop >/dev/null 2>&1 || true; fi
  [ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT
if [ "$BACKEND" = postgres ]; then
  PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort | tail -1)")
  PGP=$(free_port); mkdir -p "$W/pg"; chown postgres:postgres "$W/pg"
  runuser -u postgres -- "$PGBIN/initdb" -D "$W/pg/data" -U postgres --auth=trust -E UTF8 >/dev/null
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg/data" -o "-p $PGP -k $W/pg -c listen_addresses=127.0.0.1 -c max_wal_size=4GB" -l "$W/pg/log" -w start >/dev/null
  PGPID=$(head -1 "$W/pg/data/postmaster.pid")
  URL="postgresql://postgres@127.0.0.1:$PGP/postgres"
fi
printf 'heartbeat = 60\narchive_max_bytes = 0\n%s\n[[users]]\nname = "guest"\npassword = "guest"\ntags = ["administrator"]\n' \
  "${URL:+archive_url = \"$URL\"}" > "$W/charon.toml"
"$BIN" server --amqp-listen 127.0.0.1:$P --http-listen 127.0.0.1:$H --data-dir "$W/data" \
  --config "$W/charon.toml" --log-level warn > "$W/charon.log" 2>&1 &
CPID=$!
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$P) 2>/dev/null && break; sleep 0.2; done
if [ -n "${PERF:-}" ]; then perf record -F 499 -g -p "$CPID" -o "$W/perf.data" 2>/dev/null & PERFPID=$!; fi
if [ -n "${FILL:-}" ] && [ -n "$PGPID" ]; then
  for _ in $(seq 100); do runuser -u postgres -- "$PGBIN/psql" -qAt -h 127.0.0.1 -p "$PGP" -U postgres -c "SELECT 1 FROM archive_migrations WHERE version = 3" 2>/dev/null | grep -q 1 && break; sleep 0.5; done
  T0=$(date +%s.%N); done_=0
  while [ "$done_" -lt "$FILL" ]; do
    k=$(( FILL - done_ < 100000 ? FILL - done_ : 100000 ))
    runuser -u postgres -- "$PGBIN/psql" -q -h 127.0.0.1 -p "$PGP" -U postgres -v ON_ERROR_STOP=1 -c "
      INSERT INTO dead_letters (stable_key, vhost, queue, original_queue, original_exchange, original_routing_keys, reason, death_count,
        message_id, correlation_id, message_key, content_type, properties, headers, amqp_properties, payload, payload_bytes,
        error_message, error_stacktrace, error_fingerprint, status, created_at, updated_at)
      SELECT 'fill:' || g, '/', 'fill', 'orders-' || (g % 20), 'orders', '[\"orders-' || (g % 20) || '\"]', 'rejected', 1,
        'f-' || g, NULL, 'f-' || g, 'application/json', '{\"content_type\":\"application/json\",\"delivery_mode\":2}',
        '{\"x-exception-message\":\"Order ' || g || ' could not be processed: cause ' || (g % 10) || '\",\"x-first-death-queue\":\"orders-' || (g % 20) || '\",\"x-first-death-reason\":\"rejected\"}',
        ''::bytea, convert_to(repeat('x', 1024), 'UTF8'), 1024,
        'Order ' || g || ' could not be processed: cause ' || (g % 10), NULL, lpad(to_hex(g % 10), 16, '0'),
        (ARRAY['PENDING','PENDING','PENDING','REPLAYED','SKIPPED'])[1 + g % 5],
        (extract(epoch from now()) * 1000)::bigint - 86400000 + g, (extract(epoch from now()) * 1000)::bigint - 86400000 + g
      FROM generate_series($((done_ + 1)), $((done_ + k))) AS g"
    done_=$((done_ + k))
  done
  runuser -u postgres -- "$PGBIN/psql" -q -h 127.0.0.1 -p "$PGP" -U postgres -c "VACUUM ANALYZE dead_letters" >/dev/null
  echo "filled $FILL rows with SQL in $(echo "$(date +%s.%N) - $T0" | bc)s"
fi
if [ -n "${FILL:-}" ] && [ -z "$PGPID" ]; then
  # The broker creates and migrates archive.db once an archive queue exists: the bench's own.
  "${CLIENT:-$BIN}" bench --uri "amqp://guest:guest@127.0.0.1:$P/%2f" --http-url "http://127.0.0.1:$H" \
    --scenario archive --pmessages 1 --size 16 --quiet --queue-prefix fill-init >/dev/null
  T0=$(date +%s.%N)
  python3 - "$W/data/archive.db" "$FILL" <<'PY'
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], timeout=60)
n, done = int(sys.argv[2]), 0
now = int(time.time() * 1000) - 86400000
while done < n:
    k = min(100000, n - done)
    c.execute("""WITH RECURSIVE g(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM g WHERE i < ?)
      INSERT INTO dead_letters (stable_key, vhost, queue, original_queue, original_exchange, original_routing_keys, reason, death_count,
        message_id, correlation_id, message_key, content_type, properties, headers, amqp_properties, payload, payload_bytes,
        error_message, error_stacktrace, error_fingerprint, status, created_at, updated_at)
      SELECT 'fill:' || i, '/', 'fill', 'orders-' || (i % 20), 'orders', '["orders-' || (i % 20) || '"]', 'rejected', 1,
        'f-' || i, NULL, 'f-' || i, 'application/json', '{"content_type":"application/json","delivery_mode":2}',
        '{"x-exception-message":"Order ' || i || ' could not be processed: cause ' || (i % 10) || '","x-first-death-queue":"orders-' || (i % 20) || '"}',
        x'', zeroblob(1024), 1024, 'Order ' || i || ' could not be processed: cause ' || (i % 10), NULL, printf('%016x', i % 10),
        CASE i % 5 WHEN 3 THEN 'REPLAYED' WHEN 4 THEN 'SKIPPED' ELSE 'PENDING' END, ? + i, ? + i
      FROM g""", (done + 1, done + k, now, now))
    c.commit()
    done += k
PY
  echo "filled $FILL rows with SQL in $(echo "$(date +%s.%N) - $T0" | bc)s"
fi
B0=$(ticks $CPID); S0=$(sys_ticks $CPID); G0=0; [ -n "$PGPID" ] && G0=$(pg_ticks "$PGPID")
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"${CLIENT:-$BIN}" bench --uri "amqp://guest:guest@127.0.0.1:$P/%2f" --http-url "http://127.0.0.1:$H" \
  --scenario archive --pmessages "$N" --size 1024 --broker-pid "$CPID" ${PGPID:+--db-pid "$PGPID"} "$@"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
B1=$(ticks $CPID); S1=$(sys_ticks $CPID); G1=0; [ -n "$PGPID" ] && G1=$(pg_ticks "$PGPID")
HZ=$(getconf CLK_TCK)
awk -v b=$((B1-B0)) -v s=$((S1-S0)) -v g=$((G1-G0)) -v hz=$HZ -v n=$N 'BEGIN{printf "CPU over the whole run (archive + replay + queries): broker %.1fs (%.0f us/record, of which kernel %.0f), postgres %.1fs (%.0f us/record)\n", b/hz, b/hz/n*1e6, s/hz/n*1e6, g/hz, g/hz/n*1e6}'
if [ -n "${PERF:-}" ]; then kill -INT "$PERFPID"; wait "$PERFPID" || true; perf report -i "$W/perf.data" --no-children --sort dso,symbol --stdio 2>/dev/null | grep -v '^#' | grep '%' | head -40; fi
