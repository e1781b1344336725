"""Read pacing (`read_pace_min_reads`, `connection/read_pace.rs`): once a connection reads more
often than the setting, the broker pauses about a millisecond after each read that left its buffer
room, so the next read takes many frames at once; a pause that gathers little ends pacing for a
while. Here the setting is 1 read a second, so every client that sends anything is paced: nothing
may be lost, reordered or left unread in the socket when the client stops sending (a pause ends
without more bytes arriving), and a client waiting for an answer (a synchronous method, a
publisher confirm) still gets it. Nothing here depends on speed: every wait is a poll with a
generous bound.
"""

import time

import pika
import pytest

from conftest import CONFIG_TOML, start_charon, stop_charon
from mgmt_helpers import Api, wait_for

pytestmark = pytest.mark.charon_only

PACED = "read_pace_min_reads = 1\n" + CONFIG_TOML


@pytest.fixture
def paced(tmp_path):
    b = start_charon(tmp_path, config_text=PACED)
    yield b
    stop_charon(b)


def _drain(ch, q, n):
    """Consumes `n` bodies from `q` (acking each), up to 120 s."""
    got = []
    deadline = time.monotonic() + 120
    for method, _, body in ch.consume(q, inactivity_timeout=1):
        if method is not None:
            got.append(body)
            ch.basic_ack(method.delivery_tag)
        if len(got) == n:
            break
        assert time.monotonic() < deadline, f"{len(got)} of {n} consumed"
    ch.cancel()
    return got


def test_a_paced_stream_arrives_whole_in_order_and_the_tail_is_not_left_unread(paced, uniq):
    q = uniq("paced")
    pub = paced.connect(client_properties={"connection_name": "paced-publisher"})
    ch = pub.channel()
    ch.queue_declare(q, auto_delete=False)
    n = 20000
    for i in range(n):
        ch.basic_publish("", q, str(i).encode())
    # A synchronous method right after the stream: answered although the broker paused reading.
    wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == n,
             what=f"{n} messages in {q}")
    api = Api(paced)
    conns = wait_for(lambda: [c for c in api.ok("/connections")
                              if c["client_properties"].get("connection_name") == "paced-publisher"
                              and c["recv_oct"] > 0],
                     what="the publisher's connection")
    # recv_cnt counts socket reads (RabbitMQ's meaning): at least one, never more than bytes read.
    assert 1 <= conns[0]["recv_cnt"] <= conns[0]["recv_oct"]
    con = paced.connect()
    got = _drain(con.channel(), q, n)
    assert got == [str(i).encode() for i in range(n)]
    ch.queue_delete(q)
    pub.close()
    con.close()


def test_a_paced_client_waiting_for_confirms_gets_each(paced, uniq):
    q = uniq("paced-confirm")
    conn = paced.connect()
    ch = conn.channel()
    ch.queue_declare(q, auto_delete=True)
    ch.confirm_delivery()
    n = 300
    for i in range(n):
        # pika's BlockingChannel returns once the broker confirmed the publish (raises on nack)
        ch.basic_publish("", q, str(i).encode(), properties=pika.BasicProperties(delivery_mode=2),
                         mandatory=True)
    assert ch.queue_declare(q, passive=True).method.message_count == n
    assert _drain(ch, q, n) == [str(i).encode() for i in range(n)]
    conn.close()


def test_a_lone_message_after_a_paced_stream_is_delivered(paced, uniq):
    q = uniq("paced-lone")
    pub = paced.connect()
    pch = pub.channel()
    pch.queue_declare(q, auto_delete=False)
    con = paced.connect()
    cch = con.channel()
    got = []
    cch.basic_consume(q, lambda c, m, p, body: (got.append(body), c.basic_ack(m.delivery_tag)))
    for i in range(5000):
        pch.basic_publish("", q, b"s%d" % i)
    # The stream stops; after a pause with nothing to read, one more message on its own.
    pub.process_data_events(time_limit=0.5)
    pch.basic_publish("", q, b"lone")
    deadline = time.monotonic() + 120
    while len(got) < 5001:
        assert time.monotonic() < deadline, f"{len(got)} of 5001 delivered"
        con.process_data_events(time_limit=0.2)
        pub.process_data_events(time_limit=0)
    assert got[-1] == b"lone" and got[:-1] == [b"s%d" % i for i in range(5000)]
    pch.queue_delete(q)
    pub.close()
    con.close()


def test_a_confirm_window_stream_is_confirmed_whole_and_a_lone_publish_after_it(private_charon, uniq):
    """Scenario b's shape under the default settings: persistent publishes streamed with up to
    1,000 unconfirmed, many publishes a write. Such a stream may be paced at a lower read rate
    when its reads take many frames (`read_pace::STREAM_FRAMES`); paced or not, every publish is
    confirmed exactly once, the queue holds them in order, and a publish sent on its own after
    the stream stopped is confirmed too (a pause never waits for more bytes)."""
    from amqp_raw import RawClient
    from pamqp import commands, frame as pframe, header as pheader, body as pbody

    q = uniq("stream-confirm")
    n, window, chunk = 30000, 1000, 100
    props = commands.Basic.Properties(delivery_mode=2)

    def encoded(i):
        body = b"m%015d" % i
        return (pframe.marshal(commands.Basic.Publish(exchange="", routing_key=q), 1)
                + pframe.marshal(pheader.ContentHeader(0, len(body), props), 1)
                + pframe.marshal(pbody.ContentBody(body), 1))

    raw = RawClient("127.0.0.1", private_charon.port)
    try:
        raw.handshake()
        raw.open_channel(1)
        raw.send_frame(commands.Confirm.Select(), 1)
        raw.expect_method(commands.Confirm.SelectOk)
        raw.send_frame(commands.Queue.Declare(queue=q, durable=True), 1)
        raw.expect_method(commands.Queue.DeclareOk)
        frames = [encoded(i) for i in range(n + 1)]
        acked = [False] * (n + 2)  # by delivery tag (1-based)
        low = 1  # every tag below is acked

        def take(f):
            nonlocal low
            assert isinstance(f.method, commands.Basic.Ack), f"expected basic.ack, got {f!r}"
            tag = f.method.delivery_tag
            first = low if f.method.multiple else tag
            for t in range(first, tag + 1):
                assert not acked[t] or f.method.multiple, f"tag {t} acked twice"
                acked[t] = True
            while low <= n + 1 and acked[low]:
                low += 1

        sent = 0
        while sent < n:
            room = min(window - (sent - (low - 1)), n - sent)
            if room > 0:
                for start in range(sent, sent + room, chunk):
                    raw.send(b"".join(frames[start:min(start + chunk, sent + room)]))
                sent += room
            else:
                take(raw.read_frame_skip_heartbeats(timeout=60))
        while low <= n:
            take(raw.read_frame_skip_heartbeats(timeout=60))
        assert all(acked[1:n + 1])
        # The stream stopped; one publish on its own is confirmed without more bytes arriving.
        time.sleep(0.5)
        raw.send(frames[n])
        take(raw.read_frame_skip_heartbeats(timeout=60))
        assert low == n + 2 and all(acked[1:n + 2])
    finally:
        raw.close()
    con = private_charon.connect()
    got = _drain(con.channel(), q, n + 1)
    assert got == [b"m%015d" % i for i in range(n + 1)]
    con.channel().queue_delete(q)
    con.close()
