"""Topic permissions as RabbitMQ: `/api/topic-permissions` and `charon ctl
set/clear/list_topic_permissions`; a pika client publishing to a topic exchange is refused (403,
RabbitMQ's text) for routing keys outside its `write` pattern (`{username}` expanded), binding
outside `read`; other exchanges unaffected; persisted across kill -9; in definitions."""

import signal
import subprocess

import pika
import pytest

from conftest import find_binary, start_charon, stop_charon
from mgmt_helpers import Api

pytestmark = [pytest.mark.charon_only, pytest.mark.needs_users]


def ctl(b, *args):
    r = subprocess.run(
        [find_binary(), "ctl", "--url", f"http://127.0.0.1:{b.http_port}", *args],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def publish(b, exchange, key):
    c = b.connect(user="tp", password="tp")
    ch = c.channel()
    ch.confirm_delivery()
    try:
        ch.basic_publish(exchange, key, b"m")
        return None
    except pika.exceptions.ChannelClosedByBroker as e:
        return (e.reply_code, e.reply_text)
    finally:
        if c.is_open:
            c.close()


def bind(b, key):
    c = b.connect(user="tp", password="tp")
    ch = c.channel()
    try:
        ch.queue_declare("tp.q")
        ch.queue_bind("tp.q", "amq.topic", key)
        return None
    except pika.exceptions.ChannelClosedByBroker as e:
        return (e.reply_code, e.reply_text)
    finally:
        if c.is_open:
            c.close()


def test_topic_permissions_enforced_persisted_exported(tmp_path):
    b = start_charon(tmp_path)
    try:
        api = Api(b)
        assert api.put("/users/tp", {"password": "tp", "tags": "management"}).status_code == 201
        assert api.put("/permissions/%2F/tp", {"configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
        r = api.put("/topic-permissions/%2F/tp", {"exchange": "amq.topic", "write": "^{username}\\.", "read": "^tp\\."})
        assert r.status_code == 201, r.text
        assert api.ok("/topic-permissions") == [
            {"user": "tp", "vhost": "/", "exchange": "amq.topic", "write": "^{username}\\.", "read": "^tp\\."}]
        assert api.put("/topic-permissions/%2F/nobody", {"exchange": "amq.topic", "write": ".*", "read": ".*"}).status_code == 400
        assert api.put("/topic-permissions/%2F/tp", {"exchange": "amq.topic", "write": "(", "read": ".*"}).status_code == 400
        assert Api(b, user="tp", password="tp").get("/topic-permissions").status_code == 401

        assert publish(b, "amq.topic", "tp.a") is None
        assert publish(b, "amq.topic", "other.a") == (
            403, "ACCESS_REFUSED - write access to topic 'other.a' in exchange 'amq.topic' in vhost '/' refused for user 'tp'")
        assert publish(b, "amq.direct", "other.a") is None
        assert bind(b, "tp.#") is None
        assert bind(b, "x.#") == (
            403, "ACCESS_REFUSED - read access to topic 'x.#' in exchange 'amq.topic' in vhost '/' refused for user 'tp'")
        # The management API's publish checks it too.
        r = Api(b, user="tp", password="tp").post("/exchanges/%2F/amq.topic/publish",
                                                  {"routing_key": "other.b", "payload": "x", "payload_encoding": "string", "properties": {}})
        assert r.status_code == 401 and "write access to topic 'other.b'" in r.json()["reason"]

        out = ctl(b, "list_topic_permissions")
        assert "tp\tamq.topic\t^{username}\\.\t^tp\\." in out
        exported = api.ok("/definitions")["topic_permissions"]
        assert exported == [{"user": "tp", "vhost": "/", "exchange": "amq.topic", "write": "^{username}\\.", "read": "^tp\\."}]

        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(30)
        b = start_charon(tmp_path)
        api = Api(b)
        assert publish(b, "amq.topic", "other.a")[0] == 403
        ctl(b, "clear_topic_permissions", "tp")
        assert api.ok("/topic-permissions") == []
        assert publish(b, "amq.topic", "other.a") is None
        # Imported back from the export.
        assert api.post("/definitions", {"topic_permissions": exported}).status_code in (200, 201, 204)
        assert api.ok("/users/tp/topic-permissions") == exported
        ctl(b, "set_topic_permissions", "tp", "amq.topic", ".*", ".*")
        assert publish(b, "amq.topic", "other.a") is None
        assert api.delete("/topic-permissions/%2F/tp").status_code == 204
        assert api.delete("/topic-permissions/%2F/tp").status_code == 404
    finally:
        stop_charon(b)
