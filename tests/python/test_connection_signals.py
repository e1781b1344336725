"""The broker's signals to open connections (shutdown, a management close, resource alarms)
reach every connection they concern and no other: they are sent to each registered
connection as events (docs/performance.md, "Persistent/transient path, part 10"), so these
tests open several connections at once, in different states, and look at what each gets."""

import signal
import time

import pika
import pytest
from pamqp import commands

import conftest
from amqp_raw import RawClient
from mgmt_helpers import Api, q, wait_for

pytestmark = pytest.mark.charon_only


@pytest.fixture
def api(broker):
    return Api(broker)


def close_of(c):
    """The connection.close that comes next on channel 0 (a delivery's frames on other
    channels may come first)."""
    while True:
        f = c.read_frame_skip_heartbeats(15)
        if f.channel != 0:
            continue
        assert isinstance(f.method, commands.Connection.Close), f
        return f.method


def test_sigterm_reaches_every_open_connection_idle_publishing_and_consuming(tmp_path):
    b = conftest.start_charon(tmp_path)
    try:
        with b.connect() as admin:
            admin.channel().queue_declare("sigq")
        clients = [RawClient(b.host, b.port) for _ in range(3)]
        try:
            for c in clients:
                assert isinstance(c.handshake().method, commands.Connection.OpenOk)
            # One idle after the handshake, one that published, one consuming.
            clients[1].open_channel(1)
            clients[1].publish(1, "", "sigq", b"one")
            clients[2].open_channel(1)
            clients[2].send_frame(commands.Basic.Consume(queue="sigq", consumer_tag="t"), 1)
            clients[2].expect_method(commands.Basic.ConsumeOk)
            clients[2].expect_method(commands.Basic.Deliver)
            b.proc.send_signal(signal.SIGTERM)
            for c in clients:
                m = close_of(c)
                assert m.reply_code == 320 and m.reply_text.startswith("CONNECTION_FORCED"), m
                c.send_frame(commands.Connection.CloseOk(), 0)
            assert b.proc.wait(15) == 0
        finally:
            for c in clients:
                c.close()
    finally:
        conftest.stop_charon(b)


def test_management_close_reaches_only_its_connection(broker, api):
    names = [f"sig-{i}-{time.time_ns()}" for i in range(3)]
    conns = [broker.connect(client_properties={"connection_name": n}) for n in names]
    try:
        def listed():
            by = {c["client_properties"].get("connection_name"): c["name"]
                  for c in api.ok("/connections")}
            return by if all(n in by for n in names) else None

        by = wait_for(listed, what="connections listed")
        r = api.delete(f"/connections/{q(by[names[1]])}",
                       headers={"X-Reason": "only the middle one"})
        assert r.status_code == 204
        with pytest.raises(pika.exceptions.ConnectionClosed) as e:
            for _ in range(600):
                conns[1].process_data_events(0.1)
        assert e.value.reply_code == 320 and "only the middle one" in e.value.reply_text
        # The others were not touched: each still publishes and reads back.
        for i in (0, 2):
            ch = conns[i].channel()
            qn = ch.queue_declare("", exclusive=True).method.queue
            ch.confirm_delivery()
            ch.basic_publish("", qn, b"still-%d" % i)
            assert ch.basic_get(qn, auto_ack=True)[2] == b"still-%d" % i
    finally:
        for i in (0, 2):
            if conns[i].is_open:
                conns[i].close()


def test_alarm_on_at_start_blocks_each_publishing_connection_not_the_others(tmp_path):
    """disk_free_limit above any disk's free space: the alarm is on before any connection
    opens. Each connection that publishes gets connection.blocked and its publishes are not
    taken; a connection that only consumes is never blocked and keeps working."""
    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n",
                                       "heartbeat = 60\ndisk_free_limit = 18000000000000000000\n", 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        with b.connect() as admin:
            ch = admin.channel()
            ch.queue_declare("alq")
            ch.queue_declare("other")
        pubs = [RawClient(b.host, b.port) for _ in range(2)]
        try:
            for i, p in enumerate(pubs):
                p.handshake(capabilities={"connection.blocked": True})
                p.open_channel(1)
                p.publish(1, "", "alq", b"first-%d" % i)
            for p in pubs:
                assert p.expect_method(commands.Connection.Blocked).method.reason == "low on disk"
            for i, p in enumerate(pubs):
                p.publish(1, "", "alq", b"blocked-%d" % i)
            with b.connect() as consumer:
                cch = consumer.channel()
                got = set()
                deadline = time.time() + 60
                while len(got) < 2 and time.time() < deadline:
                    m = cch.basic_get("alq", auto_ack=True)
                    if m[0] is None:
                        consumer.sleep(0.05)
                    else:
                        got.add(m[2])
                assert got == {b"first-0", b"first-1"}
                consumer.sleep(0.3)
                assert cch.basic_get("alq", auto_ack=True)[0] is None, \
                    "a blocked publisher's message must not be taken"
        finally:
            for p in pubs:
                p.close()
    finally:
        conftest.stop_charon(b)
