import datetime
import decimal
import struct
import time

import pika
import pytest
from pamqp import commands, header as ph, body as pb

from amqp_raw import RawClient, FRAME_HEADER, FRAME_BODY


def roundtrip(conn, ch, props, body):
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.confirm_delivery()
    ch.basic_publish("", q, body, props)
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append((m, p, b)), auto_ack=True)
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert got, "message not delivered"
    return got[0]


def test_all_basic_properties_reach_consumer(conn, ch):
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="gzip",
        headers={"h": "v"}, delivery_mode=2, priority=7, correlation_id="corr-1",
        reply_to="reply.q", expiration="60000", message_id="msg-1",
        timestamp=1700000000, type="evt.created", user_id="guest", app_id="charon-tests",
        cluster_id="cl-1")
    m, p, b = roundtrip(conn, ch, props, b'{"a":1}')
    assert b == b'{"a":1}'
    for f in ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
              "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
              "user_id", "app_id", "cluster_id"):
        assert getattr(p, f) == getattr(props, f), f


def test_absent_properties_stay_absent(conn, ch):
    m, p, b = roundtrip(conn, ch, pika.BasicProperties(), b"x")
    for f in ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
              "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
              "user_id", "app_id", "cluster_id"):
        assert getattr(p, f) is None, f


RICH_HEADERS = {
    "str": "hello ✓",
    "empty": "",
    "int_small": 1,
    "int_neg": -42,
    "int_big": 2 ** 40,
    "int_min64": -(2 ** 63),
    # floats: pika cannot encode them; covered by the raw-byte test below
    "bool_t": True,
    "bool_f": False,
    "void": None,
    "decimal": decimal.Decimal("123.45"),
    "decimal_neg": decimal.Decimal("-0.001"),
    "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20),
    "bytes": b"\x00\x01\xfe\xff",
    "array": [1, "two", True, None, [1, 2], {"k": "v"}, b"\x01"],
    "empty_array": [],
    "nested": {"a": {"b": {"c": [1, {"d": "deep"}]}}, "e": {}},
}


def test_field_table_types_roundtrip_through_pika(conn, ch):
    m, p, b = roundtrip(conn, ch, pika.BasicProperties(headers=RICH_HEADERS), b"x")
    got = p.headers
    assert set(got) == set(RICH_HEADERS)
    for k, v in RICH_HEADERS.items():
        g = got[k]
        if isinstance(v, str):
            # pika decodes longstr as str when valid utf-8
            assert g == v, k
        else:
            assert g == v, (k, g, v)
            assert isinstance(g, type(v)), (k, type(g), type(v))


def build_table(items):
    out = b""
    for key, tag, payload in items:
        kb = key.encode()
        out += struct.pack(">B", len(kb)) + kb + tag + payload
    return struct.pack(">I", len(out)) + out


def every_type_table():
    inner = build_table([("x", b"I", struct.pack(">i", 7))])
    arr_items = b"b" + struct.pack(">b", -1) + b"S" + struct.pack(">I", 2) + b"hi" + b"V"
    return build_table([
        ("t", b"t", b"\x01"),
        ("b", b"b", struct.pack(">b", -128)),
        ("B", b"B", struct.pack(">B", 255)),
        ("s", b"s", struct.pack(">h", -32768)),
        ("u", b"u", struct.pack(">H", 65535)),
        ("I", b"I", struct.pack(">i", -2147483648)),
        ("i", b"i", struct.pack(">I", 4294967295)),
        ("l", b"l", struct.pack(">q", -9223372036854775808)),
        ("f", b"f", struct.pack(">f", 1.5)),
        ("d", b"d", struct.pack(">d", -2.25)),
        ("D", b"D", struct.pack(">BI", 2, 12345)),
        ("S", b"S", struct.pack(">I", 5) + b"hello"),
        ("x", b"x", struct.pack(">I", 3) + b"\x00\xff\x01"),
        ("A", b"A", struct.pack(">I", len(arr_items)) + arr_items),
        ("T", b"T", struct.pack(">Q", 1700000000)),
        ("F", b"F", inner),
        ("V", b"V", b""),
    ])


def raw_properties_payload(headers_table, body_size):
    # class 60, weight 0, body size, flags: content-type(15) headers(13) delivery-mode(12)
    # priority(11) correlation-id(10) reply-to(9) expiration(8) message-id(7) timestamp(6)
    # type(5) user-id(4) app-id(3) cluster-id(2)
    flags = 0
    fields = b""

    def ss(s):
        return struct.pack(">B", len(s)) + s

    flags |= 1 << 15; fields += ss(b"text/plain")
    flags |= 1 << 14; fields += ss(b"utf-8")
    flags |= 1 << 13; fields += headers_table
    flags |= 1 << 12; fields += b"\x02"
    flags |= 1 << 11; fields += b"\x05"
    flags |= 1 << 10; fields += ss(b"corr")
    flags |= 1 << 9; fields += ss(b"rq")
    flags |= 1 << 8; fields += ss(b"100000")
    flags |= 1 << 7; fields += ss(b"mid")
    flags |= 1 << 6; fields += struct.pack(">Q", 1234567890)
    flags |= 1 << 5; fields += ss(b"typ")
    flags |= 1 << 4; fields += ss(b"guest")
    flags |= 1 << 3; fields += ss(b"app")
    flags |= 1 << 2; fields += ss(b"clu")
    return struct.pack(">HHQH", 60, 0, body_size, flags) + fields


