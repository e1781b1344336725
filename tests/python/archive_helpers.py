"""Helpers for the dead-letter archive tests: a private PostgreSQL cluster (initdb + pg_ctl in a
temporary directory, free port), a broker started with an archive backend, the archive API through
`requests`, and polling."""

import glob
import signal
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import requests

import conftest


def _pg_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


class PgCluster:
    """A PostgreSQL server of our own; `database()` makes a fresh database and returns its URL."""

    def __init__(self):
        self.bin = _pg_bin()
        self.dir = tempfile.mkdtemp(prefix="charon-pg-")
        self.port = conftest.free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        data = os.path.join(self.dir, "data")
        self._run([f"{self.bin}/initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        self.start()

    def start(self):
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run([f"{self.bin}/pg_ctl", "-D", os.path.join(self.dir, "data"), "-o", opts,
                   "-l", os.path.join(self.dir, "log"), "-w", "-t", "120", "start"])

    def halt(self):
        """Stops the server (the data stays): the archive is down."""
        self._run([f"{self.bin}/pg_ctl", "-D", os.path.join(self.dir, "data"), "-m", "immediate", "-w", "stop"])

    def _run(self, args):
        if self.as_postgres:
            args = ["runuser", "-u", "postgres", "--"] + args
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def database(self):
        name = "a_" + uuid.uuid4().hex[:10]
        self._run([f"{self.bin}/psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                   "-c", f"CREATE DATABASE {name}"])
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self):
        self._run([f"{self.bin}/pg_ctl", "-D", os.path.join(self.dir, "data"), "-m", "immediate", "stop"])
        shutil.rmtree(self.dir, ignore_errors=True)


_cluster = {}


def own_pg_cluster():
    if _pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (scripts/test.sh installs Debian's postgresql)")
    return PgCluster()


def pg_cluster():
    """The session's PostgreSQL cluster; skips loudly when PostgreSQL is not installed."""
    if "c" not in _cluster:
        if _pg_bin() is None:
            pytest.skip("PostgreSQL is not installed (scripts/test.sh installs Debian's postgresql)")
        _cluster["c"] = PgCluster()
    return _cluster["c"]


def stop_pg_cluster():
    c = _cluster.pop("c", None)
    if c:
        c.stop()


def config_for(backend, extra=""):
    """The test config with an archive backend ('sqlite' = the default file in the data dir)."""
    text = conftest.CONFIG_TOML
    lines = []
    if backend == "postgres":
        lines.append(f'archive_url = "{pg_cluster().database()}"')
    if extra:
        lines.append(extra)
    # Top-level keys must come before the first [[table]].
    return "\n".join(lines) + "\n" + text


class Api:
    """The management API as alice (administrator)."""

    def __init__(self, broker, user="alice", password="secret"):
        self.base = f"http://{broker.host}:{broker.http_port}"
        self.s = requests.Session()
        self.s.auth = (user, password)

    def get(self, path, **params):
        r = self.s.get(self.base + path, params=params, timeout=30)
        return r.status_code, (r.json() if r.content else None)

    def call(self, method, path, body=None):
        r = self.s.request(method, self.base + path, json=body, timeout=30)
        return r.status_code, (r.json() if r.content else None)

    def records(self, **params):
        params.setdefault("page_size", 1000)
        status, body = self.get("/api/dead-letters", **params)
        assert status == 200, body
        return body

    def wait_records(self, n, timeout=90, **params):
        deadline = time.monotonic() + timeout
        body = None
        while time.monotonic() < deadline:
            try:
                body = self.records(**params)
                if body["total"] >= n:
                    return body
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError(f"expected {n} records within {timeout}s, have {body and body['total']}")

    def wait_job(self, job, timeout=120):
        deadline = time.monotonic() + timeout
        info = None
        while time.monotonic() < deadline:
            status, info = self.get(f"/api/dead-letters/jobs/{job}")
            if status == 200 and info["state"] != "RUNNING":
                return info
            time.sleep(0.1)
        raise AssertionError(f"job {job} still running after {timeout}s: {info}")


def wait_until(pred, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout}s")


def queue_depth(broker, queue):
    with broker.connect() as c:
        return c.channel().queue_declare(queue, passive=True).method.message_count


def take_bodies(broker, queue, vhost=None):
    """Every message of `queue` taken (basic.get, auto-ack) until it is empty: their bodies."""
    bodies = []
    with broker.connect(vhost=vhost) as c:
        ch = c.channel()
        while True:
            m, _p, body = ch.basic_get(queue, auto_ack=True)
            if m is None:
                return bodies
            bodies.append(body)


def ctl_ok(b, *args):
    """`charon ctl` against broker `b` as alice (the test config's administrator); its stdout,
    asserting it succeeded."""
    r = subprocess.run(
        [conftest.find_binary(), "ctl", "--url", f"http://127.0.0.1:{b.http_port}",
         "--username", "alice", "--password", "secret", *args],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


@pytest.fixture
def plain_node(tmp_path, request):
    """A broker on the archive backend `request.param` (indirect parametrization)."""
    b = conftest.start_charon(tmp_path, config_text=config_for(request.param))
    yield b
    conftest.stop_charon(b)


@pytest.fixture
def node(tmp_path, request):
    """A broker on the archive backend `request.param` (default sqlite), as a box
    {"b": broker, "cfg": its config, "tmp": its directory} that `restart` refills."""
    backend = getattr(request, "param", "sqlite")
    cfg = config_for(backend)
    box = {"b": conftest.start_charon(tmp_path, config_text=cfg), "cfg": cfg, "tmp": tmp_path}
    yield box
    conftest.stop_charon(box["b"])


def restart(box, hard=True):
    """Restarts the box's broker on the same data (hard: kill -9); returns the new broker."""
    b = box["b"]
    if hard:
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
    else:
        conftest.stop_charon(b)
    # Keep the log of the run that ended (start_charon writes charon.log afresh): a failing
    # crash test names what happened before the restart.
    log = Path(box["tmp"]) / "charon.log"
    if log.exists():
        n = len(list(Path(box["tmp"]).glob("charon.log.*"))) + 1
        log.rename(log.with_name(f"charon.log.{n}"))
    box["b"] = conftest.start_charon(box["tmp"], config_text=box["cfg"])
    return box["b"]
