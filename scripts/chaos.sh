#!/usr/bin/env bash
# kill -9 chaos under load with a proof that every confirmed message ends in exactly one place
# (see scripts/chaos.py). Long form (by hand): scripts/chaos.sh  (50 cycles)
# Short form (run by the test suite): scripts/chaos.sh --cycles 3 --cycle-seconds 1
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
[ -n "${CHARON_BIN:-}" ] || { cargo build -q -p charon; export CHARON_BIN=target/debug/charon; }
exec "$PY" scripts/chaos.py "$@"
