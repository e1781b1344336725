"""Per-exchange message stats as RabbitMQ's management API shows them: `publish_in` counts the
messages a pika client publishes into an exchange (routed or not), `publish_out` the deliveries
it routes out to queues (one per queue reached), each with `_details.rate`; connections'
`recv_oct`/`send_oct` with rates."""

import pika
import pytest

from conftest import start_charon, stop_charon
from mgmt_helpers import Api, wait_for

pytestmark = [pytest.mark.charon_only]


@pytest.fixture
def node(tmp_path):
    b = start_charon(tmp_path)
    yield b
    stop_charon(b)


def stats(api, name):
    return api.ok(f"/exchanges/%2F/{name}")["message_stats"]


def test_exchange_publish_in_and_out_counts_and_rates(node):
    api = Api(node)
    c = node.connect()
    ch = c.channel()
    ch.confirm_delivery()
    ch.exchange_declare("rx.fan", "fanout")
    ch.exchange_declare("rx.none", "direct")
    for q in ("rx.q1", "rx.q2"):
        ch.queue_declare(q)
        ch.queue_bind(q, "rx.fan")
    # A first reading starts the rate samples.
    assert stats(api, "rx.fan")["publish_in"] == 0
    assert [x["recv_oct_details"]["rate"] for x in api.ok("/connections")] == [0.0]
    for i in range(7):
        ch.basic_publish("rx.fan", "k", f"m{i}".encode())
    for i in range(3):
        ch.basic_publish("rx.none", "nowhere", b"lost")
    s = stats(api, "rx.fan")
    assert (s["publish_in"], s["publish_out"]) == (7, 14)
    s = stats(api, "rx.none")
    assert (s["publish_in"], s["publish_out"]) == (3, 0)
    # The default exchange counts too.
    ch.basic_publish("", "rx.q1", b"direct")
    wait_for(lambda: api.ok("/queues/%2F/rx.q1")["messages"] == 8, what="8 in rx.q1")
    s = stats(api, "amq.default")
    assert (s["publish_in"], s["publish_out"]) == (1, 1)
    # Listed the same way.
    listed = {x["name"]: x for x in api.ok("/exchanges/%2F")}
    assert listed["rx.fan"]["message_stats"]["publish_out"] == 14
    # Rates come from samples at least 5 s apart: positive once the interval with the
    # publishes has been sampled.
    wait_for(lambda: stats(api, "rx.fan")["publish_in_details"]["rate"] > 0
             and stats(api, "rx.fan")["publish_out_details"]["rate"] > 0,
             timeout=120, what="publish rates")
    # The connection's byte counts have rates too.
    conn = api.ok("/connections")[0]
    assert conn["recv_oct"] > 0 and conn["send_oct"] > 0
    wait_for(lambda: api.ok("/connections")[0]["recv_oct_details"]["rate"] > 0,
             timeout=120, what="connection byte rate")
    c.close()
