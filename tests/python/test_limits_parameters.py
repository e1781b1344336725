"""Vhost and user limits, runtime and global parameters over the management API as RabbitMQ 3.10:
set with the real `rabbitmqadmin`, `charon ctl` and `requests`, enforced on AMQP, persisted across
kill -9, exported and imported in definitions. Runtime/global parameters are inert JSON."""

import json
import shutil
import signal
import subprocess

import pika
import pytest

from conftest import find_binary, start_charon, stop_charon
from mgmt_helpers import Api

pytestmark = [pytest.mark.charon_only, pytest.mark.needs_users]


def admin(b, *args, vhost=None):
    cmd = ["rabbitmqadmin", "-H", "127.0.0.1", "-P", str(b.http_port), "-u", "guest", "-p", "guest"]
    if vhost:
        cmd += ["-V", vhost]
    r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


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


def test_vhost_limits_with_rabbitmqadmin_enforced_and_persisted(node, tmp_path):
    b = node
    api = Api(b)
    admin(b, "declare", "vhost", "name=lim-v")
    admin(b, "declare", "vhost_limit", "vhost=lim-v", "name=max-queues", "value=1")
    admin(b, "declare", "vhost_limit", "vhost=lim-v", "name=max-connections", "value=1")
    listed = json.loads(admin(b, "-f", "raw_json", "list", "vhost_limits"))
    assert {"vhost": "lim-v", "value": {"max-queues": 1, "max-connections": 1}} in listed
    assert api.ok("/vhost-limits/lim-v") == [{"vhost": "lim-v", "value": {"max-queues": 1, "max-connections": 1}}]
    # RabbitMQ shows vhost limits as the runtime parameter vhost-limits/limits too.
    assert {"component": "vhost-limits", "vhost": "lim-v", "name": "limits",
            "value": {"max-queues": 1, "max-connections": 1}} in api.ok("/parameters")
    # Unknown limit names and non-integer values are refused.
    r = api.put("/vhost-limits/lim-v/max-widgets", {"value": 1})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert api.put("/vhost-limits/lim-v/max-queues", {"value": "x"}).status_code == 400
    assert api.put("/vhost-limits/no-such-vhost/max-queues", {"value": 1}).status_code == 404

    c = b.connect(vhost="lim-v")
    ch = c.channel()
    ch.queue_declare("lq1")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare("lq2")
    assert e.value.reply_code == 406 and "queue limit" in e.value.reply_text
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        b.connect(vhost="lim-v")
    c.close()

    # The limits survive kill -9.
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(30)
    b = start_charon(tmp_path)
    try:
        api = Api(b)
        assert api.ok("/vhost-limits/lim-v") == [{"vhost": "lim-v", "value": {"max-queues": 1, "max-connections": 1}}]
        c = b.connect(vhost="lim-v")
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            b.connect(vhost="lim-v")
        c.close()
        admin(b, "delete", "vhost_limit", "vhost=lim-v", "name=max-connections")
        assert api.ok("/vhost-limits/lim-v") == [{"vhost": "lim-v", "value": {"max-queues": 1}}]
        c1, c2 = b.connect(vhost="lim-v"), b.connect(vhost="lim-v")
        c1.close()
        c2.close()
        # ctl: set, list, clear.
        ctl(b, "-p", "lim-v", "set_vhost_limits", '{"max-connections": 0, "max-queues": 5}')
        out = ctl(b, "-p", "lim-v", "list_vhost_limits")
        assert '"max-connections":0' in out.replace(" ", "") and '"max-queues":5' in out.replace(" ", "")
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            b.connect(vhost="lim-v")
        ctl(b, "-p", "lim-v", "clear_vhost_limits")
        assert api.ok("/vhost-limits") == []
        b.connect(vhost="lim-v").close()
    finally:
        stop_charon(b)


