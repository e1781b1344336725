import time

import pika
import pika.exceptions as pe
import pytest
from pamqp import commands

from amqp_raw import RawClient
from test_basic import drain, make_queue
from test_exchanges import expect_channel_error


# ---------------------------------------------------------------- publisher confirms

def test_confirm_select_then_publishes_are_acked_with_sequential_tags(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Confirm.Select(), 1)
        c.expect_method(commands.Confirm.SelectOk)
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect_method(commands.Queue.DeclareOk).method.queue
        for i in range(3):
            c.publish(1, "", q, b"m%d" % i)
        acked = set()
        while acked != {1, 2, 3}:
            f = c.expect_method(commands.Basic.Ack)
            assert f.method.delivery_tag in (1, 2, 3)
            assert f.method.delivery_tag not in acked
            if f.method.multiple:
                acked |= set(range(1, f.method.delivery_tag + 1))
            else:
                acked.add(f.method.delivery_tag)


def test_unroutable_publish_is_still_acked(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Confirm.Select(), 1)
        c.expect_method(commands.Confirm.SelectOk)
        c.publish(1, "amq.direct", "nobody-is-bound-here", b"x")
        f = c.expect_method(commands.Basic.Ack)
        assert f.method.delivery_tag == 1 and f.method.multiple is False


def test_mandatory_unroutable_confirm_order_is_return_then_ack(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Confirm.Select(), 1)
        c.expect_method(commands.Confirm.SelectOk)
        c.send_frame(commands.Basic.Publish(exchange="amq.direct", routing_key="nobody", mandatory=True), 1)
        from pamqp import header as ph, body as pb
        c.send_frame(ph.ContentHeader(0, 3, commands.Basic.Properties()), 1)
        c.send_frame(pb.ContentBody(b"abc"), 1)
        f = c.expect_method(commands.Basic.Return)
        assert (f.method.reply_code, f.method.reply_text) == (312, "NO_ROUTE")
        h = c.read_frame_skip_heartbeats()
        assert h.type == 2 and h.method.body_size == 3
        b = c.read_frame_skip_heartbeats()
        assert b.type == 3 and b.payload == b"abc"
        f = c.expect_method(commands.Basic.Ack)
        assert f.method.delivery_tag == 1


def test_pika_confirm_delivery_publish_succeeds(ch):
    ch.confirm_delivery()
    q = ch.queue_declare("", exclusive=True).method.queue
    for i in range(20):
        ch.basic_publish("", q, b"%d" % i)
    assert ch.queue_declare(q, passive=True).method.message_count == 20


def test_confirm_select_nowait(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Confirm.Select(nowait=True), 1)
        c.publish(1, "", "no-such-queue-x", b"x")
        f = c.expect_method(commands.Basic.Ack)
        assert f.method.delivery_tag == 1


def test_confirm_select_on_transactional_channel_is_406(ch):
    ch.tx_select()
    expect_channel_error(lambda: ch.confirm_delivery(), 406,
                         "PRECONDITION_FAILED - cannot switch from tx to confirm mode")


def test_tx_select_on_confirm_channel_is_406(ch):
    ch.confirm_delivery()
    expect_channel_error(lambda: ch.tx_select(), 406,
                         "PRECONDITION_FAILED - cannot switch from confirm to tx mode")


# ---------------------------------------------------------------- transactions

def test_tx_commit_delivers_published_messages(conn):
    ch = conn.channel()
    q = make_queue(ch)
    ch.tx_select()
    ch.basic_publish("", q, b"a")
    ch.basic_publish("", q, b"b")
    other = conn.channel()
    assert other.basic_get(q, auto_ack=True)[0] is None
    ch.tx_commit()
    assert [b for _, b in drain(other, q)] == [b"a", b"b"]


def test_tx_rollback_discards_published_messages(conn):
    ch = conn.channel()
    q = make_queue(ch)
    ch.tx_select()
    ch.basic_publish("", q, b"a")
    ch.tx_rollback()
    ch.basic_publish("", q, b"b")
    ch.tx_commit()
    other = conn.channel()
    assert [b for _, b in drain(other, q)] == [b"b"]


def test_tx_acks_are_applied_on_commit(conn):
    ch = conn.channel()
    q = make_queue(ch, 2)
    ch.tx_select()
    m, _, _ = ch.basic_get(q)
    ch.basic_ack(m.delivery_tag)
    ch.tx_rollback()
    # rolled-back ack: message still unacked on this channel; ack again and commit
    ch.basic_ack(m.delivery_tag)
    ch.tx_commit()
    ch.close()
    other = conn.channel()
    assert [b for _, b in drain(other, q)] == [b"m1"]


def test_tx_rolled_back_ack_leaves_message_unacked(conn):
    ch = conn.channel()
    q = make_queue(ch, 1)
    ch.tx_select()
    m, _, _ = ch.basic_get(q)
    ch.basic_ack(m.delivery_tag)
    ch.tx_rollback()
    ch.close()  # message was never acked: it returns to the queue
    other = conn.channel()
    again = drain(other, q)
    assert [b for _, b in again] == [b"m0"]
    assert again[0][0].redelivered is True


def test_tx_commit_without_select_is_406(ch):
    expect_channel_error(lambda: ch.tx_commit(), 406,
                         "PRECONDITION_FAILED - channel is not transactional")


def test_tx_rollback_without_select_is_406(ch):
    expect_channel_error(lambda: ch.tx_rollback(), 406,
                         "PRECONDITION_FAILED - channel is not transactional")


def test_tx_messages_discarded_when_channel_closes_uncommitted(conn):
    ch = conn.channel()
    q = make_queue(ch)
    ch.tx_select()
    ch.basic_publish("", q, b"never")
    ch.close()
    other = conn.channel()
    assert other.basic_get(q, auto_ack=True)[0] is None


