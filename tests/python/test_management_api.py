"""The management HTTP API with RabbitMQ's paths, JSON shapes, tag rules and errors, driven with
`requests` against a running Charon (shapes checked against RabbitMQ 3.10.8's answers)."""

import base64

import pika
import pytest

from dlx_helpers import get_within
from mgmt_helpers import Api, q, wait_for

pytestmark = [pytest.mark.charon_only, pytest.mark.needs_users]


@pytest.fixture
def api(broker):
    return Api(broker)


def test_login_and_tags_are_checked_like_rabbitmq(broker, api):
    r = Api(broker, "guest", "wrong").get("/overview")
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorized", "reason": "Login failed"}
    assert "Basic realm" in r.headers["www-authenticate"]
    # 'reader' has no tags: no management access at all.
    r = Api(broker, "reader", "reader").get("/overview")
    assert (r.status_code, r.json()) == (401, {"error": "not_authorised", "reason": "Not management user"})
    assert api.ok("/whoami") == {"name": "guest", "tags": ["administrator"]}
    # A management-only user: overview yes, users/nodes no.
    assert api.put("/users/mgmtonly", {"password": "pw", "tags": "management"}).status_code in (201, 204)
    m = Api(broker, "mgmtonly", "pw")
    assert m.get("/overview").status_code == 200
    r = m.get("/users")
    assert (r.status_code, r.json()["reason"]) == (401, "Not administrator user")
    assert m.get("/nodes").status_code == 401
    # No permissions on any vhost: sees no vhosts, and a vhost's queues are refused.
    assert m.ok("/vhosts") == []
    assert m.get("/queues/%2F").json() == {"error": "not_authorised", "reason": "Access refused."}
    assert api.delete("/users/mgmtonly").status_code == 204
    assert api.get("/users/mgmtonly").status_code == 404
    r = api.get("/no/such/endpoint")
    assert (r.status_code, r.json()) == (404, {"error": "Object Not Found", "reason": "Not Found"})


def test_overview_nodes_health_and_aliveness(broker, api, ch, uniq):
    o = api.ok("/overview")
    for k in ("management_version", "rabbitmq_version", "message_stats", "queue_totals",
              "object_totals", "listeners", "node", "cluster_name"):
        assert k in o, k
    assert {"messages", "messages_ready", "messages_unacknowledged"} <= set(o["queue_totals"])
    assert o["object_totals"]["connections"] >= 1
    assert "publish_details" in o["message_stats"]
    ports = {(l["protocol"], l["port"]) for l in o["listeners"]}
    assert ("amqp", broker.port) in ports and ("http", broker.http_port) in ports
    node = api.ok("/nodes")[0]
    for k in ("name", "mem_used", "mem_limit", "disk_free", "disk_free_limit", "fd_used",
              "fd_total", "mem_alarm", "disk_free_alarm", "uptime", "running"):
        assert k in node, k
    assert node["disk_free_alarm"] is False and node["fd_used"] > 0 and node["mem_used"] > 0
    assert api.ok(f"/nodes/{q(node['name'])}")["name"] == node["name"]
    assert api.ok("/health/checks/alarms") == {"status": "ok"}
    assert api.ok("/health/checks/local-alarms") == {"status": "ok"}
    assert api.ok(f"/health/checks/port-listener/{broker.port}") == {"status": "ok", "port": broker.port}
    r = api.get("/health/checks/port-listener/1")
    assert r.status_code == 503 and r.json()["status"] == "failed" and broker.port in r.json()["ports"]
    assert api.ok("/aliveness-test/%2F") == {"status": "ok"}


