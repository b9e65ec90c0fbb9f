"""Certificates for TLS tests, made by trustme at test time (never checked in), and a one-process
kraftpy (controller + broker) with a PLAINTEXT, an SSL and a mutual-TLS listener."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import trustme

from kraftpy.config.properties import format_properties, load_properties
from tests.helpers.deployments import Deployment, Proc, ProcessCluster, format_storage
from tests.helpers.processes import free_ports


class Pki:
    """A CA and the PEM files of certificates it issued, under ``directory``."""

    def __init__(self, directory: Path, name: str = "ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA(organization_name=f"kraftpy test {name}")
        self.ca_file = directory / f"{name}.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def issue(self, name: str, *identities: str, common_name: str | None = None,
              organization_unit_name: str | None = None, expired: bool = False) -> Path:
        """A PEM file with the private key and the certificate chain (a key store)."""
        kwargs: dict[str, Any] = {}
        if expired:
            kwargs["not_before"] = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
            kwargs["not_after"] = datetime.datetime(2020, 2, 1, tzinfo=datetime.UTC)
        cert = self.ca.issue_cert(*identities, common_name=common_name, organization_name="acme",
                                  organization_unit_name=organization_unit_name or "eng", **kwargs)
        path = self.directory / f"{name}.pem"
        with open(path, "wb") as f:
            f.write(cert.private_key_pem.bytes())
            for blob in cert.cert_chain_pems:
                f.write(blob.bytes())
        return path

    def server(self, name: str = "server", **kwargs: Any) -> Path:
        return self.issue(name, "localhost", "127.0.0.1", common_name=name, **kwargs)


class TlsNode(Deployment):
    """``kraftpy server`` with controller and broker in one process, serving PLAINTEXT, SSL (no client
    certificate) and MTLS (SSL with ssl.client.auth=required) listeners; ``endpoints[name]`` is each
    listener's host:port."""

    name = "tls-node"

    def __init__(self, root: Path, pki: Pki, settings: dict[str, Any] | None = None) -> None:
        super().__init__()
        root.mkdir(parents=True, exist_ok=True)
        plain, ssl_port, mtls, controller = free_ports(4)
        self.endpoints = {"PLAINTEXT": f"127.0.0.1:{plain}", "SSL": f"127.0.0.1:{ssl_port}",
                          "MTLS": f"127.0.0.1:{mtls}"}
        server_pem = pki.server()
        props = {
            "process.roles": "broker,controller", "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port},MTLS://127.0.0.1:{mtls},"
                         f"CONTROLLER://127.0.0.1:{controller}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.location": server_pem,
            "ssl.truststore.location": pki.ca_file,
            "listener.name.mtls.ssl.client.auth": "required",
            "log.dirs": root / "data",
            "num.partitions": 1, "default.replication.factor": 1, "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1, "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1, "group.initial.rebalance.delay.ms": 0,
            **(settings or {}),
        }
        self.config = root / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc = Proc("tls-node", ["server", "-c", str(self.config)], cond=self.cond)
        self.controllers = {1: self.proc}
        self.brokers = {1: self.proc}
        self.bootstrap = self.endpoints["PLAINTEXT"]
        self.log_dir = root / "logs"

    def start(self) -> None:
        format_storage([self.config])
        self.proc.start()
        self.proc.wait_for("broker running")


class TlsCluster(ProcessCluster):
    """Three controllers and three brokers with TLS on the controller listener and on the inter-broker
    listener (INTERNAL), both with ``ssl.client.auth=required``; clients use each broker's PLAINTEXT
    listener. Every node has its own certificate from ``pki``."""

    def __init__(self, root: Path, pki: Pki, settings: dict[str, Any] | None = None) -> None:
        super().__init__(root, settings)
        self.pki = pki
        internal = free_ports(len(self.BROKER_IDS))
        self.internal_ports = dict(zip(self.BROKER_IDS, internal, strict=True))
        for path in self.configs:
            props = dict(load_properties_dict(path))
            node_id = int(props["node.id"])
            props.update(self.tls_settings(f"node-{node_id}"))
            if props["process.roles"] == "broker":
                plain = self.broker_ports[node_id]
                internal_port = self.internal_ports[node_id]
                props["listeners"] = f"PLAINTEXT://127.0.0.1:{plain},INTERNAL://127.0.0.1:{internal_port}"
                props["advertised.listeners"] = props["listeners"]
                props["inter.broker.listener.name"] = "INTERNAL"
            path.write_text(format_properties(props))

    def tls_settings(self, name: str | None) -> dict[str, str]:
        """What a node's properties say of TLS; ``name`` None: a node without a certificate."""
        props = {"listener.security.protocol.map": "CONTROLLER:SSL,PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
                 "ssl.truststore.location": str(self.pki.ca_file), "ssl.client.auth": "required"}
        if name is not None:
            props["ssl.keystore.location"] = str(self.pki.server(name))
        return props


def load_properties_dict(path: Path) -> dict[str, str]:
    return {entry.key: entry.value for entry in load_properties(path)}
