#!/usr/bin/env bash
# The test command: builds the workspace, runs Rust tests, then the Python
# end-to-end suite (pika / aio-pika) against target/debug/charon.
# Extra args are passed to pytest (e.g. scripts/test.sh -k confirms).
# Set CHARON_TEST_URL=amqp://guest:guest@127.0.0.1:5672/%2f to run the Python
# suite against an external broker (e.g. RabbitMQ 3.10.8) instead.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

echo "==> cargo build --workspace --all-targets"
cargo build --workspace --all-targets

# The dead-letter archive's tests run a private PostgreSQL cluster (initdb + pg_ctl): Debian's
# postgresql package provides the binaries. Without it those tests skip loudly.
if ! dpkg -s postgresql >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "==> apt-get install postgresql"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }; } \
      || echo "!! could not install postgresql: the PostgreSQL archive tests will skip"
fi

echo "==> cargo test --workspace --no-fail-fast"
# Every test binary runs even when one fails; the exit status still reports the failure.
RUST_STATUS=0
cargo test --workspace --no-fail-fast || RUST_STATUS=$?

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    # Debian's python3 has no venv module (nor ensurepip) without python3-venv.
    if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null && command -v apt-get >/dev/null \
        && ! dpkg -s python3-venv >/dev/null 2>&1; then
        echo "==> apt-get install python3-venv"
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-venv
    fi
    echo "==> creating .venv"
    rm -rf .venv
    "$PY" -m venv .venv
fi
REQ=tests/python/requirements.txt
STAMP=.venv/.requirements.sha
if [ ! -f "$STAMP" ] || ! sha256sum -c --status "$STAMP" 2>/dev/null; then
    echo "==> pip install -r $REQ"
    .venv/bin/pip install --disable-pip-version-check -q -r "$REQ"
    sha256sum "$REQ" > "$STAMP"
fi

# rabbitmqadmin 3.10 for the management tests: Debian's rabbitmq-server package, only unpacked
# (never installed as a service, never started).
if ! command -v rabbitmqadmin >/dev/null 2>&1; then
    echo "==> unpacking rabbitmqadmin from Debian's rabbitmq-server"
    tmp=$(mktemp -d)
    (cd "$tmp" && { apt-get download rabbitmq-server >/dev/null 2>&1 || \
        { apt-get update -qq && apt-get download rabbitmq-server; }; } && \
        dpkg-deb -x rabbitmq-server_*.deb x && \
        install -m 0755 x/usr/bin/rabbitmqadmin /usr/local/bin/rabbitmqadmin)
    rm -rf "$tmp"
fi

# Headless Chromium for the web UI test (installed when missing; the test skips without it).
scripts/ensure-chromium.sh

if [ -z "${CHARON_TEST_URL:-}" ]; then
    export CHARON_BIN="$ROOT/target/debug/charon"
    [ -x "$CHARON_BIN" ] || { echo "missing $CHARON_BIN"; exit 1; }
fi

# TLS tests make their CA with the openssl CLI; the php-amqplib TLS case runs a php script with
# Debian's php-cli and php-amqplib.
if ! command -v openssl >/dev/null 2>&1; then
    echo "==> apt-get install openssl"
    apt-get update -q && apt-get install -y -q openssl
fi
if { ! dpkg -s php-cli >/dev/null 2>&1 || ! dpkg -s php-amqplib >/dev/null 2>&1; } \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "==> apt-get install php-cli php-amqplib"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q php-cli php-amqplib >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q php-cli php-amqplib >/dev/null; }; } \
      || echo "!! could not install php-cli php-amqplib: the php-amqplib TLS test will skip"
fi

echo "==> pytest tests/python"
cd tests/python
PY_STATUS=0
"$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider "$@" || PY_STATUS=$?
if [ "$RUST_STATUS" -ne 0 ]; then
    echo "==> cargo test failed (exit $RUST_STATUS): see above"
    exit "$RUST_STATUS"
fi
exit "$PY_STATUS"
