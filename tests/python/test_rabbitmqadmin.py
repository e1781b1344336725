"""The real `rabbitmqadmin` 3.10 (from Debian's rabbitmq-server package, which scripts/test.sh
unpacks without starting anything), unmodified, against Charon: list/show/declare/delete of
every object type, publish, get, purge, export, import, close connection."""

import json
import shutil
import subprocess

import pika
import pytest

from conftest import start_charon, stop_charon
from mgmt_helpers import wait_for

pytestmark = pytest.mark.charon_only


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if shutil.which("rabbitmqadmin") is None:
        pytest.fail("rabbitmqadmin is not installed (scripts/test.sh unpacks it from Debian's rabbitmq-server)")
    b = start_charon(tmp_path_factory.mktemp("admin"))
    yield b
    stop_charon(b)


def admin(b, *args, vhost=None, ok=True):
    cmd = ["rabbitmqadmin", "-H", "127.0.0.1", "-P", str(b.http_port), "-u", "guest", "-p", "guest"]
    if vhost:
        cmd += ["-V", vhost]
    r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60)
    if ok:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def listed(b, what, vhost=None):
    return json.loads(admin(b, "-f", "raw_json", "list", what, vhost=vhost).stdout)


def test_declare_list_delete_every_object_type(node):
    b = node
    assert "vhost declared" in admin(b, "declare", "vhost", "name=adm-v").stdout
    admin(b, "declare", "user", "name=adm-u", "password=pw", "tags=monitoring")
    admin(b, "declare", "permission", "vhost=adm-v", "user=adm-u", "configure=.*", "write=.*", "read=.*")
    admin(b, "declare", "exchange", "name=adm-x", "type=topic", vhost="adm-v")
    admin(b, "declare", "queue", "name=adm-q", "durable=true", 'arguments={"x-max-length": 10}', vhost="adm-v")
    admin(b, "declare", "queue", "name=adm-qq", "queue_type=quorum", vhost="adm-v")
    admin(b, "declare", "binding", "source=adm-x", "destination=adm-q", "routing_key=a.#", vhost="adm-v")
    admin(b, "declare", "policy", "name=adm-p", "pattern=^adm-q$", 'definition={"message-ttl": 5000}',
          "apply-to=queues", vhost="adm-v")
    assert "adm-v" in [v["name"] for v in listed(b, "vhosts")]
    assert {"name": "adm-u", "tags": ["monitoring"]}.items() <= [u for u in listed(b, "users") if u["name"] == "adm-u"][0].items()
    assert any(p["user"] == "adm-u" and p["vhost"] == "adm-v" for p in listed(b, "permissions"))
    xs = {x["name"]: x for x in listed(b, "exchanges", "adm-v")}
    assert xs["adm-x"]["type"] == "topic"
    qs = {q["name"]: q for q in listed(b, "queues", "adm-v")}
    assert qs["adm-q"]["arguments"] == {"x-max-length": 10} and qs["adm-q"]["policy"] == "adm-p"
    assert qs["adm-qq"]["type"] == "quorum"
    bs = listed(b, "bindings", "adm-v")
    assert any(x["source"] == "adm-x" and x["routing_key"] == "a.#" for x in bs)
    assert [p["name"] for p in listed(b, "policies", "adm-v")] == ["adm-p"]
    assert listed(b, "nodes")[0]["running"] is True
    for empty in ("parameters", "operator_policies", "vhost_limits"):
        assert listed(b, empty) == []
    out = admin(b, "show", "overview").stdout
    assert "3.10.8" in out
    tsv = admin(b, "-f", "tsv", "list", "queues", "name", "messages", vhost="adm-v").stdout.splitlines()
    assert tsv[0] == "name\tmessages" and "adm-q\t0" in tsv
    # delete everything again
    key = [x for x in bs if x["source"] == "adm-x"][0]["properties_key"]
    admin(b, "delete", "binding", "source=adm-x", "destination_type=queue", "destination=adm-q",
          f"properties_key={key}", vhost="adm-v")
    assert not any(x["source"] == "adm-x" for x in listed(b, "bindings", "adm-v"))
    admin(b, "delete", "policy", "name=adm-p", vhost="adm-v")
    admin(b, "delete", "queue", "name=adm-q", vhost="adm-v")
    admin(b, "delete", "exchange", "name=adm-x", vhost="adm-v")
    admin(b, "delete", "permission", "vhost=adm-v", "user=adm-u")
    admin(b, "delete", "user", "name=adm-u")
    admin(b, "delete", "vhost", "name=adm-v")
    assert "adm-v" not in [v["name"] for v in listed(b, "vhosts")]
    assert "adm-u" not in [u["name"] for u in listed(b, "users")]
    r = admin(b, "delete", "queue", "name=nope", ok=False)
    assert r.returncode != 0 and "Not found: /api/queues/%2F/nope" in r.stderr


