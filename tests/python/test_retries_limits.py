"""Delivery counts that persist and delivery limits (issue 10): `delivery-limit` as a policy key
applies to classic queues too (a Charon extension; RabbitMQ ignores it there), the delivery count
survives a restart (quorum `x-delivery-count`, the classic limit), and retries, dead-lettering
and the DLQ's max-length keep working while the disk alarm blocks publishers."""

import signal
import time

import pika
import pytest

import conftest
from dlx_helpers import clear_policy, get_within, set_policy

pytestmark = pytest.mark.charon_only

UPPER_SLACK_S = 60.0


def fanout_dlq(ch, uniq):
    x, q = uniq("dlx"), uniq("dlq")
    ch.exchange_declare(x, "fanout", durable=True)
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, x)
    return x, q


def test_delivery_limit_policy_applies_to_classic_queues(broker, ch, uniq):
    x, dlq = fanout_dlq(ch, uniq)
    q, pol = uniq("classic"), uniq("pol")
    set_policy(broker, pol, f"^{q}$", {"delivery-limit": 2, "dead-letter-exchange": x})
    try:
        ch.queue_declare(q)
        ch.basic_publish("", q, b"poison")
        for _ in range(3):
            m = get_within(ch, q, timeout=10, auto_ack=False)
            assert m is not None
            ch.basic_nack(m[0].delivery_tag, requeue=True)
        d = get_within(ch, dlq, timeout=UPPER_SLACK_S)
        assert d is not None and d[2] == b"poison"
        assert d[1].headers["x-death"][0]["reason"] == "delivery_limit"
        assert ch.basic_get(q)[0] is None
    finally:
        clear_policy(broker, pol)


@pytest.fixture
def node(tmp_path):
    box = {"b": conftest.start_charon(tmp_path)}
    yield box
    conftest.stop_charon(box["b"])


def kill9(tmp_path, b):
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)
    return conftest.start_charon(tmp_path)


def test_quorum_x_delivery_count_survives_kill_9(tmp_path, node, uniq):
    b = node["b"]
    q = uniq("qq")
    c = b.connect()
    ch = c.channel()
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"m", pika.BasicProperties(delivery_mode=2))
    counts = []
    for _ in range(2):
        m = get_within(ch, q, timeout=10, auto_ack=False)
        counts.append((m[1].headers or {}).get("x-delivery-count"))
        ch.basic_nack(m[0].delivery_tag, requeue=True)
    m = get_within(ch, q, timeout=10, auto_ack=False)
    counts.append((m[1].headers or {}).get("x-delivery-count"))
    assert counts[1:] == [1, 2]
    # The counts are on disk once a later confirmed persistent publish is; then crash with the
    # third delivery unacked (a return, as a consumer that goes away).
    bq = uniq("barrier")
    ch.queue_declare(bq, durable=True)
    ch.basic_publish("", bq, b"barrier", pika.BasicProperties(delivery_mode=2))
    b = node["b"] = kill9(tmp_path, b)
    try:
        c.close()
    except Exception:
        pass
    with b.connect() as c:
        ch = c.channel()
        m = get_within(ch, q, timeout=UPPER_SLACK_S, auto_ack=False)
        assert m[2] == b"m" and m[0].redelivered
        # Two failed deliveries (nacks); the crash with the third in flight is not one (4.x).
        assert m[1].headers["x-delivery-count"] == 2


def test_classic_delivery_limit_counts_deliveries_before_a_restart(tmp_path, node, uniq):
    b = node["b"]
    q, pol = uniq("classic"), uniq("pol")
    with b.connect() as c:
        ch = c.channel()
        x, dlq = fanout_dlq(ch, uniq)
        set_policy(b, pol, f"^{q}$", {"delivery-limit": 2, "dead-letter-exchange": x})
        ch.queue_declare(q, durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", q, b"poison", pika.BasicProperties(delivery_mode=2))
        for _ in range(2):
            m = get_within(ch, q, timeout=10, auto_ack=False)
            ch.basic_nack(m[0].delivery_tag, requeue=True)
        # A confirmed persistent publish: the delivery counts before it are on disk.
        bq = uniq("barrier")
        ch.queue_declare(bq, durable=True)
        ch.basic_publish("", bq, b"barrier", pika.BasicProperties(delivery_mode=2))
    b = node["b"] = kill9(tmp_path, b)
    with b.connect() as c:
        ch = c.channel()
        m = get_within(ch, q, timeout=UPPER_SLACK_S, auto_ack=False)
        assert m is not None
        ch.basic_nack(m[0].delivery_tag, requeue=True)  # the third return: over the limit
        d = get_within(ch, dlq, timeout=UPPER_SLACK_S)
        assert d is not None and d[1].headers["x-death"][0]["reason"] == "delivery_limit"


def test_retries_dead_lettering_and_dlq_max_length_hold_under_the_disk_alarm(tmp_path, uniq):
    """disk_free_limit above any disk's free space: the alarm is on from the start. Each raw
    connection gets one publish in before it is paused (how the alarm works); a consumer (never
    publishing) keeps working, retries come back, dead letters still flow (as RabbitMQ lets
    dead-lettering run past its disk alarm) and the DLQ's max-length still drops heads."""
    limits_hold_under_an_alarm(tmp_path, uniq, "disk_free_limit = 18000000000000000000",
                               "disk alarm set")


def test_retries_dead_lettering_and_dlq_max_length_hold_under_the_memory_alarm(tmp_path, uniq):
    """The same with the memory alarm on (a 1 MiB watermark, below any broker's memory use)."""
    limits_hold_under_an_alarm(tmp_path, uniq, 'vm_memory_high_watermark = "1MiB"',
                               "memory alarm set")


def limits_hold_under_an_alarm(tmp_path, uniq, config_line, alarm_log):
    from amqp_raw import RawClient

    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n", f"heartbeat = 60\n{config_line}\n", 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        # The alarm is on before anything is published.
        deadline = time.monotonic() + UPPER_SLACK_S
        while alarm_log not in b.log_path.read_text(errors="replace") \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alarm_log in b.log_path.read_text(errors="replace")
        q, x, dlq = uniq("main"), uniq("dlx"), uniq("dlq")
        with b.connect() as c:
            ch = c.channel()
            ch.exchange_declare(x, "fanout")
            ch.queue_declare(dlq, arguments={"x-max-length": 2})
            ch.queue_bind(dlq, x)
            ch.queue_declare(q, arguments={"x-retry-limit": 1, "x-retry-backoff-initial": 100,
                                           "x-dead-letter-exchange": x})
            for i in range(4):
                with RawClient(b.host, b.port) as pub:
                    pub.handshake(capabilities={"connection.blocked": True})
                    pub.open_channel(1)
                    pub.publish(1, "", q, f"m{i}".encode())
                    time.sleep(0.05)
            seen = {}
            deadline = time.monotonic() + UPPER_SLACK_S
            while sum(seen.values()) < 8 and time.monotonic() < deadline:
                m = get_within(ch, q, timeout=0.2, auto_ack=False)
                if m is None:
                    continue
                seen[m[2]] = seen.get(m[2], 0) + 1
                ch.basic_reject(m[0].delivery_tag, requeue=False)
            assert seen == {f"m{i}".encode(): 2 for i in range(4)}
            deadline = time.monotonic() + UPPER_SLACK_S
            while ch.queue_declare(dlq, passive=True).method.message_count < 2 \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
            assert ch.queue_declare(dlq, passive=True).method.message_count == 2
    finally:
        conftest.stop_charon(b)
