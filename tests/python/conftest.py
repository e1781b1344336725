"""Test harness: starts the Charon binary (or uses an external broker given
by CHARON_TEST_URL, e.g. a RabbitMQ 3.10.8 node for differential checks).

Markers:
  charon_only  - needs a broker we start ourselves (config file, signals, HTTP)
  needs_users  - needs users alice/secret (administrator, full perms on / and
                 'other'), reader/reader (read-only on /) and vhost 'other'.
                 Against an external broker this runs only when
                 CHARON_TEST_EXTERNAL_USERS=1 (see setup_rabbitmq.sh).
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path

import pika
import pytest

REPO = Path(__file__).resolve().parents[2]

CONFIG_TOML = """
heartbeat = 60
frame_max = 131072
channel_max = 2047

[[users]]
name = "alice"
password = "secret"
tags = ["administrator"]

[[users]]
name = "reader"
password = "reader"
tags = []

[[users]]
name = "dlxuser"
password = "dlxuser"
tags = []

[[users]]
name = "dlxnoread"
password = "dlxnoread"
tags = []

[[vhosts]]
name = "other"

[[permissions]]
user = "dlxuser"
vhost = "/"
configure = ".*"
write = "^allowed-"
read = ".*"

[[permissions]]
user = "dlxnoread"
vhost = "/"
configure = ".*"
write = ".*"
read = "^$"

[[permissions]]
user = "alice"
vhost = "/"
configure = ".*"
write = ".*"
read = ".*"

[[permissions]]
user = "alice"
vhost = "other"
configure = ".*"
write = ".*"
read = ".*"

