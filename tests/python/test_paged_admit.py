"""Persistent messages published while held bodies are over message_memory_budget enter their
durable queue already paged out (their bodies are in the store's record; the queue keeps each
body aside only until that record is durable). A consumer running at the same time sees every byte, in order, whether it is served
from the kept body or from the store. (basic.get, dead-lettering and kill -9 of such messages:
test_durability.py's budget-of-1-byte test, where every publish is admitted paged out.)"""

import os
import threading

import pika
import pytest

import conftest

pytestmark = pytest.mark.charon_only

PUBLISHERS, PER_PUBLISHER = 2, 1500


def budget_config():
    # 1 byte: every stored body is over the budget, so every publish is admitted paged out.
    return conftest.CONFIG_TOML.replace("heartbeat = 60\n", "heartbeat = 60\nmessage_memory_budget = 1\n", 1)


def bodies_of(p):
    return [b"%d:%05d:" % (p, i) + os.urandom(700 + i % 300) for i in range(PER_PUBLISHER)]


def test_consumers_running_while_paged_admitted_publishes_stream_get_every_body_in_order(tmp_path):
    b = conftest.start_charon(tmp_path, config_text=budget_config())
    try:
        with b.connect() as c:
            c.channel().queue_declare("adm", durable=True)
        sent = {p: bodies_of(p) for p in range(PUBLISHERS)}
        got = {p: [] for p in range(PUBLISHERS)}
        errors = []

        def publish(p):
            try:
                with b.connect() as pc:
                    pch = pc.channel()
                    # No confirms: publishes stream ahead of their group commits, so the
                    # consumer is often delivered bodies whose records are not durable yet.
                    for body in sent[p]:
                        pch.basic_publish("", "adm", body, pika.BasicProperties(delivery_mode=2))
                    pch.confirm_delivery()  # a sync round trip: everything above has arrived
            except Exception as e:  # reported by the main thread
                errors.append(e)

        with b.connect() as c:
            ch = c.channel()
            ch.basic_qos(prefetch_count=200)
            threads = [threading.Thread(target=publish, args=(p,)) for p in range(PUBLISHERS)]
            for t in threads:
                t.start()
            total = 0
            for method, _props, body in ch.consume("adm", inactivity_timeout=120.0):
                assert method is not None, f"only {total} of {PUBLISHERS * PER_PUBLISHER} delivered"
                got[int(body.split(b":", 1)[0])].append(body)
                ch.basic_ack(method.delivery_tag)
                total += 1
                if total == PUBLISHERS * PER_PUBLISHER:
                    break
            ch.cancel()
            for t in threads:
                t.join(120)
            assert not errors, errors
            for p in range(PUBLISHERS):
                assert got[p] == sent[p], f"publisher {p}'s bodies differ or are out of order"
            assert ch.queue_declare("adm", durable=True, passive=True).method.message_count == 0
    finally:
        conftest.stop_charon(b)

