import pika
import pika.exceptions as pe
import pytest


def closed_with(ch_or_fn, code, text=None):
    pass


def expect_channel_error(fn, code, text=None):
    with pytest.raises(pe.ChannelClosedByBroker) as ei:
        fn()
    assert ei.value.reply_code == code, ei.value
    if text is not None:
        assert ei.value.reply_text == text
    return ei.value


def bound_queue(ch, exchange, routing_key="", arguments=None):
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, exchange, routing_key=routing_key, arguments=arguments)
    return q


def get_all(ch, q):
    out = []
    while True:
        m, p, b = ch.basic_get(q, auto_ack=True)
        if m is None:
            return out
        out.append(b)


# ---------------------------------------------------------------- built-ins

@pytest.mark.parametrize("name,etype", [
    ("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
    ("amq.headers", "headers"), ("amq.match", "headers")])
def test_builtin_exchanges_exist(ch, name, etype):
    ch.exchange_declare(name, etype, passive=True)
    # redeclaring with the same type/durability is fine
    ch.exchange_declare(name, etype, durable=True)


def test_default_exchange_routes_by_queue_name(ch, uniq):
    q = ch.queue_declare(uniq("q"), exclusive=True).method.queue
    ch.basic_publish("", q, b"direct-to-queue")
    assert ch.basic_get(q, auto_ack=True)[2] == b"direct-to-queue"


def test_default_exchange_cannot_be_bound(ch, uniq):
    q = ch.queue_declare("", exclusive=True).method.queue
    expect_channel_error(lambda: ch.queue_bind(q, "", routing_key="x"), 403,
                         "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_default_exchange_cannot_be_deleted(ch):
    expect_channel_error(lambda: ch.exchange_delete(""), 403,
                         "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_amq_prefix_exchange_declare_is_refused(ch):
    expect_channel_error(lambda: ch.exchange_declare("amq.custom", "direct"), 403,
                         "ACCESS_REFUSED - exchange name 'amq.custom' contains reserved prefix 'amq.*'")


def test_builtin_exchange_cannot_be_deleted(ch):
    expect_channel_error(lambda: ch.exchange_delete("amq.direct"), 403,
                         "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed")


def test_unbinding_a_missing_binding_is_ok(ch, uniq):
    x = uniq("x")
    ch.exchange_declare(x, "direct")
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_unbind(q, x, routing_key="never-bound")
    assert ch.is_open
    ch.exchange_delete(x)


def test_redeclare_builtin_with_other_type_is_406(ch):
    expect_channel_error(
        lambda: ch.exchange_declare("amq.direct", "fanout", durable=True), 406,
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'amq.direct' in vhost '/': "
        "received 'fanout' but current is 'direct'")


# ---------------------------------------------------------------- declare

def test_passive_declare_of_missing_exchange_is_404(ch, uniq):
    name = uniq("nx")
    expect_channel_error(lambda: ch.exchange_declare(name, passive=True), 404,
                         f"NOT_FOUND - no exchange '{name}' in vhost '/'")


@pytest.mark.spec_4_0
def test_exchange_declare_unknown_type_is_channel_error_406(broker, uniq):
    # RabbitMQ 4.x (rabbit_exchange:check_type/1): precondition_failed on the channel; 3.10.8
    # closed the connection with 503 COMMAND_INVALID. pika's TestInvalidExchangeType... expects 4.x.
    c = broker.connect()
    ch = c.channel()
    with pytest.raises(pe.ChannelClosedByBroker) as ei:
        ch.exchange_declare(uniq("x"), "no-such-type")
    assert ei.value.reply_code == 406
    assert ei.value.reply_text == "PRECONDITION_FAILED - unknown exchange type 'no-such-type'"
    assert c.is_open
    c.channel().exchange_declare(uniq("x"), "direct", auto_delete=True)
    c.close()


def test_exchange_redeclare_with_different_durability_is_406(ch, uniq):
    name = uniq("x")
    ch.exchange_declare(name, "direct", auto_delete=True)
    expect_channel_error(
        lambda: ch.exchange_declare(name, "direct", durable=True, auto_delete=True), 406,
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '{name}' in vhost '/': "
        "received 'true' but current is 'false'")


def test_exchange_redeclare_with_different_type_is_406(broker, uniq):
    name = uniq("x")
    c = broker.connect()
    try:
        ch = c.channel()
        ch.exchange_declare(name, "direct")
        expect_channel_error(
            lambda: ch.exchange_declare(name, "topic"), 406,
            f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost '/': "
            "received 'topic' but current is 'direct'")
        c.channel().exchange_delete(name)
    finally:
        c.close()


def test_durable_exchange_declare_and_passive(ch, uniq):
    name = uniq("dx")
    ch.exchange_declare(name, "fanout", durable=True)
    ch.exchange_declare(name, "fanout", passive=True)
    ch.exchange_delete(name)
    expect_channel_error(lambda: ch.exchange_declare(name, passive=True), 404)


def test_auto_delete_exchange_deleted_when_last_binding_removed(broker, uniq):
    name = uniq("ad")
    c = broker.connect()
    try:
        ch = c.channel()
        ch.exchange_declare(name, "fanout", auto_delete=True)
        q = bound_queue(ch, name)
        ch.exchange_declare(name, passive=True)
        ch.queue_unbind(q, name, routing_key="")
        expect_channel_error(lambda: ch.exchange_declare(name, passive=True), 404)
    finally:
        c.close()


def test_auto_delete_exchange_without_bindings_survives(ch, uniq):
    name = uniq("ad")
    ch.exchange_declare(name, "fanout", auto_delete=True)
    ch.exchange_declare(name, passive=True)
    ch.exchange_delete(name)


def test_internal_exchange_cannot_be_published_to(ch, uniq):
    name = uniq("int")
    ch.exchange_declare(name, "fanout", internal=True, auto_delete=True)
    ch.basic_publish(name, "", b"x")
    with pytest.raises(pe.ChannelClosedByBroker) as ei:
        ch.queue_declare("", exclusive=True)  # sync point
    assert ei.value.reply_code == 403
    assert ei.value.reply_text == (
        f"ACCESS_REFUSED - cannot publish to internal exchange '{name}' in vhost '/'")


def test_internal_exchange_reachable_via_exchange_binding(ch, uniq):
    src, internal = uniq("src"), uniq("int")
    ch.exchange_declare(src, "fanout")
    ch.exchange_declare(internal, "fanout", internal=True)
    ch.exchange_bind(internal, src)
    q = bound_queue(ch, internal)
    ch.basic_publish(src, "", b"via-e2e")
    assert get_all(ch, q) == [b"via-e2e"]
    ch.exchange_delete(src)
    ch.exchange_delete(internal)


# ---------------------------------------------------------------- delete

def test_exchange_delete_if_unused_with_bindings_is_406(ch, uniq):
    name = uniq("x")
    ch.exchange_declare(name, "fanout", auto_delete=False)
    bound_queue(ch, name)
    expect_channel_error(lambda: ch.exchange_delete(name, if_unused=True), 406,
                         f"PRECONDITION_FAILED - exchange '{name}' in vhost '/' in use")


def test_exchange_delete_if_unused_without_bindings_succeeds(ch, uniq):
    name = uniq("x")
    ch.exchange_declare(name, "fanout")
    ch.exchange_delete(name, if_unused=True)
    expect_channel_error(lambda: ch.exchange_declare(name, passive=True), 404)


def test_delete_missing_exchange_is_ok(ch, uniq):
    # RabbitMQ: exchange.delete of a non-existent exchange succeeds
    ch.exchange_delete(uniq("missing"))
    assert ch.is_open


def test_deleting_exchange_removes_its_bindings(ch, uniq):
    name = uniq("x")
    ch.exchange_declare(name, "fanout")
    q = bound_queue(ch, name)
    ch.exchange_delete(name)
    ch.exchange_declare(name, "fanout")
    ch.basic_publish(name, "", b"after-recreate")
    assert get_all(ch, q) == []
    ch.exchange_delete(name)


# ---------------------------------------------------------------- alternate exchange

def test_alternate_exchange_receives_unroutable(ch, uniq):
    ae, main = uniq("ae"), uniq("main")
    ch.exchange_declare(ae, "fanout")
    ch.exchange_declare(main, "direct", arguments={"alternate-exchange": ae})
    q_ae = bound_queue(ch, ae)
    q_main = bound_queue(ch, main, "routed")
    ch.basic_publish(main, "routed", b"r")
    ch.basic_publish(main, "nowhere", b"u")
    assert get_all(ch, q_main) == [b"r"]
    assert get_all(ch, q_ae) == [b"u"]
    ch.exchange_delete(main)
    ch.exchange_delete(ae)


def test_mandatory_publish_to_alternate_exchange_is_not_returned(ch, uniq):
    ae, main = uniq("ae"), uniq("main")
    ch.exchange_declare(ae, "fanout")
    ch.exchange_declare(main, "direct", arguments={"alternate-exchange": ae})
    q_ae = bound_queue(ch, ae)
    returned = []
    ch.add_on_return_callback(lambda *a: returned.append(a))
    ch.basic_publish(main, "nowhere", b"u", mandatory=True)
    assert get_all(ch, q_ae) == [b"u"]
    ch.connection.process_data_events(0.2)
    assert returned == []
    ch.exchange_delete(main)
    ch.exchange_delete(ae)


# ---------------------------------------------------------------- e2e bindings

def test_exchange_to_exchange_bind_and_unbind(ch, uniq):
    src, dst = uniq("src"), uniq("dst")
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "fanout")
    ch.exchange_bind(dst, src, routing_key="a.*")
    q = bound_queue(ch, dst)
    ch.basic_publish(src, "a.b", b"1")
    ch.basic_publish(src, "b.b", b"2")
    assert get_all(ch, q) == [b"1"]
    ch.exchange_unbind(dst, src, routing_key="a.*")
    ch.basic_publish(src, "a.b", b"3")
    assert get_all(ch, q) == []
    ch.exchange_delete(src)
    ch.exchange_delete(dst)


def test_exchange_bind_to_missing_source_is_404(ch, uniq):
    dst, src = uniq("dst"), uniq("nosrc")
    ch.exchange_declare(dst, "fanout", auto_delete=True)
    expect_channel_error(lambda: ch.exchange_bind(dst, src), 404,
                         f"NOT_FOUND - no exchange '{src}' in vhost '/'")


def test_exchange_binding_cycle_delivers_once(ch, uniq):
    a, b = uniq("a"), uniq("b")
    ch.exchange_declare(a, "fanout")
    ch.exchange_declare(b, "fanout")
    ch.exchange_bind(b, a)
    ch.exchange_bind(a, b)
    q = bound_queue(ch, a)
    ch.queue_bind(q, b)
    ch.basic_publish(a, "", b"once")
    assert get_all(ch, q) == [b"once"]
    ch.exchange_delete(a)
    ch.exchange_delete(b)


# ---------------------------------------------------------------- routing

def test_direct_exchange_routes_exact_key_only(ch, uniq):
    x = uniq("d")
    ch.exchange_declare(x, "direct")
    q1 = bound_queue(ch, x, "k1")
    q2 = bound_queue(ch, x, "k2")
    ch.basic_publish(x, "k1", b"a")
    ch.basic_publish(x, "k2", b"b")
    ch.basic_publish(x, "K1", b"c")
    assert get_all(ch, q1) == [b"a"]
    assert get_all(ch, q2) == [b"b"]
    ch.exchange_delete(x)


def test_fanout_ignores_routing_key(ch, uniq):
    x = uniq("f")
    ch.exchange_declare(x, "fanout")
    q1 = bound_queue(ch, x, "whatever")
    q2 = bound_queue(ch, x, "")
    ch.basic_publish(x, "k", b"m")
    assert get_all(ch, q1) == [b"m"]
    assert get_all(ch, q2) == [b"m"]
    ch.exchange_delete(x)


def test_queue_bound_twice_gets_one_copy(ch, uniq):
    x = uniq("t")
    ch.exchange_declare(x, "topic")
    q = bound_queue(ch, x, "a.*")
    ch.queue_bind(q, x, "*.b")
    ch.basic_publish(x, "a.b", b"m")
    assert get_all(ch, q) == [b"m"]
    ch.exchange_delete(x)


TOPIC_CASES = [
    ("a.b.c", "a.b.c", True),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.*.c", "a.b.b.c", False),
    ("a.#.c", "a.c", True),
    ("a.#.c", "a.b.b.c", True),
    ("#", "", True),
    ("#", "a.b.c", True),
    ("*", "", False),
    ("*", "a", True),
    ("*", "a.b", False),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("#.a", "a", True),
    ("#.a", "b.b.a", True),
    ("*.*", "a.b", True),
    ("*.*", "a", False),
    ("a.*", "a.", True),
    ("*.a", ".a", True),
    ("#.#", "x.y", True),
    ("a.#.#.b", "a.b", True),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    ("a.b", "a.bc", False),
    ("", "", True),
    ("", "a", False),
    ("..", "..", True),
]


@pytest.mark.parametrize("pattern,key,match", TOPIC_CASES)
def test_topic_binding_matching(ch, uniq, pattern, key, match):
    x = uniq("t")
    ch.exchange_declare(x, "topic", auto_delete=True)
    q = bound_queue(ch, x, pattern)
    ch.basic_publish(x, key, b"m")
    assert get_all(ch, q) == ([b"m"] if match else [])
    ch.exchange_delete(x)


HEADERS_CASES = [
    # (binding args, message headers, expected match)
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x"}, True),
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1}, False),
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 3}, True),
    ({"x-match": "all", "a": 1}, {"a": 2}, False),
    ({"x-match": "any", "a": 1, "b": "x"}, {"a": 1}, True),
    ({"x-match": "any", "a": 1, "b": "x"}, {"b": "y"}, False),
    ({"x-match": "any", "a": 1, "b": "x"}, {}, False),
    ({"a": 1, "b": 2}, {"a": 1}, False),          # default is all
    ({"a": 1, "b": 2}, {"a": 1, "b": 2}, True),
    ({"x-match": "all"}, {}, True),               # no headers to match
    ({"x-match": "any"}, {"a": 1}, False),
    ({"x-match": "all", "a": None}, {"a": None}, True),   # void matches on presence
    ({"x-match": "all", "a": None}, {"a": 5}, True),
    ({"x-match": "all", "x-foo": "bar"}, {"x-foo": "other"}, True),   # x- keys ignored by all
    ({"x-match": "any", "x-foo": "bar", "b": 1}, {"x-foo": "bar"}, False),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {"x-foo": "bar"}, True),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {"x-foo": "baz"}, False),
    ({"x-match": "any-with-x", "x-foo": "bar", "b": 1}, {"x-foo": "bar"}, True),
    ({"x-match": "any-with-x", "x-foo": "bar"}, {"x-foo": "nope"}, False),
]


