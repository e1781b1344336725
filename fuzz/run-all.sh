#!/usr/bin/env bash
# Runs every fuzz target for FUZZ_SECONDS (default 600) each, one at a time, at the lowest
# priority, keeping the corpus in fuzz/corpus/<target>. Stable toolchain via RUSTC_BOOTSTRAP.
# Usage: fuzz/run-all.sh [target...]
set -uo pipefail
cd "$(dirname "$0")"
SECS=${FUZZ_SECONDS:-600}
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(frame_decode properties_decode field_table_decode method_decode store_records store_segments)
status=0
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t"
    echo "==> $t for ${SECS}s"
    RUSTC_BOOTSTRAP=1 nice -n 19 cargo fuzz run -O "$t" "corpus/$t" -- -max_total_time="$SECS" -print_final_stats=1 2>&1 | tail -25
    rc=${PIPESTATUS[0]}
    echo "==> $t exit $rc"
    [ "$rc" -eq 0 ] || status=1
done
exit $status
