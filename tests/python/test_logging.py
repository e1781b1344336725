"""Operations basics of the log: plain lines without ANSI colour when stderr is not a terminal,
`log_format = "json"`, RUST_LOG-style filters, and failed logins and connection opens/closes
logged at info (as RabbitMQ does)."""

import json
import os
import subprocess
import time

import pika
import pytest

import conftest

pytestmark = pytest.mark.charon_only

BOUND = 60.0


def wait_for_log(path, needle, bound=BOUND):
    deadline = time.monotonic() + bound
    while True:
        text = path.read_text(errors="replace")
        if needle in text:
            return text
        assert time.monotonic() < deadline, f"{needle!r} never logged:\n{text[-2000:]}"
        time.sleep(0.05)


def connect_fail_and_close(b):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        b.connect(user="guest", password="wrong")
    c = b.connect()
    c.channel()
    c.close()


def test_text_log_in_a_file_has_no_ansi_and_logs_logins_and_connections(tmp_path):
    b = conftest.start_charon(tmp_path)
    try:
        connect_fail_and_close(b)
        text = wait_for_log(b.log_path, "closing AMQP connection")
        assert "\x1b[" not in text
        assert "login refused: user 'guest' - invalid credentials" in text
        assert "user 'guest' authenticated and granted access to vhost '/'" in text
        opened = [line for line in text.splitlines() if "granted access to vhost" in line]
        assert opened and " INFO " in opened[0]
    finally:
        conftest.stop_charon(b)


def test_json_log_format_writes_one_object_per_line(tmp_path):
    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n", 'heartbeat = 60\nlog_format = "json"\n', 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        connect_fail_and_close(b)
        text = wait_for_log(b.log_path, "closing AMQP connection")
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert records
        for r in records:
            assert {"timestamp", "level", "target", "fields"} <= r.keys(), r
        msgs = [(r["level"], r["fields"].get("message", "")) for r in records]
        assert any(level == "INFO" and m.startswith("closing AMQP connection") for level, m in msgs)
        refused = [r for r in records if "login refused" in r["fields"].get("message", "")]
        assert refused and refused[0]["fields"]["user"] == "guest"
    finally:
        conftest.stop_charon(b)


def start_plain(tmp_path, env):
    """The broker without --log-level, so RUST_LOG decides."""
    amqp, http = conftest.free_port(), conftest.free_port()
    (tmp_path / "data").mkdir(exist_ok=True)
    log_path = tmp_path / "charon.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARON_")} | env
    proc = subprocess.Popen(
        [conftest.find_binary(), "server", "--amqp-listen", f"127.0.0.1:{amqp}",
         "--http-listen", f"127.0.0.1:{http}", "--data-dir", str(tmp_path / "data")],
        stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, env=env)
    conftest.wait_port("127.0.0.1", amqp, timeout=BOUND, proc=proc)
    return conftest.Broker("127.0.0.1", amqp, http_port=http, proc=proc, log_path=log_path)


def test_rust_log_filters_by_level_and_target(tmp_path):
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    b = start_plain(quiet, {"RUST_LOG": "warn"})
    try:
        c = b.connect()
        c.close()
        conftest.stop_charon(b)
        text = b.log_path.read_text(errors="replace")
        assert "granted access to vhost" not in text and "charon started" not in text
    finally:
        conftest.stop_charon(b)
    loud = tmp_path / "loud"
    loud.mkdir()
    b = start_plain(loud, {"RUST_LOG": "warn,charon_server::connection=info,charon_server::admin=info"})
    try:
        c = b.connect()
        c.close()
        text = wait_for_log(b.log_path, "closing AMQP connection")
        assert "granted access to vhost" in text
        assert "charon started" not in text  # target `charon` stays at warn
    finally:
        conftest.stop_charon(b)


def test_an_invalid_log_filter_stops_startup_with_a_message(tmp_path):
    r = subprocess.run(
        [conftest.find_binary(), "server", "--amqp-listen", f"127.0.0.1:{conftest.free_port()}",
         "--http-listen", f"127.0.0.1:{conftest.free_port()}", "--data-dir", str(tmp_path),
         "--log-level", "info,[[[bad"],
        capture_output=True, text=True, timeout=BOUND)
    assert r.returncode != 0
    assert "invalid log filter" in r.stderr
