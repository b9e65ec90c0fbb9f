"""Security for a campaign (`--security sasl_ssl`) and the security nemeses.

With `sasl_ssl` the cluster runs as a locked-down production cluster would:

- a CA made at run start (trustme) into DIR/pki, and one key store per node (its key and certificate,
  subject `CN=<node>,OU=jepsen,O=kraftpy`, naming every address the node is reached at);
- the controller listener over SASL_SSL (Raft, registration, heartbeats): TLS with `ssl.client.auth=required`
  and, inside it, a SCRAM-SHA-512 login as the `controller` user, whose credential is in the
  controllers' bootstrap metadata (a controller checks logins against it until it has replayed the log);
- on every broker an inter-broker listener `INTERNAL` over TLS with `ssl.client.auth=required` (replica
  fetches, transaction markers: the brokers' principal is their certificate's subject) and a client
  listener `CLIENT` over SASL_SSL with SCRAM-SHA-512;
- the StandardAuthorizer on, `allow.everyone.if.no.acl.found=false`, and as super users the brokers'
  principals and `User:admin` (the harness's own admin client);
- three SCRAM users written when the controllers' storage is formatted (`--add-scram`): `controller`
  (every node on the controller listener, a super user), `admin` and `jepsen`, the user of every
  workload client, who gets only the ACLs it needs (`grant_workload_acls`).

The security nemeses (`SecurityFaults`):

- `cert-rotate`: a node's key store is rewritten with a fresh certificate from the same CA (written
  beside it and renamed over it); the node picks it up without a restart (`ssl.reload.check.interval.ms`
  is 1000 here) and the heal looks for its `ssl certificates reloaded` log line;
- `acl-flap`: the workload user's WRITE ACL on the topics is deleted, and created again at the heal:
  sends in between are refused with TOPIC_AUTHORIZATION_FAILED (a definite failure in the history);
- `credential-flap`: the workload user's SCRAM-SHA-512 password is changed, and changed back at the heal:
  new connections of the workload fail authentication in between, open ones keep working.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.jepsen.runner import NodeSpec, Plan

MODES = ("none", "sasl_ssl")
MECHANISM = "SCRAM-SHA-512"
ITERATIONS = 4096
ADMIN_USER = "admin"
CONTROLLER_USER = "controller"
WORKLOAD_USER = "jepsen"
CLIENT_LISTENER = "CLIENT"
INTERNAL_LISTENER = "INTERNAL"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
RELOAD_INTERVAL_MS = 1000
RELOADED = "ssl certificates reloaded"
ACLS_CHANGED = '"acls changed"'
PKI_DIR = "pki"


def enabled(plan: Plan) -> bool:
    return plan.security != "none"


def password(plan: Plan, user: str) -> str:
    """The user's password, derived from the cluster id (a run's passwords are reproducible)."""
    return f"{user}-{random.Random(f'{plan.cluster_id}-{user}').getrandbits(64):016x}"


def ca_file(plan: Plan) -> Path:
    return plan.out / PKI_DIR / "ca.pem"


def keystore(plan: Plan, node: NodeSpec) -> Path:
    return plan.out / PKI_DIR / f"{node.name}.pem"


def principal(node: NodeSpec) -> str:
    """The principal a node's certificate gives it (the subject as Kafka prints it)."""
    return f"User:CN={node.name},OU=jepsen,O=kraftpy"


def client_settings(plan: Plan, user: str | None = None) -> dict[str, Any]:
    """librdkafka settings of a client authenticating as `user` (default: the admin)."""
    if not enabled(plan):
        return {}
    user = user or ADMIN_USER
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.username": user,
            "sasl.password": password(plan, user), "ssl.ca.location": str(ca_file(plan))}


