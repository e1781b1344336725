#!/usr/bin/env bash
# Ingest pairs for the dead-letter archive (issue 9, docs/archive.md "Benchmark and performance"):
# runs scripts/bench-archive.sh with the base binary and a new binary alternately (new first in
# even rounds, so neither side always runs on the warmer or the quieter minute) and prints one
# table row per run: archived/s and the broker's / the database's CPU µs a record over the
# archive phase, with the load average before the run beside it. Medians per binary at the end.
#
# Usage: scripts/archive-pairs.sh NEWBIN [BACKENDS] [N] [ROUNDS] [extra bench args…]
#   NEWBIN    the binary to compare (e.g. target/release/charon copied elsewhere)
#   BACKENDS  sqlite, postgres or sqlite,postgres (default sqlite,postgres)
#   N         records a run (default 50000); ROUNDS pairs per backend (default 3)
#   BASE=/work/base/charon  the base binary; LOCALE=C.UTF-8 (the PostgreSQL cluster's locale)
#   OUT=DIR   keep every run's output there (default a temp dir, printed at the end)
# The client (`charon bench`) is always the base binary, so only the broker differs.
set -euo pipefail
NEW=${1:?usage: scripts/archive-pairs.sh NEWBIN [sqlite,postgres] [N] [ROUNDS]}
BACKENDS=${2:-sqlite,postgres}; N=${3:-50000}; ROUNDS=${4:-3}
shift $(( $# > 4 ? 4 : $# ))
BASE=${BASE:-/work/base/charon}
LOCALE=${LOCALE:-C.UTF-8}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$(mktemp -d /tmp/archive-pairs.XXXXXX)}
mkdir -p "$OUT"
[ -x "$NEW" ] || { echo "no binary $NEW" >&2; exit 1; }
[ -x "$BASE" ] || { echo "no base binary $BASE" >&2; exit 1; }

run() { # backend label bin round -> one table row
  local backend=$1 label=$2 bin=$3 round=$4 log
  shift 4
  log="$OUT/$backend-$round-$label.log"
  LC_ALL=$LOCALE BIN=$bin CLIENT=$BASE "$HERE/bench-archive.sh" "$backend" "$N" "$@" >"$log" 2>&1 || {
    echo "| $backend | $round | $label | failed, see $log | | | |"; return; }
  local load rate cpu broker db
  load=$(sed -n 's/^load before: \([^ ]*\).*/\1/p' "$log")
  rate=$(sed -n 's/^ *archived: *\([0-9]*\)\/s.*/\1/p' "$log")
  cpu=$(grep 'CPU µs per record' "$log" || true)
  broker=$(sed -n 's/.*archive broker \([0-9.]*\) db.*/\1/p' <<<"$cpu")
  db=$(sed -n 's/.*archive broker [0-9.]* db \([0-9.]*\),.*/\1/p' <<<"$cpu")
  echo "| $backend | $round | $label | $rate | $broker | $db | $load |"
}

echo "N=$N rounds=$ROUNDS base=$BASE new=$NEW locale=$LOCALE $(date -u +%H:%M)"
echo "| backend | round | binary | archived/s | broker µs/record | db µs/record | load before |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for backend in ${BACKENDS//,/ }; do
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then
      run "$backend" base "$BASE" "$r" "$@"; run "$backend" new "$NEW" "$r" "$@"
    else
      run "$backend" new "$NEW" "$r" "$@"; run "$backend" base "$BASE" "$r" "$@"
    fi
  done
done | tee "$OUT/table.md"
echo
# Medians of archived/s and CPU a record per backend and binary.
awk -F'|' '$5 ~ /^ *[0-9]+ *$/ {
    k = $2 "|" $4; gsub(/ /, "", k); n[k]++; r[k, n[k]] = $5 + 0; b[k, n[k]] = $6 + 0; d[k, n[k]] = $7 + 0 }
  function med(a, k, c,   i, j, t, v) { for (i = 1; i <= c; i++) v[i] = a[k, i]
    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2 }
  END { for (k in n) printf "median %s (%d runs): %.0f archived/s, broker %.1f µs, db %.1f µs a record\n",
    k, n[k], med(r, k, n[k]), med(b, k, n[k]), med(d, k, n[k]) }' "$OUT/table.md" | sort
echo "logs: $OUT"
