"""A ``kraftpy dev`` target with security on, for the handshake fuzzing.

Besides dev's PLAINTEXT listener (the fuzzer's own setup traffic) and its controller listener, the
target serves:

=================  ===============  ===============================================================
listener           protocol         who gets in
=================  ===============  ===============================================================
``SASL_SSL``       SASL_SSL         SCRAM-SHA-256/512 users bootstrapped at format (``--add-scram``'s
                                    records), PLAIN users of the listener's JAAS config, OAUTHBEARER
                                    with Kafka's unsecured validator
``SASL_PLAINTEXT`` SASL_PLAINTEXT   the same
``MTLS``           SSL              a client certificate of the target's CA (``ssl.client.auth=required``)
=================  ===============  ===============================================================

Certificates are made at start by trustme under ``<dir>/pki`` (a CA, the server's certificate for
127.0.0.1, a client certificate, and a client certificate of another CA the broker does not trust).
The settings go into ``<dir>/server.properties`` before ``kraftpy dev`` first runs (dev keeps a file
it finds, completing it with the keys it needs), and the storage is formatted here with the SCRAM
credentials as bootstrap records, as ``kraftpy storage format --add-scram`` does. A failed SASL login
is answered after ``connection.failed.authentication.delay.ms`` (10 ms here, Kafka's default is 100:
the fuzzer makes tens of thousands of them; the delay path runs all the same).
"""

from __future__ import annotations

import ssl
import sys
from pathlib import Path

import trustme

from kraftpy.cli.dev import dev_properties
from kraftpy.config import load_config
from kraftpy.config.properties import format_properties
from kraftpy.ids import random_uuid_str
from kraftpy.metadata.bootstrap import parse_add_scram, write_bootstrap
from kraftpy.storage.formatter import format_dirs
from tests.fuzz.target import DevTarget
from tests.helpers.processes import free_ports

SCRAM_PASSWORD = "fuzz-scram-secret"
#: SCRAM users (both mechanisms); the second one's name needs RFC 5802's =2C / =3D escaping.
SCRAM_USERS = ("fuzz-scram", "fuzz,odd=name")
#: Another SCRAM user: a re-authentication as this one must be refused (the principal would change).
OTHER_USER, OTHER_PASSWORD = "fuzz-other", "fuzz-other-secret"
PLAIN_USERS = {"fuzz-plain": "fuzz-plain-secret", "fuzz-plain-2": "second"}
SASL_LISTENERS = ("SASL_SSL", "SASL_PLAINTEXT")
FAILED_AUTHENTICATION_DELAY_MS = 10


def _plain_jaas() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in PLAIN_USERS.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


class Pki:
    """The target's certificates (trustme), as PEM files under ``directory``."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.ca = trustme.CA(organization_name="kraftpy fuzz")
        self.ca_file = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.server = self._issue(self.ca, "server", "localhost", "127.0.0.1")
        self.client = self._issue(self.ca, "client", "fuzz-client")
        self.stranger = self._issue(trustme.CA(organization_name="kraftpy fuzz stranger"), "stranger", "stranger")

    def _issue(self, ca: trustme.CA, name: str, *identities: str) -> Path:
        cert = ca.issue_cert(*identities, common_name=name)
        path = self.directory / f"{name}.pem"
        with open(path, "wb") as f:
            f.write(cert.private_key_pem.bytes())
            for blob in cert.cert_chain_pems:
                f.write(blob.bytes())
        return path

    def client_context(self, cert: str | None = None, *, tls12: bool = False, trust: bool = True) -> ssl.SSLContext:
        """A client context: trusting the target's CA (or nothing), with a client certificate
        (``"client"``: the target's CA, ``"stranger"``: another CA), TLS 1.2 at most when ``tls12``."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        if trust:
            context.load_verify_locations(str(self.ca_file))
        else:
            context.verify_mode = ssl.CERT_NONE
        if cert is not None:
            context.load_cert_chain(str(self.client if cert == "client" else self.stranger))
        if tls12:
            context.maximum_version = ssl.TLSVersion.TLSv1_2
        return context


class SecureDevTarget(DevTarget):
    """`DevTarget` with the SASL_SSL, SASL_PLAINTEXT and MTLS listeners above; ``ports[name]`` are theirs."""

    def __init__(self, directory: Path, **kwargs) -> None:
        super().__init__(directory, **kwargs)
        self.ports = dict(zip(("SASL_SSL", "SASL_PLAINTEXT", "MTLS"), free_ports(3), strict=True))
        self.pki: Pki | None = None

    def prepare(self) -> None:
        """Certificates, server.properties and the formatted storage (once per directory)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pki = Pki(self.directory / "pki")
        listeners = {"PLAINTEXT": self.port, **self.ports, "CONTROLLER": self.controller_port}
        broker = {name: port for name, port in listeners.items() if name != "CONTROLLER"}
        jaas = _plain_jaas()
        props = {
            **dev_properties(self.directory, self.port, self.controller_port),
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items()),
            "advertised.listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in broker.items()),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,"
                                              "SASL_PLAINTEXT:SASL_PLAINTEXT,MTLS:SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.location": str(self.pki.server),
            "ssl.truststore.location": str(self.pki.ca_file),
            "listener.name.mtls.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "connection.failed.authentication.delay.ms": str(FAILED_AUTHENTICATION_DELAY_MS),
            # Sessions carry a lifetime (KIP-368), so re-authentication is what a client must do.
            "connections.max.reauth.ms": "3600000",
        }
        config_path = self.directory / "server.properties"
        config_path.write_text(format_properties(props, header="kraftpy fuzz: a dev target with security on"))
        config = load_config(config_path, ())
        format_dirs(config.all_dirs, random_uuid_str(), config.node_id)
        records = [parse_add_scram(f'{mechanism}=[name="{name}",password="{SCRAM_PASSWORD}"]')
                   for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512") for name in SCRAM_USERS]
        records += [parse_add_scram(f"{mechanism}=[name={OTHER_USER},password={OTHER_PASSWORD}]")
                    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")]
        write_bootstrap(config.metadata_log_dir, records)

    def command(self) -> list[str]:
        # No --port: the listeners are server.properties' (the flags would replace them).
        return [sys.executable, "-m", "kraftpy", "dev", "--dir", str(self.directory), "--log-format", "json",
                "--log-level", self.log_level]

    async def start(self, nursery, timeout: float = 60.0) -> None:
        if self.pki is None:
            self.prepare()
        await super().start(nursery, timeout)