def node_properties(node: NodeSpec, plan: Plan) -> list[tuple[str, str]]:
    """The listener and security keys of a node's configuration."""
    if not enabled(plan):
        props = [("listener.security.protocol.map", "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT")]
        if node.role == "controller":
            return [*props, ("listeners", f"CONTROLLER://{node.host}:{node.port}")]
        return [*props, ("listeners", f"PLAINTEXT://{node.host}:{node.port}"),
                ("advertised.listeners", f"PLAINTEXT://{node.advertised}"),
                ("inter.broker.listener.name", "PLAINTEXT")]
    props = [
        ("listener.security.protocol.map",
         f"CONTROLLER:SASL_SSL,{INTERNAL_LISTENER}:SSL,{CLIENT_LISTENER}:SASL_SSL"),
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", str(keystore(plan, node))),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", str(ca_file(plan))),
        ("ssl.reload.check.interval.ms", str(RELOAD_INTERVAL_MS)),
        ("listener.name.controller.ssl.client.auth", "required"),
        ("sasl.mechanism.controller.protocol", MECHANISM),
        ("listener.name.controller.sasl.enabled.mechanisms", MECHANISM),
        (f"listener.name.controller.{MECHANISM.lower()}.sasl.jaas.config",
         f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{CONTROLLER_USER}" '
         f'password="{password(plan, CONTROLLER_USER)}";'),
        ("authorizer.class.name", AUTHORIZER),
        ("super.users", ";".join([f"User:{ADMIN_USER}", f"User:{CONTROLLER_USER}",
                                  *(principal(b) for b in plan.brokers)])),
    ]
    if node.role == "controller":
        return [*props, ("listeners", f"CONTROLLER://{node.host}:{node.port}")]
    return [
        *props,
        ("listeners", f"{INTERNAL_LISTENER}://{node.host}:{node.port},"
                      f"{CLIENT_LISTENER}://{node.host}:{node.client_port}"),
        ("advertised.listeners", f"{INTERNAL_LISTENER}://{node.advertised},"
                                 f"{CLIENT_LISTENER}://{node.host}:{node.client_port}"),
        ("inter.broker.listener.name", INTERNAL_LISTENER),
        (f"listener.name.{INTERNAL_LISTENER.lower()}.ssl.client.auth", "required"),
        (f"listener.name.{CLIENT_LISTENER.lower()}.sasl.enabled.mechanisms", MECHANISM),
        ("allow.everyone.if.no.acl.found", "false"),
    ]


def format_args(node: NodeSpec, plan: Plan) -> list[str]:
    """`kraftpy storage format` arguments: the SCRAM users, written into the controllers' bootstrap
    metadata."""
    if not enabled(plan) or node.role != "controller":
        return []
    return [arg for user in (CONTROLLER_USER, ADMIN_USER, WORKLOAD_USER) for arg in (
        "--add-scram", f"{MECHANISM}=[name={user},password={password(plan, user)},iterations={ITERATIONS}]")]