# ---------------------------------------------------------------- channels

def test_error_on_one_channel_leaves_others_open(conn, uniq):
    a, b, c = conn.channel(), conn.channel(), conn.channel()
    q = make_queue(a)
    expect_channel_error(lambda: b.queue_declare(uniq("nope"), passive=True), 404)
    assert not b.is_open
    assert a.is_open and c.is_open and conn.is_open
    c.confirm_delivery()
    c.basic_publish("", q, b"still works")
    assert a.basic_get(q, auto_ack=True)[2] == b"still works"


def test_many_channels_on_one_connection(conn):
    chans = [conn.channel() for _ in range(50)]
    q = make_queue(chans[0])
    for i, c in enumerate(chans):
        c.confirm_delivery()
        c.basic_publish("", q, b"%d" % i)
    got = drain(chans[-1], q)
    assert sorted(int(b) for _, b in got) == list(range(50))


def test_channel_number_can_be_reused_after_close(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1)
        c.expect_method(commands.Channel.CloseOk)
        c.open_channel(1)


def test_channels_numbered_on_both_sides_of_256_publish_confirm_close_and_reopen(broker):
    # The connection finds channels below 256 by index and the others by hash
    # (connection/channel_map.rs): each must keep its own publishes, confirms and state, also
    # after a channel on either side is closed and its number opened again.
    numbers = [1, 255, 256, 2047]
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        for n in numbers:
            c.open_channel(n)
            c.send_frame(commands.Confirm.Select(), n)
            c.expect_method(commands.Confirm.SelectOk)
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect_method(commands.Queue.DeclareOk).method.queue

        def publish_and_confirm(chans, rounds):
            for r in range(rounds):
                for n in chans:
                    c.publish(n, "", q, b"%d-%d" % (n, r))
            acked = {n: 0 for n in chans}
            while any(acked[n] < rounds for n in chans):
                f = c.read_frame_skip_heartbeats()
                assert isinstance(f.method, commands.Basic.Ack), f
                assert f.channel in acked, f
                # Tags count per channel from 1: a channel holding another's state acks others.
                assert f.method.delivery_tag == acked[f.channel] + 1 or f.method.multiple, f
                assert f.method.delivery_tag <= rounds, f
                acked[f.channel] = f.method.delivery_tag

        publish_and_confirm(numbers, 3)
        for n in (255, 256):
            c.send_frame(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), n)
            c.expect_method(commands.Channel.CloseOk)
        # A closed number is closed (504 would close the connection): reopen it, fresh state.
        for n in (256, 255):
            c.open_channel(n)
            c.send_frame(commands.Confirm.Select(), n)
            c.expect_method(commands.Confirm.SelectOk)
        publish_and_confirm([255, 256], 2)
        bodies = []
        while True:
            c.send_frame(commands.Basic.Get(queue=q, no_ack=True), 2047)
            f = c.read_frame_skip_heartbeats()
            if isinstance(f.method, commands.Basic.GetEmpty):
                break
            assert isinstance(f.method, commands.Basic.GetOk), f
            c.read_frame_skip_heartbeats()  # header
            bodies.append(c.read_frame_skip_heartbeats().payload.decode())
        expected = ["%d-%d" % (n, r) for r in range(3) for n in numbers]
        expected += ["%d-%d" % (n, r) for r in range(2) for n in (255, 256)]
        assert sorted(bodies) == sorted(expected)
        # A second channel.open of a hashed number is refused as for an indexed one.
        c.send_frame(commands.Channel.Open(), 256)
        f = c.read_frame_skip_heartbeats()
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 504


def test_channel_open_twice_is_504_channel_error(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Channel.Open(), 1)
        f = c.read_frame_skip_heartbeats()
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 504
        assert f.method.reply_text == "CHANNEL_ERROR - second 'channel.open' seen"


def test_method_on_unopened_channel_is_504(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 3)
        f = c.read_frame_skip_heartbeats()
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 504
        assert f.method.reply_text == "CHANNEL_ERROR - expected 'channel.open'"


def test_frames_on_closing_channel_are_discarded_until_close_ok(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Queue.Declare(queue="no-such-q-xyz", passive=True), 1)
        f = c.expect_method(commands.Channel.Close)
        assert f.method.reply_code == 404
        # anything but close-ok is ignored while the channel is closing
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        c.send_frame(commands.Channel.CloseOk(), 1)
        c.open_channel(1)
        c.send_frame(commands.Queue.Declare(queue="", exclusive=True), 1)
        c.expect_method(commands.Queue.DeclareOk)


def test_channel_flow_active_true_is_acknowledged(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Channel.Flow(active=True), 1)
        f = c.expect_method(commands.Channel.FlowOk)
        assert f.method.active is True


def test_channel_flow_active_false_is_not_implemented_540(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_frame(commands.Channel.Flow(active=False), 1)
        f = c.read_frame_skip_heartbeats()
        assert isinstance(f.method, commands.Connection.Close), f
        assert f.method.reply_code == 540
        assert f.method.reply_text == "NOT_IMPLEMENTED - active=false"


def test_channel_close_returns_unacked_and_cancels_consumers(conn):
    ch = conn.channel()
    q = make_queue(ch, 2)
    c2 = conn.channel()
    got = []
    c2.basic_consume(q, lambda c, m, p, b: got.append(b))
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert ch.queue_declare(q, passive=True).method.consumer_count == 1
    c2.close()
    r = ch.queue_declare(q, passive=True)
    assert r.method.consumer_count == 0
    assert r.method.message_count == 2
