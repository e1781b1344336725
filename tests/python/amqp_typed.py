"""A decoder of AMQP 0-9-1 content-header properties and field tables that keeps each value's
type tag, so tests can assert the exact wire types the broker sends (e.g. x-death `count` is
'l', signed 64-bit; `time` is 'T'). Values come back as Typed(tag, value); tables as dicts of
Typed, arrays as lists of Typed.

`raw_get(broker, queue)` does a basic.get over a raw socket (amqp_raw.RawClient) and returns
(get_ok_method, properties dict, body bytes) with typed headers.
"""

import struct
from collections import namedtuple

from pamqp import commands

from amqp_raw import RawClient, FRAME_HEADER, FRAME_BODY

Typed = namedtuple("Typed", "tag value")

PROPERTY_ORDER = [
    ("content_type", "s"), ("content_encoding", "s"), ("headers", "F"), ("delivery_mode", "o"),
    ("priority", "o"), ("correlation_id", "s"), ("reply_to", "s"), ("expiration", "s"),
    ("message_id", "s"), ("timestamp", "T"), ("type", "s"), ("user_id", "s"), ("app_id", "s"),
    ("cluster_id", "s"),
]


def _shortstr(b, o):
    n = b[o]
    return b[o + 1:o + 1 + n].decode(), o + 1 + n


def _value(b, o):
    tag = chr(b[o])
    o += 1
    fixed = {"t": ">B", "b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I",
             "l": ">q", "L": ">Q", "f": ">f", "d": ">d", "T": ">Q"}
    if tag in fixed:
        fmt = fixed[tag]
        v = struct.unpack_from(fmt, b, o)[0]
        o += struct.calcsize(fmt)
        if tag == "t":
            v = bool(v)
        return Typed(tag, v), o
    if tag == "D":
        scale = b[o]
        raw = struct.unpack_from(">i", b, o + 1)[0]
        return Typed(tag, (scale, raw)), o + 5
    if tag in ("S", "x"):
        n = struct.unpack_from(">I", b, o)[0]
        raw = b[o + 4:o + 4 + n]
        return Typed(tag, raw.decode() if tag == "S" else raw), o + 4 + n
    if tag == "F":
        t, o = _table(b, o)
        return Typed(tag, t), o
    if tag == "A":
        n = struct.unpack_from(">I", b, o)[0]
        end = o + 4 + n
        o += 4
        items = []
        while o < end:
            v, o = _value(b, o)
            items.append(v)
        return Typed(tag, items), o
    if tag == "V":
        return Typed(tag, None), o
    raise ValueError(f"unknown field type {tag!r}")


def _table(b, o):
    n = struct.unpack_from(">I", b, o)[0]
    end = o + 4 + n
    o += 4
    out = {}
    while o < end:
        k, o = _shortstr(b, o)
        v, o = _value(b, o)
        out[k] = v
    return out, o


def decode_properties(payload):
    """Decodes a content-header frame payload into {property: value}; headers stay typed."""
    flags = struct.unpack_from(">H", payload, 12)[0]
    o = 14
    props = {}
    for i, (name, kind) in enumerate(PROPERTY_ORDER):
        if not flags & (1 << (15 - i)):
            continue
        if kind == "s":
            props[name], o = _shortstr(payload, o)
        elif kind == "F":
            props[name], o = _table(payload, o)
        elif kind == "o":
            props[name] = payload[o]
            o += 1
        elif kind == "T":
            props[name] = struct.unpack_from(">Q", payload, o)[0]
            o += 8
    return props


def raw_get(broker, queue, no_ack=True, wait=60.0):
    """basic.get over a raw socket until a message is there (up to `wait` seconds);
    (GetOk method, typed properties, body), or None if the queue stayed empty."""
    import time
    deadline = time.monotonic() + wait
    while True:
        got = _raw_get_once(broker, queue, no_ack)
        if got is not None or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _raw_get_once(broker, queue, no_ack):
    with RawClient(broker.host, broker.port) as c:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.send_frame(commands.Basic.Get(queue=queue, no_ack=no_ack), 1)
        f = c.read_frame_skip_heartbeats()
        if isinstance(f.method, commands.Basic.GetEmpty):
            return None
        assert isinstance(f.method, commands.Basic.GetOk), f
        h = c.read_frame_skip_heartbeats()
        assert h.type == FRAME_HEADER, h
        size = struct.unpack_from(">Q", h.payload, 4)[0]
        body = b""
        while len(body) < size:
            bf = c.read_frame_skip_heartbeats()
            assert bf.type == FRAME_BODY, bf
            body += bf.payload
        return f.method, decode_properties(h.payload), body


def untyped(v):
    """Strips type tags recursively (for value comparisons)."""
    if isinstance(v, Typed):
        return untyped(v.value)
    if isinstance(v, dict):
        return {k: untyped(x) for k, x in v.items()}
    if isinstance(v, list):
        return [untyped(x) for x in v]
    return v
