"""Operator policies as RabbitMQ 4.x: set with the real `rabbitmqadmin`, `charon ctl` and
`requests`; only operator keys accepted; merged over the user policy (the smaller max-length wins)
and enforced on a pika client's queue; shown in the queue's `operator_policy` and
`effective_policy_definition`; persisted across kill -9; exported and imported in definitions."""

import json
import shutil
import signal
import subprocess

import pika
import pytest

from conftest import find_binary, start_charon, stop_charon
from mgmt_helpers import Api, wait_for

pytestmark = [pytest.mark.charon_only, pytest.mark.needs_users]


def admin(b, *args, vhost=None, ok=True):
    cmd = ["rabbitmqadmin", "-H", "127.0.0.1", "-P", str(b.http_port), "-u", "guest", "-p", "guest"]
    if vhost:
        cmd += ["-V", vhost]
    r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60)
    if ok:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def ctl(b, *args):
    r = subprocess.run(
        [find_binary(), "ctl", "--url", f"http://127.0.0.1:{b.http_port}", *args],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


@pytest.fixture
def node(tmp_path):
    if shutil.which("rabbitmqadmin") is None:
        pytest.fail("rabbitmqadmin is not installed (scripts/test.sh unpacks it from Debian's rabbitmq-server)")
    b = start_charon(tmp_path)
    yield b
    stop_charon(b)


def publish(b, queue, n, start=0):
    c = b.connect()
    ch = c.channel()
    ch.confirm_delivery()
    for i in range(start, start + n):
        ch.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    c.close()


def ready(api, queue):
    return api.ok(f"/queues/%2F/{queue}")["messages_ready"]


def test_operator_policy_caps_a_user_policy_end_to_end(node, tmp_path):
    b = node
    api = Api(b)
    admin(b, "declare", "policy", "name=user-10", r"pattern=^cap\.", 'definition={"max-length":10}',
          "apply-to=queues", "priority=1")
    admin(b, "declare", "operator_policy", "name=op-2", r"pattern=^cap\.",
          'definition={"max-length":2,"message-ttl":600000}', "apply-to=queues")
    listed = json.loads(admin(b, "-f", "raw_json", "list", "operator_policies").stdout)
    assert listed == [{"vhost": "/", "name": "op-2", "pattern": r"^cap\.", "apply-to": "queues",
                       "definition": {"max-length": 2, "message-ttl": 600000}, "priority": 0}]

    c = b.connect()
    c.channel().queue_declare("cap.q", durable=True)
    c.close()
    publish(b, "cap.q", 5)
    # Drop-head keeps the newest 2: the operator's 2 beats the user policy's 10.
    wait_for(lambda: ready(api, "cap.q") == 2, what="queue capped at 2")
    q = api.ok("/queues/%2F/cap.q")
    assert q["policy"] == "user-10" and q["operator_policy"] == "op-2"
    assert q["effective_policy_definition"] == {"max-length": 2, "message-ttl": 600000}
    c = b.connect()
    ch = c.channel()
    bodies = []
    for _ in range(2):
        _m, _p, body = ch.basic_get("cap.q", auto_ack=True)
        bodies.append(body)
    c.close()
    assert bodies == [b"m3", b"m4"]

    # Only operator-policy keys; administrators only; unknown vhost 404.
    r = api.put("/operator-policies/%2F/bad", {"pattern": ".*", "definition": {"dead-letter-exchange": "x"}})
    assert r.status_code == 400 and "not recognised policy settings" in r.json()["reason"]
    r = api.put("/operator-policies/%2F/bad", {"pattern": ".*", "definition": {"max-length": -1}})
    assert r.status_code == 400
    assert api.put("/operator-policies/nope/x", {"pattern": ".*", "definition": {"max-length": 1}}).status_code == 404
    assert api.put("/users/pm", {"password": "pm", "tags": "policymaker"}).status_code in (201, 204)
    assert api.put("/permissions/%2F/pm", {"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    pm = Api(b, user="pm", password="pm")
    r = pm.put("/operator-policies/%2F/pm-op", {"pattern": ".*", "definition": {"max-length": 1}})
    assert r.status_code == 401 and r.json()["reason"] == "Not administrator user"
    assert [p["name"] for p in pm.ok("/operator-policies/%2F")] == ["op-2"]
    assert api.ok("/operator-policies/%2F/op-2")["definition"]["max-length"] == 2
    assert api.ok("/operator-policies?columns=name,definition.max-length") == \
        [{"name": "op-2", "definition": {"max-length": 2}}]
    page = api.ok("/policies/%2F?page=1&page_size=10")
    assert page["total_count"] == 1 and page["items"][0]["name"] == "user-10"

    # ctl lists, sets and clears them.
    out = ctl(b, "list_operator_policies")
    assert "Listing operator policy overrides" in out and "op-2" in out
    ctl(b, "set_operator_policy", "--apply-to", "queues", "--priority", "3", "ttl-op", "^other$",
        '{"expires":60000}')
    assert api.ok("/operator-policies/%2F/ttl-op")["priority"] == 3
    ctl(b, "clear_operator_policy", "ttl-op")
    assert api.get("/operator-policies/%2F/ttl-op").status_code == 404

    # Exported; survives kill -9.
    exported = api.ok("/definitions")
    assert [p["name"] for p in exported["operator_policies"]] == ["op-2"]
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(30)
    b = start_charon(tmp_path)
    try:
        api = Api(b)
        assert api.ok("/queues/%2F/cap.q")["operator_policy"] == "op-2"
        publish(b, "cap.q", 5)
        wait_for(lambda: ready(api, "cap.q") == 2, what="still capped at 2 after kill -9")
        # Deleting the operator policy lifts the cap to the user policy's 10 at once.
        admin(b, "delete", "operator_policy", "name=op-2")
        q = api.ok("/queues/%2F/cap.q")
        assert q["operator_policy"] is None and q["effective_policy_definition"] == {"max-length": 10}
        publish(b, "cap.q", 12, start=10)
        wait_for(lambda: ready(api, "cap.q") == 10, what="capped at 10 by the user policy")
        # The export imports back (into the same broker: the operator policy returns).
        r = api.post("/definitions", {"operator_policies": exported["operator_policies"]})
        assert r.status_code in (200, 201, 204), r.text
        wait_for(lambda: api.ok("/queues/%2F/cap.q")["operator_policy"] == "op-2", what="re-imported")
        wait_for(lambda: ready(api, "cap.q") == 2, what="capped again after import")
    finally:
        stop_charon(b)