@pytest.mark.parametrize("args,headers,match", HEADERS_CASES)
def test_headers_exchange_matching(ch, uniq, args, headers, match):
    x = uniq("h")
    ch.exchange_declare(x, "headers", auto_delete=True)
    q = bound_queue(ch, x, "", arguments=args)
    ch.basic_publish(x, "ignored", b"m", pika.BasicProperties(headers=headers))
    assert get_all(ch, q) == ([b"m"] if match else [])
    ch.exchange_delete(x)


def test_headers_exchange_message_without_headers(ch, uniq):
    x = uniq("h")
    ch.exchange_declare(x, "headers", auto_delete=True)
    q_all = bound_queue(ch, x, "", arguments={"x-match": "all"})
    q_any = bound_queue(ch, x, "", arguments={"x-match": "any", "a": 1})
    ch.basic_publish(x, "", b"m")
    assert get_all(ch, q_all) == [b"m"]
    assert get_all(ch, q_any) == []
    ch.exchange_delete(x)


def test_headers_binding_invalid_x_match_is_406(ch, uniq):
    x = uniq("h")
    ch.exchange_declare(x, "headers", auto_delete=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    expect_channel_error(lambda: ch.queue_bind(q, x, arguments={"x-match": "some"}), 406,
                         "PRECONDITION_FAILED - Invalid x-match field value <<\"some\">>; "
                         "expected all, any, all-with-x, or any-with-x")


def test_unbind_with_arguments_must_match_binding(ch, uniq):
    x = uniq("h")
    ch.exchange_declare(x, "headers")
    q = bound_queue(ch, x, "", arguments={"x-match": "any", "a": 1})
    ch.queue_bind(q, x, "", arguments={"x-match": "any", "b": 2})
    ch.queue_unbind(q, x, "", arguments={"x-match": "any", "a": 1})
    ch.basic_publish(x, "", b"a", pika.BasicProperties(headers={"a": 1}))
    ch.basic_publish(x, "", b"b", pika.BasicProperties(headers={"b": 2}))
    assert get_all(ch, q) == [b"b"]
    ch.exchange_delete(x)
