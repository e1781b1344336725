"""TLS listeners (amqps_listen, https_listen) with a CA the test makes (openssl CLI): pika and
aio-pika over TLS, client certificates with the EXTERNAL mechanism (user = certificate CN),
fail_if_no_peer_cert, the management API over HTTPS."""

import asyncio
import json
import ssl
import subprocess
import urllib.request

import aio_pika
import pika
import pytest

import conftest

pytestmark = pytest.mark.charon_only


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1/localhost and client certificates with
    CN=alice (a configured user) and CN=mallory (not a user)."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=charon-test-ca",
            "-keyout", "ca.key", "-out", "ca.pem", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        "basicConstraints=CA:FALSE\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n")
    for name, ext in [("server", "server.ext"), ("alice", "client.ext"), ("reader", "client.ext"),
                      ("mallory", "client.ext")]:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/O=charon/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", f"{name}.pem", cwd=d)
    return d


def start_tls(tmp_path, fail_if_no_peer_cert=False):
    pki = make_pki(tmp_path / "pki")
    amqps, https = conftest.free_port(), conftest.free_port()
    cfg = conftest.CONFIG_TOML.replace("heartbeat = 60\n", f"""heartbeat = 60
amqps_listen = "127.0.0.1:{amqps}"
auth_mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]
https_listen = "127.0.0.1:{https}"
""", 1) + f"""
[tls]
cert_file = "{pki}/server.pem"
key_file = "{pki}/server.key"
ca_file = "{pki}/ca.pem"
verify_peer = true
fail_if_no_peer_cert = {"true" if fail_if_no_peer_cert else "false"}
"""
    b = conftest.start_charon(tmp_path / "broker", config_text=cfg)
    conftest.wait_port("127.0.0.1", amqps, proc=b.proc)
    conftest.wait_port("127.0.0.1", https, proc=b.proc)
    return b, pki, amqps, https


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    (tmp / "pki").mkdir()
    b, pki, amqps, https = start_tls(tmp)
    yield b, pki, amqps, https
    conftest.stop_charon(b)


def client_context(pki, cert=None):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    return ctx


def pika_params(port, pki, cert=None, credentials=None):
    return pika.ConnectionParameters(
        host="127.0.0.1", port=port, connection_attempts=1, socket_timeout=10,
        ssl_options=pika.SSLOptions(client_context(pki, cert), "127.0.0.1"),
        credentials=credentials or pika.PlainCredentials("guest", "guest"))


def test_pika_over_tls_with_password(tls_broker):
    b, pki, amqps, _ = tls_broker
    with pika.BlockingConnection(pika_params(amqps, pki)) as c:
        ch = c.channel()
        ch.queue_declare("tls-q")
        ch.confirm_delivery()
        ch.basic_publish("", "tls-q", b"over tls")
        m, _, body = ch.basic_get("tls-q", auto_ack=True)
        assert body == b"over tls"
    # the plaintext listener still works and sees the same queue
    with b.connect() as c:
        c.channel().queue_declare("tls-q", passive=True)


def test_external_login_with_client_certificate(tls_broker):
    b, pki, amqps, _ = tls_broker
    params = pika_params(amqps, pki, cert="alice", credentials=pika.credentials.ExternalCredentials())
    with pika.BlockingConnection(params) as c:
        ch = c.channel()
        ch.queue_declare("alice-external")
    # the certificate names the user: CN=reader may read but not configure
    params = pika_params(amqps, pki, cert="reader", credentials=pika.credentials.ExternalCredentials())
    with pika.BlockingConnection(params) as c:
        ch = c.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            ch.queue_declare("reader-may-not")
        assert e.value.args[0] == 403 and "user 'reader'" in e.value.args[1]
    # EXTERNAL with a certificate whose CN is not a user is refused like a bad login
    params = pika_params(amqps, pki, cert="mallory", credentials=pika.credentials.ExternalCredentials())
    with pytest.raises(pika.exceptions.AMQPConnectionError) as e:
        pika.BlockingConnection(params)
    assert "403" in str(e.value) and "EXTERNAL" in str(e.value)
    # without a client certificate EXTERNAL is not offered
    params = pika_params(amqps, pki, credentials=pika.credentials.ExternalCredentials())
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(params)


def test_aio_pika_over_tls(tls_broker):
    b, pki, amqps, _ = tls_broker

    async def go():
        conn = await aio_pika.connect(
            f"amqps://guest:guest@127.0.0.1:{amqps}/", ssl_context=client_context(pki, "alice"))
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue("aio-tls", auto_delete=True)
            await ch.default_exchange.publish(aio_pika.Message(b"aio over tls"), routing_key="aio-tls")
            msg = await q.get(timeout=30)
            await msg.ack()
            return msg.body

    assert asyncio.run(go()) == b"aio over tls"


def test_management_api_over_https(tls_broker):
    b, pki, _, https = tls_broker
    req = urllib.request.Request(f"https://127.0.0.1:{https}/api/health")
    with urllib.request.urlopen(req, context=client_context(pki), timeout=30) as r:
        assert r.status == 200


def test_fail_if_no_peer_cert_refuses_clients_without_certificate(tmp_path):
    (tmp_path / "pki").mkdir()
    b, pki, amqps, _ = start_tls(tmp_path, fail_if_no_peer_cert=True)
    try:
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(pika_params(amqps, pki))
        with pika.BlockingConnection(pika_params(amqps, pki, cert="alice")) as c:
            c.channel().queue_declare("with-cert")
    finally:
        conftest.stop_charon(b)