def test_queue_crud_fields_and_counters(broker, api, ch, uniq):
    qn, dlx, dlq = uniq("apiq"), uniq("dlx"), uniq("dlq")
    assert api.put(f"/exchanges/%2F/{dlx}", {"type": "fanout", "durable": True}).status_code == 201
    assert api.put(f"/exchanges/%2F/{dlx}", {"type": "fanout", "durable": True}).status_code == 204
    assert api.put(f"/queues/%2F/{dlq}", {"durable": True}).status_code == 201
    assert api.post(f"/bindings/%2F/e/{dlx}/q/{dlq}", {"routing_key": ""}).status_code == 201
    r = api.put(f"/queues/%2F/{qn}", {"durable": True, "arguments": {"x-dead-letter-exchange": dlx}})
    assert r.status_code == 201
    # Inequivalent redeclare: RabbitMQ's 400 with the precondition text.
    r = api.put(f"/queues/%2F/{qn}", {"durable": False})
    assert r.status_code == 400 and "inequivalent arg 'durable'" in r.json()["reason"]
    r = api.put("/queues/%2F/badarg", {"arguments": {"x-message-ttl": "abc"}})
    assert r.status_code == 400 and "expected integer, got longstr" in r.json()["reason"]
    assert api.put(f"/queues/%2F/{qn}", "not json").status_code == 400
    for i in range(4):
        ch.basic_publish("", qn, b"m%d" % i)
    ch.basic_publish("", qn, b"x", pika.BasicProperties(expiration="0"))
    m1 = get_within(ch, qn, auto_ack=False)
    ch.basic_ack(m1[0].delivery_tag)
    m2 = get_within(ch, qn, auto_ack=False)
    ch.basic_reject(m2[0].delivery_tag, requeue=False)
    info = wait_for(lambda: (lambda i: i if i["dead_lettered"]["expired"] == 1 and i["messages"] == 2 else None)(
        api.ok(f"/queues/%2F/{qn}")), what="counters")
    for k in ("arguments", "effective_policy_definition", "policy", "state", "type", "node",
              "message_stats", "messages_ready", "messages_unacknowledged", "consumers",
              "consumer_utilisation", "head_message_timestamp", "memory", "durable", "auto_delete",
              "exclusive"):
        assert k in info, k
    assert info["arguments"] == {"x-dead-letter-exchange": dlx}
    assert (info["type"], info["state"], info["durable"]) == ("classic", "running", True)
    assert info["dead_lettered"]["rejected"] == 1
    assert info["message_stats"]["publish"] == 5 and info["message_stats"]["ack"] == 1
    assert info["message_stats"]["get"] == 2
    assert api.ok(f"/queues/%2F/{dlq}")["messages"] == 2
    # columns, listing per vhost
    assert api.ok(f"/queues/%2F/{qn}?columns=name,messages") == {"name": qn, "messages": 2}
    names = [x["name"] for x in api.ok("/queues/%2F?columns=name")]
    assert qn in names and dlq in names
    # purge, delete (if-empty refused while messages are there)
    assert api.delete(f"/queues/%2F/{dlq}?if-empty=true").status_code == 400
    assert api.delete(f"/queues/%2F/{dlq}/contents").status_code == 204
    assert api.ok(f"/queues/%2F/{dlq}")["messages"] == 0
    assert api.delete(f"/queues/%2F/{dlq}").status_code == 204
    assert api.get(f"/queues/%2F/{dlq}").status_code == 404
    assert api.delete(f"/queues/%2F/{qn}").status_code == 204
    assert api.delete(f"/exchanges/%2F/{dlx}").status_code == 204
    assert api.delete("/exchanges/%2F/amq.direct").status_code == 401


