"""`worker_threads` (`--worker-threads`, `CHARON_WORKER_THREADS`): the broker runs connections
and queues on that many threads. With one thread every hand-off between a connection and a queue
stays on it; messages still flow through exchanges, dead-lettering and acks as with more. Zero
is refused at start with a clear message.
"""

import pytest

from conftest import start_charon, stop_charon

pytestmark = pytest.mark.charon_only


def test_one_worker_thread_routes_dead_letters_and_acks(tmp_path, uniq):
    b = start_charon(tmp_path, extra_args=("--worker-threads", "1"))
    try:
        conn = b.connect()
        ch = conn.channel()
        fan, dlx = uniq("fan"), uniq("dlx")
        q1, q2, dlq = uniq("q1"), uniq("q2"), uniq("dlq")
        ch.exchange_declare(fan, "fanout", auto_delete=True)
        ch.exchange_declare(dlx, "fanout", auto_delete=True)
        ch.queue_declare(dlq, auto_delete=True)
        ch.queue_bind(dlq, dlx)
        ch.queue_declare(q1, auto_delete=True, arguments={"x-dead-letter-exchange": dlx})
        ch.queue_declare(q2, auto_delete=True)
        ch.queue_bind(q1, fan)
        ch.queue_bind(q2, fan)
        n = 500
        for i in range(n):
            ch.basic_publish(fan, "ignored", str(i).encode())
        got1 = []
        for i in range(n):
            method, _, body = _get(ch, q1)
            got1.append(body)
            ch.basic_nack(method.delivery_tag, requeue=False)
        got2 = []
        for i in range(n):
            method, _, body = _get(ch, q2)
            got2.append(body)
            ch.basic_ack(method.delivery_tag)
        dead = []
        for i in range(n):
            method, props, body = _get(ch, dlq)
            assert props.headers["x-death"][0]["queue"] == q1
            dead.append(body)
            ch.basic_ack(method.delivery_tag)
        want = [str(i).encode() for i in range(n)]
        assert got1 == want and got2 == want and dead == want
        conn.close()
    finally:
        stop_charon(b)


def _get(ch, q):
    """basic.get until a message is there (generous bound: never depends on speed)."""
    import time
    deadline = time.monotonic() + 60
    while True:
        method, props, body = ch.basic_get(q)
        if method is not None:
            return method, props, body
        assert time.monotonic() < deadline, f"nothing in {q}"
        time.sleep(0.01)


def test_zero_worker_threads_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match="worker_threads must be at least 1"):
        b = start_charon(tmp_path, extra_args=("--worker-threads", "0"))
        stop_charon(b)
