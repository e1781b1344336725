"""`charon ctl` with rabbitmqctl's verbs, flags (`-p`, columns, `--formatter json`, `--quiet`)
and output (informational line, tab-separated table with a header; one-line errors)."""

import json
import subprocess

import pika
import pytest

from conftest import find_binary
from mgmt_helpers import Api, wait_for

pytestmark = [pytest.mark.charon_only, pytest.mark.needs_users]


def ctl(broker, *args, user="guest", password="guest"):
    return subprocess.run(
        [find_binary(), "ctl", "--url", f"http://127.0.0.1:{broker.http_port}",
         "--username", user, "--password", password, *args],
        capture_output=True, text=True, timeout=60)


def ok(broker, *args, **kw):
    r = ctl(broker, *args, **kw)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def test_users_vhosts_permissions_verbs(broker, uniq):
    u, v = uniq("ctlu"), uniq("ctlv")
    assert f'Adding user "{u}" ...' in ok(broker, "add_user", u, "pw1")
    ok(broker, "set_user_tags", u, "monitoring", "policymaker")
    lines = ok(broker, "-q", "list_users").splitlines()
    assert lines[0] == "user\ttags" and f"{u}\t[monitoring, policymaker]" in lines
    ok(broker, "change_password", u, "pw2")
    assert ctl(broker, "list_vhosts", user=u, password="pw1").returncode != 0
    ok(broker, "add_vhost", v)
    ok(broker, "set_permissions", "-p", v, u, "^c", "^w", "^r")
    assert f"{u}\t^c\t^w\t^r" in ok(broker, "list_permissions", "-p", v).splitlines()
    assert f"{v}\t^c\t^w\t^r" in ok(broker, "list_user_permissions", u).splitlines()
    vhosts = json.loads(ok(broker, "list_vhosts", "--formatter", "json"))
    assert {"name": v} in vhosts
    # The user logs in over AMQP with the new password.
    pika.BlockingConnection(broker.params(user=u, password="pw2", vhost=v)).close()
    ok(broker, "clear_permissions", "-p", v, u)
    assert u not in ok(broker, "list_permissions", "-p", v)
    ok(broker, "delete_vhost", v)
    ok(broker, "delete_user", u)
    r = ctl(broker, "delete_user", u)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == ["Error: Not Found (HTTP 404)"]
    r = ctl(broker, "add_user", "guest", "x")
    assert r.returncode != 0 and "already exists" in r.stderr and "Error: Error" not in r.stderr


def test_queue_verbs_columns_and_connections(broker, uniq):
    qn = uniq("ctlq")
    conn = broker.connect(client_properties={"connection_name": "ctl-conn"})
    ch = conn.channel()
    ch.queue_declare(qn, durable=True)
    for _ in range(3):
        ch.basic_publish("", qn, b"x")
    Api(broker).ok("/queues/%2F")  # let the publishes land
    wait_for(lambda: f"{qn}\t3\t0\ttrue" in ok(broker, "-q", "list_queues", "name", "messages", "consumers", "durable"),
             what="queue listed")
    out = ok(broker, "list_queues")
    assert out.splitlines()[:3] == ["Timeout: 60.0 seconds ...", "Listing queues for vhost / ...", "name\tmessages"]
    rows = json.loads(ok(broker, "list_queues", "name", "messages_ready", "--formatter", "json"))
    assert {"name": qn, "messages_ready": 3} in rows
    assert "amq.topic\ttopic" in ok(broker, "-q", "list_exchanges").splitlines()
    binds = ok(broker, "-q", "list_bindings", "source_name", "destination_name", "routing_key").splitlines()
    assert binds[0] == "source_name\tdestination_name\trouting_key" and f"\t{qn}\t{qn}" in binds
    ok(broker, "purge_queue", qn)
    wait_for(lambda: f"{qn}\t0" in ok(broker, "-q", "list_queues"), what="purged")
    conns = json.loads(ok(broker, "list_connections", "name", "user", "client_properties", "--formatter", "json"))
    mine = [c for c in conns if c["client_properties"].get("connection_name") == "ctl-conn"]
    assert mine and mine[0]["user"] == "guest"
    assert "guest" in ok(broker, "-q", "list_channels")
    ok(broker, "close_connection", mine[0]["name"], "closed by ctl test")
    with pytest.raises(pika.exceptions.ConnectionClosed) as e:
        for _ in range(200):
            conn.process_data_events(0.1)
    assert e.value.reply_code == 320 and "closed by ctl test" in e.value.reply_text
    assert "Queue was successfully deleted with 0 ready messages" in ok(broker, "delete_queue", qn)


def test_status_alarms_environment_and_definitions(broker, tmp_path, uniq):
    out = ok(broker, "status")
    assert out.startswith("Status of node ") and "\nAlarms\n\n(none)" in out
    assert f"port: {broker.port}, protocol: amqp" in out
    assert "reported no alarms" in ok(broker, "alarms")
    assert f"amqp_listen = 127.0.0.1:{broker.port}" in ok(broker, "environment")
    qn = uniq("ctldef")
    Api(broker).put(f"/queues/%2F/{qn}", {"durable": True})
    path = tmp_path / "defs.json"
    ok(broker, "export_definitions", str(path))
    defs = json.loads(path.read_text())
    assert any(q["name"] == qn for q in defs["queues"])
    Api(broker).delete(f"/queues/%2F/{qn}")
    ok(broker, "import_definitions", str(path))
    assert Api(broker).get(f"/queues/%2F/{qn}").status_code == 200
    r = ctl(broker, "list_users", user="reader", password="reader")
    assert r.returncode != 0 and r.stderr.strip() == "Error: Not management user (HTTP 401)"
