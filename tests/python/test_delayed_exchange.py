"""Delayed message exchange compatible with rabbitmq_delayed_message_exchange: type
`x-delayed-message`, argument `x-delayed-type`, header `x-delay` (ms). Through pika over a real
socket. Lower bounds on delays are strict (measured from before the publish); upper bounds are
generous (UPPER_SLACK_S) so a loaded machine cannot fail them."""

import signal
import time

import pika
import pytest

import conftest
from dlx_helpers import get_within

pytestmark = pytest.mark.charon_only

UPPER_SLACK_S = 60.0
DELAYED = "x-delayed-message"


def declare(ch, name, routing_type, durable=False):
    ch.exchange_declare(name, DELAYED, durable=durable, arguments={"x-delayed-type": routing_type})


@pytest.mark.parametrize("routing_type,bind_key,bind_args,rk,headers", [
    ("direct", "k", None, "k", {}),
    ("topic", "a.*", None, "a.b", {}),
    ("fanout", "", None, "anything", {}),
    ("headers", "", {"x-match": "all", "kind": "order"}, "", {"kind": "order"}),
])
def test_every_delayed_type_routes_when_the_delay_ends(ch, uniq, routing_type, bind_key,
                                                       bind_args, rk, headers):
    x, q, other = uniq("dx"), uniq("dq"), uniq("dq-other")
    declare(ch, x, routing_type)
    ch.queue_declare(q)
    ch.queue_declare(other)
    ch.queue_bind(q, x, bind_key, arguments=bind_args)
    if routing_type != "fanout":
        ch.queue_bind(other, x, "nomatch", arguments={"x-match": "all", "kind": "nomatch"}
                      if routing_type == "headers" else None)
    t0 = time.monotonic()
    ch.basic_publish(x, rk, b"later", pika.BasicProperties(headers={**headers, "x-delay": 700}))
    ch.basic_publish(x, rk, b"now", pika.BasicProperties(headers=headers))
    ch.basic_publish(x, rk, b"negative", pika.BasicProperties(headers={**headers, "x-delay": -5}))
    first = [get_within(ch, q, timeout=10)[2] for _ in range(2)]
    assert sorted(first) == [b"negative", b"now"]
    m = get_within(ch, q, timeout=0.7 + UPPER_SLACK_S)
    assert m is not None and m[2] == b"later"
    assert time.monotonic() - t0 >= 0.7 - 0.005
    assert m[0].exchange == x and m[0].routing_key == rk
    assert ch.basic_get(other)[0] is None  # not bound (fanout) or not matching


def test_delayed_messages_arrive_in_due_order_with_confirms(ch, uniq):
    x, q = uniq("dx"), uniq("dq")
    declare(ch, x, "direct")
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    ch.confirm_delivery()
    for d in (900, 300, 600):
        ch.basic_publish(x, "k", str(d).encode(), pika.BasicProperties(headers={"x-delay": d}))
    got = []
    deadline = time.monotonic() + UPPER_SLACK_S
    while len(got) < 3 and time.monotonic() < deadline:
        m = get_within(ch, q, timeout=0.2)
        if m is not None:
            got.append(m[2])
    assert got == [b"300", b"600", b"900"]


@pytest.mark.parametrize("args,code,text", [
    ({}, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing "
              "exchange type"),
    ({"x-delayed-type": "x-delayed-message"}, 406,
     "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for "
     "'x-delayed-type'"),
    # As RabbitMQ 4.x reports an unknown exchange type (a channel error).
    ({"x-delayed-type": "zqxwv123"}, 406, "PRECONDITION_FAILED - unknown exchange type 'zqxwv123'"),
])
def test_bad_delayed_type_is_refused_like_the_plugin(broker, uniq, args, code, text):
    with broker.connect() as c:
        ch = c.channel()
        with pytest.raises((pika.exceptions.ChannelClosedByBroker,
                            pika.exceptions.ConnectionClosedByBroker)) as e:
            ch.exchange_declare(uniq("bad"), DELAYED, arguments=args)
        assert (e.value.reply_code, e.value.reply_text) == (code, text)


def test_redeclare_is_equivalent_only_with_the_same_type(ch, uniq):
    x = uniq("dx")
    declare(ch, x, "topic")
    declare(ch, x, "topic")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.exchange_declare(x, "topic")
    assert e.value.reply_code == 406 and "'type'" in e.value.reply_text


@pytest.fixture
def node(tmp_path):
    box = {"b": conftest.start_charon(tmp_path)}
    yield box
    conftest.stop_charon(box["b"])


