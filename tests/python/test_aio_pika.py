"""A representative subset with aio-pika (asyncio client on aiormq/pamqp)."""
import asyncio
import datetime
import decimal

import aio_pika
import aiormq
import pytest


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_aio_connect_and_server_properties(broker):
    async def main():
        conn = await aio_pika.connect(broker.url())
        caps = conn.transport.connection.server_properties["capabilities"]
        assert caps["publisher_confirms"] is True
        assert caps["consumer_cancel_notify"] is True
        await conn.close()
    run(main())


def test_aio_declare_publish_consume_with_confirms(broker):
    async def main():
        async with await aio_pika.connect(broker.url()) as conn:
            ch = await conn.channel(publisher_confirms=True)
            x = await ch.declare_exchange("aio-topic", aio_pika.ExchangeType.TOPIC, auto_delete=True)
            q = await ch.declare_queue("", exclusive=True)
            await q.bind(x, "a.#")
            for i in range(10):
                r = await x.publish(aio_pika.Message(body=b"%d" % i), routing_key=f"a.{i}")
                assert isinstance(r, aiormq.spec.Basic.Ack)
            got = []
            async with q.iterator() as it:
                async for msg in it:
                    async with msg.process():
                        got.append(msg.body)
                    if len(got) == 10:
                        break
            assert got == [b"%d" % i for i in range(10)]
    run(main())


def test_aio_headers_fidelity(broker):
    headers = {"s": "str", "i": 123, "neg": -70000, "big": 2 ** 40, "b": True, "n": None,
               "f": 1.5, "d": decimal.Decimal("1.23"),
               "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
               "arr": [1, "x", [2]], "tbl": {"k": {"kk": "v"}}}

    async def main():
        async with await aio_pika.connect(broker.url()) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue("", exclusive=True)
            await ch.default_exchange.publish(
                aio_pika.Message(body=b"h", headers=headers, content_type="text/plain",
                                 correlation_id="c1", message_id="m1", priority=3,
                                 delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                 app_id="aio", type="t", reply_to="r"),
                routing_key=q.name)
            msg = await q.get(no_ack=True)
            assert msg.body == b"h"
            assert (msg.content_type, msg.correlation_id, msg.message_id, msg.priority,
                    msg.app_id, msg.type, msg.reply_to) == ("text/plain", "c1", "m1", 3, "aio", "t", "r")
            assert msg.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
            got = msg.headers
            for k, v in headers.items():
                if k == "ts":
                    assert got[k].replace(tzinfo=datetime.timezone.utc) == v
                else:
                    assert got[k] == v, (k, got[k], v)
    run(main())


def test_aio_channel_error_404(broker):
    async def main():
        async with await aio_pika.connect(broker.url()) as conn:
            ch = await conn.channel()
            with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity) as ei:
                await ch.declare_queue("aio-missing-queue-xyz", passive=True)
            assert ei.value.args[0] == "NOT_FOUND - no queue 'aio-missing-queue-xyz' in vhost '/'"
            ch2 = await conn.channel()
            q = await ch2.declare_queue("", exclusive=True)
            assert q.name.startswith("amq.gen-")
    run(main())


def test_aio_precondition_failed_406(broker):
    async def main():
        async with await aio_pika.connect(broker.url()) as conn:
            ch = await conn.channel()
            await ch.declare_queue("aio-406-q", auto_delete=False)
            ch2 = await conn.channel()
            with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as ei:
                await ch2.declare_queue("aio-406-q", durable=True)
            assert "inequivalent arg 'durable' for queue 'aio-406-q'" in ei.value.args[0]
            ch3 = await conn.channel()
            await ch3.queue_delete("aio-406-q")
    run(main())


def test_aio_bad_password(broker):
    async def main():
        with pytest.raises(aiormq.exceptions.ProbableAuthenticationError):
            await aio_pika.connect(broker.url(password="wrong"))
    run(main())


def test_aio_mandatory_return(broker):
    async def main():
        async with await aio_pika.connect(broker.url()) as conn:
            ch = await conn.channel(publisher_confirms=True, on_return_raises=True)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as ei:
                await ch.default_exchange.publish(aio_pika.Message(b"x"), routing_key="aio-nobody",
                                                  mandatory=True)
            assert ei.value.message.body == b"x"
    run(main())


def test_aio_nack_requeue_order(broker):
    async def main():
        async with await aio_pika.connect(broker.url()) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue("", exclusive=True)
            for i in range(3):
                await ch.default_exchange.publish(aio_pika.Message(b"%d" % i), routing_key=q.name)
            msgs = [await q.get() for _ in range(3)]
            for m in reversed(msgs):
                await m.nack(requeue=True)
            again = [await q.get(no_ack=True) for _ in range(3)]
            assert [m.body for m in again] == [b"0", b"1", b"2"]
            assert all(m.redelivered for m in again)
    run(main())
