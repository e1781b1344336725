"""Failure reasons without archiving (issue 9, docs/archive.md): every queue that dead-letters
counts its dead letters by the error the consumer set (`x-exception-message` /
`x-exception-stacktrace`, the archive's extraction and fingerprint), archived or not, in
`/api/queues/{vhost}/{name}` (`dead_lettered_errors`, with a sample message) and in Prometheus
(`charon_queue_dead_lettered_errors_total{vhost,queue,reason,fingerprint}`), with at most 100
fingerprints per queue (the rest as `other`)."""

import string
import time

import pika
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

import conftest
from archive_helpers import Api, wait_until

pytestmark = pytest.mark.charon_only


@pytest.fixture
def broker(tmp_path):
    b = conftest.start_charon(tmp_path)
    yield b
    conftest.stop_charon(b)


def reject_all(ch, queue, n):
    done = 0
    deadline = time.monotonic() + 60
    while done < n and time.monotonic() < deadline:
        m, _, _ = ch.basic_get(queue)
        if m is None:
            time.sleep(0.05)
            continue
        ch.basic_reject(m.delivery_tag, requeue=False)
        done += 1
    assert done == n


def publish(ch, queue, headers):
    ch.basic_publish("", queue, b"body", pika.BasicProperties(headers=headers))


def scrape(b):
    r = requests.get(f"http://{b.host}:{b.http_port}/metrics", timeout=30)
    assert r.status_code == 200
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            if s.name.startswith("charon_queue_dead_lettered_errors"):
                out[(s.labels["queue"], s.labels["reason"], s.labels["fingerprint"])] = s.value
    return out


def test_dead_lettered_counts_by_error_for_archived_and_plain_dlqs_with_bounded_fingerprints(broker):
    api = Api(broker)
    with broker.connect(user="alice", password="secret") as c:
        ch = c.channel()
        ch.queue_declare("orders.dlq", arguments={"x-dead-letter-archive": True})
        ch.queue_declare("orders", arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"})
        ch.queue_declare("payments.dlq")
        ch.queue_declare("payments", arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "payments.dlq"})
        ch.confirm_delivery()
        # orders: 3 of one cause (ids differ), 1 other cause with a stack trace, 2 without error.
        for i in (17, 18, 19):
            publish(ch, "orders", {"x-exception-message": f"Order {i} not found"})
        publish(ch, "orders", {"x-exception-message": "Payment declined",
                               "x-exception-stacktrace": "E: declined\n\tat a.B.c(B.java:3)"})
        publish(ch, "orders", {"tenant": "acme"})
        publish(ch, "orders", None)
        reject_all(ch, "orders", 6)
        # payments (not archived): 100 + 3 distinct causes: 100 fingerprints, 3 counted as other.
        words = ["".join(string.ascii_lowercase[(i // 26 ** k) % 26] for k in range(3)) for i in range(103)]
        for w in words:
            publish(ch, "payments", {"x-exception-message": f"cause {w}"})
        reject_all(ch, "payments", 103)

    status, q = api.get("/api/queues/%2F/orders")
    assert status == 200
    assert q["dead_lettered"]["rejected"] == 6
    errs = q["dead_lettered_errors"]
    assert [(e["count"], e["sample_message"], e["by_reason"]) for e in errs] == [
        (3, "Order 17 not found", {"rejected": 3}),
        (1, "Payment declined", {"rejected": 1}),
    ]
    # The same extraction and fingerprint as the archive's records.
    recs = api.wait_records(4, error="")["items"]
    fps = {r["error_message"]: r["error_fingerprint"] for r in recs if r["error_message"]}
    assert errs[0]["fingerprint"] == fps["Order 17 not found"] == fps["Order 19 not found"]
    assert errs[1]["fingerprint"] == fps["Payment declined"]

    status, p = api.get("/api/queues/%2F/payments")
    perrs = p["dead_lettered_errors"]
    assert p["dead_lettered"]["rejected"] == 103
    assert len(perrs) == 101 and sum(e["count"] for e in perrs) == 103
    other = [e for e in perrs if e["fingerprint"] == "other"]
    assert other == [{"fingerprint": "other", "count": 3, "sample_message": None,
                      "by_reason": {"rejected": 3}}]
    assert status == 200 and api.get("/api/queues/%2F/payments.dlq")[1]["dead_lettered_errors"] == []

    m = scrape(broker)
    assert m[("orders", "rejected", errs[0]["fingerprint"])] == 3
    assert m[("orders", "rejected", errs[1]["fingerprint"])] == 1
    assert m[("payments", "rejected", "other")] == 3
    assert len([k for k in m if k[0] == "payments"]) == 101