class Pki:
    """The run's CA and the nodes' key stores (PEM: key, then the certificate chain)."""

    def __init__(self, plan: Plan) -> None:
        import trustme

        self.plan = plan
        self.ca = trustme.CA(organization_name="kraftpy jepsen CA")
        ca_file(plan).parent.mkdir(parents=True, exist_ok=True)
        self.ca.cert_pem.write_to_path(str(ca_file(plan)))
        self._lock = threading.Lock()
        for node in plan.nodes:
            self.issue(node)
        self._write(harness_keystore(plan), self.ca.issue_cert(
            "127.0.0.1", common_name="jepsen-harness", organization_name="kraftpy", organization_unit_name="jepsen"))

    def issue(self, node: NodeSpec) -> str:
        """Writes a fresh certificate for `node` (beside the key store, then renamed over it: a node
        reloading it never reads half a file). Returns the certificate's serial number in hex."""
        from cryptography import x509

        names = dict.fromkeys([node.host, node.advertised_host, "127.0.0.1", "localhost"])
        with self._lock:
            cert = self.ca.issue_cert(*names, common_name=node.name, organization_name="kraftpy",
                                      organization_unit_name="jepsen")
            self._write(keystore(self.plan, node), cert)
        return f"{x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).serial_number:x}"


    @staticmethod
    def _write(path: Path, cert: Any) -> None:
        tmp = path.with_suffix(".pem.new")
        with open(tmp, "wb") as f:
            f.write(cert.private_key_pem.bytes())
            for blob in cert.cert_chain_pems:
                f.write(blob.bytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def harness_keystore(plan: Plan) -> Path:
    return plan.out / PKI_DIR / "harness.pem"


def control_sasl(plan: Plan) -> Any:
    """The harness's SCRAM login on the controller listener (quorum status), or None on a plaintext cluster."""
    if not enabled(plan):
        return None
    from kraftpy.security.sasl import SaslLogin

    return SaslLogin(MECHANISM, CONTROLLER_USER, password(plan, CONTROLLER_USER))


def control_tls(plan: Plan) -> Any:
    """How the harness connects to the controller listener (quorum status): TLS with its own client
    certificate, or None on a plaintext cluster."""
    if not enabled(plan):
        return None
    from kraftpy.security.tls import ClientTls, client_settings

    return ClientTls(client_settings({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                      "ssl.truststore.location": str(ca_file(plan)), "ssl.keystore.type": "PEM",
                                      "ssl.keystore.location": str(harness_keystore(plan))}))


def write_client_properties(plan: Plan, path: Path, user: str) -> Path:
    """A `.properties` file of the librdkafka settings of `user` (the member and transaction client
    processes read it with --client-config)."""
    path.write_text("".join(f"{k}={v}\n" for k, v in client_settings(plan, user).items()))
    return path


def read_client_properties(path: str | None) -> dict[str, str]:
    if not path:
        return {}
    out = {}
    for line in Path(path).read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


# --- ACLs -----------------------------------------------------------------------------------------


def _workload_bindings(plan: Plan, topic_prefix: str) -> dict[str, Any]:
    """Every ACL the workload user needs, by name; `write` is the one acl-flap removes."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    user = f"User:{WORKLOAD_USER}"

    def allow(rtype: Any, name: str, op: Any, pattern: Any = ResourcePatternType.PREFIXED) -> Any:
        return AclBinding(rtype, name, pattern, user, "*", op, AclPermissionType.ALLOW)

    return {
        "write": allow(ResourceType.TOPIC, topic_prefix, AclOperation.WRITE),
        "read": allow(ResourceType.TOPIC, topic_prefix, AclOperation.READ),
        "describe": allow(ResourceType.TOPIC, topic_prefix, AclOperation.DESCRIBE),
        "group": allow(ResourceType.GROUP, "jepsen", AclOperation.READ),
        "group-describe": allow(ResourceType.GROUP, "jepsen", AclOperation.DESCRIBE),
        "txn-id": allow(ResourceType.TRANSACTIONAL_ID, "jepsen", AclOperation.WRITE),
        "txn-id-describe": allow(ResourceType.TRANSACTIONAL_ID, "jepsen", AclOperation.DESCRIBE),
        "idempotent": allow(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE,
                            ResourcePatternType.LITERAL),
    }


def _admin(plan: Plan) -> Any:
    from confluent_kafka.admin import AdminClient

    from tests.jepsen.runner import client_config

    return AdminClient(client_config(plan, **{"socket.timeout.ms": 5000}))


def _retrying(what: str, fn: Any, attempts: int = 10) -> Any:
    """Runs `fn` until it succeeds: an admin request to a broker that is down, paused or moving its
    controller fails now and then; the nemesis tries again within its window."""
    last: Exception | None = None
    for _ in range(attempts):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - every failure is retried, the last one raised
            last = e
            threading.Event().wait(0.5)
    raise RuntimeError(f"{what} failed: {last}")


def create_acls(plan: Plan, bindings: list[Any]) -> None:
    admin = _admin(plan)

    def once() -> None:
        for future in admin.create_acls(bindings, request_timeout=10).values():
            future.result(timeout=15)

    _retrying("CreateAcls", once)


def delete_acls(plan: Plan, bindings: list[Any]) -> int:
    from confluent_kafka.admin import AclBindingFilter

    admin = _admin(plan)
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]

    def once() -> int:
        return sum(len(f.result(timeout=15)) for f in admin.delete_acls(filters, request_timeout=10).values())

    return _retrying("DeleteAcls", once)


def _log_marks(plan: Plan) -> dict[str, int]:
    """Each broker's log size now: where to look for what it logs next."""
    marks = {}
    for broker in plan.brokers:
        path = plan.out / "logs" / f"{broker.name}.log"
        marks[broker.name] = path.stat().st_size if path.exists() else 0
    return marks


def _logged_since(plan: Plan, name: str, mark: int, event: str) -> int:
    """How many lines naming `event` the node logged since `mark` (a byte offset)."""
    with contextlib.suppress(OSError), open(plan.out / "logs" / f"{name}.log", "rb") as f:
        f.seek(mark)
        return f.read().decode(errors="replace").count(event)
    return 0


def wait_acls_applied(plan: Plan, marks: dict[str, int], timeout: float = 20.0) -> list[str]:
    """Waits until every broker logged `acls changed` since `marks` (its authorizer applied the change:
    an ACL change reaches each broker with its metadata, not all at once); returns the brokers that
    did within `timeout` (a killed or paused broker applies it when it is back)."""
    deadline = time.monotonic() + timeout
    while True:
        applied = [name for name, mark in marks.items() if _logged_since(plan, name, mark, ACLS_CHANGED)]
        if len(applied) == len(marks) or time.monotonic() >= deadline:
            return applied
        time.sleep(0.1)


def grant_workload_acls(plan: Plan, topic_prefix: str) -> list[str]:
    """Creates the workload user's ACLs; returns once every broker applied them (the brokers that did)."""
    marks = _log_marks(plan)
    create_acls(plan, list(_workload_bindings(plan, topic_prefix).values()))
    return wait_acls_applied(plan, marks)


def can_log_in(plan: Plan, user: str) -> bool:
    """Whether a new connection authenticating as `user` with its usual password gets a Metadata answer."""
    from confluent_kafka.admin import AdminClient

    from tests.jepsen.runner import client_config

    admin = AdminClient(client_config(plan, user=user, **{"socket.timeout.ms": 3000}))
    try:
        admin.list_topics(timeout=3)
    except Exception:  # noqa: BLE001 - any failure: not logged in
        return False
    return True


def alter_password(plan: Plan, user: str, new_password: str) -> None:
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = _admin(plan)
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, ITERATIONS),
                                          new_password.encode(), os.urandom(16))

    def once() -> None:
        for future in admin.alter_user_scram_credentials([upsert], request_timeout=10).values():
            future.result(timeout=15)

    _retrying("AlterUserScramCredentials", once)


