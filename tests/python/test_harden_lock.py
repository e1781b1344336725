"""Data-directory lock: a second broker on a data directory in use exits with a clear message;
the lock goes with the process (kill -9 included), so a restart is never blocked by it."""

import signal
import subprocess

import pytest

import conftest

pytestmark = pytest.mark.charon_only


def test_second_broker_on_same_data_dir_exits_with_clear_message(tmp_path):
    b = conftest.start_charon(tmp_path / "one")
    try:
        second = subprocess.run(
            [conftest.find_binary(), "server",
             "--amqp-listen", f"127.0.0.1:{conftest.free_port()}",
             "--http-listen", f"127.0.0.1:{conftest.free_port()}",
             "--data-dir", str(b.data_dir)],
            capture_output=True, timeout=60)
        err = second.stderr.decode(errors="replace")
        assert second.returncode != 0, err
        assert "in use by another broker" in err, err
        assert f"pid {b.proc.pid}" in err, err
        # The first broker is untouched and still serves.
        c = b.connect()
        ch = c.channel()
        ch.queue_declare("still-here")
        c.close()
    finally:
        conftest.stop_charon(b)


def test_lock_is_released_by_kill_9(tmp_path):
    b = conftest.start_charon(tmp_path)
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait()
    b2 = conftest.start_charon(tmp_path)
    try:
        c = b2.connect()
        c.channel().queue_declare("after-kill")
        c.close()
    finally:
        conftest.stop_charon(b2)
