"""`POST /api/queues/{vhost}/{name}/messages/remove` (Charon's extension behind the UI's DLQ
replay): removes ready messages by the ids the peek endpoint shows, without dead-lettering them,
and the removal is durable (a persistent message in a durable queue stays gone after a restart).
"""

import urllib.parse

import pika
import pytest

import conftest
from dlx_helpers import api

pytestmark = [pytest.mark.charon_only, pytest.mark.needs_users]

ADMIN = {"user": "alice", "password": "secret"}


def peek(b, queue, count=50):
    status, msgs = api(b, "GET", f"/api/queues/%2F/{urllib.parse.quote(queue, safe='')}/messages?offset=0&count={count}", **ADMIN)
    assert status == 200, (status, msgs)
    return msgs


def remove(b, queue, ids):
    return api(b, "POST", f"/api/queues/%2F/{urllib.parse.quote(queue, safe='')}/messages/remove", {"ids": ids}, **ADMIN)


def count(b, queue):
    with b.connect(user="alice", password="secret") as c:
        return c.channel().queue_declare(queue, passive=True).method.message_count


def test_remove_by_peeked_id_is_not_dead_lettered_and_survives_a_restart(tmp_path):
    b = conftest.start_charon(tmp_path)
    try:
        with b.connect(user="alice", password="secret") as c:
            ch = c.channel()
            ch.exchange_declare("rm-dlx", "fanout")
            ch.queue_declare("rm-dlq", durable=True)
            ch.queue_bind("rm-dlq", "rm-dlx")
            ch.queue_declare("rm-q", durable=True, arguments={"x-dead-letter-exchange": "rm-dlx"})
            ch.confirm_delivery()
            for body in (b"m0", b"m1", b"m2", b"m3"):
                ch.basic_publish("", "rm-q", body, pika.BasicProperties(delivery_mode=2))
        msgs = peek(b, "rm-q")
        assert [m["payload"] for m in msgs] == ["m0", "m1", "m2", "m3"]
        ids = [m["id"] for m in msgs]
        status, res = remove(b, "rm-q", [ids[1], ids[3], 987654321])
        assert status == 200, (status, res)
        assert sorted(res["removed"]) == sorted([ids[1], ids[3]])
        assert res["missing"] == [987654321]
        assert [m["payload"] for m in peek(b, "rm-q")] == ["m0", "m2"]
        assert count(b, "rm-dlq") == 0, "a removed message must not be dead-lettered"
        # Removing again: nothing left to remove.
        status, res = remove(b, "rm-q", [ids[1]])
        assert (status, res["removed"], res["missing"]) == (200, [], [ids[1]])

        conftest.stop_charon(b)
        b = conftest.start_charon(tmp_path)
        assert count(b, "rm-q") == 2
        with b.connect(user="alice", password="secret") as c:
            ch = c.channel()
            got = [ch.basic_get("rm-q", auto_ack=True)[2] for _ in range(2)]
        assert got == [b"m0", b"m2"]
    finally:
        conftest.stop_charon(b)


def test_remove_answers_rabbitmq_style_errors(broker):
    status, body = remove(broker, "no-such-queue-here", [1])
    assert status == 404 and body["error"] == "Object Not Found", (status, body)
    status, body = api(broker, "POST", "/api/queues/no-such-vhost/q/messages/remove", {"ids": [1]}, **ADMIN)
    assert status == 404, (status, body)
    status, body = api(broker, "POST", "/api/queues/%2F/q/messages/remove", {"ids": "x"}, **ADMIN)
    assert status == 400 and body["error"] == "bad_request", (status, body)
    status, body = api(broker, "POST", "/api/queues/%2F/q/messages/remove", {"ids": [1]},
                       user="alice", password="wrong")
    assert status == 401, (status, body)