[[permissions]]
user = "reader"
vhost = "/"
configure = "^$"
write = "^$"
read = ".*"
"""


def pytest_configure(config):
    config.addinivalue_line("markers", "charon_only: needs a Charon process started by the harness")
    config.addinivalue_line("markers", "needs_users: needs the users/vhosts from the test config")
    config.addinivalue_line("markers", "spec_4_0: what the RabbitMQ 4.0 dead-lettering spec requires "
                            "beyond 3.10.8 (skipped against an external broker unless CHARON_TEST_SPEC40=1)")


_HANDED_OUT: set[int] = set()


def free_port():
    """A loopback port nothing listens on, never one this process handed out before: two calls
    before either port is bound could otherwise return the same one (a TLS test's AMQPS port
    came back as the broker's HTTP port: "Address already in use")."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def find_binary():
    if os.environ.get("CHARON_BIN"):
        return os.environ["CHARON_BIN"]
    for p in (REPO / "target/debug/charon", REPO / "target/release/charon"):
        if p.exists():
            return str(p)
    return None


def wait_port(host, port, timeout=120.0, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited early with code {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {host}:{port} within {timeout}s")


class Broker:
    def __init__(self, host, port, vhost="/", user="guest", password="guest",
                 external=False, http_port=None, proc=None, data_dir=None, log_path=None):
        self.host = host
        self.port = port
        self.vhost = vhost
        self.user = user
        self.password = password
        self.external = external
        self.http_port = http_port
        self.proc = proc
        self.data_dir = data_dir
        self.log_path = log_path

    def params(self, user=None, password=None, vhost=None, **kw):
        kw.setdefault("connection_attempts", 1)
        kw.setdefault("socket_timeout", 5)
        kw.setdefault("blocked_connection_timeout", 10)
        return pika.ConnectionParameters(
            host=self.host, port=self.port,
            virtual_host=self.vhost if vhost is None else vhost,
            credentials=pika.PlainCredentials(user or self.user, password or self.password),
            **kw)

    def connect(self, **kw):
        return pika.BlockingConnection(self.params(**kw))

    def url(self, user=None, password=None, vhost=None):
        v = urllib.parse.quote(self.vhost if vhost is None else vhost, safe="")
        return f"amqp://{user or self.user}:{password or self.password}@{self.host}:{self.port}/{v}"


def start_charon(tmpdir: Path, extra_args=(), config_text=CONFIG_TOML):
    """Starts the broker; a port picked free can be taken by a parallel run before the broker
    binds it, so an early exit on "Address already in use" is retried with other ports."""
    for attempt in range(10):
        try:
            return _start_charon(tmpdir, extra_args, config_text)
        except RuntimeError as e:
            if "Address already in use" not in str(e) or attempt == 9:
                raise


def _start_charon(tmpdir: Path, extra_args=(), config_text=CONFIG_TOML):
    binary = find_binary()
    if binary is None:
        pytest.fail("Charon binary not found (build with `cargo build -p charon` or set CHARON_BIN)")
    amqp_port, http_port = free_port(), free_port()
    data_dir = tmpdir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    cfg = tmpdir / "charon.toml"
    cfg.write_text(config_text)
    log_path = tmpdir / "charon.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [binary, "server", "--amqp-listen", f"127.0.0.1:{amqp_port}",
         "--http-listen", f"127.0.0.1:{http_port}", "--data-dir", str(data_dir),
         "--config", str(cfg), "--log-level", "info", *extra_args],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port("127.0.0.1", amqp_port, proc=proc)
    except Exception:
        proc.kill()
        proc.wait()
        log.close()
        text = log_path.read_text(errors='replace')
        # The error line comes before a long backtrace: show both ends.
        shown = text if len(text) <= 6000 else f"{text[:3000]}\n[...]\n{text[-3000:]}"
        raise RuntimeError(shown)
    return Broker("127.0.0.1", amqp_port, http_port=http_port, proc=proc,
                  data_dir=data_dir, log_path=log_path)


def stop_charon(b: Broker):
    if b.proc and b.proc.poll() is None:
        b.proc.send_signal(signal.SIGTERM)
        try:
            b.proc.wait(10)
        except subprocess.TimeoutExpired:
            b.proc.kill()
            b.proc.wait()


def restart_charon(tmpdir: Path, b: Broker, hard=False):
    """Stops `b` (kill -9 when `hard`, else SIGTERM) and starts Charon again on its data dir."""
    if hard:
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
    else:
        stop_charon(b)
    return start_charon(tmpdir)


@pytest.fixture(scope="session")
def broker():
    url = os.environ.get("CHARON_TEST_URL")
    if url:
        p = urllib.parse.urlparse(url)
        vhost = urllib.parse.unquote(p.path[1:]) if p.path and p.path != "/" else "/"
        yield Broker(p.hostname or "127.0.0.1", p.port or 5672, vhost=vhost,
                     user=urllib.parse.unquote(p.username or "guest"),
                     password=urllib.parse.unquote(p.password or "guest"), external=True)
        return
    tmp = Path(tempfile.mkdtemp(prefix="charon-test-"))
    b = start_charon(tmp)
    yield b
    stop_charon(b)
    if b.proc.returncode not in (0, None):
        print(f"charon exited with {b.proc.returncode}; log at {b.log_path}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def private_charon(tmp_path):
    """A Charon process of the test's own (for shutdown tests etc.)."""
    if os.environ.get("CHARON_TEST_URL"):
        pytest.skip("needs a broker process started by the harness")
    b = start_charon(tmp_path)
    yield b
    stop_charon(b)


@pytest.fixture(scope="module", autouse=True)
def _stop_archive_pg_cluster():
    """After each module: the PostgreSQL cluster an archive test started (archive_helpers.pg_cluster)
    is stopped, so one module's cluster never outlives it."""
    yield
    import sys

    helpers = sys.modules.get("archive_helpers")
    if helpers is not None:
        helpers.stop_pg_cluster()


@pytest.fixture(autouse=True)
def _markers(request):
    ext = bool(os.environ.get("CHARON_TEST_URL"))
    if request.node.get_closest_marker("charon_only") and ext:
        pytest.skip("charon_only: not applicable to an external broker")
    if request.node.get_closest_marker("spec_4_0") and ext and \
            os.environ.get("CHARON_TEST_SPEC40") != "1":
        pytest.skip("spec_4_0: RabbitMQ 3.10.8 predates this part of the spec")
    if request.node.get_closest_marker("needs_users") and ext and \
            os.environ.get("CHARON_TEST_EXTERNAL_USERS") != "1":
        pytest.skip("needs_users: external broker lacks the test users (set CHARON_TEST_EXTERNAL_USERS=1)")


@pytest.fixture
def conn(broker):
    c = broker.connect()
    yield c
    if c.is_open:
        try:
            c.close()
        except Exception:
            pass


@pytest.fixture
def ch(conn):
    return conn.channel()


def publish_persistent(b, queue, bodies):
    """Declares durable `queue` on broker `b` and publishes `bodies` to it, persistent, each
    confirmed."""
    with b.connect() as c:
        ch = c.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        for body in bodies:
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))


@pytest.fixture
def confirm_publisher(broker):
    """A connection of its own and its channel in confirm mode: each publish returns once routed
    (a mandatory one nobody takes raises UnroutableError)."""
    c = broker.connect()
    pch = c.channel()
    pch.confirm_delivery()
    yield c, pch
    if c.is_open:
        c.close()


@pytest.fixture
def uniq():
    def make(prefix="t"):
        return f"{prefix}-{uuid.uuid4().hex[:12]}"
    return make
