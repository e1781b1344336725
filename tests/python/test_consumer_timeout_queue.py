"""Per-queue consumer timeouts (RabbitMQ 3.12+/4.x): the `x-consumer-timeout` queue argument and
the `consumer-timeout` policy key override the broker's `consumer_timeout` (here the default,
30 min) for deliveries from that queue; with both, the smaller wins. A channel whose oldest
unacked delivery outlived its queue's timeout is closed with 406 and RabbitMQ's text naming the
timeout used; the delivery goes back to its queue. Channels holding deliveries from other
queues stay open."""

import time

import pika
import pytest

import conftest
from mgmt_helpers import Api

pytestmark = pytest.mark.charon_only


def closed_with(e):
    return e.value.args[0], e.value.args[1]


def expect_timeout(held, ms):
    """Waits on the consumer (up to 90 s) until the broker closes its channel; checks the 406
    text."""
    ch, events = held
    deadline = time.monotonic() + 90
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        for ev in events:
            assert ev == (None, None, None), "nothing else was published"
            assert time.monotonic() < deadline, "the channel was not closed"
    code, text = closed_with(e)
    assert code == 406, text
    assert text == (
        f"PRECONDITION_FAILED - delivery acknowledgement on channel {ch.channel_number} "
        f"timed out. Timeout value used: {ms} ms. This timeout value can be configured, "
        "see consumers doc guide to learn more")


def hold_one(c, queue, args=None):
    """A channel that declared `queue`, published one message to it and holds its delivery
    unacked (a consumer with manual acks): (channel, the consumer's event generator)."""
    ch = c.channel()
    ch.queue_declare(queue, arguments=args)
    ch.basic_publish("", queue, queue.encode())
    events = ch.consume(queue, inactivity_timeout=0.2)
    deadline = time.monotonic() + 60
    for m, _, body in events:
        if m is not None:
            assert body == queue.encode()
            return ch, events
        assert time.monotonic() < deadline, "no delivery"


def test_queue_argument_overrides_the_broker_timeout(private_charon):
    b = private_charon
    with b.connect() as c:
        untimed = hold_one(c, "ct-plain")
        timed = hold_one(c, "ct-arg", {"x-consumer-timeout": 1000})
        expect_timeout(timed, 1000)
        # the broker-wide 30 min still applies to the other queue's delivery
        assert untimed[0].is_open
        untimed[0].basic_qos(prefetch_count=0)
        # the timed-out delivery went back to its queue
        ch = c.channel()
        m, _, body = ch.basic_get("ct-arg", auto_ack=True)
        assert body == b"ct-arg" and m.redelivered


def test_policy_and_argument_the_smaller_wins(private_charon):
    b = private_charon
    api = Api(b)
    r = api.put("/policies/%2F/ct", {"pattern": "^ct-pol", "apply-to": "queues",
                                       "definition": {"consumer-timeout": 1500}})
    assert r.status_code in (201, 204), r.text
    with b.connect() as c:
        # argument 10 min, policy 1.5 s: the policy's
        ch = hold_one(c, "ct-pol-arg", {"x-consumer-timeout": 600000})
        expect_timeout(ch, 1500)
        # no argument: the policy's
        ch = hold_one(c, "ct-pol-only")
        expect_timeout(ch, 1500)
        # argument 1.2 s under a policy of 1.5 s: the argument's
        ch = hold_one(c, "ct-pol-short", {"x-consumer-timeout": 1200})
        expect_timeout(ch, 1200)
    # a policy changed at run time applies to the queues it matches
    r = api.put("/policies/%2F/ct", {"pattern": "^ct-late", "apply-to": "queues",
                                       "definition": {"consumer-timeout": 1100}})
    assert r.status_code in (201, 204), r.text
    with b.connect() as c:
        ch = hold_one(c, "ct-late")
        expect_timeout(ch, 1100)


def test_invalid_consumer_timeout_policy_is_refused(private_charon):
    api = Api(private_charon)
    r = api.put("/policies/%2F/bad", {"pattern": "^x", "definition": {"consumer-timeout": -5}})
    assert r.status_code == 400
    assert "is not a valid consumer timeout" in r.json()["reason"]


def test_consumer_timeout_zero_disables_only_the_broker_wide_timeout(tmp_path):
    """`consumer_timeout = 0` turns off the broker-wide timeout; a queue's own still applies."""
    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n", "heartbeat = 60\nconsumer_timeout = 0\n", 1)
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        with b.connect() as c:
            untimed = hold_one(c, "ct0-plain")
            timed = hold_one(c, "ct0-arg", {"x-consumer-timeout": 1000})
            expect_timeout(timed, 1000)
            assert untimed[0].is_open
            untimed[0].basic_qos(prefetch_count=0)
    finally:
        conftest.stop_charon(b)
