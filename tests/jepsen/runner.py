"""The Jepsen runner: a fresh cluster of real processes, a queue workload, a seeded nemesis, a
final read, the checker and the report.

    python -m tests.jepsen.runner --time-limit 60 --nemesis kill,pause --seed 7 --out DIR \\
        --nodes 3 --brokers 3

Steps: write a `.properties` file per node into DIR/config, `kraftpy storage format` each one with a
cluster id derived from the seed, set up the network backend (network namespaces when root, else the
TCP proxy layer), start `kraftpy controller --config F` and `kraftpy broker --config F` (inside the
node's namespace with the netns backend), wait until the brokers answer, create the topic
(RF=3, min.insync.replicas=2), run producer and consumer workers (confluent-kafka: acks=all,
idempotence, retries; consumers assign() their partitions; kafka-python session consumers read
through fetch sessions) while the nemesis runs the schedule, heal everything, let the session
consumers read up to every high watermark, read every partition from the start, stop the cluster
and write history.jsonl,
schedule.json, results.json, summary.txt and the PNG. The exit status is 0 when the history is
valid, 1 when it is not, 2 when the harness itself failed.

`--workload group` replaces the assign() consumers with member processes of one consumer group
(`tests.jepsen.group`): they subscribe(), commit what they processed, and are replaced now and then;
after healing, the group drains (consumes and commits up to every high watermark) before the final
read, and the checker adds the group checks. The nemesis may then also strike the group's
coordinator.

`--workload txn` runs transactional producers, read_committed and read_uncommitted consumers and a
consume-transform-produce process over three topics (`tests.jepsen.txn`); after healing the
clients stop and a read_committed final read covers every partition, and the transaction checker
(`tests.jepsen.txn_checker`) judges the history. The nemesis's `coordinator` variant then strikes
the transform's transaction coordinator.

`--security sasl_ssl` secures the cluster (`tests.jepsen.security`): certificates made into DIR/pki,
TLS with client certificates between the nodes, a SASL_SSL (SCRAM-SHA-512) client listener on every
broker, the StandardAuthorizer on; the workload clients log in as a user holding only the ACLs they
need, and the `cert-rotate`, `acl-flap` and `credential-flap` nemeses become available.

`--nemesis membership` (also in `all`) runs a dynamic controller quorum (KIP-853): every node is configured
with controller.quorum.bootstrap.servers instead of controller.quorum.voters, and the controllers are
formatted with `--initial-controllers` (directory ids derived from the cluster id). The nemesis then
removes controllers (the active one too) from the voters and adds them back, and replaces a controller's
disk (`tests.jepsen.nemesis`); the results' ``details.membership`` says what it did and which voters the
quorum ended with.

`--dry-run` writes the configurations and the schedule and stops there.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from kraftpy.config.properties import format_properties
from kraftpy.ids import uuid_to_str
from tests.jepsen import nemesis as nm
from tests.jepsen import security as sec
from tests.jepsen.checker import check, membership_faults, security_faults
from tests.jepsen.group import ASSIGNORS, GroupWorkload, offsets_partition_for
from tests.jepsen.history import FINAL_READ, POLL, SEND, SESSION_DRAIN, Recorder
from tests.jepsen.provenance import attach_provenance, replica_agreement
from tests.jepsen.proxy import Route, SocketOwners, ThreadedProxy
from tests.jepsen.report import HISTORY, RUN_FACTS, write_report
from tests.jepsen.txn import TxnWorkload, txn_topics
from tests.jepsen.txn_checker import check_txn

CONTROLLER_PORT = 9093
CLIENT_LOG = "clients.log"
CLIENT_LOGGER = logging.getLogger("tests.jepsen.clients")
CLIENT_LOGGER.propagate = False
BROKER_PORT = 9092
CLIENT_PORT = 9094  # netns: the SASL_SSL client listener of a broker with --security sasl_ssl
NETWORKS = ("auto", "netns", "proxy", "none")
WORKLOADS = ("queue", "group", "txn")
OFFSETS_TOPIC = "__consumer_offsets"
TXN_STATE_TOPIC = "__transaction_state"


class HarnessError(RuntimeError):
    """The harness could not run the test (as opposed to the system under test misbehaving)."""


# --- the cluster plan and its configuration files ---------------------------------------------


@attrs.frozen
class NodeSpec:
    name: str
    node_id: int
    role: str  # controller | broker
    host: str  # where the process listens
    port: int
    advertised_host: str  # where the others (and clients) reach it
    advertised_port: int
    data_dir: Path
    config: Path
    client_port: int = 0  # brokers with --security sasl_ssl: the SASL_SSL client listener (never proxied)

    @property
    def advertised(self) -> str:
        return f"{self.advertised_host}:{self.advertised_port}"


@attrs.frozen
class Plan:
    out: Path
    network: str  # netns | proxy | none
    cluster_id: str
    controllers: tuple[NodeSpec, ...]
    brokers: tuple[NodeSpec, ...]
    partitions: int
    replication_factor: int
    min_insync: int
    offsets_partitions: int = 50
    txn_partitions: int = 50
    security: str = "none"  # none | sasl_ssl (tests.jepsen.security)
    #: A dynamic quorum (the membership nemesis): controller.quorum.bootstrap.servers, and the
    #: controllers formatted with --initial-controllers.
    dynamic: bool = False
    #: Brokers reserve each new segment's disk blocks (log.preallocate) and roll every
    #: `PREALLOCATED_ROLL_MS`: the faults land on reserved segments, and on rolls giving back what a
    #: segment did not use.
    preallocate: bool = False

    @property
    def nodes(self) -> tuple[NodeSpec, ...]:
        return self.controllers + self.brokers

    @property
    def voters(self) -> str:
        return ",".join(f"{c.node_id}@{c.advertised}" for c in self.controllers)

    @property
    def bootstrap_controllers(self) -> str:
        return ",".join(c.advertised for c in self.controllers)

    @property
    def initial_controllers(self) -> str:
        """`storage format --initial-controllers`: every controller, with a directory id from the cluster id."""
        return ",".join(f"{c.node_id}@{c.advertised}:{self.directory_id(c)}" for c in self.controllers)

    def directory_id(self, node: NodeSpec) -> str:
        return uuid_to_str(random.Random(f"{self.cluster_id}-{node.name}").randbytes(16))

    @property
    def bootstrap(self) -> str:
        if self.security != "none":
            return ",".join(f"{b.host}:{b.client_port}" for b in self.brokers)
        return ",".join(b.advertised for b in self.brokers)

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def proxy_routes(self) -> list[Route]:
        return [Route(n.name, (n.host, n.port), listen=(n.advertised_host, n.advertised_port))
                for n in self.nodes]


def cluster_id_for(seed: int) -> str:
    return uuid_to_str(random.Random(f"kraftpy-jepsen-cluster-{seed}").randbytes(16))


def plan_cluster(out: Path, *, seed: int, controllers: int = 3, brokers: int = 3, network: str = "netns",
                 base_port: int = 19000, partitions: int = 3, replication_factor: int = 3,
                 min_insync: int = 2, offsets_partitions: int = 50, txn_partitions: int = 50,
                 security: str = "none", dynamic: bool = False, preallocate: bool = False) -> Plan:
    """Names, ids, addresses and files of every node. Controllers are c1..cN with node ids 1..N,
    brokers b1..bM with node ids 101..100+M.

    netns: node k listens on 10.77.0.(10+k), controllers on 9093 and brokers on 9092.
    proxy: node k listens on 127.0.0.1:(base_port+k) and is reached through the proxy at
    127.0.0.1:(base_port+100+k). none: 127.0.0.1:(base_port+k), no network faults. With `security`
    sasl_ssl a broker's SASL_SSL client listener is on 9094 (netns) or base_port+50+k, reached
    directly (clients are never faulted)."""
    if security not in sec.MODES:
        raise ValueError(f"unknown security {security!r}")
    if network not in ("netns", "proxy", "none"):
        raise ValueError(f"unknown network backend {network!r}")
    if controllers < 1 or brokers < 1:
        raise ValueError("a cluster needs at least one controller and one broker")
    if replication_factor > brokers:
        raise ValueError(f"replication factor {replication_factor} needs at least that many brokers, not {brokers}")
    out = Path(out).resolve()
    specs: list[NodeSpec] = []
    roles = [("controller", f"c{i + 1}", i + 1) for i in range(controllers)] + \
        [("broker", f"b{i + 1}", 101 + i) for i in range(brokers)]
    for k, (role, name, node_id) in enumerate(roles):
        if network == "netns":
            host = str(nm.SUBNET.network_address + 10 + k)
            port = CONTROLLER_PORT if role == "controller" else BROKER_PORT
            adv_host, adv_port = host, port
            client_port = CLIENT_PORT
        else:
            host, port = "127.0.0.1", base_port + k
            adv_host, adv_port = (host, base_port + 100 + k) if network == "proxy" else (host, port)
            client_port = base_port + 50 + k
        specs.append(NodeSpec(name=name, node_id=node_id, role=role, host=host, port=port,
                              advertised_host=adv_host, advertised_port=adv_port,
                              client_port=client_port if role == "broker" and security != "none" else 0,
                              data_dir=out / "data" / name, config=out / "config" / f"{name}.properties"))
    return Plan(out=out, network=network, cluster_id=cluster_id_for(seed),
                controllers=tuple(s for s in specs if s.role == "controller"),
                brokers=tuple(s for s in specs if s.role == "broker"),
                partitions=partitions, replication_factor=replication_factor, min_insync=min_insync,
                offsets_partitions=offsets_partitions, txn_partitions=txn_partitions, security=security,
                dynamic=dynamic, preallocate=preallocate)


#: log.segment.bytes and log.roll.ms of a --preallocate campaign: its segments roll every two seconds,
#: long before they fill, so that one whose reservation a roll did not give back stands out.
PREALLOCATED_SEGMENT_BYTES = 1 << 20
PREALLOCATED_ROLL_MS = 2000


def preallocated_segments(topic: str, plan: Plan) -> dict[str, int]:
    """What a --preallocate campaign left in the brokers' logs of the workload's topic: its segments (more
    than its replicas: rolls under the faults), and the finished ones still holding disk blocks reserved
    past their data (a roll gives them back, whatever the faults: 0)."""
    from kraftpy.storage.segment import RESERVED_SLACK_BYTES

    segments = replicas = finished_reserved = 0
    for broker in plan.brokers:
        for directory in broker.data_dir.glob(f"{topic}-*"):
            logs = sorted(directory.glob("*.log"))
            replicas += bool(logs)
            segments += len(logs)
            for finished in logs[:-1]:
                stat = finished.stat()
                finished_reserved += stat.st_blocks * 512 > stat.st_size + RESERVED_SLACK_BYTES
    return {"segment_bytes": PREALLOCATED_SEGMENT_BYTES, "replicas": replicas, "segments": segments,
            "finished_segments_still_reserved": finished_reserved}


def render_config(node: NodeSpec, plan: Plan) -> str:
    """The node's configuration in Kafka's `.properties` format."""
    props: list[tuple[str, str]] = [
        ("process.roles", node.role),
        ("node.id", str(node.node_id)),
        ("controller.quorum.bootstrap.servers", plan.bootstrap_controllers) if plan.dynamic
        else ("controller.quorum.voters", plan.voters),
        ("controller.listener.names", "CONTROLLER"),
        *sec.node_properties(node, plan),
        ("log.dirs", str(node.data_dir)),
        ("num.partitions", str(plan.partitions)),
        ("default.replication.factor", str(plan.replication_factor)),
        ("min.insync.replicas", str(plan.min_insync)),
        ("offsets.topic.replication.factor", str(plan.replication_factor)),
        ("offsets.topic.num.partitions", str(plan.offsets_partitions)),
        ("transaction.state.log.num.partitions", str(plan.txn_partitions)),
        ("transaction.state.log.replication.factor", str(plan.replication_factor)),
        ("transaction.state.log.min.isr", str(plan.min_insync)),
        ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "1000"),
        ("unclean.leader.election.enable", "false"),
        ("auto.create.topics.enable", "false"),
        ("broker.heartbeat.interval.ms", "500"),
        ("broker.session.timeout.ms", "6000"),
        ("replica.lag.time.max.ms", "10000"),
        ("controller.quorum.election.timeout.ms", "1000"),
        ("controller.quorum.fetch.timeout.ms", "2000"),
    ]
    if plan.preallocate and node.role == "broker":
        props += [("log.preallocate", "true"), ("log.segment.bytes", str(PREALLOCATED_SEGMENT_BYTES)),
                  ("log.roll.ms", str(PREALLOCATED_ROLL_MS))]
    return format_properties(props, header=f"kraftpy jepsen: {node.role} {node.name} ({plan.network} network)")


def write_configs(plan: Plan) -> list[Path]:
    paths = []
    for node in plan.nodes:
        node.config.parent.mkdir(parents=True, exist_ok=True)
        node.data_dir.mkdir(parents=True, exist_ok=True)
        node.config.write_text(render_config(node, plan))
        paths.append(node.config)
    return paths


# --- the kraftpy command ----------------------------------------------------------------------


def client_config(plan: Plan, *, user: str | None = None, **extra: Any) -> dict[str, Any]:
    """The settings every confluent-kafka client of the harness shares: the bootstrap brokers and the
    harness's logger (librdkafka's connection chatter goes to DIR/clients.log, not the terminal); with
    `--security sasl_ssl` SASL_SSL as `user` (the admin when None; workload clients are
    `security.WORKLOAD_USER`)."""
    return {"bootstrap.servers": plan.bootstrap, "logger": CLIENT_LOGGER, **sec.client_settings(plan, user),
            **extra}


def log_clients_to(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    CLIENT_LOGGER.addHandler(handler)
    CLIENT_LOGGER.setLevel(logging.DEBUG)  # librdkafka's debug contexts, where a client asks for them
    return handler


def default_kraftpy() -> list[str]:
    return [sys.executable, "-m", "kraftpy"]


def check_kraftpy(cmd: Sequence[str]) -> None:
    """Fails with a clear message when the kraftpy command lacks what the runner starts."""
    procs = {}
    try:
        for sub in ("storage", "controller", "broker"):
            procs[sub] = subprocess.Popen([*cmd, sub, "--help"], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise HarnessError(f"cannot run `{shlex.join(cmd)}`: {e}") from e
    failures = []
    for sub, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if proc.returncode != 0:
            failures.append((sub, proc.returncode, " ".join((err or out).split())[-300:]))
    if failures:
        sub, code, detail = failures[0]
        raise HarnessError(
            f"`kraftpy {sub}` is not available (`{shlex.join([*cmd, sub, '--help'])}` exited "
            f"{code}: {detail}). The Jepsen runner starts real `kraftpy controller` and "
            f"`kraftpy broker` processes; it cannot run before both commands exist.")


def quorum_format_args(node: NodeSpec, plan: Plan) -> list[str]:
    """A dynamic quorum's controllers are formatted with every controller as an initial voter."""
    return ["--initial-controllers", plan.initial_controllers] if plan.dynamic and node.role == "controller" else []