def test_user_limits_with_requests_and_ctl_enforced_and_exported(node):
    b = node
    api = Api(b)
    assert api.put("/users/lim-u", {"password": "pw", "tags": ""}).status_code == 201
    assert api.put("/permissions/%2F/lim-u", {"configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
    assert api.put("/user-limits/lim-u/max-channels", {"value": 1}).status_code == 204
    # The user's own record shows its limits, as RabbitMQ's /api/users does.
    assert api.ok("/users/lim-u")["limits"] == {"max-channels": 1}
    assert next(u for u in api.ok("/users") if u["name"] == "lim-u")["limits"] == {"max-channels": 1}
    assert api.put("/user-limits/lim-u/max-widgets", {"value": 1}).status_code == 400
    assert api.put("/user-limits/nobody/max-channels", {"value": 1}).status_code == 404
    assert api.ok("/user-limits/lim-u") == [{"user": "lim-u", "value": {"max-channels": 1}}]
    c = b.connect(user="lim-u", password="pw")
    c.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
        c.channel()
    ctl(b, "set_user_limits", "lim-u", '{"max-connections": 1, "max-channels": 10}')
    assert api.ok("/user-limits") == [{"user": "lim-u", "value": {"max-connections": 1, "max-channels": 10}}]
    c = b.connect(user="lim-u", password="pw")
    c.channel()
    c.channel()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        b.connect(user="lim-u", password="pw")
    c.close()
    # Exported with the user, as RabbitMQ does; imported into a fresh broker.
    defs = api.ok("/definitions")
    mine = [u for u in defs["users"] if u["name"] == "lim-u"][0]
    assert mine["limits"] == {"max-connections": 1, "max-channels": 10}
    ctl(b, "clear_user_limits", "lim-u", "max-connections")
    assert api.ok("/user-limits/lim-u") == [{"user": "lim-u", "value": {"max-channels": 10}}]
    ctl(b, "clear_user_limits", "lim-u", "all")
    assert api.ok("/user-limits") == []
    b.connect(user="lim-u", password="pw").close()
    assert api.post("/definitions", defs).status_code in (200, 201, 204)
    assert api.ok("/user-limits/lim-u") == [{"user": "lim-u", "value": {"max-connections": 1, "max-channels": 10}}]


def test_runtime_and_global_parameters_inert_persisted_exported(node, tmp_path):
    b = node
    api = Api(b)
    upstream = {"uri": "amqp://elsewhere", "prefetch-count": 100}
    admin(b, "declare", "parameter", "component=federation-upstream", "name=up1",
          f"value={json.dumps(upstream)}")
    params = json.loads(admin(b, "-f", "raw_json", "list", "parameters"))
    assert {"component": "federation-upstream", "vhost": "/", "name": "up1", "value": upstream} in params
    assert api.ok("/parameters/federation-upstream/%2F/up1")["value"] == upstream
    assert api.put("/global-parameters/my-flag", {"value": {"on": True}}).status_code == 201
    assert api.ok("/global-parameters/my-flag") == {"name": "my-flag", "value": {"on": True}}
    names = [g["name"] for g in api.ok("/global-parameters")]
    assert "my-flag" in names and "internal_cluster_id" in names
    defs = api.ok("/definitions")
    assert {"component": "federation-upstream", "vhost": "/", "name": "up1", "value": upstream} in defs["parameters"]
    assert {"name": "my-flag", "value": {"on": True}} in defs["global_parameters"]
    # Survive kill -9.
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(30)
    b2 = start_charon(tmp_path)
    try:
        api2 = Api(b2)
        assert api2.ok("/parameters/federation-upstream/%2F/up1")["value"] == upstream
        assert api2.ok("/global-parameters/my-flag")["value"] == {"on": True}
        admin(b2, "delete", "parameter", "component=federation-upstream", "name=up1")
        assert api2.get("/parameters/federation-upstream/%2F/up1").status_code == 404
        assert api2.delete("/global-parameters/my-flag").status_code == 204
        assert api2.get("/global-parameters/my-flag").status_code == 404
        # Imported back from the export.
        assert api2.post("/definitions", defs).status_code in (200, 201, 204)
        assert api2.ok("/parameters/federation-upstream/%2F/up1")["value"] == upstream
        assert api2.ok("/global-parameters/my-flag")["value"] == {"on": True}
    finally:
        stop_charon(b2)


def test_deleting_a_vhost_forgets_its_limits_and_parameters(node):
    # RabbitMQ removes a vhost's limits and runtime parameters with it: a vhost created again under
    # the same name starts without them.
    b = node
    api = Api(b)
    admin(b, "declare", "vhost", "name=gone-v")
    admin(b, "declare", "vhost_limit", "vhost=gone-v", "name=max-queues", "value=1")
    admin(b, "declare", "parameter", "component=federation-upstream", "name=up", "value={}", vhost="gone-v")
    assert api.ok("/vhost-limits/gone-v") == [{"vhost": "gone-v", "value": {"max-queues": 1}}]
    assert api.get("/parameters/federation-upstream/gone-v/up").status_code == 200
    admin(b, "delete", "vhost", "name=gone-v")
    admin(b, "declare", "vhost", "name=gone-v")
    assert api.ok("/vhost-limits/gone-v") in ([], [{"vhost": "gone-v", "value": {}}])
    assert api.get("/parameters/federation-upstream/gone-v/up").status_code == 404
    # The recreated vhost takes two queues again.
    admin(b, "declare", "permission", "vhost=gone-v", "user=guest", "configure=.*", "write=.*", "read=.*")
    admin(b, "declare", "queue", "name=q1", vhost="gone-v")
    admin(b, "declare", "queue", "name=q2", vhost="gone-v")


def test_management_queue_declare_respects_max_queues(node):
    api = Api(node)
    assert api.put("/vhosts/mq-v").status_code in (201, 204)
    assert api.put("/vhost-limits/mq-v/max-queues", {"value": 1}).status_code in (201, 204)
    assert api.put("/queues/mq-v/first", {"durable": True}).status_code == 201
    r = api.put("/queues/mq-v/second", {"durable": True})
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "cannot declare queue 'second': queue limit in vhost 'mq-v' (1) is reached"
    # Redeclaring the existing queue is not a new queue.
    assert api.put("/queues/mq-v/first", {"durable": True}).status_code == 204
    assert [q["name"] for q in api.ok("/queues/mq-v")] == ["first"]
    # rabbitmqadmin goes through the same endpoint.
    r = subprocess.run(["rabbitmqadmin", "-H", "127.0.0.1", "-P", str(node.http_port), "-u", "guest",
                        "-p", "guest", "-V", "mq-v", "declare", "queue", "name=third"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "queue limit" in (r.stdout + r.stderr)