# --- the nemeses ------------------------------------------------------------------------------------


class SecurityFaults:
    """Starts and heals `cert-rotate`, `acl-flap` and `credential-flap` faults (see the module docstring)
    (their records in the history say what they did: the checker's `details.security`)."""

    def __init__(self, plan: Plan, pki: Pki, *, topic_prefix: str) -> None:
        self.plan = plan
        self.pki = pki
        self.topic_prefix = topic_prefix
        self._log_marks: dict[int, tuple[str, int]] = {}

    def start(self, fault: Any) -> dict[str, Any]:
        if fault.kind == "cert-rotate":
            node = self.plan.node(fault.nodes[0])
            log = self.plan.out / "logs" / f"{node.name}.log"
            self._log_marks[fault.id] = (node.name, log.stat().st_size if log.exists() else 0)
            serial = self.pki.issue(node)
            return {"targets": [node.name], "serial": serial}
        if fault.kind == "acl-flap":
            marks = _log_marks(self.plan)
            removed = delete_acls(self.plan, [_workload_bindings(self.plan, self.topic_prefix)["write"]])
            return {"targets": [f"User:{WORKLOAD_USER}"], "acls_removed": removed,
                    "applied_on": wait_acls_applied(self.plan, marks)}
        if fault.kind == "credential-flap":
            alter_password(self.plan, WORKLOAD_USER, password(self.plan, WORKLOAD_USER) + "-changed")
            # a new connection with the password the workload holds is refused from now on (once the
            # brokers have the new credential: a few tries)
            refused = any(not can_log_in(self.plan, WORKLOAD_USER) for _ in range(3))
            return {"targets": [f"User:{WORKLOAD_USER}"], "old_password_refused": refused}
        raise ValueError(f"not a security fault: {fault.kind!r}")

    def stop(self, fault: Any) -> dict[str, Any]:
        if fault.kind == "cert-rotate":
            name, mark = self._log_marks.pop(fault.id, (fault.nodes[0], 0))
            return {"targets": [name], "reloads": _logged_since(self.plan, name, mark, RELOADED)}
        if fault.kind == "acl-flap":
            marks = _log_marks(self.plan)
            create_acls(self.plan, [_workload_bindings(self.plan, self.topic_prefix)["write"]])
            return {"targets": [f"User:{WORKLOAD_USER}"], "applied_on": wait_acls_applied(self.plan, marks)}
        if fault.kind == "credential-flap":
            alter_password(self.plan, WORKLOAD_USER, password(self.plan, WORKLOAD_USER))
            return {"targets": [f"User:{WORKLOAD_USER}"]}
        raise ValueError(f"not a security fault: {fault.kind!r}")
