"""The peer client libraries' TLS cases against Charon's TLS listener (`amqps_listen`, `[tls]`),
with a CA this test makes (openssl CLI): py-amqp, aiormq, aio-pika and php-amqplib (a php script
run here) each
- publish and consume a message over TLS, the server certificate verified against the test CA;
- log in with a client certificate and the EXTERNAL mechanism (the certificate's CN names the
  user; with `ssl_cert_login_from = "distinguished_name"` its whole subject DN, as RabbitMQ);
- fail the handshake when they trust another CA than the one that signed the server's
  certificate;
- are refused without a client certificate when the listener has `fail_if_no_peer_cert`.
The management API shows such connections with `ssl: true` and their mechanism."""

import asyncio
import base64
import json
import shutil
import socket
import ssl
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import aio_pika
import aiormq
import amqp
import pytest

import conftest

pytestmark = pytest.mark.charon_only

PHP_CLIENT = Path(__file__).parent / "clients" / "php_amqplib_tls.php"
# The subject DN of the `alice` client certificate as RabbitMQ formats it (RFC 4514, most
# significant RDN last).
ALICE_DN = "CN=alice,OU=team\\, one,O=charon"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def make_cert(d, ca, name, subject, ext):
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", f"{name}.pem", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """`ca` signs the server's certificate (127.0.0.1/localhost) and the client certificates
    `alice` (subject O=charon, OU="team, one", CN=alice) and `mallory` (CN not a user);
    `other-ca` signs nothing the broker uses."""
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        "basicConstraints=CA:FALSE\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n")
    make_cert(d, "ca", "server", "/O=charon/CN=127.0.0.1", "server.ext")
    make_cert(d, "ca", "alice", "/O=charon/OU=team, one/CN=alice", "client.ext")
    make_cert(d, "ca", "mallory", "/O=charon/CN=mallory", "client.ext")
    return d


def start(tmp, pki, fail_if_no_peer_cert=False, login_from=None, external=True):
    amqps = conftest.free_port()
    top = f'heartbeat = 60\namqps_listen = "127.0.0.1:{amqps}"\n'
    if external:
        top += 'auth_mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]\n'
    if login_from:
        top += f'ssl_cert_login_from = "{login_from}"\n'
    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n", top, 1) + f"""
[[users]]
name = '{ALICE_DN}'
password = "not-used-by-external"
tags = []

[[permissions]]
user = '{ALICE_DN}'
vhost = "/"
configure = ".*"
write = ".*"
read = ".*"

