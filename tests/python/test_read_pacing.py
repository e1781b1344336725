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
