"""TLS configuration (kraftpy.security.tls and the loader's listener rules), and a Kafka-protocol server
over TLS in this process: principals, refusals, file regions sent through TLS, certificate reload."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
import trio

from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.broker.settings import BrokerSettings
from kraftpy.config import load_config
from kraftpy.config.loader import ConfigError
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import ApiVersionsRequest
from kraftpy.protocol.types import FileRegion
from kraftpy.rpc.kafka_server import KafkaServer
from kraftpy.security import tls
from kraftpy.security.tls import ClientTls, ServerTls, TlsConfigError, TlsSettings
from tests.helpers import forkserver
from tests.security.tls_support import Pki

BASE = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:9093
controller.listener.names=CONTROLLER
log.dirs=/tmp/kraftpy-tls-test
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def config(text: str):
    return load_config(text=BASE + text)


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config(text)
    return info.value


# -- listeners and protocols ---------------------------------------------------------------------------


def test_every_security_protocol_is_accepted_and_a_protocol_name_maps_to_itself():
    c = config("listeners=PLAINTEXT://:9092,SASL_PLAINTEXT://:9094,CONTROLLER://:9093\n"
               "inter.broker.listener.name=PLAINTEXT\n")
    assert c.security_protocol("SASL_PLAINTEXT") == "SASL_PLAINTEXT"
    assert c.security_protocol("PLAINTEXT") == "PLAINTEXT"
    c = config("listeners=INTERNAL://:9092,CLIENTS://:9094,CONTROLLER://:9093\n"
               "listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CLIENTS:PLAINTEXT\n"
               "inter.broker.listener.name=INTERNAL\n")
    assert [listener.name for listener in c.broker_listeners] == ["INTERNAL", "CLIENTS"]
    assert c.security_protocol("INTERNAL") == "SASL_PLAINTEXT"


def test_a_listener_without_a_protocol_and_an_unknown_protocol_are_refused():
    e = error("listeners=EXTERNAL://:9092,CONTROLLER://:9093\ninter.broker.listener.name=EXTERNAL\n")
    assert e.key == "listener.security.protocol.map" and "EXTERNAL has no security protocol" in e.reason
    e = error("listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:TLS\n")
    assert e.key == "listener.security.protocol.map" and "not one of" in e.reason


def test_security_inter_broker_protocol_names_the_inter_broker_listener():
    c = config("listeners=PLAINTEXT://:9092,SASL_PLAINTEXT://:9094,CONTROLLER://:9093\n"
               "security.inter.broker.protocol=SASL_PLAINTEXT\n")
    assert c.inter_broker_listener_name == "SASL_PLAINTEXT"
    e = error("security.inter.broker.protocol=SSL\n")
    assert e.key == "security.inter.broker.protocol" and "no listener is named SSL" in e.reason


def test_broker_settings_serve_every_broker_listener_with_its_protocol(pki):
    server = pki.server()
    c = config(f"listeners=PLAINTEXT://:9092,SSL://:9094,CONTROLLER://:9093\nssl.keystore.location={server}\n")
    settings = BrokerSettings.from_config(c, cluster_id="x")
    served = {listener.name: listener for listener in settings.served_listeners()}
    assert set(served) == {"PLAINTEXT", "SSL"}
    assert served["SSL"].security_protocol == "SSL" and isinstance(served["SSL"].tls, ServerTls)
    assert served["PLAINTEXT"].tls is None
    assert settings.inter_broker_tls is None  # the inter-broker listener is PLAINTEXT


# -- ssl.* keys ---------------------------------------------------------------------------------------------

SSL_LISTENERS = "listeners=PLAINTEXT://:9092,SSL://:9094,CONTROLLER://:9093\n"


def test_a_missing_keystore_file_stops_with_key_value_and_line(tmp_path):
    missing = tmp_path / "nope.pem"
    e = error(SSL_LISTENERS + f"ssl.keystore.location={missing}\n")
    assert e.key == "ssl.keystore.location" and e.value == str(missing)
    assert e.line == BASE.count("\n") + 2
    assert "No such file or directory (ENOENT)" in e.reason
    assert "\n" not in str(e)


def test_a_file_that_is_not_pem_is_refused(tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    e = error(SSL_LISTENERS + f"ssl.keystore.location={junk}\n")
    assert e.key == "ssl.keystore.location" and "not a PEM private key and certificate chain" in e.reason
    e = error(SSL_LISTENERS + f"ssl.keystore.location={junk}\n".replace("keystore", "truststore"))
    assert e.key == "ssl.keystore.location" and "needs a key store" in e.reason


def test_jks_and_pkcs12_are_refused_in_one_line():
    for kind in ("JKS", "PKCS12"):
        e = error(f"ssl.keystore.type={kind}\n")
        assert e.key == "ssl.keystore.type" and f"{kind} stores are not supported" in e.reason


def test_client_auth_needs_a_truststore(pki):
    e = error(SSL_LISTENERS + f"ssl.keystore.location={pki.server()}\nssl.client.auth=required\n")
    assert e.key == "ssl.truststore.location" and "ssl.client.auth=required needs a trust store" in e.reason


def test_listener_prefixed_keys_override_for_their_listener_only(pki, tmp_path):
    server = pki.server()
    c = config("listeners=PLAINTEXT://:9092,SSL://:9094,MTLS://:9095,CONTROLLER://:9093\n"
               "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL\n"
               f"ssl.keystore.location={server}\nssl.truststore.location={pki.ca_file}\n"
               "listener.name.mtls.ssl.client.auth=required\n")
    assert tls.listener_tls(c, "SSL").context.verify_mode == ssl.CERT_NONE
    assert tls.listener_tls(c, "MTLS").context.verify_mode == ssl.CERT_REQUIRED
    assert tls.listener_tls(c, "PLAINTEXT") is None
    # A broken per-listener value is named with its prefixed key.
    e = error("listeners=PLAINTEXT://:9092,SSL://:9094,CONTROLLER://:9093\n"
              f"listener.name.ssl.ssl.keystore.location={tmp_path / 'gone.pem'}\n")
    assert e.key == "listener.name.ssl.ssl.keystore.location"
    e = error("listener.name.other.ssl.client.auth=required\n")
    assert e.key == "listener.name.other.ssl.client.auth" and "no listener OTHER" in e.reason


def test_inline_pem_keystore_and_truststore(pki):
    leaf = pki.ca.issue_cert("localhost")
    settings = TlsSettings(keystore_certificate_chain="".join(b.bytes().decode() for b in leaf.cert_chain_pems),
                           keystore_key=leaf.private_key_pem.bytes().decode(),
                           truststore_certificates=pki.ca.cert_pem.bytes().decode(), client_auth="required")
    assert tls.server_context(settings).verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(TlsConfigError) as info:
        tls.server_context(TlsSettings(keystore_key=leaf.private_key_pem.bytes().decode()))
    assert info.value.key == "ssl.keystore.certificate.chain"


def test_protocol_versions_and_cipher_suites(pki):
    server = str(pki.server())
    ctx = tls.server_context(TlsSettings(keystore_location=server, enabled_protocols=("TLSv1.2",)))
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    ctx = tls.server_context(TlsSettings(keystore_location=server, protocol="TLSv1.2"))
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(TlsConfigError) as info:
        tls.server_context(TlsSettings(keystore_location=server, enabled_protocols=("TLSv1.1",)))
    assert info.value.key == "ssl.enabled.protocols"
    assert tls.openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256") == "ECDHE-ECDSA-AES128-GCM-SHA256"
    assert tls.openssl_cipher_name("TLS_RSA_WITH_AES_256_CBC_SHA256") == "AES256-SHA256"
    ctx = tls.server_context(TlsSettings(keystore_location=server,
                                         cipher_suites=("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",)))
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    with pytest.raises(TlsConfigError) as info:
        tls.server_context(TlsSettings(keystore_location=server, cipher_suites=("NO_SUCH_SUITE",)))
    assert info.value.key == "ssl.cipher.suites"


def test_endpoint_identification():
    assert tls.client_context(TlsSettings()).check_hostname is True
    assert tls.client_context(TlsSettings(endpoint_identification_algorithm="")).check_hostname is False
    with pytest.raises(TlsConfigError):
        tls.client_context(TlsSettings(endpoint_identification_algorithm="ldap"))


def test_distinguished_names_print_as_java_does():
    subject = ((("countryName", "US"),), (("organizationName", "acme, inc"),),
               (("organizationalUnitName", "eng"),), (("commonName", "alice"),))
    assert tls.distinguished_name(subject) == "CN=alice,OU=eng,O=acme\\, inc,C=US"
    assert tls.distinguished_name(((("emailAddress", "a@b"),),)) == "1.2.840.113549.1.9.1=#1603614062"


# -- a server over TLS ----------------------------------------------------------------------------------------


class Spec:
    def __init__(self, name: str, server_tls: ServerTls | None) -> None:
        self.name, self.host, self.port = name, "127.0.0.1", 0
        self.security_protocol = "SSL" if server_tls else "PLAINTEXT"
        self.tls = server_tls


class Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def _add(self, event: str, **fields) -> None:
        self.lines.append((event, fields))

    warning = info = error = debug = _add

    def bind(self, **_fields) -> Recorder:
        return self


def api_versions(conn: KafkaConnection):
    return conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                   client_software_version="1"))


async def serve(nursery, server_tls: ServerTls, handler, log: Recorder) -> dict[str, int]:
    server = KafkaServer(handler, max_frame_bytes=1 << 20, log=log)
    return await nursery.start(server.serve_listeners, [Spec("SSL", server_tls), Spec("PLAINTEXT", None)])


def client_tls(pki: Pki, keystore: Path | None = None) -> ClientTls:
    return ClientTls(TlsSettings(truststore_location=str(pki.ca_file),
                                 keystore_location=str(keystore) if keystore else None))


async def test_client_certificate_principal_refusals_and_file_regions_over_tls(pki, tmp_path):
    seen = []
    data_file = tmp_path / "segment"
    data_file.write_bytes(b"x" * 100 + bytes(range(256)) * 9000)

    async def handler(frame, conn):
        seen.append((conn.listener, conn.security_protocol, conn.principal))
        fd = os.open(data_file, os.O_RDONLY)
        region = conn.hold(FileRegion(fd, 100, 256 * 9000, owned=True))  # larger than one TLS read
        correlation = bytes(frame[4:8])
        return [(4 + region.length).to_bytes(4, "big"), correlation, region]

    log = Recorder()
    server_tls = ServerTls(TlsSettings(keystore_location=str(pki.server()), truststore_location=str(pki.ca_file),
                                       client_auth="requested", listener="SSL"))
    alice = pki.issue("alice", common_name="alice", organization_unit_name="eng")
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            ports = await serve(nursery, server_tls, handler, log)
            for keystore, principal in ((alice, "User:CN=alice,OU=eng,O=acme"), (None, "User:ANONYMOUS")):
                async with await KafkaConnection.connect("127.0.0.1", ports["SSL"],
                                                         tls=client_tls(pki, keystore)) as conn:
                    await conn.send_raw(b"\x00\x00\x00\x08\x00\x12\x00\x03\x00\x00\x00\x07")
                    frame = await conn.receive_frame()
                    assert bytes(frame[:4]) == b"\x00\x00\x00\x07"
                    assert bytes(frame[4:]) == bytes(range(256)) * 9000  # the file region, read and encrypted
                assert seen[-1] == ("SSL", "SSL", principal)
            # A client of another CA, and a plaintext client on the TLS port: closed and logged, the
            # listener still serving.
            rogue = Pki(tmp_path / "rogue", "rogue")
            with pytest.raises(ConnectionClosed):
                conn = await KafkaConnection.connect("127.0.0.1", ports["SSL"],
                                                     tls=client_tls(pki, rogue.issue("mallory", common_name="m")))
                await api_versions(conn)
            async with await KafkaConnection.connect("127.0.0.1", ports["SSL"]) as conn:
                with pytest.raises(ConnectionClosed):
                    await api_versions(conn)
            async with await KafkaConnection.connect("127.0.0.1", ports["PLAINTEXT"]) as conn:
                await conn.send_raw(b"\x00\x00\x00\x08\x00\x12\x00\x03\x00\x00\x00\x09")
                await conn.receive_frame()
            assert seen[-1] == ("PLAINTEXT", "PLAINTEXT", "User:ANONYMOUS")
            failures = [fields for event, fields in log.lines if event == "closing connection: TLS handshake failed"]
            assert len(failures) == 2
            assert all(f["listener"] == "SSL" and f["peer"].startswith("127.0.0.1:") and f["reason"] for f in failures)
            nursery.cancel_scope.cancel()


async def test_changed_certificates_are_used_by_new_connections_and_a_broken_file_is_ignored(pki, tmp_path):
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(pki.server("first").read_bytes())
    server_tls = ServerTls(TlsSettings(keystore_location=str(keystore), listener="SSL"))
    log = Recorder()

    async def handler(frame, conn):
        return [b"\x00\x00\x00\x04", bytes(frame[4:8])]

    async def server_subject(port: int) -> str:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        ssl_stream = await client_tls(pki).connect(stream, "127.0.0.1")
        subject = tls.distinguished_name(ssl_stream.getpeercert()["subject"])
        await ssl_stream.aclose()
        return subject

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            ports = await serve(nursery, server_tls, handler, log)
            assert (await server_subject(ports["SSL"])).startswith("CN=first,")
            assert not server_tls.check_reload(log)  # unchanged files: nothing to do
            keystore.write_bytes(pki.server("second").read_bytes())
            assert await trio.to_thread.run_sync(server_tls.check_reload, log)
            assert (await server_subject(ports["SSL"])).startswith("CN=second,")
            reloaded = [fields for event, fields in log.lines if event == "ssl certificates reloaded"]
            assert reloaded[-1]["listener"] == "SSL" and reloaded[-1]["subject"].startswith("CN=second,")
            assert reloaded[-1]["not_after"]
            keystore.write_text("-----BEGIN CERTIFICATE-----\ntruncated\n")
            assert not server_tls.check_reload(log)
            assert (await server_subject(ports["SSL"])).startswith("CN=second,")
            kept = [fields for event, fields in log.lines if event.startswith("ssl certificates not reloaded")]
            assert len(kept) == 1 and kept[0]["key"] == "ssl.keystore.location"
            nursery.cancel_scope.cancel()


async def test_the_watch_task_reloads_on_its_interval(pki, tmp_path):
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(pki.server("first").read_bytes())
    server_tls = ServerTls(TlsSettings(keystore_location=str(keystore), listener="SSL"))
    log = Recorder()
    keystore.write_bytes(pki.server("second").read_bytes())
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(server_tls.watch, 0.01, log)
            await server_tls.reloaded.wait()
            nursery.cancel_scope.cancel()
    assert [event for event, _ in log.lines] == ["ssl certificates reloaded"]


def test_a_taken_port_of_a_second_listener_is_named_in_one_line(pki, tmp_path):
    import socket

    from tests.helpers.deployments import format_storage
    from tests.helpers.processes import free_ports

    plain, controller = free_ports(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ssl_port = taken.getsockname()[1]
        listeners = f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port},CONTROLLER://127.0.0.1:{controller}"
        path = tmp_path / "server.properties"
        path.write_text(BASE.replace("9093", str(controller)).replace("/tmp/kraftpy-tls-test", str(tmp_path / "d"))
                        + f"listeners={listeners}\nssl.keystore.location={pki.server()}\n")
        format_storage([path])
        run = forkserver.run(["server", "-c", str(path)], capture_output=True,
                             text=True, timeout=60)
    assert run.returncode != 0
    assert [line for line in run.stderr.splitlines() if not line.startswith("{")] == [
        f"kraftpy: cannot listen on 127.0.0.1:{ssl_port}: Address already in use (EADDRINUSE) (listeners={listeners})"]


def test_a_broker_only_process_reads_the_controller_listeners_prefixed_client_keys(pki, tmp_path):
    alice = pki.issue("broker-client", common_name="broker")
    c = load_config(text=BASE.replace("process.roles=broker,controller", "process.roles=broker")
                    .replace("node.id=1", "node.id=4")
                    + "listeners=PLAINTEXT://:9092\n"
                    "listener.security.protocol.map=CONTROLLER:SSL,PLAINTEXT:PLAINTEXT\n"
                    f"listener.name.controller.ssl.truststore.location={pki.ca_file}\n"
                    f"listener.name.controller.ssl.keystore.location={alice}\n")
    client = tls.connecting_tls(c, "CONTROLLER")
    assert client is not None and client.settings.keystore_location == str(alice)
    assert client.settings.key("ssl.truststore.location") == "listener.name.controller.ssl.truststore.location"


def test_a_sasl_ssl_listener_asks_for_certificates_only_when_its_own_key_says_so(pki):
    c = config("listeners=PLAINTEXT://:9092,SASL_SSL://:9094,MTLS_SASL://:9095,CONTROLLER://:9093\n"
               "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,"
               "MTLS_SASL:SASL_SSL\n"
               f"ssl.keystore.location={pki.server()}\nssl.truststore.location={pki.ca_file}\n"
               "ssl.client.auth=required\nlistener.name.mtls_sasl.ssl.client.auth=required\n")
    assert tls.listener_tls(c, "SASL_SSL").context.verify_mode == ssl.CERT_NONE
    assert tls.listener_tls(c, "MTLS_SASL").context.verify_mode == ssl.CERT_REQUIRED


def test_an_encrypted_key_needs_its_password(pki, tmp_path):
    from cryptography.hazmat.primitives import serialization

    leaf = pki.ca.issue_cert("localhost")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"s3cret"))
    path = tmp_path / "encrypted.pem"
    path.write_bytes(encrypted + b"".join(b.bytes() for b in leaf.cert_chain_pems))
    assert tls.server_context(TlsSettings(keystore_location=str(path), key_password="s3cret"))
    for password in (None, "wrong"):
        with pytest.raises(TlsConfigError) as info:
            tls.server_context(TlsSettings(keystore_location=str(path), key_password=password))
        assert info.value.key == "ssl.keystore.location" and "s3cret" not in str(info.value)
    # In a properties file the password is never printed.
    e = error(SSL_LISTENERS + f"ssl.keystore.location={path}\nssl.key.password=wrong\n")
    assert e.key == "ssl.keystore.location" and "wrong" not in str(e)


async def _trickle(stream: trio.SocketStream, data: bytes) -> None:
    for i in range(len(data)):  # one byte a send (TCP_NODELAY is on): the server reads tiny pieces
        await stream.send_all(data[i:i + 1])


async def test_a_handshake_split_into_single_bytes_and_garbage_handshakes(pki):
    import random

    server_tls = ServerTls(TlsSettings(keystore_location=str(pki.server()), listener="SSL"))
    log = Recorder()

    async def handler(frame, conn):
        return [b"\x00\x00\x00\x04", bytes(frame[4:8])]

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            ports = await serve(nursery, server_tls, handler, log)
            stream = await trio.open_tcp_stream("127.0.0.1", ports["SSL"])
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            client = client_tls(pki).context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
            while True:
                try:
                    client.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await _trickle(stream, outgoing.read())
                    incoming.write(await stream.receive_some(65536))
            client.write(b"\x00\x00\x00\x08\x00\x12\x00\x03\x00\x00\x00\x2a")
            await _trickle(stream, outgoing.read())
            answer = b""
            while len(answer) < 8:
                try:
                    answer += client.read(8)
                except ssl.SSLWantReadError:
                    incoming.write(await stream.receive_some(65536))
            assert answer == b"\x00\x00\x00\x04\x00\x00\x00\x2a"
            await stream.aclose()

            # Garbage after a TLS record header (and lone record headers): each closes its own
            # connection, none stops the listener.
            rng = random.Random(17)
            for _ in range(200):
                body = rng.randbytes(rng.randrange(0, 300))
                attempt = await trio.open_tcp_stream("127.0.0.1", ports["SSL"])
                try:
                    await attempt.send_all(b"\x16\x03\x01" + len(body).to_bytes(2, "big") + body)
                    await attempt.send_eof()
                    while await attempt.receive_some(65536):
                        pass
                except trio.BrokenResourceError:
                    pass
                await attempt.aclose()
            async with await KafkaConnection.connect("127.0.0.1", ports["SSL"], tls=client_tls(pki)) as conn:
                await conn.send_raw(b"\x00\x00\x00\x08\x00\x12\x00\x03\x00\x00\x00\x07")
                assert bytes(await conn.receive_frame()) == b"\x00\x00\x00\x07"
            refusals = [f for event, f in log.lines if event == "closing connection: TLS handshake failed"]
            assert len(refusals) == 200
            nursery.cancel_scope.cancel()
