"""Users, vhosts and permissions created at run time persist (restart and kill -9), passwords are
RabbitMQ's salted SHA-256 hashes, and a definitions file exported from RabbitMQ 3.10.8 imports,
logs its users in, and exports again with the same objects."""

import json
import signal
from pathlib import Path

import pika
import pytest

from conftest import start_charon, stop_charon
from mgmt_helpers import Api, wait_for

pytestmark = pytest.mark.charon_only

FIXTURE = Path(__file__).parent / "fixtures" / "rabbitmq-3.10.8-definitions.json"
KINDS = ("users", "vhosts", "permissions", "policies", "queues", "exchanges", "bindings")


def canon(items):
    return sorted(json.dumps(x, sort_keys=True) for x in items)


def amqp_login(b, user, password, vhost="/"):
    c = pika.BlockingConnection(b.params(user=user, password=password, vhost=vhost))
    c.close()


def restart(b, tmp_path, kill=False, config_text=None):
    if kill:
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(30)
    else:
        stop_charon(b)
    if config_text is not None:
        return start_charon(tmp_path, config_text=config_text)  # same tmp_path: same data dir
    return start_charon(tmp_path)


def test_users_vhosts_permissions_survive_restart_and_kill9(tmp_path):
    b = start_charon(tmp_path)
    try:
        api = Api(b)
        assert api.put("/vhosts/rt-vhost").status_code == 201
        # The creator gets full permissions on a vhost it creates (RabbitMQ's API).
        assert {p["user"] for p in api.ok("/vhosts/rt-vhost/permissions")} == {"guest"}
        assert api.put("/users/rt-user", {"password": "s3cret", "tags": "monitoring"}).status_code == 201
        r = api.put("/permissions/rt-vhost/rt-user", {"configure": "^rt-", "write": ".*", "read": ".*"})
        assert r.status_code == 201
        u = api.ok("/users/rt-user")
        assert u["hashing_algorithm"] == "rabbit_password_hashing_sha256" and u["tags"] == ["monitoring"]
        assert len(__import__("base64").b64decode(u["password_hash"])) == 36  # 4-byte salt + SHA-256
        assert api.put("/users/rt-gone", {"password": "x", "tags": ""}).status_code == 201
        assert api.delete("/users/rt-gone").status_code == 204
        amqp_login(b, "rt-user", "s3cret", "rt-vhost")
        b = restart(b, tmp_path)
        api = Api(b)
        amqp_login(b, "rt-user", "s3cret", "rt-vhost")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            amqp_login(b, "rt-user", "wrong", "rt-vhost")
        assert api.get("/users/rt-gone").status_code == 404
        # Change the password and the permissions, then kill -9.
        assert api.put("/users/rt-user", {"password": "n3w", "tags": ["monitoring", "policymaker"]}).status_code == 204
        assert api.put("/permissions/rt-vhost/rt-user", {"configure": "", "write": "", "read": "^x$"}).status_code == 204
        b = restart(b, tmp_path, kill=True)
        api = Api(b)
        amqp_login(b, "rt-user", "n3w", "rt-vhost")
        assert api.ok("/users/rt-user")["tags"] == ["monitoring", "policymaker"]
        assert api.ok("/permissions/rt-vhost/rt-user")["read"] == "^x$"
        assert Api(b, "rt-user", "n3w").ok("/whoami")["name"] == "rt-user"
        # Deleting the vhost deletes its permissions; that survives kill -9 too.
        assert api.delete("/vhosts/rt-vhost").status_code == 204
        b = restart(b, tmp_path, kill=True)
        api = Api(b)
        assert api.get("/vhosts/rt-vhost").status_code == 404
        assert [p for p in api.ok("/permissions") if p["vhost"] == "rt-vhost"] == []
        r = api.put("/permissions/rt-vhost/rt-user", {"configure": ".*", "write": ".*", "read": ".*"})
        assert (r.status_code, r.json()["reason"]) == (400, "vhost_or_user_not_found")
    finally:
        stop_charon(b)


def test_rabbitmq_definitions_import_login_and_export_round_trip(tmp_path):
    original = json.loads(FIXTURE.read_text())
    # Only the default guest, so that the export holds exactly the fixture's users.
    b = start_charon(tmp_path, config_text="")
    try:
        api = Api(b)
        r = api.post("/definitions", original)
        assert r.status_code == 204, r.text
        # Hashes were imported as they are: RabbitMQ's passwords log in.
        amqp_login(b, "alice", "secret")
        amqp_login(b, "app", "apppw", "shop")
        assert Api(b, "monitor", "mon").ok("/whoami")["tags"] == ["monitoring", "management"]
        exported = api.ok("/definitions")
        for k in KINDS:
            assert canon(exported[k]) == canon(original[k]), k
        # Queues work with their arguments and the policy (dead-lettering through 'dlx').
        q = api.ok("/queues/%2F/orders.new")
        assert q["arguments"] == {"x-dead-letter-exchange": "dlx", "x-message-ttl": 60000}
        assert q["policy"] == "dlx-all"
        assert api.ok("/queues/%2F/orders.q")["type"] == "quorum"
        # Per-vhost export has no vhost fields and only that vhost's objects.
        shop = api.ok("/definitions/shop")
        assert [x["name"] for x in shop["queues"]] == ["app.work"]
        assert all("vhost" not in x for x in shop["queues"] + shop["exchanges"] + shop["bindings"])
        # It survives a restart (users, vhost 'shop' with its durable queue).
        b = restart(b, tmp_path, kill=True, config_text="")
        api = Api(b)
        again = api.ok("/definitions")
        for k in KINDS:
            assert canon(again[k]) == canon(original[k]), k
        # Importing Charon's export into a fresh broker gives the same definitions.
        tmp2 = tmp_path / "second"
        tmp2.mkdir()
        c = start_charon(tmp2, config_text="")
        try:
            assert Api(c).post("/definitions", again).status_code == 204
            third = Api(c, "alice", "secret").ok("/definitions")
            for k in KINDS:
                assert canon(third[k]) == canon(original[k]), k
        finally:
            stop_charon(c)
        bad = api.post("/definitions", {"queues": [{"name": "x", "vhost": "nope"}]})
        assert bad.status_code == 404
        assert api.post("/definitions", "nonsense").status_code == 400
    finally:
        stop_charon(b)