def test_get_ackmodes_encoding_and_truncate(broker, api, ch, uniq):
    qn, dlq = uniq("getq"), uniq("getdlq")
    api.put(f"/queues/%2F/{dlq}", {})
    api.put(f"/queues/%2F/{qn}", {"arguments": {"x-dead-letter-exchange": "",
                                                 "x-dead-letter-routing-key": dlq}})
    r = api.post(f"/exchanges/%2F/amq.default/publish",
                 {"routing_key": qn, "payload": "hello world", "payload_encoding": "string",
                  "properties": {"headers": {"k": "v"}, "content_type": "text/plain"}})
    assert r.json() == {"routed": True}
    raw = base64.b64encode(b"\xff\x00bin").decode()
    api.post("/exchanges/%2F/amq.default/publish",
             {"routing_key": qn, "payload": raw, "payload_encoding": "base64", "properties": {}})
    assert api.post("/exchanges/%2F/amq.default/publish",
                    {"routing_key": "nowhere", "payload": "x", "properties": {}}).json() == {"routed": False}
    got = api.post(f"/queues/%2F/{qn}/get", {"count": 5, "ackmode": "ack_requeue_true",
                                               "encoding": "auto", "truncate": 5}).json()
    assert [g["payload"] for g in got] == ["hello", raw]
    assert got[1]["payload_encoding"] == "base64" and got[0]["payload_bytes"] == 11
    assert got[0]["properties"]["headers"] == {"k": "v"}
    assert got[0]["properties"]["content_type"] == "text/plain"
    assert (got[0]["message_count"], got[1]["message_count"]) == (1, 0)
    # requeued: still there, now redelivered
    got = api.post(f"/queues/%2F/{qn}/get", {"count": 1, "ackmode": "reject_requeue_true",
                                               "encoding": "base64"}).json()
    assert got[0]["redelivered"] is True
    assert base64.b64decode(got[0]["payload"]) == b"hello world"
    # reject_requeue_false dead-letters
    api.post(f"/queues/%2F/{qn}/get", {"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
    wait_for(lambda: api.ok(f"/queues/%2F/{dlq}")["messages"] == 1, what="dead letter")
    # ack_requeue_false removes
    api.post(f"/queues/%2F/{qn}/get", {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
    wait_for(lambda: api.ok(f"/queues/%2F/{qn}")["messages"] == 0, what="empty queue")
    r = api.post(f"/queues/%2F/{qn}/get", {"count": 1, "ackmode": "bogus"})
    assert r.status_code == 400


def test_peek_reads_in_order_without_changing_the_queue(broker, api, ch, uniq):
    src, dlq = uniq("peeksrc"), uniq("peekdlq")
    ch.queue_declare(dlq)
    ch.queue_declare(src, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    for i in range(3):
        ch.basic_publish("", src, b"body-%d" % i, pika.BasicProperties(headers={"n": i}, message_id=f"id{i}"))
    for _ in range(3):
        m = get_within(ch, src, auto_ack=False)
        ch.basic_reject(m[0].delivery_tag, requeue=False)
    wait_for(lambda: api.ok(f"/queues/%2F/{dlq}")["messages"] == 3, what="dead letters")
    peeked = api.ok(f"/queues/%2F/{dlq}/messages?offset=0&count=10")
    assert [p["payload"] for p in peeked] == ["body-0", "body-1", "body-2"]
    assert all(isinstance(p["id"], int) for p in peeked)
    xd = peeked[0]["properties"]["headers"]["x-death"]
    assert xd[0]["reason"] == "rejected" and xd[0]["queue"] == src and xd[0]["count"] == 1
    assert xd[0]["routing-keys"] == [src] and isinstance(xd[0]["time"], int)
    assert peeked[1]["properties"]["message_id"] == "id1"
    assert [p["payload"] for p in api.ok(f"/queues/%2F/{dlq}/messages?offset=1&count=1")] == ["body-1"]
    # Nothing changed: same count, and a consumer gets them first-time (not redelivered).
    assert api.ok(f"/queues/%2F/{dlq}")["messages"] == 3
    for i in range(3):
        m = get_within(ch, dlq)
        assert m[2] == b"body-%d" % i and m[0].redelivered is False
    assert api.get(f"/queues/%2F/{dlq}/messages?count=x").status_code == 400


def test_exchanges_and_bindings(broker, api, uniq):
    x, y, qn = uniq("x"), uniq("y"), uniq("bq")
    assert api.put(f"/exchanges/%2F/{x}", {"type": "topic", "durable": "true"}).status_code == 201
    r = api.put(f"/exchanges/%2F/{x}", {"type": "direct"})
    assert r.status_code == 400 and "inequivalent arg 'type'" in r.json()["reason"]
    assert api.put("/exchanges/%2F/bogus-type", {"type": "bogus"}).json()["reason"] == "unknown exchange type 'bogus'"
    api.put(f"/exchanges/%2F/{y}", {"type": "headers", "internal": True})
    api.put(f"/queues/%2F/{qn}", {})
    xi = api.ok(f"/exchanges/%2F/{x}")
    assert (xi["type"], xi["durable"], xi["internal"], xi["arguments"]) == ("topic", True, False, {})
    r = api.post(f"/bindings/%2F/e/{x}/q/{qn}", {"routing_key": "a.*"})
    assert r.status_code == 201 and r.headers["location"] == "a.%2A"
    api.post(f"/bindings/%2F/e/{x}/e/{y}", {"routing_key": "", "arguments": {"x-match": "any", "k": "v"}})
    r = api.post(f"/bindings/%2F/e/{x}/q/nosuchq", {"routing_key": "a"})
    assert (r.status_code, r.json()) == (404, {"error": "not_found", "reason": "no queue 'nosuchq' in vhost '/'"})
    qb = api.ok(f"/queues/%2F/{qn}/bindings")
    assert {(b["source"], b["routing_key"]) for b in qb} == {("", qn), (x, "a.*")}
    src = api.ok(f"/exchanges/%2F/{x}/bindings/source")
    ex = [b for b in src if b["destination_type"] == "exchange"][0]
    assert ex["destination"] == y and ex["arguments"] == {"x-match": "any", "k": "v"}
    assert api.ok(f"/exchanges/%2F/{y}/bindings/destination")[0]["source"] == x
    one = api.ok(f"/bindings/%2F/e/{x}/q/{qn}")[0]
    assert api.ok(f"/bindings/%2F/e/{x}/q/{qn}/{q(one['properties_key'])}")["routing_key"] == "a.*"
    assert api.delete(f"/bindings/%2F/e/{x}/q/{qn}/{q(one['properties_key'])}").status_code == 204
    assert api.ok(f"/bindings/%2F/e/{x}/q/{qn}") == []
    assert api.delete(f"/bindings/%2F/e/{x}/e/{y}/{q(ex['properties_key'])}").status_code == 204
    assert all(b["source"] != x for b in api.ok("/bindings/%2F"))


def test_connections_channels_consumers_and_close(broker, api, uniq):
    qn = uniq("cq")
    conn = broker.connect(client_properties={"connection_name": "mgmt-test"})
    ch = conn.channel()
    ch.queue_declare(qn)
    ch.basic_qos(prefetch_count=7)
    ch.confirm_delivery()
    ch.basic_consume(qn, lambda *a: None, consumer_tag="ctag-1")
    for _ in range(3):
        ch.basic_publish("", qn, b"x")
    conn.process_data_events(0.2)
    mine = wait_for(lambda: [c for c in api.ok("/connections")
                             if c["client_properties"].get("connection_name") == "mgmt-test"], what="connection")
    c = mine[0]
    assert (c["user"], c["vhost"], c["channels"], c["protocol"]) == ("guest", "/", 1, "AMQP 0-9-1")
    assert c["peer_host"] == "127.0.0.1" and c["port"] == broker.port
    chans = api.ok(f"/connections/{q(c['name'])}/channels")
    assert len(chans) == 1 and chans[0]["prefetch_count"] == 7 and chans[0]["confirm"] is True
    stats = wait_for(lambda: (lambda s: s if s.get("publish") == 3 else None)(
        api.ok(f"/connections/{q(c['name'])}/channels")[0]["message_stats"]), what="publish count")
    assert stats["deliver"] == 3 and stats["confirm"] == 3
    assert api.ok(f"/connections/{q(c['name'])}/channels")[0]["messages_unacknowledged"] == 3
    assert api.ok("/overview")["message_stats"]["publish"] >= 3
    details = api.ok(f"/queues/%2F/{qn}")["consumer_details"]
    assert [d["consumer_tag"] for d in details] == ["ctag-1"]
    cons = [k for k in api.ok("/consumers") if k["consumer_tag"] == "ctag-1"]
    assert cons and cons[0]["queue"] == {"name": qn, "vhost": "/"} and cons[0]["prefetch_count"] == 7
    r = api.delete(f"/connections/{q(c['name'])}", headers={"X-Reason": "bye from test"})
    assert r.status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosed) as e:
        for _ in range(200):
            conn.process_data_events(0.1)
    assert e.value.reply_code == 320 and "bye from test" in e.value.reply_text
    wait_for(lambda: not [c for c in api.ok("/connections")
                          if c["client_properties"].get("connection_name") == "mgmt-test"], what="gone")
    # Opens, closes and failed logins are logged at info, as RabbitMQ does.
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        broker.connect(password="wrong-password")
    log = lambda: broker.log_path.read_text(errors="replace")
    wait_for(lambda: f"connection ({c['name']}): user 'guest' authenticated and granted access to vhost '/'" in log()
             and f"closing AMQP connection ({c['name']}, vhost: '/', user: 'guest')" in log()
             and "PLAIN login refused: user 'guest' - invalid credentials" in log(), what="log lines")


def test_pagination_sorting_and_columns(broker, api, uniq):
    prefix = uniq("page")
    for i in range(5):
        api.put(f"/queues/%2F/{prefix}-{i}", {})
    r = api.ok(f"/queues/%2F?page=1&page_size=2&name={prefix}&sort=name&sort_reverse=true&columns=name")
    assert (r["filtered_count"], r["item_count"], r["page_count"], r["page_size"]) == (5, 2, 3, 2)
    assert r["items"] == [{"name": f"{prefix}-4"}, {"name": f"{prefix}-3"}]
    r = api.ok(f"/queues/%2F?page=1&page_size=2&name={q('^' + prefix + '-[0-1]$')}&use_regex=true&sort=name")
    assert r["filtered_count"] == 2 and r["page_count"] == 1
    assert [x["name"] for x in r["items"]] == [f"{prefix}-0", f"{prefix}-1"]
    r = api.get(f"/queues/%2F?page=9&page_size=2&name={prefix}")
    assert r.status_code == 400
    assert api.ok("/overview?columns=object_totals.queues")["object_totals"]["queues"] >= 5


def test_message_rates_in_overview_and_queue(broker, api, ch, uniq):
    """Rates are computed over intervals of at least 5 s: a publish burst after the first
    sample shows as a positive rate once the next interval has passed (polled, no timing bound
    on the broker's speed)."""
    qn = uniq("rateq")
    ch.queue_declare(qn)
    api.ok("/overview")
    api.ok(f"/queues/%2F/{qn}")
    for _ in range(50):
        ch.basic_publish("", qn, b"r")
    wait_for(lambda: api.ok(f"/queues/%2F/{qn}")["messages"] == 50, what="published")
    o = wait_for(lambda: (lambda o: o if o["message_stats"]["publish_details"]["rate"] > 0 else None)(
        api.ok("/overview")), timeout=60, what="overview publish rate")
    assert o["message_stats"]["publish"] >= 50
    qi = wait_for(lambda: (lambda x: x if x["message_stats"]["publish_details"]["rate"] > 0 else None)(
        api.ok(f"/queues/%2F/{qn}")), timeout=60, what="queue publish rate")
    assert qi["message_stats"]["publish"] == 50


def test_collection_paths_with_a_trailing_slash_answer_as_without(broker, api, ch, uniq):
    # RabbitMQ answers `GET /api/connections/` like `/api/connections` (amqp091-go's recovery tests
    # list connections that way); a trailing slash must not turn a collection into a 404.
    name = uniq("slash")
    ch.queue_declare(name)
    conns = wait_for(lambda: api.get("/connections/").json() or None, what="connections listed")
    assert api.get("/connections/").status_code == 200
    assert {c["name"] for c in conns} == {c["name"] for c in api.get("/connections").json()}
    queues = api.get("/queues/%2F/")
    assert queues.status_code == 200
    assert name in {x["name"] for x in queues.json()}
    assert api.get("/queues/%2F/" + name + "/").json()["name"] == name
    assert api.get("/no-such-collection/").status_code == 404
