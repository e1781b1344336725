"""Helpers for the dead-lettering tests: polling basic.get, the management API (policies), and
AMQP type checks on decoded headers (pika keeps the wire type: 'l' decodes to pika.compat.long,
'T' to datetime, 'S' to str, 'A' to list, 'F' to dict)."""

import base64
import datetime
import json
import os
import time
import urllib.error
import urllib.request

import pika
import pika.compat


def http_base(broker):
    url = os.environ.get("CHARON_TEST_HTTP_URL")
    if url:
        return url.rstrip("/")
    if broker.http_port:
        return f"http://{broker.host}:{broker.http_port}"
    return None


def api(broker, method, path, body=None, user="guest", password="guest"):
    """Calls the management API; returns (status, parsed JSON or None)."""
    base = http_base(broker)
    assert base, "no management API URL (set CHARON_TEST_HTTP_URL for an external broker)"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, method=method, data=data)
    req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw) if raw else None
        except ValueError:
            return e.code, raw


def set_policy(broker, name, pattern, definition, priority=0, apply_to="queues"):
    status, body = api(broker, "PUT", f"/api/policies/%2f/{name}",
                       {"pattern": pattern, "definition": definition, "priority": priority,
                        "apply-to": apply_to})
    assert status in (201, 204), (status, body)


def clear_policy(broker, name):
    status, body = api(broker, "DELETE", f"/api/policies/%2f/{name}")
    assert status in (204, 404), (status, body)


def get_within(ch, queue, timeout=60.0, auto_ack=True):
    """basic.get until a message arrives; returns (method, properties, body) or None."""
    deadline = time.monotonic() + timeout
    while True:
        m, p, b = ch.basic_get(queue, auto_ack=auto_ack)
        if m is not None:
            return m, p, b
        if time.monotonic() > deadline:
            return None
        ch.connection.sleep(0.02)


def get_n(ch, queue, n, timeout=60.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        got = get_within(ch, queue, max(0.05, deadline - time.monotonic()))
        if got is None:
            break
        out.append(got)
    return out


def count(ch, queue):
    return ch.queue_declare(queue, passive=True).method.message_count


def eventually(cond, what="condition", bound=60.0, conn=None):
    """Waits until `cond()` is true (generously bounded: the broker works in the background
    and a busy machine is slow, so never a short fixed sleep)."""
    deadline = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < deadline, f"not within {bound}s: {what}"
        if conn is not None:
            conn.sleep(0.02)
        else:
            time.sleep(0.02)


def assert_empty_for(ch, queue, seconds=0.3):
    ch.connection.sleep(seconds)
    assert ch.basic_get(queue, auto_ack=True)[0] is None, f"{queue} should be empty"


def is_long(v):
    """AMQP 'l' (signed 64-bit)."""
    return type(v) is pika.compat.long


def is_timestamp(v):
    return isinstance(v, datetime.datetime)


def props(**kw):
    return pika.BasicProperties(**kw)