[tls]
cert_file = "{pki}/server.pem"
key_file = "{pki}/server.key"
ca_file = "{pki}/ca.pem"
verify_peer = true
fail_if_no_peer_cert = {"true" if fail_if_no_peer_cert else "false"}
"""
    b = conftest.start_charon(tmp, config_text=cfg)
    conftest.wait_port("127.0.0.1", amqps, proc=b.proc)
    return b, amqps


@pytest.fixture(scope="module")
def tls(tmp_path_factory, pki):
    """A broker asking for (not requiring) client certificates; EXTERNAL takes the CN."""
    b, port = start(tmp_path_factory.mktemp("tls-cn"), pki)
    yield b, port
    conftest.stop_charon(b)


@pytest.fixture(scope="module")
def tls_strict(tmp_path_factory, pki):
    """A broker with fail_if_no_peer_cert; EXTERNAL takes the subject DN."""
    b, port = start(tmp_path_factory.mktemp("tls-dn"), pki, fail_if_no_peer_cert=True,
                    login_from="distinguished_name")
    yield b, port
    conftest.stop_charon(b)


def api(b, path):
    req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}{path}")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def tls_connection_seen(b, user, mechanism):
    """Whether the management API lists a TLS connection of `user` logged in with `mechanism`."""
    return any(c["ssl"] is True and c["user"] == user and c["auth_mechanism"] == mechanism
               for c in api(b, "/api/connections"))


# ---------------------------------------------------------------- py-amqp

def py_amqp(port, pki, cert=None, ca="ca", external=False):
    sslopts = {"ca_certs": str(pki / f"{ca}.pem"), "cert_reqs": ssl.CERT_REQUIRED,
               "server_hostname": "127.0.0.1"}
    if cert:
        sslopts.update(certfile=str(pki / f"{cert}.pem"), keyfile=str(pki / f"{cert}.key"))
    kw = {"login_method": "EXTERNAL"} if external else {"userid": "guest", "password": "guest"}
    return amqp.Connection(host=f"127.0.0.1:{port}", ssl=sslopts, connect_timeout=30, **kw)


def py_amqp_round_trip(conn, queue, body):
    with conn:
        ch = conn.channel()
        ch.queue_declare(queue, auto_delete=False)
        ch.confirm_select()
        ch.basic_publish(amqp.Message(body), routing_key=queue, confirm_timeout=30)
        got = []
        tag = ch.basic_consume(
            queue, callback=lambda m: (got.append(m.body), m.channel.basic_ack(m.delivery_tag)))
        while not got:
            conn.drain_events(timeout=30)
        ch.basic_cancel(tag)
        ch.queue_delete(queue)
        return got[0]


def test_py_amqp_publish_consume_over_tls(tls, pki):
    b, port = tls
    conn = py_amqp(port, pki)
    conn.connect()
    assert tls_connection_seen(b, "guest", "AMQPLAIN")
    assert py_amqp_round_trip(conn, "pyamqp-tls", b"py-amqp over tls") == b"py-amqp over tls"


def test_py_amqp_external_login_with_client_certificate(tls, pki):
    b, port = tls
    conn = py_amqp(port, pki, cert="alice", external=True)
    conn.connect()
    assert tls_connection_seen(b, "alice", "EXTERNAL")
    assert py_amqp_round_trip(conn, "pyamqp-ext", b"as alice") == b"as alice"
    # a certificate naming no user is refused like a bad login (403 ACCESS_REFUSED)
    with pytest.raises(amqp.exceptions.AccessRefused) as e:
        py_amqp(port, pki, cert="mallory", external=True).connect()
    assert "EXTERNAL" in str(e.value)


def test_py_amqp_wrong_ca_fails_the_handshake(tls, pki):
    _, port = tls
    with pytest.raises(ssl.SSLCertVerificationError):
        py_amqp(port, pki, ca="other-ca").connect()


def test_py_amqp_without_certificate_refused_by_fail_if_no_peer_cert(tls_strict, pki):
    b, port = tls_strict
    with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
        py_amqp(port, pki).connect()
    # with one, the subject DN is the EXTERNAL login (ssl_cert_login_from = distinguished_name)
    conn = py_amqp(port, pki, cert="alice", external=True)
    conn.connect()
    assert tls_connection_seen(b, ALICE_DN, "EXTERNAL")
    assert py_amqp_round_trip(conn, "pyamqp-dn", b"as the DN") == b"as the DN"


# ---------------------------------------------------------------- aiormq / aio-pika

def amqps_url(port, pki, cert=None, ca="ca", external=False):
    q = {"cafile": str(pki / f"{ca}.pem")}
    if cert:
        q.update(certfile=str(pki / f"{cert}.pem"), keyfile=str(pki / f"{cert}.key"))
    if external:
        q["auth"] = "external"
    creds = "" if external else "guest:guest@"
    return f"amqps://{creds}127.0.0.1:{port}/?{urllib.parse.urlencode(q)}"


async def aiormq_round_trip(url, queue, body):
    conn = await aiormq.connect(url)
    try:
        ch = await conn.channel(publisher_confirms=True)
        await ch.queue_declare(queue, auto_delete=True)
        await ch.basic_publish(body, routing_key=queue)
        got = asyncio.get_running_loop().create_future()

        async def on_message(m):
            await m.channel.basic_ack(m.delivery.delivery_tag)
            if not got.done():
                got.set_result(m.body)

        await ch.basic_consume(queue, on_message)
        return await asyncio.wait_for(got, 60)
    finally:
        await conn.close()


def test_aiormq_publish_consume_over_tls(tls, pki):
    _, port = tls
    url = amqps_url(port, pki)
    assert asyncio.run(aiormq_round_trip(url, "aiormq-tls", b"aiormq over tls")) == b"aiormq over tls"


def test_aiormq_external_login_with_client_certificate(tls, tls_strict, pki):
    b, port = tls
    url = amqps_url(port, pki, cert="alice", external=True)
    assert asyncio.run(aiormq_round_trip(url, "aiormq-ext", b"as alice")) == b"as alice"
    b, port = tls_strict

    async def dn_login():
        conn = await aiormq.connect(amqps_url(port, pki, cert="alice", external=True))
        try:
            return tls_connection_seen(b, ALICE_DN, "EXTERNAL")
        finally:
            await conn.close()

    assert asyncio.run(dn_login())
    with pytest.raises(aiormq.exceptions.ProbableAuthenticationError):
        asyncio.run(aiormq_round_trip(amqps_url(tls[1], pki, cert="mallory", external=True), "x", b""))


def test_aiormq_wrong_ca_and_missing_certificate_are_refused(tls, tls_strict, pki):
    with pytest.raises(aiormq.exceptions.AMQPConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(aiormq_round_trip(amqps_url(tls[1], pki, ca="other-ca"), "x", b""))
    with pytest.raises(aiormq.exceptions.AMQPConnectionError, match="CERTIFICATE_REQUIRED"):
        asyncio.run(aiormq_round_trip(amqps_url(tls_strict[1], pki), "x", b""))


def client_context(pki, cert=None, ca="ca"):
    ctx = ssl.create_default_context(cafile=str(pki / f"{ca}.pem"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    return ctx


async def aio_pika_round_trip(url, queue, body, ssl_context=None):
    conn = await aio_pika.connect(url, ssl_context=ssl_context, timeout=30)
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(queue, auto_delete=True)
        await ch.default_exchange.publish(aio_pika.Message(body), routing_key=queue)
        async with q.iterator() as it:
            async for m in it:
                async with m.process():
                    return m.body


def test_aio_pika_publish_consume_and_external_over_tls(tls, pki):
    b, port = tls
    got = asyncio.run(aio_pika_round_trip(f"amqps://guest:guest@127.0.0.1:{port}/", "aiopika-tls",
                                          b"aio-pika over tls", client_context(pki)))
    assert got == b"aio-pika over tls"
    got = asyncio.run(aio_pika_round_trip(f"amqps://127.0.0.1:{port}/?auth=external", "aiopika-ext",
                                          b"as alice", client_context(pki, "alice")))
    assert got == b"as alice"


def test_aio_pika_wrong_ca_and_missing_certificate_are_refused(tls, tls_strict, pki):
    with pytest.raises(aiormq.exceptions.AMQPConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(aio_pika_round_trip(f"amqps://guest:guest@127.0.0.1:{tls[1]}/", "x", b"",
                                        client_context(pki, ca="other-ca")))
    with pytest.raises(aiormq.exceptions.AMQPConnectionError, match="CERTIFICATE_REQUIRED"):
        asyncio.run(aio_pika_round_trip(f"amqps://guest:guest@127.0.0.1:{tls_strict[1]}/", "x", b"",
                                        client_context(pki)))


# ---------------------------------------------------------------- php-amqplib

@pytest.fixture(scope="module")
def php():
    if not shutil.which("php") or not Path("/usr/share/php/PhpAmqpLib/autoload.php").exists():
        pytest.skip("php-cli and Debian's php-amqplib are needed (scripts/test.sh installs them)")
    return shutil.which("php")


def run_php(php, port, pki, cert=None, ca="ca", external=False, queue="php-tls", body="php over tls"):
    args = [php, str(PHP_CLIENT), str(port), str(pki / f"{ca}.pem"),
            str(pki / f"{cert}.pem") if cert else "-", str(pki / f"{cert}.key") if cert else "-",
            "external" if external else "plain", queue, body]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines, f"php printed no result: {r.stdout!r} {r.stderr!r}"
    return json.loads(lines[-1])


def test_php_amqplib_publish_consume_and_external_over_tls(tls, pki, php):
    _, port = tls
    assert run_php(php, port, pki) == {"ok": True, "body": "php over tls"}
    assert run_php(php, port, pki, cert="alice", external=True, queue="php-ext", body="as alice") == \
        {"ok": True, "body": "as alice"}
    r = run_php(php, port, pki, cert="mallory", external=True, queue="php-x")
    assert r["ok"] is False and "ACCESS_REFUSED" in r["message"], r


def test_php_amqplib_wrong_ca_and_missing_certificate_are_refused(tls, tls_strict, pki, php):
    r = run_php(php, tls[1], pki, ca="other-ca")
    assert r["ok"] is False and "certificate verify failed" in r["message"].lower(), r
    # TLS 1.3: the client's side of the handshake completes, then the server's alert closes the
    # connection; php-amqplib reports the closed connection (without the alert's text)
    r = run_php(php, tls_strict[1], pki)
    assert r["ok"] is False and "closed connection" in r["message"], r
    r = run_php(php, tls_strict[1], pki, cert="alice", external=True, queue="php-dn", body="dn")
    assert r == {"ok": True, "body": "dn"}


def test_external_only_when_enabled_so_clients_with_certificates_use_passwords(tmp_path, pki):
    """As RabbitMQ, EXTERNAL is offered only when `auth_mechanisms` names it: without it a
    client presenting a certificate logs in with its password (py-amqp picks EXTERNAL whenever
    the server offers it: its own TLS tests rely on this)."""
    b, port = start(tmp_path, pki, external=False)
    try:
        conn = amqp.Connection(host=f"127.0.0.1:{port}", connect_timeout=30, ssl={
            "ca_certs": str(pki / "ca.pem"), "cert_reqs": ssl.CERT_REQUIRED,
            "server_hostname": "127.0.0.1", "certfile": str(pki / "alice.pem"),
            "keyfile": str(pki / "alice.key")})
        conn.connect()
        assert conn.mechanisms == [b"PLAIN", b"AMQPLAIN"]
        assert tls_connection_seen(b, "guest", "AMQPLAIN")
        assert py_amqp_round_trip(conn, "pyamqp-noext", b"password") == b"password"
        with pytest.raises(amqp.exceptions.AMQPError):
            py_amqp(port, pki, cert="alice", external=True).connect()
    finally:
        conftest.stop_charon(b)


def test_tls_listener_refuses_plain_amqp(tls):
    """A plaintext AMQP header sent to the TLS port gets no AMQP answer (TLS alert or close)."""
    _, port = tls
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        data = s.recv(64)
    assert not data.startswith(b"AMQP") and not data.startswith(b"\x01\x00\x00"), data