def format_storage(plan: Plan, cmd: Sequence[str]) -> None:
    """`kraftpy storage format` on every node, all at once."""
    procs = {node.name: subprocess.Popen([*cmd, "storage", "format", "-c", str(node.config), "-t", plan.cluster_id,
                                          *sec.format_args(node, plan), *quorum_format_args(node, plan)],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node in plan.nodes}
    failures = []
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"kraftpy storage format failed for {name}: {(err or out).strip()}")
    if failures:
        raise HarnessError("; ".join(failures))


# --- the running cluster ------------------------------------------------------------------------


@attrs.define
class RunningNode:
    spec: NodeSpec
    process: subprocess.Popen | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def role(self) -> str:
        return self.spec.role

    @property
    def address(self) -> str:
        return self.spec.host


class ProcessCluster:
    """The node processes (implements the nemesis's `Cluster`). Each node's output goes to
    DIR/logs/NAME.log, appended across restarts."""

    def __init__(self, plan: Plan, cmd: Sequence[str], *, topic: str, group: str | None = None,
                 txn_id: str | None = None, wrap: Callable[[str, list[str]], list[str]] = lambda name, c: c,
                 log: Callable[[str], Any] = print) -> None:
        self.plan = plan
        self.cmd = list(cmd)
        self.topic = topic
        self.group = group
        self.txn_id = txn_id
        self.wrap = wrap
        self.log = log
        self._nodes = [RunningNode(spec) for spec in plan.nodes]
        self._lock = threading.Lock()
        (plan.out / "logs").mkdir(parents=True, exist_ok=True)

    def nodes(self) -> list[RunningNode]:
        return self._nodes

    def node(self, name: str) -> RunningNode:
        for n in self._nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def pids(self) -> dict[int, str]:
        return {n.process.pid: n.name for n in self._nodes if n.process is not None and n.process.poll() is None}

    def start(self, name: str) -> None:
        node = self.node(name)
        with self._lock:
            if node.process is not None and node.process.poll() is None:
                return
            cmd = self.wrap(name, [*self.cmd, node.role, "--config", str(node.spec.config)])
            logfile = open(self.plan.out / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - closed below
            try:
                logfile.write(f"\n--- start {node.starts + 1}: {shlex.join(cmd)}\n".encode())
                logfile.flush()
                node.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logfile,
                                                stderr=subprocess.STDOUT, start_new_session=True)
            finally:
                logfile.close()
            node.starts += 1

    def start_all(self) -> None:
        for n in self._nodes:
            self.start(n.name)

    def restart(self, name: str) -> None:
        node = self.node(name)
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait(timeout=10)
        self.start(name)

    def exited(self) -> list[str]:
        return [f"{n.name} (exit {n.process.returncode})" for n in self._nodes
                if n.process is not None and n.process.poll() is not None]

    def stop_all(self, timeout: float = 10.0) -> None:
        """SIGTERM the brokers first (their controlled shutdown needs the controllers), then the
        controllers; whatever has not exited after `timeout` seconds is killed."""
        for role in ("broker", "controller"):
            group = [n for n in self._nodes if n.role == role and n.process is not None]
            for n in group:
                p = n.process
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGCONT)
                        p.terminate()
            deadline = time.monotonic() + timeout
            for n in group:
                p = n.process
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.log(f"{n.name} did not stop within {timeout:.0f}s of SIGTERM; killed")
                    p.kill()
                    p.wait()

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.plan.out / "logs" / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # what the nemesis asks

    def active_controller(self) -> str | None:
        """The quorum leader, as `kraftpy quorum status` finds it (asked in-process: starting the
        command takes seconds on a loaded machine, and the nemesis should strike when scheduled);
        None when no controller answers (the nemesis then uses the scheduled node)."""
        import trio

        from kraftpy.cli.quorum import fetch_status

        addresses = [(c.advertised_host, c.advertised_port) for c in self.plan.controllers]
        try:
            status = trio.run(fetch_status, addresses, 2.0, sec.control_tls(self.plan), sec.control_sasl(self.plan))
        except Exception:
            return None
        for spec in self.plan.controllers:
            if spec.node_id == status.get("leader_id"):
                return spec.name
        return None

    def partition_leader(self, partition: int) -> str | None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(client_config(self.plan, **{"socket.timeout.ms": 3000}))
        md = admin.list_topics(self.topic, timeout=3)
        t = md.topics.get(self.topic)
        if t is None or partition not in t.partitions:
            return None
        return self._broker_name(t.partitions[partition].leader)

    def group_coordinator(self) -> str | None:
        """The broker leading the group's `__consumer_offsets` partition (from Metadata), or None; in a
        transaction campaign the leader of the transform's `__transaction_state` partition (Kafka maps
        a transactional id as it maps a group)."""
        from confluent_kafka.admin import AdminClient

        if self.group is None and self.txn_id is None:
            return None
        topic, key = (TXN_STATE_TOPIC, self.txn_id) if self.txn_id else (OFFSETS_TOPIC, self.group)
        admin = AdminClient(client_config(self.plan, **{"socket.timeout.ms": 3000}))
        t = admin.list_topics(topic, timeout=3).topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            return None
        partition = t.partitions.get(offsets_partition_for(key, len(t.partitions)))
        return None if partition is None else self._broker_name(partition.leader)

    def is_back(self, name: str) -> bool:
        """A restarted broker is in the metadata and every partition is fully replicated again (its
        ISR is its replica set: the restarted broker caught up everywhere); a restarted controller
        is caught up with the quorum's leader (lag 0, fetched within the last 2 s)."""
        spec = self.node(name).spec
        if spec.role == "controller":
            import trio

            from kraftpy.cli.quorum import fetch_status

            addresses = [(c.advertised_host, c.advertised_port) for c in self.plan.controllers]
            status = trio.run(fetch_status, addresses, 2.0, sec.control_tls(self.plan), sec.control_sasl(self.plan))
            if status.get("leader_id") == spec.node_id:
                return True
            # A voter, or (a dynamic quorum's controller that a membership fault left out) an observer.
            return any(v["id"] == spec.node_id and v["lag"] == 0 and v["last_fetch_ms_ago"] is not None
                       and v["last_fetch_ms_ago"] < 2000 for v in [*status["voters"], *status["observers"]])
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(client_config(self.plan, **{"socket.timeout.ms": 3000}))
        md = admin.list_topics(timeout=3)
        if spec.node_id not in md.brokers:
            return False
        return all(t.error is None and all(p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas)
                                           for p in t.partitions.values())
                   for t in md.topics.values())

    def _broker_name(self, node_id: int) -> str | None:
        for spec in self.plan.brokers:
            if spec.node_id == node_id:
                return spec.name
        return None

    # what the membership nemesis asks (a dynamic quorum)

    def _ask_leader(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        import trio

        from kraftpy.cli.quorum import ask_leader

        addresses = [(c.advertised_host, c.advertised_port) for c in self.plan.controllers]
        return trio.run(ask_leader, addresses, api, body, 10.0, sec.control_tls(self.plan), sec.control_sasl(self.plan))

    def quorum_status(self, timeout: float = 15.0) -> dict[str, Any]:
        """The quorum's leader's status; asked again while there is none (a leader that just removed
        itself has handed over, and the voters have not elected the next one yet)."""
        from kraftpy.metadata.rpc import QUORUM_STATUS_API
        from kraftpy.rpc.control import RpcError

        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._ask_leader(QUORUM_STATUS_API, {})
            except RpcError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def directory_id(self, name: str) -> str:
        """The directory id in the controller's meta.properties (its current disk)."""
        text = (self.node(name).spec.data_dir / "meta.properties").read_text()
        return next(line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("directory.id="))

    def voters(self) -> dict[str, str]:
        """The voters as the quorum's leader describes them: node name -> directory id."""
        names = {c.node_id: c.name for c in self.plan.controllers}
        return {names[v["id"]]: v["directory_id"] for v in self.quorum_status()["voters"] if v["id"] in names}

    def remove_voter(self, name: str, directory_id: str | None = None) -> None:
        from kraftpy.ids import Uuid
        from kraftpy.metadata import quorum_membership as membership
        from kraftpy.raft.voters import ReplicaKey

        key = ReplicaKey(self.node(name).spec.node_id, Uuid.from_base64(directory_id or self.directory_id(name)))
        self._retry(lambda: self._ask_leader(membership.REMOVE_RAFT_VOTER_API, membership.remove_request(key)))

    def add_voter(self, name: str, timeout: float = 60.0) -> None:
        """Add the controller back once the leader sees it caught up as an observer (its current disk)."""
        from kraftpy.ids import Uuid
        from kraftpy.metadata import quorum_membership as membership
        from kraftpy.raft.voters import Endpoint, ReplicaKey

        spec = self.node(name).spec
        directory = self.directory_id(name)
        deadline = time.monotonic() + timeout

        def caught_up() -> bool:
            status = _quietly(self.quorum_status)
            return isinstance(status, dict) and any(
                o["id"] == spec.node_id and o.get("directory_id") == directory and o["lag"] == 0
                for o in status["observers"])

        while not caught_up():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{name} did not catch up as an observer within {timeout:.0f}s")
            time.sleep(0.2)
        key = ReplicaKey(spec.node_id, Uuid.from_base64(directory))
        body = membership.add_request(key, (Endpoint("CONTROLLER", spec.advertised_host, spec.advertised_port),))
        self._retry(lambda: self._ask_leader(membership.ADD_RAFT_VOTER_API, body), deadline=deadline)

    def _retry(self, call: Callable[[], Any], deadline: float | None = None) -> None:
        """A change the leader answers REQUEST_TIMED_OUT (the previous change not committed yet, a new
        leader's epoch not committed yet) or that finds no leader is asked again until `deadline`."""
        from kraftpy.rpc.control import RpcError

        deadline = deadline if deadline is not None else time.monotonic() + 30.0
        while True:
            try:
                call()
                return
            except RpcError as exc:
                if exc.code not in ("REQUEST_TIMED_OUT", "UNAVAILABLE", "NETWORK_EXCEPTION",
                                    "NOT_LEADER_OR_FOLLOWER") or time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def replace_disk(self, name: str) -> str:
        """Kill the controller, wipe its directory, format it with --no-initial-controllers (a new
        directory id), start it; the directory id it had."""
        node = self.node(name)
        old = self.directory_id(name)
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait(timeout=10)
        shutil.rmtree(node.spec.data_dir)
        node.spec.data_dir.mkdir(parents=True)
        done = subprocess.run([*self.cmd, "storage", "format", "-c", str(node.spec.config), "-t", self.plan.cluster_id,
                               "--no-initial-controllers", *sec.format_args(node.spec, self.plan)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise HarnessError(f"kraftpy storage format failed for {name}: {(done.stderr or done.stdout).strip()}")
        self.start(name)
        return old


def _quietly(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        return f"unknown: {exc}"


def wait_for_cluster(plan: Plan, cluster: ProcessCluster, timeout: float, log: Callable[[str], Any]) -> None:
    """Until every broker is in the metadata a broker answers with."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(client_config(plan, **{"socket.timeout.ms": 3000}))
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        dead = cluster.exited()
        if dead:
            name = dead[0].split()[0]
            raise HarnessError(f"node {dead[0]} exited while the cluster started; its log ends with:\n"
                               f"{cluster.log_tail(name)}")
        try:
            md = admin.list_topics(timeout=2)
            if len(md.brokers) >= len(plan.brokers):
                log(f"cluster answers: {len(md.brokers)} brokers")
                return
            last = f"{len(md.brokers)} of {len(plan.brokers)} brokers registered"
        except Exception as e:
            last = str(e)
        time.sleep(0.5)
    raise HarnessError(f"the cluster did not answer within {timeout:.0f}s ({last}); logs in {plan.out / 'logs'}")


def create_topic(plan: Plan, topic: str, timeout: float, log: Callable[[str], Any]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(plan))
    new = NewTopic(topic, num_partitions=plan.partitions, replication_factor=plan.replication_factor,
                   config={"min.insync.replicas": str(plan.min_insync)})
    deadline = time.monotonic() + timeout
    while True:
        # Right after start, a broker whose metadata does not show the others unfenced yet names no
        # controller or fewer brokers, and librdkafka's admin client waits out its request timeout or
        # drops the broker it asked (a local error, code < 0): ask again.
        futures = admin.create_topics([new], request_timeout=10)
        try:
            futures[topic].result(timeout=timeout)
            break
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" in str(e):
                break
            local = bool(e.args) and hasattr(e.args[0], "code") and e.args[0].code() < 0
            if not local or time.monotonic() >= deadline:
                raise HarnessError(f"creating topic {topic} failed: {e}") from e
            log(f"creating topic {topic} failed locally ({e}); trying again")
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=3).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == plan.partitions \
                and all(p.leader >= 0 and len(p.isrs) >= plan.min_insync for p in t.partitions.values()):
            log(f"topic {topic}: {plan.partitions} partitions with leaders")
            return
        time.sleep(0.5)
    raise HarnessError(f"topic {topic} has no leader for every partition after {timeout:.0f}s")


# --- the workload --------------------------------------------------------------------------------

# delivery errors after which the record certainly was not appended
DEFINITE_FAILURES = {
    "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "_INVALID_ARG", "MSG_SIZE_TOO_LARGE", "INVALID_REQUIRED_ACKS",
    "TOPIC_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PART", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD",
}


def classify_send_error(name: str) -> str:
    """`fail` when the broker certainly did not append the record, `info` when it may have."""
    return "fail" if name in DEFINITE_FAILURES else "info"


def decode_value(raw: bytes | None) -> Any:
    if raw is None:
        return None
    text = raw.decode(errors="replace")
    return int(text) if text.isdigit() else text


def _is_fatal(exc: BaseException) -> bool:
    """Whether a confluent-kafka exception carries a fatal error (the client can do nothing more)."""
    error = exc.args[0] if exc.args else None
    return bool(getattr(error, "fatal", lambda: False)())


def delivery_report() -> tuple[dict[str, Any], threading.Event, Callable[[Any, Any], None]]:
    """One send's outcome (``type`` ok/fail/info, then ``offset`` and ``partition`` or ``error``), the event
    set when its delivery report came, and the callback that fills both."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            outcome.update(type="ok", offset=msg.offset(), partition=msg.partition())
        else:
            outcome.update(type=classify_send_error(err.name()), error=err.name())
        done.set()

    return outcome, done, on_delivery


def _poll_fatally(producer: Any, timeout: float) -> str | None:
    """`producer.poll(timeout)`; the error text when the producer raised a fatal error instead."""
    from confluent_kafka import KafkaException

    try:
        producer.poll(timeout)
    except KafkaException as e:
        return f"fatal: {e}"
    return None


class Workload:
    """Producer and consumer threads recording into `recorder` until `stop` is set."""

    def __init__(self, plan: Plan, recorder: Recorder, *, topic: str, seed: int, producers: int,
                 consumers: int, op_timeout: float, log: Callable[[str], Any], pipelined: int = 0,
                 burst: int = 16, session_consumers: int = 0) -> None:
        """``pipelined`` of the ``producers`` send ``burst`` records at a time (see `_produce_pipelined`);
        ``session_consumers`` read through fetch sessions (see `_consume_in_session`)."""
        self.plan = plan
        self.session_consumers = session_consumers
        #: Stops the session consumers, which read on after `stop` until `drain_sessions` is done.
        self.session_stop = threading.Event()
        #: Each session consumer's next offset of each of its partitions.
        self.session_positions: list[dict[int, int]] = []
        self.session_threads: list[threading.Thread] = []
        self.recorder = recorder
        self.topic = topic
        self.seed = seed
        self.producers = producers
        self.pipelined = pipelined
        self.burst = burst
        self.consumers = consumers
        self.op_timeout = op_timeout
        self.log = log
        self.stop = threading.Event()
        self._values = itertools.count()
        self._processes = itertools.count()
        self._lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def next_process(self) -> int:
        with self._lock:
            return next(self._processes)

    def next_value(self) -> int:
        with self._lock:
            return next(self._values)

    def producer_config(self) -> dict[str, Any]:
        return client_config(self.plan, user=sec.WORKLOAD_USER, **{
            "acks": "all",
            "enable.idempotence": True,
            "retries": 2147483647,
            "linger.ms": 0,
            "message.timeout.ms": int(self.op_timeout * 1000),
            "request.timeout.ms": max(1000, int(self.op_timeout * 500)),
            "topic.metadata.refresh.interval.ms": 2000,
            "reconnect.backoff.max.ms": 1000,
            # librdkafka's idempotence log (producer id and epoch changes, drains, sequence resets after
            # an error or a timeout) in clients.log: a duplicate's provenance names the epoch, this says why
            "debug": "eos",
        })

    def consumer_config(self, process: int) -> dict[str, Any]:
        return client_config(self.plan, user=sec.WORKLOAD_USER, **{
            "group.id": f"jepsen-{self.seed}-{process}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 2000,
            "reconnect.backoff.max.ms": 1000,
        })

    def start(self) -> None:
        for i in range(self.producers):
            self.threads.append(threading.Thread(target=self._guard, args=(self._produce, i),
                                                 name=f"producer-{i}", daemon=True))
        for i in range(self.consumers):
            parts = [p for p in range(self.plan.partitions) if p % self.consumers == i]
            if parts:
                self.threads.append(threading.Thread(target=self._guard, args=(self._consume, parts),
                                                     name=f"consumer-{i}", daemon=True))
        for i in range(self.session_consumers):
            positions = {p: 0 for p in range(self.plan.partitions) if p % self.session_consumers == i}
            if positions:
                self.session_positions.append(positions)
                self.session_threads.append(threading.Thread(
                    target=self._guard, args=(self._consume_in_session, positions), name=f"session-consumer-{i}",
                    daemon=True))
        for t in self.threads + self.session_threads:
            t.start()

    def abandon(self) -> None:
        """Tell every client thread to stop, without waiting (the campaign is over, or failed)."""
        self.stop.set()
        self.session_stop.set()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=self.op_timeout * 3 + 10)
            if t.is_alive():
                self.errors.append(f"{t.name} did not stop")

    def _guard(self, fn: Callable[..., None], arg: Any) -> None:
        try:
            fn(arg)
        except Exception as e:
            self.errors.append(f"{threading.current_thread().name}: {e!r}")
            self.log(f"worker failed: {e!r}")

    def _produce(self, worker: int) -> None:
        if worker < self.pipelined:
            self._produce_pipelined(worker)
            return
        from confluent_kafka import KafkaException, Producer

        rnd = random.Random(f"{self.seed}-producer-{worker}")
        producer = Producer(self.producer_config())
        process = self.next_process()
        while not self.stop.is_set():
            value = self.next_value()
            partition = rnd.randrange(self.plan.partitions)
            key = f"k{partition}"
            fields = dict(value=value, key=key, partition=partition)
            self.recorder.invoke(SEND, process, **fields)
            outcome, done, on_delivery = delivery_report()
            try:
                producer.produce(self.topic, key=key.encode(), value=str(value).encode(), partition=partition,
                                 on_delivery=on_delivery)
            except (BufferError, KafkaException) as e:
                self.recorder.fail(SEND, process, error=f"produce: {e}", **fields)
                # refused at once (a full queue, a topic error it holds): pace; a producer failed fatally
                # (e.g. its InitProducerId refused) refuses everything from now on: a new one
                if _poll_fatally(producer, 0.1) or _is_fatal(e):
                    producer = Producer(self.producer_config())
                continue
            deadline = time.monotonic() + self.op_timeout + 5
            fatal = None
            while fatal is None and not done.is_set() and time.monotonic() < deadline:
                fatal = _poll_fatally(producer, 0.1)
            if not done.is_set():
                self.recorder.info(SEND, process, error=fatal or "no delivery report", **fields)
            elif outcome["type"] == "ok":
                self.recorder.ok(SEND, process, value=value, key=key, partition=outcome["partition"],
                                 offset=outcome["offset"])
                if fatal is None:
                    continue
            else:
                self.recorder.complete(outcome["type"], SEND, process, error=outcome["error"], **fields)
                if outcome["type"] == "fail" and fatal is None:
                    continue
            # indeterminate (or the producer failed fatally): a new process, and a new producer (the
            # old one may still deliver)
            process = self.next_process()
            with contextlib.suppress(Exception):
                producer.flush(0)
            producer = Producer(self.producer_config())
        producer.flush(self.op_timeout)

    def _produce_pipelined(self, worker: int) -> None:
        """Bursts of `burst` records handed over at once, each its own process in the history, by one
        idempotent producer (named in each send, for the checker's `reordered`) that sends batches of
        at most two records with no linger: several Produce requests are in flight on a connection,
        and the broker appends them ahead of their answers. An indeterminate send (or a fatal error)
        ends the producer instance: the next burst goes through a new one."""
        from confluent_kafka import KafkaException, Producer

        rnd = random.Random(f"{self.seed}-pipelined-{worker}")
        instances = itertools.count()
        config = {**self.producer_config(), "batch.num.messages": 2}

        def new_producer() -> tuple[Any, str]:
            return Producer(config), f"w{worker}.{next(instances)}"

        producer, name = new_producer()
        while not self.stop.is_set():
            sent: list[tuple[int, dict[str, Any], dict[str, Any], threading.Event]] = []
            for _ in range(self.burst):
                value = self.next_value()
                partition = rnd.randrange(self.plan.partitions)
                fields = dict(value=value, key=f"k{partition}", partition=partition, producer=name)
                process = self.next_process()
                self.recorder.invoke(SEND, process, **fields)
                outcome, done, on_delivery = delivery_report()
                try:
                    producer.produce(self.topic, key=fields["key"].encode(), value=str(value).encode(),
                                     partition=partition, on_delivery=on_delivery)
                except (BufferError, KafkaException) as e:
                    self.recorder.fail(SEND, process, error=f"produce: {e}", **fields)
                    continue
                sent.append((process, fields, outcome, done))
            deadline = time.monotonic() + self.op_timeout + 5
            fatal = None
            while fatal is None and not all(done.is_set() for *_, done in sent) and time.monotonic() < deadline:
                fatal = _poll_fatally(producer, 0.1)
            renew = fatal is not None
            for process, fields, outcome, done in sent:
                if not done.is_set():
                    self.recorder.info(SEND, process, error=fatal or "no delivery report", **fields)
                    renew = True
                elif outcome["type"] == "ok":
                    self.recorder.ok(SEND, process, value=fields["value"], key=fields["key"],
                                     partition=outcome["partition"], offset=outcome["offset"], producer=name)
                else:
                    self.recorder.complete(outcome["type"], SEND, process, error=outcome["error"], **fields)
                    renew = renew or outcome["type"] != "fail"
            if renew:
                with contextlib.suppress(Exception):
                    producer.flush(0)
                producer, name = new_producer()
        producer.flush(self.op_timeout)

    def _consume(self, partitions: list[int]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        positions = {p: OFFSET_BEGINNING for p in partitions}
        while not self.stop.is_set():
            process = self.next_process()
            consumer = Consumer(self.consumer_config(process))
            consumer.assign([TopicPartition(self.topic, p, positions[p]) for p in partitions])
            try:
                while not self.stop.is_set():
                    self.recorder.invoke(POLL, process)
                    try:
                        msgs = consumer.consume(num_messages=200, timeout=1.0)
                    except Exception as e:
                        self.recorder.info(POLL, process, error=f"consume: {e}")
                        break
                    records = []
                    error = None
                    for m in msgs:
                        if m.error() is not None:
                            error = m.error().name()
                            continue
                        records.append((m.partition(), m.offset(), decode_value(m.value())))
                        positions[m.partition()] = m.offset() + 1
                    if error is not None and not records:
                        self.recorder.info(POLL, process, error=error)
                        break  # a new consumer (and process) resumes after the last record read
                    self.recorder.ok(POLL, process, records=records, error=error)
            finally:
                consumer.close()

    def _consume_in_session(self, positions: dict[int, int]) -> None:
        """Read ``positions``' partitions from the beginning with kafka-python, whose fetches go through
        a KIP-227 session (librdkafka's never do): an incremental fetch names only what changed, and the
        leader answers from what it was told changed. Every poll is recorded as the queue consumers'
        are; a client error ends the client, and a new one (a new process) resumes after the last record
        read. Reads on after `stop`, until `drain_sessions` sets `session_stop`."""
        from kafka import KafkaConsumer, TopicPartition

        while not self.session_stop.is_set():
            process = self.next_process()
            try:
                consumer = KafkaConsumer(bootstrap_servers=self.plan.bootstrap.split(","), enable_auto_commit=False,
                                         auto_offset_reset="none", fetch_max_wait_ms=500, request_timeout_ms=30_000,
                                         metadata_max_age_ms=2000, reconnect_backoff_max_ms=1000,
                                         client_id=f"jepsen-session-{process}")
            except Exception as e:  # no broker answered its bootstrap (a fault): a new client, soon
                self.log(f"session consumer: {type(e).__name__}: {e}; a new one")
                self.session_stop.wait(1.0)
                continue
            try:
                parts = [TopicPartition(self.topic, p) for p in positions]
                consumer.assign(parts)
                for tp in parts:
                    consumer.seek(tp, positions[tp.partition])
                while not self.session_stop.is_set():
                    self.recorder.invoke(POLL, process, member="session")
                    try:
                        batches = consumer.poll(timeout_ms=1000, max_records=500)
                    except Exception as e:
                        self.recorder.info(POLL, process, member="session", error=f"poll: {type(e).__name__}: {e}")
                        break  # a new consumer (and process) resumes after the last record read
                    records = []
                    for _, messages in sorted(batches.items(), key=lambda kv: kv[0].partition):
                        for m in messages:
                            records.append((m.partition, m.offset, decode_value(m.value)))
                            positions[m.partition] = m.offset + 1
                    self.recorder.ok(POLL, process, member="session", records=records)
            finally:
                with contextlib.suppress(Exception):
                    consumer.close(autocommit=False)

    def drain_sessions(self, timeout: float) -> None:
        """Once healed: let each session consumer read on until it holds every partition up to the high
        watermark it has now (or ``timeout`` passed), record that as a `session-drain`, then stop them.
        A partition a session was never told of again would stay behind."""
        from confluent_kafka import Consumer, TopicPartition

        if not self.session_threads:
            return
        process = self.next_process()
        consumer = Consumer(self.consumer_config(process))
        targets: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        try:
            for p in range(self.plan.partitions):
                while p not in targets and time.monotonic() < deadline:
                    with contextlib.suppress(Exception):
                        targets[p] = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=3)[1]
        finally:
            consumer.close()
        for i, positions in enumerate(self.session_positions):
            mine = {p: targets.get(p, -1) for p in positions}
            drain = self.next_process()
            self.recorder.invoke(SESSION_DRAIN, drain, member=f"session-{i}", offsets=sorted(mine.items()))
            while time.monotonic() < deadline and any(positions[p] < high for p, high in mine.items()):
                time.sleep(0.1)
            reached = sorted((p, positions[p]) for p in mine)
            behind = [p for p, high in mine.items() if high < 0 or positions[p] < high]
            if behind:
                self.recorder.info(SESSION_DRAIN, drain, member=f"session-{i}", offsets=reached,
                                   error="behind on partitions " + ",".join(map(str, sorted(behind))))
            else:
                self.recorder.ok(SESSION_DRAIN, drain, member=f"session-{i}", offsets=reached)
        self.session_stop.set()
        for t in self.session_threads:
            t.join(timeout=self.op_timeout * 3 + 10)
            if t.is_alive():
                self.errors.append(f"{t.name} did not stop")

    def final_read(self, timeout: float) -> None:
        """Reads every partition from the beginning up to its high watermark."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        for p in range(self.plan.partitions):
            process = self.next_process()
            self.recorder.invoke(FINAL_READ, process, partition=p)
            consumer = Consumer(self.consumer_config(process))
            records: list[tuple[int, int, Any]] = []
            deadline = time.monotonic() + timeout
            high = None
            try:
                while high is None and time.monotonic() < deadline:
                    with contextlib.suppress(Exception):
                        _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=3)
                if high is None:
                    self.recorder.info(FINAL_READ, process, partition=p, error="no high watermark")
                    continue
                consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)])
                last = -1
                while last < high - 1 and time.monotonic() < deadline:
                    for m in consumer.consume(num_messages=500, timeout=1.0):
                        if m.error() is None:
                            records.append((m.partition(), m.offset(), decode_value(m.value())))
                            last = max(last, m.offset())
                error = None if last >= high - 1 else f"incomplete: read up to {last}, high watermark {high}"
                self.recorder.ok(FINAL_READ, process, partition=p, records=records, error=error)
            finally:
                consumer.close()


# --- the run -------------------------------------------------------------------------------------


@contextlib.contextmanager
def network_backend(kind: str, plan: Plan, cluster_pids: Callable[[], dict[int, str]],
                    seed: int) -> Iterator[Any]:
    if kind == "netns":
        with nm.NetnsNetwork([n.name for n in plan.nodes]) as net:
            for n in plan.nodes:
                if net.addresses[n.name] != n.host:
                    raise HarnessError(f"address plan mismatch for {n.name}")
            yield net
    elif kind == "proxy":
        with ThreadedProxy(plan.proxy_routes(), identify=SocketOwners(cluster_pids), seed=seed) as proxy:
            yield proxy
    else:
        yield None


def group_id(seed: int) -> str:
    return f"jepsen-group-{seed}"


def choose_network(requested: str, kinds: Sequence[str]) -> str:
    if requested == "auto":
        return "netns" if nm.netns_available() is None else "proxy"
    if requested == "netns":
        reason = nm.netns_available()
        if reason:
            raise HarnessError(f"--network netns: {reason}")
    if requested == "none" and any(k in ("partition", "link") for k in kinds):
        raise HarnessError("partition and link faults need a network backend (--network netns or proxy)")
    return requested


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tests.jepsen.runner",
                                 description="Run a Jepsen-style campaign against a fresh kraftpy cluster.")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds of workload (default 60)")
    ap.add_argument("--nemesis", default="all",
                    help="comma-separated fault kinds: kill, pause, partition, link, roll, all, none (default all)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the schedule and workload (default: random)")
    ap.add_argument("--out", type=Path, default=None, help="output directory (default jepsen-runs/seed-SEED)")
    ap.add_argument("--nodes", type=int, default=3, help="controllers (default 3)")
    ap.add_argument("--brokers", type=int, default=3, help="brokers (default 3)")
    ap.add_argument("--partitions", type=int, default=3, help="partitions of the test topic (default 3)")
    ap.add_argument("--topic", default="jepsen")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between faults (default 10)")
    ap.add_argument("--network", choices=NETWORKS, default="auto",
                    help="netns (root), proxy, none; auto picks netns when it works, else proxy")
    ap.add_argument("--workload", choices=WORKLOADS, default="queue",
                    help="queue (assign() consumers), group (members of one consumer group) or txn "
                         "(transactions); default queue")
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--pipelined-producers", type=int, default=1,
                    help="queue: how many of the producers send bursts with several requests in flight (default 1)")
    ap.add_argument("--burst", type=int, default=16, help="queue: records a pipelined producer hands over at once")
    ap.add_argument("--consumers", type=int, default=3,
                    help="consumers, group members, or read_committed consumers (txn) (default 3)")
    ap.add_argument("--session-consumers", type=int, default=1,
                    help="queue workload without --security: kafka-python consumers reading every partition "
                         "through fetch sessions, which read on once healed up to every high watermark (default 1)")
    ap.add_argument("--abort-every", type=int, default=5,
                    help="txn: about one transaction in N is aborted on purpose (default 5)")
    ap.add_argument("--transaction-timeout-ms", type=int, default=10000,
                    help="txn: the clients' transaction.timeout.ms (default 10000)")
    ap.add_argument("--txn-partitions", type=int, default=50,
                    help="transaction.state.log.num.partitions of the cluster (default 50, Kafka's)")
    ap.add_argument("--assignor", default="range", choices=ASSIGNORS,
                    help="group: the members' partition.assignment.strategy (default range)")
    ap.add_argument("--churn-interval", type=float, default=8.0,
                    help="group, txn: seconds between member (client) replacements (default 8)")
    ap.add_argument("--static-members", action="store_true",
                    help="group: members keep their slot's group.instance.id across replacements")
    ap.add_argument("--session-timeout-ms", type=int, default=6000, help="group: the members' session.timeout.ms")
    ap.add_argument("--offsets-partitions", type=int, default=50,
                    help="offsets.topic.num.partitions of the cluster (default 50, Kafka's)")
    ap.add_argument("--drain-timeout", type=float, default=120.0,
                    help="group: seconds the healed group has to commit up to every high watermark; queue: "
                         "seconds the session consumers have to read up to every high watermark")
    ap.add_argument("--op-timeout", type=float, default=10.0, help="seconds before a send is indeterminate")
    ap.add_argument("--base-port", type=int, default=19000, help="first port of the proxy/none layouts")
    ap.add_argument("--startup-timeout", type=float, default=60.0)
    ap.add_argument("--final-read-timeout", type=float, default=60.0)
    ap.add_argument("--kraftpy", default=None, help="the kraftpy command (default: this python -m kraftpy)")
    ap.add_argument("--security", choices=sec.MODES, default="none",
                    help="none (plaintext, no authorization) or sasl_ssl: TLS between the nodes, SASL_SSL "
                         "(SCRAM-SHA-512) for the clients, ACLs on; allows the cert-rotate, acl-flap and "
                         "credential-flap nemeses")
    ap.add_argument("--preallocate", action="store_true",
                    help="brokers reserve each segment's disk blocks (log.preallocate=true, "
                         f"log.segment.bytes={PREALLOCATED_SEGMENT_BYTES}) and roll every "
                         f"{PREALLOCATED_ROLL_MS / 1000:g} s (log.roll.ms)")
    ap.add_argument("--dry-run", action="store_true", help="write the configurations and schedule, then stop")
    return ap


class Log:
    def __init__(self, path: Path | None) -> None:
        self.t0 = time.monotonic()
        self.fh = open(path, "a") if path else None  # noqa: SIM115 - closed in close()

    def __call__(self, message: str) -> None:
        line = f"[{time.monotonic() - self.t0:8.2f}s] {message}"
        print(line, file=sys.stderr, flush=True)
        if self.fh:
            self.fh.write(line + "\n")
            self.fh.flush()

    def close(self) -> None:
        if self.fh:
            self.fh.close()


def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    kinds = nm.parse_kinds(args.nemesis, security=args.security != "none")
    out = (args.out or Path("jepsen-runs") / f"seed-{seed}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "runner.log")
    try:
        network = choose_network(args.network, kinds)
        if args.security == "none" and any(k in nm.SECURITY_KINDS for k in kinds):
            raise HarnessError(f"the {', '.join(k for k in kinds if k in nm.SECURITY_KINDS)} nemesis needs "
                               f"--security sasl_ssl")
        plan = plan_cluster(out, seed=seed, controllers=args.nodes, brokers=args.brokers, network=network,
                            base_port=args.base_port, partitions=args.partitions,
                            offsets_partitions=args.offsets_partitions, txn_partitions=args.txn_partitions,
                            security=args.security, dynamic="membership" in kinds,
                            preallocate=args.preallocate)
        write_configs(plan)
        faults = nm.schedule(seed, kinds, [c.name for c in plan.controllers], [b.name for b in plan.brokers],
                             args.time_limit, interval=args.interval, partitions=args.partitions,
                             group=args.workload in ("group", "txn"))
        (out / "schedule.json").write_text(json.dumps(
            {"seed": seed, "nemesis": list(kinds), "network": network, "security": args.security,
             "time_limit": args.time_limit, "preallocate": args.preallocate,
             "workload": args.workload, "faults": [f.to_json() for f in faults]}, indent=2) + "\n")
        log(f"seed {seed}, {args.workload} workload, nemesis {','.join(kinds) or 'none'}, network {network}, "
            f"security {args.security}, "
            f"{len(faults)} faults, output in {out}")
        if args.dry_run:
            return 0
        cmd = shlex.split(args.kraftpy) if args.kraftpy else default_kraftpy()
        check_kraftpy(cmd)
        pki = sec.Pki(plan) if sec.enabled(plan) else None
        format_storage(plan, cmd)
        return _campaign(args, plan, cmd, faults, kinds, seed, log, pki)
    except HarnessError as e:
        log(f"harness error: {e}")
        return 2
    except Exception:
        log(f"harness error:\n{traceback.format_exc()}")
        return 2
    finally:
        log.close()


def _campaign(args: argparse.Namespace, plan: Plan, cmd: list[str], faults: list[nm.Fault],
              kinds: Sequence[str], seed: int, log: Log, pki: sec.Pki | None = None) -> int:
    group = group_id(seed) if args.workload == "group" else None
    txn_id = f"jepsen-transform-{seed}" if args.workload == "txn" else None
    cluster = ProcessCluster(plan, cmd, topic=args.topic, group=group, txn_id=txn_id, log=log)
    client_log = log_clients_to(plan.out / CLIENT_LOG)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(CLIENT_LOGGER.removeHandler, client_log)
        cleanup.callback(client_log.close)
        return _campaign_in(args, plan, cluster, faults, kinds, seed, log, pki)


def _campaign_in(args: argparse.Namespace, plan: Plan, cluster: ProcessCluster, faults: list[nm.Fault],
                 kinds: Sequence[str], seed: int, log: Log, pki: sec.Pki | None = None) -> int:
    members: GroupWorkload | None = None
    security = sec.SecurityFaults(plan, pki, topic_prefix=args.topic) if pki else None
    txns: TxnWorkload | None = None
    workload: Workload | None = None
    with network_backend(plan.network, plan, cluster.pids, seed) as net:
        if isinstance(net, nm.NetnsNetwork):
            cluster.wrap = net.wrap
        try:
            cluster.start_all()
            wait_for_cluster(plan, cluster, args.startup_timeout, log)
            for topic in txn_topics(args.topic) if cluster.txn_id else (args.topic,):
                create_topic(plan, topic, args.startup_timeout, log)
            if security:
                applied = sec.grant_workload_acls(plan, args.topic)
                log(f"ACLs granted to User:{sec.WORKLOAD_USER}, applied on {', '.join(applied) or 'no broker'}")
                if len(applied) < len(plan.brokers):
                    raise HarnessError(f"the workload's ACLs reached only {applied} of the brokers")
            client_properties = sec.write_client_properties(
                plan, plan.out / "config" / "client-jepsen.properties", sec.WORKLOAD_USER) if security else None
            with open(plan.out / HISTORY, "w") as sink:
                recorder = Recorder(sink)
                workload = Workload(plan, recorder, topic=args.topic, seed=seed,
                                    producers=0 if cluster.txn_id else args.producers,
                                    consumers=0 if cluster.group or cluster.txn_id else args.consumers,
                                    op_timeout=args.op_timeout, log=log, pipelined=args.pipelined_producers,
                                    burst=args.burst,
                                    session_consumers=0 if cluster.group or cluster.txn_id or security
                                    else args.session_consumers)
                if cluster.group:
                    members = GroupWorkload(
                        bootstrap=plan.bootstrap, recorder=recorder, topic=args.topic, group=cluster.group,
                        partitions=plan.partitions, seed=seed, members=args.consumers, assignor=args.assignor,
                        churn_interval=args.churn_interval, static=args.static_members,
                        session_timeout_ms=args.session_timeout_ms, op_timeout=args.op_timeout, out=plan.out,
                        next_process=workload.next_process, log=log, client_properties=client_properties,
                        client_config=lambda **kw: client_config(plan, user=sec.WORKLOAD_USER, **kw))
                if cluster.txn_id:
                    txns = TxnWorkload(
                        bootstrap=plan.bootstrap, recorder=recorder, topic=args.topic, partitions=plan.partitions,
                        seed=seed, producers=args.producers, read_committed=args.consumers,
                        churn_interval=args.churn_interval, abort_every=args.abort_every,
                        transaction_timeout_ms=args.transaction_timeout_ms, op_timeout=args.op_timeout,
                        out=plan.out, next_process=workload.next_process,
                        client_config=lambda **kw: client_config(plan, user=sec.WORKLOAD_USER, **kw), log=log,
                        client_properties=client_properties)
                nemesis = nm.Nemesis(cluster, net, security=security)
                runner = nm.ScheduleRunner(faults, nemesis, recorder.nemesis, log=log)
                workload.start()
                if members:
                    members.start()
                if txns:
                    txns.start()
                runner.start()
                time.sleep(args.time_limit)  # the workload's own duration
                runner.abort()
                runner.join()
                nemesis.heal_all()
                if members:
                    members.stop_churn()
                if txns:
                    txns.stop_churn()
                workload.join()
                log(f"workload done: {len(recorder.ops)} ops; healed; final read")
                for name in [n.name for n in cluster.nodes()]:
                    if cluster.node(name).process is None or cluster.node(name).process.poll() is not None:
                        cluster.restart(name)
                wait_for_cluster(plan, cluster, args.startup_timeout, log)
                workload.drain_sessions(args.drain_timeout)
                if members:
                    members.drain(args.drain_timeout)
                    members.stop()
                if txns:
                    txns.stop()
                    txns.final_read(args.final_read_timeout)
                else:
                    workload.final_read(args.final_read_timeout)
                history = recorder.ops
                final_voters = _quietly(cluster.voters) if plan.dynamic else None
        finally:
            if workload is not None:
                workload.abandon()  # a campaign that failed early leaves no client thread reading on
            if members:
                members.kill_all()
            if txns:
                txns.kill_all()
            cluster.stop_all()
    if txns:
        results = check_txn(history, seed=seed, nemesis=list(kinds))
    else:
        results = check(history, seed=seed, nemesis=list(kinds))
    results["details"]["network"] = plan.network
    if not txns:
        # whether the broker appended a resend of one producer session, or the client wrote in two sessions
        attach_provenance(results, workload.topic, {b.name: b.data_dir for b in plan.brokers})
        # The healed cluster's replicas of the workload's topic hold one history (and, caught up, all of it).
        agreement = replica_agreement(workload.topic, {b.name: b.data_dir for b in plan.brokers})
        results["details"]["replicas"] = agreement
        results["replicas_diverged"] = len(agreement["diverged"])
        if agreement["diverged"]:
            results["valid"] = False
    results["details"]["harness_errors"] = runner.errors + workload.errors + (members.errors if members else []) \
        + (txns.errors if txns else [])
    if nemesis.rolls:
        results["details"]["rolls"] = nemesis.rolls
    if plan.preallocate:
        results["details"]["preallocate"] = preallocated_segments(workload.topic, plan)
    if plan.dynamic:
        results["details"]["membership"] = {**membership_faults(history), "voters_at_end": final_voters}
    if security:
        results["details"]["security"] = {**security_faults(history), "mode": plan.security,
                                          "workload_user": sec.WORKLOAD_USER}
    if members:
        facts = (cluster.group, args.assignor, args.static_members, len(members.all),
                 members.replacements["term"], members.replacements["kill"])
        results["details"].setdefault("group", {}).update(zip(RUN_FACTS, facts, strict=True))
    if txns:
        results["details"]["txn_run"] = {
            "clients_started": len(txns.all), "clients_stopped": txns.replacements["term"],
            "clients_killed": txns.replacements["kill"], "transform_group": txns.group,
            "topics": ",".join(txns.topics)}
    write_report(history, results, plan.out)
    sys.stdout.write((plan.out / "summary.txt").read_text())
    return 0 if results["valid"] is True else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        nm.parse_kinds(args.nemesis)
    except ValueError as e:
        build_parser().error(str(e))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
