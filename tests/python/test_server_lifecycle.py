"""Tests of the Charon process itself (config file, HTTP health, signals).
They start their own broker, so they are skipped against an external one."""
import json
import signal
import time
import urllib.request

import pika
import pytest
from pamqp import commands

from amqp_raw import RawClient

pytestmark = pytest.mark.charon_only


def test_http_health_endpoint(private_charon):
    with urllib.request.urlopen(f"http://127.0.0.1:{private_charon.http_port}/api/health",
                                timeout=5) as r:
        assert r.status == 200
        assert json.loads(r.read()) == {"status": "ok"}


def test_configured_user_and_vhost_work(private_charon):
    c = private_charon.connect(user="alice", password="secret", vhost="other")
    ch = c.channel()
    ch.confirm_delivery()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"x")
    assert ch.basic_get(q, auto_ack=True)[2] == b"x"
    c.close()


def test_sigterm_sends_320_connection_forced_and_exits_0(private_charon):
    with RawClient(private_charon.host, private_charon.port) as c:
        f = c.handshake()
        assert isinstance(f.method, commands.Connection.OpenOk)
        private_charon.proc.send_signal(signal.SIGTERM)
        f = c.read_frame_skip_heartbeats(10)
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 320
        assert f.method.reply_text.startswith("CONNECTION_FORCED")
        c.send_frame(commands.Connection.CloseOk(), 0)
    assert private_charon.proc.wait(15) == 0


def test_sigint_exits_0(private_charon):
    private_charon.proc.send_signal(signal.SIGINT)
    assert private_charon.proc.wait(15) == 0


def test_durable_queue_and_persistent_message_survive_restart(tmp_path):
    import conftest
    b = conftest.start_charon(tmp_path)
    try:
        c = b.connect()
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("durable-q", durable=True)
        ch.basic_publish("", "durable-q", b"persist", pika.BasicProperties(delivery_mode=2))
        c.close()
    finally:
        conftest.stop_charon(b)
    # restart on the same data dir
    import subprocess
    b2 = conftest.start_charon(tmp_path)
    try:
        c = b2.connect()
        ch = c.channel()
        m, p, body = ch.basic_get("durable-q", auto_ack=True)
        assert body == b"persist"
        c.close()
    finally:
        conftest.stop_charon(b2)
