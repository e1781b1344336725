"""Prometheus: `/metrics` on the HTTP listener and on `prometheus_listen`, parsed with the
reference exposition-format parser (prometheus_client): rabbitmq_prometheus's names, Charon's
per-queue and per-reason dead-letter counters, the DLQ head age and the alarms as gauges."""

import pika
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import free_port, start_charon, stop_charon
from dlx_helpers import get_within
from mgmt_helpers import wait_for

pytestmark = pytest.mark.charon_only


def scrape(url):
    r = requests.get(url, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics_on_both_listeners_with_dead_letter_counters(tmp_path):
    prom = free_port()
    b = start_charon(tmp_path, extra_args=("--prometheus-listen", f"127.0.0.1:{prom}"))
    try:
        conn = b.connect()
        ch = conn.channel()
        ch.queue_declare("m.dlq")
        ch.queue_declare("m.src", arguments={"x-dead-letter-exchange": "",
                                             "x-dead-letter-routing-key": "m.dlq",
                                             "x-max-length": 2})
        ch.queue_declare("m.nodlx", arguments={"x-dead-letter-exchange": "absent"})
        for i in range(3):  # '0' dropped from the head: maxlen
            ch.basic_publish("", "m.src", b"%d" % i)
        # '1' dropped from the head (maxlen), then 'ttl' expires
        ch.basic_publish("", "m.src", b"ttl", pika.BasicProperties(expiration="0"))
        m = get_within(ch, "m.src", auto_ack=False)
        ch.basic_reject(m[0].delivery_tag, requeue=False)  # rejected
        ch.basic_publish("", "m.nodlx", b"x")
        m = get_within(ch, "m.nodlx", auto_ack=False)
        ch.basic_reject(m[0].delivery_tag, requeue=False)  # dropped: DLX missing

        def ready():
            s = scrape(f"http://127.0.0.1:{prom}/metrics")
            done = value(s, "charon_queue_dead_lettered_total", vhost="/", queue="m.src", reason="rejected") == 1
            done = done and value(s, "charon_queue_dead_letters_dropped_total", vhost="/", queue="m.nodlx",
                                  cause="dlx_missing") == 1
            return s if done and value(s, "rabbitmq_queue_messages", vhost="/", queue="m.dlq") == 4 else None

        s = wait_for(ready, timeout=30, what="dead-letter counters")
        for reason, n in (("maxlen", 2), ("expired", 1), ("rejected", 1), ("delivery_limit", 0)):
            got = value(s, "charon_queue_dead_lettered_total", vhost="/", queue="m.src", reason=reason)
            assert got == n, (reason, got)
        assert value(s, "charon_queue_dead_letters_dropped_total", vhost="/", queue="m.nodlx", cause="dlx_missing") == 1
        assert value(s, "charon_queue_dead_letters_dropped_total", vhost="/", queue="m.src", cause="dlx_missing") == 0
        age = value(s, "charon_dlq_oldest_message_age_seconds", vhost="/", queue="m.dlq")
        assert age is not None and 0 <= age < 3600
        assert value(s, "charon_dlq_oldest_message_age_seconds", vhost="/", queue="m.src") is None
        assert value(s, "rabbitmq_queue_messages_ready", vhost="/", queue="m.src") == 0
        assert value(s, "rabbitmq_queue_messages_published_total", vhost="/", queue="m.src") == 4
        assert value(s, "rabbitmq_channel_messages_published_total") == 5
        assert value(s, "rabbitmq_connections") == 1 and value(s, "rabbitmq_channels") == 1
        assert value(s, "rabbitmq_alarms_free_disk_space_watermark") == 0
        assert value(s, "charon_alarm", resource="disk") == 0
        assert value(s, "rabbitmq_process_resident_memory_bytes") > 0
        # The same metrics on the management listener.
        s2 = scrape(f"http://127.0.0.1:{b.http_port}/metrics")
        assert value(s2, "charon_queue_dead_lettered_total", vhost="/", queue="m.src", reason="expired") == 1
        conn.close()
        wait_for(lambda: value(scrape(f"http://127.0.0.1:{prom}/metrics"),
                               "rabbitmq_connections_closed_total") == 1, what="closed count")
    finally:
        stop_charon(b)


def test_grafana_dashboard_uses_only_exported_metrics(broker):
    """Every metric the dashboard in docs/ queries is one the broker exports."""
    import json
    import re
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-charon.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    wanted = {m for e in exprs for m in re.findall(r"\b((?:rabbitmq|charon)_[a-z_]+)\b", e)}
    assert len(wanted) >= 10
    text = requests.get(f"http://127.0.0.1:{broker.http_port}/metrics", timeout=30).text
    exported = set()
    for fam in text_string_to_metric_families(text):
        exported.add(fam.name)
        if fam.type == "counter":
            exported.add(fam.name + "_total")
    assert wanted <= exported, wanted - exported
