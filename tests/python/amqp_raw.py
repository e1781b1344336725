"""A tiny raw-socket AMQP 0-9-1 client for tests that real client libraries
cannot express (bad protocol headers, malformed frames, silent heartbeats,
AMQPLAIN, out-of-order frames).

Frames are split by a hand-rolled reader (type, channel, size, payload,
0xCE end octet are all checked here); method payloads are encoded/decoded
with pamqp's codec.
"""

import socket
import struct
import time

from pamqp import commands, frame as pframe, header as pheader
from pamqp import body as pbody

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


class ConnectionClosedBySocket(Exception):
    pass


class RawFrame:
    def __init__(self, ftype, channel, payload):
        self.type = ftype
        self.channel = channel
        self.payload = payload
        self.method = None
        if ftype in (FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT):
            raw = struct.pack(">BHI", ftype, channel, len(payload)) + payload + bytes([FRAME_END])
            _, _, self.method = pframe.unmarshal(raw)

    @property
    def name(self):
        return getattr(self.method, "name", None)

    def __repr__(self):
        return f"RawFrame(type={self.type}, ch={self.channel}, {self.name or self.payload[:40]!r})"


def amqplain_table(user, password):
    def short(s):
        b = s.encode()
        return struct.pack(">B", len(b)) + b

    def longstr(s):
        b = s.encode()
        return b"S" + struct.pack(">I", len(b)) + b

    # AMQPLAIN response is a field table *without* the outer 4-byte length.
    return short("LOGIN") + longstr(user) + short("PASSWORD") + longstr(password)


class RawClient:
    def __init__(self, host, port, timeout=60.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.tune = None
        self.server_properties = None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    # ---- low level -------------------------------------------------
    def send(self, data: bytes):
        self.sock.sendall(data)

    def send_frame(self, value, channel=0):
        self.send(pframe.marshal(value, channel))

    def send_raw_frame(self, ftype, channel, payload, end=FRAME_END):
        self.send(struct.pack(">BHI", ftype, channel, len(payload)) + payload + bytes([end]))

    def _recv_exact(self, n, deadline):
        while len(self.buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("timed out reading from broker")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionClosedBySocket(f"socket closed by peer (buffered {self.buf!r})")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_bytes_until_close(self, timeout=60.0):
        """Read everything until the peer closes; returns the bytes."""
        deadline = time.monotonic() + timeout
        data = self.buf
        self.buf = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout(f"peer did not close; got {data!r}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return data
            if not chunk:
                return data
            data += chunk

    def read_frame(self, timeout=60.0) -> RawFrame:
        deadline = time.monotonic() + timeout
        hdr = self._recv_exact(7, deadline)
        ftype, channel, size = struct.unpack(">BHI", hdr)
        payload = self._recv_exact(size, deadline)
        end = self._recv_exact(1, deadline)
        assert end == bytes([FRAME_END]), f"bad frame end octet {end!r}"
        return RawFrame(ftype, channel, payload)

    def read_frame_skip_heartbeats(self, timeout=60.0) -> RawFrame:
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(max(0.01, deadline - time.monotonic()))
            if f.type != FRAME_HEARTBEAT:
                return f

    def expect_method(self, cls, timeout=60.0):
        f = self.read_frame_skip_heartbeats(timeout)
        assert isinstance(f.method, cls), f"expected {cls.__name__}, got {f!r} ({f.method!r})"
        return f

    def wait_closed(self, timeout=60.0):
        """Returns True if the server closes the TCP connection within timeout."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True

    # ---- handshake -------------------------------------------------
    def handshake(self, user="guest", password="guest", vhost="/", heartbeat=0,
                  frame_max=131072, channel_max=2047, mechanism="PLAIN", open_vhost=True,
                  capabilities=None):
        self.send(PROTOCOL_HEADER)
        start = self.expect_method(commands.Connection.Start)
        self.server_properties = start.method.server_properties
        self.start = start.method
        if mechanism == "PLAIN":
            response = f"\x00{user}\x00{password}"
        elif mechanism == "AMQPLAIN":
            response = amqplain_table(user, password).decode("latin-1")
        else:
            response = ""
        self.send_frame(commands.Connection.StartOk(
            client_properties={"product": "charon-raw-test",
                               "capabilities": capabilities or {"authentication_failure_close": True}},
            mechanism=mechanism, response=response))
        f = self.read_frame_skip_heartbeats()
        if not isinstance(f.method, commands.Connection.Tune):
            return f
        self.tune = f.method
        self.send_frame(commands.Connection.TuneOk(channel_max=channel_max, frame_max=frame_max,
                                                   heartbeat=heartbeat))
        if not open_vhost:
            return f
        self.send_frame(commands.Connection.Open(virtual_host=vhost))
        return self.read_frame_skip_heartbeats()

    def open_channel(self, ch=1):
        self.send_frame(commands.Channel.Open(), ch)
        return self.expect_method(commands.Channel.OpenOk)

    def publish(self, ch, exchange, routing_key, body: bytes, properties=None, frame_max=131072):
        self.send_frame(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), ch)
        self.send_frame(pheader.ContentHeader(0, len(body), properties or commands.Basic.Properties()), ch)
        step = frame_max - 8
        for i in range(0, len(body), step):
            self.send_frame(pbody.ContentBody(body[i:i + step]), ch)


def publish_until_blocked(pub, channel, routing_key, body, limit):
    """Publishes `body` on `channel` until the broker sends connection.blocked (or `limit`
    messages went out); returns (the Blocked method or None, messages sent). A publish that
    times out means the broker stopped reading: the alarm is on, its frame is read next."""
    from pamqp import commands as _commands
    blocked = None
    sent = 0
    while blocked is None and sent < limit:
        pub.sock.settimeout(10)
        try:
            pub.publish(channel, "", routing_key, body)
            sent += 1
        except socket.timeout:
            pass
        try:
            f = pub.read_frame(timeout=0.01 if sent % 8 else 0.05)
            if isinstance(f.method, _commands.Connection.Blocked):
                blocked = f.method
        except socket.timeout:
            pass
    return blocked, sent
