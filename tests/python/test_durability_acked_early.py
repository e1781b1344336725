"""Persistent publishes acked while their confirms are still pending (issue 13 b, branch b13o).
Written for a store that drops a publish every queue copy of which is acked before the writer takes
its batch (branch b13o-deferred, docs/performance.md part 16); it pins the guarantees whatever the
store does. Through real sockets: pipelined confirms, a consumer acking at once, kill -9 — every
confirmed message not acked comes back (redelivered when it had been delivered), no acked one ever
does."""

import asyncio

import aio_pika
import pytest

import conftest
from test_durability import count_q, drain, settle_store

pytestmark = pytest.mark.charon_only


@pytest.fixture
def node(tmp_path):
    box = {"b": conftest.start_charon(tmp_path)}
    yield box
    conftest.stop_charon(box["b"])


async def _stream(url, queue, fanout_queue, windows, window, stop_acking_at):
    """Publishes `windows` × `window` persistent messages with pipelined confirms to `queue` (and
    every fifth also to `fanout_queue` through a fanout: two queue copies), while a consumer acks
    what it gets at once until `stop_acking_at` windows have gone out, then holds the rest
    unacked. Returns (confirmed, acked) bodies of `queue`."""
    pub = await aio_pika.connect(url)
    con = await aio_pika.connect(url)
    pch = await pub.channel(publisher_confirms=True)
    cch = await con.channel()
    await cch.set_qos(prefetch_count=2000)
    q = await cch.declare_queue(queue, durable=True)
    await pch.declare_queue(fanout_queue, durable=True)
    fan = await pch.declare_exchange("early-fan", aio_pika.ExchangeType.FANOUT, durable=True)
    await (await pch.get_queue(queue)).bind(fan)
    await (await pch.get_queue(fanout_queue)).bind(fan)
    acked, held = set(), []
    state = {"acking": True}

    async def on_message(m):
        if state["acking"]:
            await m.ack()
            acked.add(m.body)
        else:
            held.append(m)

    tag = await q.consume(on_message)
    confirmed = set()
    for w in range(windows):
        if w == stop_acking_at:
            state["acking"] = False
        bodies = [f"m-{w}-{i}".encode() for i in range(window)]
        sends = []
        for i, body in enumerate(bodies):
            msg = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
            if i % 5 == 0:
                sends.append(fan.publish(msg, routing_key=""))
            else:
                sends.append(pch.default_exchange.publish(msg, routing_key=queue))
        await asyncio.gather(*sends)
        confirmed |= set(bodies)
    # Let the consumer take what is on its way, then stop it without acking the rest: a round
    # trip on its own channel after its last ack puts every ack before the barrier below.
    await asyncio.sleep(0.5)
    state["acking"] = False
    await q.cancel(tag)
    await cch.declare_queue(queue, durable=True, passive=True)
    await pub.close()
    # The consumer's connection stays open (its unacked deliveries stay delivered) until the
    # broker is killed.
    return confirmed, acked, con


def test_acked_before_written_stay_gone_confirmed_unacked_come_back_after_kill_9(tmp_path, node):
    b = node["b"]
    url = b.url()

    async def main():
        return await _stream(url, "early", "early-copy", 30, 200, 20)

    loop = asyncio.new_event_loop()
    try:
        confirmed, acked, con = loop.run_until_complete(main())
        assert confirmed and acked, "nothing confirmed or nothing acked"
        with b.connect() as c:
            ch = c.channel()
            settle_store(b, ch, "early")  # every ack above is on disk (or its publish dropped)
            before = count_q(ch, "early")
        b = node["b"] = conftest.restart_charon(tmp_path, b, hard=True)
        try:
            loop.run_until_complete(con.close())
        except Exception:
            pass  # its broker is gone
    finally:
        loop.close()
    with b.connect() as c:
        ch = c.channel()
        got = drain(ch, "early")
        copies = drain(ch, "early-copy")
    bodies = [g[2] for g in got]
    assert len(bodies) == len(set(bodies)), "a message came back twice"
    back = set(bodies) & acked
    assert not back, f"{len(back)} acked messages came back, e.g. {sorted(back)[:3]}"
    missing = (confirmed - acked) - set(bodies)
    assert not missing, f"{len(missing)} confirmed, unacked messages lost, e.g. {sorted(missing)[:3]}"
    assert set(bodies) <= confirmed
    # The queue counted the unacked ones before the kill (ready ones; the held ones were
    # delivered) — after it, every one is ready.
    assert len(bodies) >= before
    # The fanout's second copy was never acked: every confirmed one of them is there.
    fanned = {x for x in confirmed if int(x.split(b"-")[2]) % 5 == 0}
    assert {g[2] for g in copies} == fanned