def test_content_header_bytes_are_delivered_verbatim(broker):
    """Hand-built header frame with every field-table type; the consumer must
    receive exactly the same property bytes."""
    body = b"payload-bytes"
    hdr = raw_properties_payload(every_type_table(), len(body))
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect_method(commands.Queue.DeclareOk).method.queue
        c.send_frame(commands.Basic.Publish(exchange="", routing_key=q), 1)
        c.send_raw_frame(FRAME_HEADER, 1, hdr)
        c.send_raw_frame(FRAME_BODY, 1, body)
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag="ct", no_ack=True), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        d = c.expect_method(commands.Basic.Deliver)
        assert d.method.consumer_tag == "ct" and d.method.routing_key == q
        h = c.read_frame_skip_heartbeats()
        assert h.type == FRAME_HEADER and h.channel == 1
        assert h.payload == hdr
        b = c.read_frame_skip_heartbeats()
        assert b.type == FRAME_BODY and b.payload == body


def test_content_header_bytes_verbatim_via_basic_get(broker):
    body = b""
    hdr = raw_properties_payload(every_type_table(), 0)
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Confirm.Select(), 1)
        c.expect_method(commands.Confirm.SelectOk)
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect_method(commands.Queue.DeclareOk).method.queue
        c.send_frame(commands.Basic.Publish(exchange="", routing_key=q), 1)
        c.send_raw_frame(FRAME_HEADER, 1, hdr)
        c.expect_method(commands.Basic.Ack)
        c.send_frame(commands.Basic.Get(queue=q, no_ack=True), 1)
        g = c.expect_method(commands.Basic.GetOk)
        assert g.method.message_count == 0
        h = c.read_frame_skip_heartbeats()
        assert h.type == FRAME_HEADER and h.payload == hdr
        # empty body: no body frame follows; next thing is the reply to our next method
        c.send_frame(commands.Basic.Get(queue=q, no_ack=True), 1)
        c.expect_method(commands.Basic.GetEmpty)


def test_empty_body_roundtrip(conn, ch):
    m, p, b = roundtrip(conn, ch, pika.BasicProperties(content_type="x/empty"), b"")
    assert b == b"" and p.content_type == "x/empty"


@pytest.mark.parametrize("size", [131072 - 8, 131072 - 7, 131072 * 2 - 16, 1024 * 1024, 3 * 1024 * 1024 + 17])
def test_large_body_split_over_frames_roundtrip(conn, ch, size):
    body = bytes((i * 7 + 3) % 256 for i in range(size))
    m, p, b = roundtrip(conn, ch, pika.BasicProperties(), body)
    assert len(b) == size
    assert b == body


def test_large_body_frames_respect_frame_max(broker):
    size = 1024 * 1024
    body = bytes(i % 251 for i in range(size))
    with RawClient(broker.host, broker.port) as c:
        c.handshake(frame_max=8192)
        c.open_channel(1)
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect_method(commands.Queue.DeclareOk).method.queue
        c.publish(1, "", q, body, frame_max=8192)
        c.send_frame(commands.Basic.Consume(queue=q, consumer_tag="big", no_ack=True), 1)
        c.expect_method(commands.Basic.ConsumeOk)
        c.expect_method(commands.Basic.Deliver, timeout=10)
        h = c.read_frame_skip_heartbeats()
        assert h.type == FRAME_HEADER and h.method.body_size == size
        got = b""
        frames = 0
        while len(got) < size:
            f = c.read_frame_skip_heartbeats(10)
            assert f.type == FRAME_BODY
            assert len(f.payload) + 8 <= 8192
            got += f.payload
            frames += 1
        assert got == body
        assert frames >= size // (8192 - 8)


def test_routing_key_and_exchange_fidelity(conn, ch, uniq):
    x = uniq("fx")
    ch.exchange_declare(x, "topic", auto_delete=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    rk = "a.ü.long-key." + "z" * 200
    ch.queue_bind(q, x, "a.#")
    ch.confirm_delivery()
    ch.basic_publish(x, rk, b"x")
    m, p, b = ch.basic_get(q, auto_ack=True)
    assert m.exchange == x and m.routing_key == rk
