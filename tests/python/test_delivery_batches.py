"""A queue hands a consumer its ready messages as one batch of deliveries, which the connection
encodes into its output buffer sized from the batch's first delivery (docs/performance.md,
part 25). Batches whose messages differ in size — small first and large after (the buffer grows
while the batch is encoded), large first, bodies split over several frames, empty bodies — must
reach the consumer byte for byte, in order, with their properties."""

from pathlib import Path

import pika
import pytest

pytestmark = pytest.mark.charon_only

# 16 B, 300 KiB (several frames at the default frame_max), empty, 40 B, 1 MiB, 3 B, 128 KiB + 5
SIZES = [16, 300 * 1024, 0, 40, 1 << 20, 3, 128 * 1024 + 5]


def bodies(n, first_small=True):
    out = []
    for i in range(n):
        size = SIZES[i % len(SIZES)] if first_small else SIZES[-1 - i % len(SIZES)]
        stamp = b"%05d|" % i
        out.append((stamp + bytes([(i * 7 + j) % 251 for j in range(min(size, 251))]) * (size // 251 + 1))[:size] if size else b"")
    return out


def fill_then_consume(b, uniq, sent, persistent):
    queue = uniq("batch")
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare(queue, durable=persistent)
        ch.confirm_delivery()
        for i, body in enumerate(sent):
            props = pika.BasicProperties(
                delivery_mode=2 if persistent else 1,
                message_id=f"m{i}",
                headers={"i": i},
            )
            ch.basic_publish("", queue, body, props)
    got = []
    with b.connect() as c:
        ch = c.channel()
        # the whole backlog may go out at once: one batch, or a few
        ch.basic_qos(prefetch_count=len(sent))
        for method, props, body in ch.consume(queue, inactivity_timeout=60.0):
            assert method is not None, f"only {len(got)} of {len(sent)} delivered"
            got.append((props.message_id, props.headers, body))
            if len(got) == len(sent):
                ch.basic_ack(method.delivery_tag, multiple=True)
                break
        ch.cancel()
    assert [g[0] for g in got] == [f"m{i}" for i in range(len(sent))]
    assert [g[1] for g in got] == [{"i": i} for i in range(len(sent))]
    for i, (want, (_, _, have)) in enumerate(zip(sent, got)):
        assert have == want, f"delivery {i}: {len(have)} bytes, sent {len(want)}"


@pytest.mark.parametrize("persistent", [False, True])
def test_a_batch_small_first_then_large_arrives_byte_for_byte(broker, uniq, persistent):
    fill_then_consume(broker, uniq, bodies(35, first_small=True), persistent)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_batch_large_first_then_small_arrives_byte_for_byte(broker, uniq, persistent):
    fill_then_consume(broker, uniq, bodies(35, first_small=False), persistent)


def test_many_small_then_one_large_in_one_batch(broker, uniq):
    sent = [b"s%04d" % i for i in range(500)] + [bytes(range(256)) * 4096]
    fill_then_consume(broker, uniq, sent, False)


def vm_peak_kib(broker):
    if broker.proc is None or not Path(f"/proc/{broker.proc.pid}/status").exists():
        pytest.skip("needs the broker's /proc/PID/status")
    for line in Path(f"/proc/{broker.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1])
    pytest.skip("no VmPeak")


def test_one_huge_message_before_thousands_of_small_ones(broker, uniq):
    # The room is estimated from the first delivery: times 3,000, a 48 MiB first message asked
    # the allocator for ~140 GiB (address space only while overcommit lets it; an abort where
    # it does not). Capped, the broker's address space stays far below that and all arrive.
    huge = bytes(range(256)) * (48 * 4096)
    sent = [huge] + [b"t%04d" % i for i in range(3000)]
    fill_then_consume(broker, uniq, sent, False)
    peak_gib = vm_peak_kib(broker) / (1 << 20)
    assert peak_gib < 64, f"the broker reserved {peak_gib:.0f} GiB of address space"