@pytest.mark.parametrize("hard", [False, True], ids=["restart", "kill9"])
def test_persistent_delayed_messages_survive_restart_on_time_exactly_once(tmp_path, node, uniq,
                                                                            hard):
    b = node["b"]
    x, q = uniq("dx"), uniq("dq")
    long_ms = 5000
    with b.connect() as c:
        ch = c.channel()
        declare(ch, x, "direct", durable=True)
        ch.queue_declare(q, durable=True)
        ch.queue_bind(q, x, "k")
        ch.confirm_delivery()
        t0 = time.monotonic()
        ch.basic_publish(x, "k", b"long", pika.BasicProperties(
            delivery_mode=2, headers={"x-delay": long_ms}))
        ch.basic_publish(x, "k", b"short", pika.BasicProperties(
            delivery_mode=2, headers={"x-delay": 200}))
        m = get_within(ch, q, timeout=UPPER_SLACK_S)
        assert m[2] == b"short"  # routed (Route record) before the restart
        ch.basic_publish(x, "k", b"passes-while-down", pika.BasicProperties(
            delivery_mode=2, headers={"x-delay": 300}))
    if hard:
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
    else:
        conftest.stop_charon(b)
    b = node["b"] = conftest.start_charon(tmp_path)
    with b.connect() as c:
        ch = c.channel()
        got = []
        deadline = time.monotonic() + long_ms / 1000 + UPPER_SLACK_S
        while len(got) < 2 and time.monotonic() < deadline:
            m = get_within(ch, q, timeout=0.2)
            if m is not None:
                got.append((m[2], time.monotonic()))
        assert [g[0] for g in got] == [b"passes-while-down", b"long"]
        assert got[1][1] - t0 >= long_ms / 1000 - 0.005
        time.sleep(0.5)
        assert ch.basic_get(q)[0] is None  # never twice


def test_declaring_a_delayed_exchange_needs_configure_permission(broker, uniq):
    """The configure check applies to x-delayed-message like to any known type (user 'reader'
    has no configure permission on '/')."""
    name = uniq("dx")
    with broker.connect(user="reader", password="reader") as c:
        ch = c.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            declare(ch, name, "direct")
        assert e.value.reply_code == 403
        assert e.value.reply_text == (f"ACCESS_REFUSED - access to exchange '{name}' in vhost '/' "
                                      "refused for user 'reader'")


def test_delayed_exchange_is_listed_with_its_type(broker, ch, uniq):
    from dlx_helpers import api
    x = uniq("dx")
    declare(ch, x, "topic")
    status, body = api(broker, "GET", f"/api/exchanges/%2f/{x}")
    assert status == 200
    assert body["type"] == DELAYED and body["arguments"] == {"x-delayed-type": "topic"}
    assert body["messages_delayed"] == 0
    for _ in range(3):
        ch.basic_publish(x, "k", b"later", pika.BasicProperties(headers={"x-delay": 600000}))
    deadline = time.monotonic() + UPPER_SLACK_S
    while time.monotonic() < deadline:
        body = api(broker, "GET", f"/api/exchanges/%2f/{x}")[1]
        if body["messages_delayed"] == 3:
            break
        time.sleep(0.05)
    assert body["messages_delayed"] == 3
    ch.exchange_delete(x)


def test_release_lateness_is_shown_per_delayed_exchange(broker, ch, uniq):
    """The broker measures release lateness (release time − due time) where it releases a
    delayed message and shows count/p50/p99/max (ms) in the exchange's details."""
    from dlx_helpers import api
    x, q = uniq("dx"), uniq("dq")
    declare(ch, x, "direct")
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    body = api(broker, "GET", f"/api/exchanges/%2f/{x}")[1]
    assert body["release_lateness_ms"] is None
    for d in (150, 250, 350):
        ch.basic_publish(x, "k", b"m", pika.BasicProperties(headers={"x-delay": d}))
    assert all(get_within(ch, q, timeout=UPPER_SLACK_S) is not None for _ in range(3))
    lat = api(broker, "GET", f"/api/exchanges/%2f/{x}")[1]["release_lateness_ms"]
    assert lat["count"] == 3
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"] < UPPER_SLACK_S * 1000
    listed = [e for e in api(broker, "GET", "/api/exchanges/%2f")[1] if e["name"] == x]
    assert listed[0]["release_lateness_ms"]["count"] == 3
    ch.exchange_delete(x)
    ch.queue_delete(q)
