"""A paged-out persistent backlog is read back for delivery a run of neighbouring records at a
time, and a dense run's bodies are slices of one buffer (charon-store `read_many`). Over a real
socket: every consumer sees every byte of every body, also for messages nacked back into the
queue and redelivered, and for a second queue holding every other message of the same records
(its runs are sparser)."""

import os

import pika
import pytest

import conftest

pytestmark = pytest.mark.charon_only

COUNT = 1200


def budget_config():
    # 1 byte: every stored body is over the budget, so every body is paged out once durable.
    return conftest.CONFIG_TOML.replace("heartbeat = 60\n", "heartbeat = 60\nmessage_memory_budget = 1\n", 1)


def consume_all(ch, queue, want, requeue_every=0):
    """Consumes `queue` until `want` distinct bodies were acked; the first delivery of every
    `requeue_every`-th message is nacked back into the queue instead. Returns the acked bodies
    in ack order and the bodies that came redelivered."""
    acked, redelivered, nacked = [], [], set()
    for method, _props, body in ch.consume(queue, inactivity_timeout=120.0):
        assert method is not None, f"{queue}: only {len(acked)} of {want} bodies arrived"
        if method.redelivered:
            redelivered.append(body)
        n = int(body.split(b":", 2)[1])
        if requeue_every and n % requeue_every == 0 and n not in nacked:
            nacked.add(n)
            ch.basic_nack(method.delivery_tag, requeue=True)
            continue
        ch.basic_ack(method.delivery_tag)
        acked.append(body)
        if len(acked) == want:
            break
    ch.cancel()
    return acked, redelivered


def test_a_paged_backlog_read_back_in_runs_reaches_consumers_byte_exact_also_redelivered(tmp_path):
    b = conftest.start_charon(tmp_path, config_text=budget_config())
    bodies = [b"m:%05d:" % i + os.urandom(900 + (i * 37) % 300) for i in range(COUNT)]
    try:
        with b.connect() as c:
            ch = c.channel()
            ch.queue_declare("runs-all", durable=True)
            ch.queue_declare("runs-odd", durable=True)
            ch.exchange_declare("runs-x", "direct", durable=True)
            ch.queue_bind("runs-all", "runs-x", "all")
            ch.queue_bind("runs-all", "runs-x", "odd")
            ch.queue_bind("runs-odd", "runs-x", "odd")
            ch.confirm_delivery()
            for i, body in enumerate(bodies):
                # Odd messages go to both queues (one record, two members).
                ch.basic_publish("runs-x", "odd" if i % 2 else "all", body,
                                 pika.BasicProperties(delivery_mode=2))
            ch.basic_qos(prefetch_count=400)
            acked, redelivered = consume_all(ch, "runs-all", COUNT, requeue_every=7)
            assert sorted(acked) == sorted(bodies)
            nacked = [body for i, body in enumerate(bodies) if i % 7 == 0]
            assert sorted(redelivered) == sorted(nacked)
            odd, _ = consume_all(ch, "runs-odd", COUNT // 2)
            assert odd == bodies[1::2]
            q = ch.queue_declare("runs-all", durable=True, passive=True)
            assert q.method.message_count == 0
    finally:
        conftest.stop_charon(b)