def test_publish_get_purge_connections_and_close(node):
    b = node
    admin(b, "declare", "queue", "name=adm-msgs", "durable=false")
    for i in range(3):
        assert "Message published" in admin(b, "publish", "routing_key=adm-msgs", f"payload=p{i}").stdout
    r = admin(b, "publish", "exchange=amq.default", "routing_key=nowhere", "payload=x")
    assert "message not routed" in r.stdout.lower() or "Message published but NOT routed" in r.stdout
    got = json.loads(admin(b, "-f", "raw_json", "get", "queue=adm-msgs", "count=2").stdout)
    assert [g["payload"] for g in got] == ["p0", "p1"]
    got = json.loads(admin(b, "-f", "raw_json", "get", "queue=adm-msgs", "ackmode=ack_requeue_false").stdout)
    assert got[0]["payload"] == "p0" and got[0]["redelivered"] is True
    assert [q["messages"] for q in listed(b, "queues") if q["name"] == "adm-msgs"] == [2]
    assert "queue purged" in admin(b, "purge", "queue", "name=adm-msgs").stdout
    assert [q["messages"] for q in listed(b, "queues") if q["name"] == "adm-msgs"] == [0]
    conn = b.connect(client_properties={"connection_name": "adm-conn"})
    ch = conn.channel()
    ch.basic_consume("adm-msgs", lambda *a: None, consumer_tag="adm-ctag")
    conn.process_data_events(0.1)
    conns = wait_for(lambda: [c for c in listed(b, "connections")
                              if c["client_properties"].get("connection_name") == "adm-conn"], what="listed")
    assert any(c["user"] == "guest" for c in listed(b, "channels"))
    assert any(c["consumer_tag"] == "adm-ctag" for c in listed(b, "consumers"))
    assert "connection closed" in admin(b, "close", "connection", f"name={conns[0]['name']}").stdout
    with pytest.raises(pika.exceptions.ConnectionClosed) as e:
        for _ in range(200):
            conn.process_data_events(0.1)
    assert e.value.reply_code == 320


def test_export_and_import(node, tmp_path):
    b = node
    admin(b, "declare", "exchange", "name=adm-exp-x", "type=fanout")
    admin(b, "declare", "queue", "name=adm-exp-q")
    admin(b, "declare", "binding", "source=adm-exp-x", "destination=adm-exp-q")
    path = tmp_path / "defs.json"
    assert "Exported definitions" in admin(b, "export", str(path)).stdout
    defs = json.loads(path.read_text())
    assert any(q["name"] == "adm-exp-q" for q in defs["queues"])
    admin(b, "delete", "queue", "name=adm-exp-q")
    admin(b, "delete", "exchange", "name=adm-exp-x")
    assert "Uploaded definitions" in admin(b, "import", str(path)).stdout
    assert any(q["name"] == "adm-exp-q" for q in listed(b, "queues"))
    assert any(x["source"] == "adm-exp-x" and x["destination"] == "adm-exp-q" for x in listed(b, "bindings"))
    vpath = tmp_path / "vhost.json"
    admin(b, "export", str(vpath), vhost="/")
    assert "users" not in json.loads(vpath.read_text())
    admin(b, "import", str(vpath), vhost="/")
