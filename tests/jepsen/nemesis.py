"""Nemeses: a seeded fault schedule and the faults themselves.

The schedule is a pure function of the seed, the fault kinds, the node names and the timing: the
same `--seed` gives the same list of faults (kind, variant, targets, start and stop times). Targets
that only exist at run time (the leader of a partition, the active controller) are resolved when the
fault starts; the schedule names the partition and a fallback node for them.

Fault kinds and their variants:

- `kill`: SIGKILL `one` node, the `leader` of a partition, the active `controller`, or a `majority`
  (of the controllers or of the brokers); healed by restarting the killed nodes. The group workload
  adds `coordinator`: the broker coordinating the workload's consumer group (the leader of its
  `__consumer_offsets` partition).
- `pause`: SIGSTOP the same choices of targets; healed by SIGCONT.
- `partition`: cut node-to-node links: `one` node isolated, `majority` (a majority and a minority),
  `bridge` (two halves that only one node sees both of), `ring` (every node sees a majority, no two
  the same one). Clients are never partitioned.
- `link`: `slow` (a delay with jitter) or `lossy` (a share of the traffic dropped) on all the links
  of one node.
- `roll`: a rolling restart (`all`): every broker, then every controller, stopped with SIGTERM and
  started again one at a time, the next one only once this one is back (`Cluster.is_back`: a broker
  in the metadata with every partition fully replicated again, a controller caught up with the
  quorum's leader). The fault's start runs the whole roll and records how long each node took; its
  stop has nothing left to heal. Nothing acknowledged may be lost across it.
- `membership` (a dynamic controller quorum, KIP-853: the runner formats the controllers with
  `--initial-controllers` when it is asked for): `remove` a scheduled controller, or the `leader`
  (the active controller removes itself and hands over), from the voters with `kraftpy quorum
  remove-controller`, and add it back at the heal once it caught up as an observer; `replace` a
  controller's disk: kill it, wipe its directory, format it again with `--no-initial-controllers` (a
  new directory id), start it, and remove the old replica from the voters; the heal adds the new one.
  No change is made that would leave the voters unable to form a majority of running replicas (a
  removal needs another voter); a refused change is recorded as the fault's error.
- `cert-rotate`, `acl-flap`, `credential-flap` (a cluster with `--security sasl_ssl` only; `all`
  includes them there, `security` names the three): a node's key store rewritten with a fresh
  certificate, the workload user's WRITE ACL removed, its SCRAM password changed; each undone (or, for
  a certificate, checked to have been reloaded) at the heal. `tests.jepsen.security` does them.

A fault starts every ~`interval` seconds and is healed before the next one starts; everything is
healed at the end.

Network faults have two backends with the same three operations (`partition`, `set_links`,
`heal`):

1. `NetnsNetwork` (root on Linux): each node in its own network namespace with a veth pair to a
   bridge in the root namespace, node addresses 10.77.0.10+i/24 and 10.77.0.1 for the root
   namespace (the harness's clients; another network on the same machine takes its own `subnet`); partitions are iptables DROP rules inside the nodes'
   namespaces; slow and lossy links are `tc netem` (delay, jitter, loss) on a htb class per
   destination. Where the kernel has no netem, a slow link is a rate limit (htb + tbf) and a lossy
   link is an iptables `statistic` DROP rule. Processes are started with `ip netns exec NAME cmd`.
2. The TCP proxy layer of `kraftpy.testing.proxy` (anywhere): every node listener is reached through a
   proxy port; the proxy refuses and closes connections across a partition, delays chunks, and
   closes connections at random to drop traffic.

Found in the sandbox this harness was first built in (Linux 6.x, Debian 12, root): `ip netns add`,
veth pairs, bridges, iptables (nf_tables backend, after `apt-get install iptables iproute2`), the
`statistic` match, htb, tbf and u32 filters all work; the kernel is built without `sch_netem`
(`tc qdisc add ... netem` answers "Specified qdisc kind is unknown"), so there slow links are rate
limits and lossy links are iptables rules, and the netem delay test is skipped. There is no modprobe
and no /lib/modules: what the kernel lacks cannot be loaded.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import attrs

from kraftpy.testing import faults
from kraftpy.testing.faults import process_state as _proc_state  # noqa: F401 (the tests read states with it)

KINDS = ("kill", "pause", "partition", "link", "roll", "membership")
#: faults of a cluster with --security sasl_ssl (`tests.jepsen.security`); `all` includes them there
SECURITY_KINDS = ("cert-rotate", "acl-flap", "credential-flap")
VARIANTS: dict[str, tuple[str, ...]] = {
    "kill": ("one", "leader", "controller", "majority"),
    "pause": ("one", "leader", "controller", "majority"),
    "partition": ("one", "majority", "bridge", "ring"),
    "link": ("slow", "lossy"),
    "roll": ("all",),
    "membership": ("remove", "leader", "replace"),
    "cert-rotate": ("one",),
    "acl-flap": ("write",),
    "credential-flap": ("password",),
}
#: what a campaign with a consumer group adds: its coordinator as a target
GROUP_VARIANTS: dict[str, tuple[str, ...]] = {"kill": ("coordinator",), "pause": ("coordinator",)}

Pair = tuple[str, str]


def parse_kinds(spec: str | Iterable[str], *, security: bool = False) -> tuple[str, ...]:
    """`kill,pause` -> ("kill", "pause"); `all` -> every kind (with `security`, the security kinds
    too); `security` -> the security kinds; `none` or empty -> no faults."""
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    kinds: list[str] = []
    for item in items:
        if item == "all":
            kinds.extend(KINDS + (SECURITY_KINDS if security else ()))
        elif item == "security":
            kinds.extend(SECURITY_KINDS)
        elif item == "none":
            continue
        elif item in KINDS or item in SECURITY_KINDS:
            kinds.append(item)
        else:
            raise ValueError(f"unknown nemesis {item!r}: choose from {', '.join(KINDS + SECURITY_KINDS)}, "
                             f"all, security, none")
    return tuple(dict.fromkeys(kinds))


@attrs.frozen
class Fault:
    """One scheduled fault. Times are seconds since the start of the test."""

    id: int
    kind: str
    variant: str
    start: float
    stop: float
    nodes: tuple[str, ...] = ()  # targets; for leader/controller variants, the fallback target
    partition: int | None = None  # leader variants: the topic partition whose leader is the target
    cut: tuple[Pair, ...] = ()  # partition: node pairs that cannot talk (both directions)
    links: tuple[Pair, ...] = ()  # link faults: affected node pairs (both directions)
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self, recurse=False)
        out["nodes"] = list(self.nodes)
        out["cut"] = [list(p) for p in self.cut]
        out["links"] = [list(p) for p in self.links]
        for key in ("delay_ms", "jitter_ms", "loss"):
            if not out[key]:
                del out[key]
        return {k: v for k, v in out.items() if v is not None and v != []}

    @property
    def network(self) -> bool:
        return self.kind in ("partition", "link")


def _pairs_between(a: Iterable[str], b: Iterable[str]) -> set[Pair]:
    return {tuple(sorted((x, y))) for x in a for y in b if x != y}  # type: ignore[misc]


def _all_pairs(nodes: Sequence[str]) -> set[Pair]:
    return _pairs_between(nodes, nodes)


def partition_cut(variant: str, nodes: Sequence[str], rnd: random.Random) -> tuple[Pair, ...]:
    """The node pairs a partition of this variant cuts, chosen with `rnd`."""
    order = list(nodes)
    rnd.shuffle(order)
    n = len(order)
    if n < 2:
        return ()
    if variant == "one":
        cut = _pairs_between(order[:1], order[1:])
    elif variant == "majority":
        m = n // 2 + 1
        cut = _pairs_between(order[:m], order[m:])
    elif variant == "bridge":
        if n < 3:
            cut = _pairs_between(order[:1], order[1:])
        else:
            bridge, rest = order[0], order[1:]
            half = len(rest) // 2
            cut = _pairs_between(rest[:half], rest[half:])
            assert all(bridge not in p for p in cut)
    elif variant == "ring":
        # nodes on a ring see their neighbours up to distance d, where 1 + 2d >= a majority
        m = n // 2 + 1
        d = -(-(m - 1) // 2)
        cut = set()
        for i in range(n):
            for j in range(i + 1, n):
                dist = min(j - i, n - (j - i))
                if dist > d:
                    cut.add(tuple(sorted((order[i], order[j]))))
    else:
        raise ValueError(f"unknown partition variant {variant!r}")
    return tuple(sorted(cut))  # type: ignore[arg-type]


def schedule(seed: int, kinds: Sequence[str], controllers: Sequence[str], brokers: Sequence[str],
             time_limit: float, *, interval: float = 10.0, partitions: int = 3,
             first_after: float | None = None, heal_before_end: float = 0.0,
             group: bool = False) -> list[Fault]:
    """A deterministic list of faults: one every ~`interval` seconds (±20 %), each lasting 30–60 % of
    the interval and healed before the next starts, all healed by `time_limit - heal_before_end`.
    `group` adds the GROUP_VARIANTS (a campaign without it is scheduled as before)."""
    kinds = tuple(kinds)
    for k in kinds:
        if k not in KINDS and k not in SECURITY_KINDS:
            raise ValueError(f"unknown nemesis kind {k!r}")
    if not kinds:
        return []
    rnd = random.Random(f"kraftpy-jepsen-{seed}")
    nodes = list(controllers) + list(brokers)
    end = time_limit - heal_before_end
    t = interval * 0.5 if first_after is None else first_after
    faults: list[Fault] = []
    while True:
        duration = interval * rnd.uniform(0.3, 0.6)
        if t + duration > end:
            break
        kind = rnd.choice(kinds)
        variant = rnd.choice(VARIANTS[kind] + (GROUP_VARIANTS.get(kind, ()) if group else ()))
        fault = _make_fault(len(faults), kind, variant, t, t + duration, rnd, controllers, brokers,
                            nodes, partitions)
        faults.append(fault)
        t = t + duration + max(interval * 0.1, interval * rnd.uniform(0.8, 1.2) - duration)
    return faults


def _make_fault(fid: int, kind: str, variant: str, start: float, stop: float, rnd: random.Random,
                controllers: Sequence[str], brokers: Sequence[str], nodes: Sequence[str],
                partitions: int) -> Fault:
    common: dict[str, Any] = dict(id=fid, kind=kind, variant=variant, start=round(start, 3),
                                  stop=round(stop, 3))
    if kind in ("kill", "pause"):
        if variant == "one":
            return Fault(nodes=(rnd.choice(list(nodes)),), **common)
        if variant == "leader":
            return Fault(nodes=(rnd.choice(list(brokers or nodes)),), partition=rnd.randrange(partitions),
                         **common)
        if variant == "controller":
            return Fault(nodes=(rnd.choice(list(controllers or nodes)),), **common)
        if variant == "coordinator":
            return Fault(nodes=(rnd.choice(list(brokers or nodes)),), **common)
        group = list(rnd.choice([g for g in (controllers, brokers) if g] or [nodes]))
        return Fault(nodes=tuple(sorted(rnd.sample(group, len(group) // 2 + 1))), **common)
    if kind == "partition":
        return Fault(cut=partition_cut(variant, nodes, rnd), **common)
    if kind == "roll":
        return Fault(nodes=tuple(brokers) + tuple(controllers), **common)
    if kind == "membership":
        return Fault(nodes=(rnd.choice(list(controllers or nodes)),), **common)
    if kind == "cert-rotate":
        return Fault(nodes=(rnd.choice(list(nodes)),), **common)
    if kind in ("acl-flap", "credential-flap"):
        return Fault(**common)
    victim = rnd.choice(list(nodes))
    links = tuple(sorted(_pairs_between([victim], nodes)))
    if variant == "slow":
        return Fault(nodes=(victim,), links=links, delay_ms=float(rnd.choice([50, 100, 200, 500])),
                     jitter_ms=float(rnd.choice([0, 10, 50])), **common)
    return Fault(nodes=(victim,), links=links, loss=rnd.choice([0.05, 0.1, 0.2, 0.4]), **common)


# --- the cluster and network interfaces -------------------------------------------------------


class Node(Protocol):
    name: str
    role: str  # "controller" or "broker"
    address: str
    process: subprocess.Popen | None


class Cluster(Protocol):
    """What the nemesis needs from the runner."""

    def nodes(self) -> Sequence[Node]: ...

    def active_controller(self) -> str | None: ...

    def partition_leader(self, partition: int) -> str | None: ...

    def group_coordinator(self) -> str | None: ...

    def restart(self, name: str) -> None: ...

    def is_back(self, name: str) -> bool:
        """After a restart: a broker serves again with every partition fully replicated, a controller
        is caught up with the quorum's leader (the roll waits for it before the next node)."""
        ...


class Membership(Protocol):
    """What the `membership` nemesis needs of a cluster with a dynamic quorum (the runner's)."""

    def voters(self) -> dict[str, str]:
        """The voters as the quorum's leader describes them: node name -> directory id."""
        ...

    def remove_voter(self, name: str, directory_id: str | None = None) -> None:
        """`kraftpy quorum remove-controller` of the controller's replica (its current disk's, or
        `directory_id`'s); raises with the leader's refusal."""
        ...

    def add_voter(self, name: str) -> None:
        """`kraftpy quorum add-controller` of the running controller, once it caught up as an observer."""
        ...

    def replace_disk(self, name: str) -> str:
        """Kill the controller, wipe its directory, format it with --no-initial-controllers, start it;
        the directory id it had."""
        ...


class Network(Protocol):
    def partition(self, cut: Iterable[Pair]) -> None: ...

    def set_links(self, pairs: Iterable[Pair], *, delay_ms: float = 0.0, jitter_ms: float = 0.0,
                  loss: float = 0.0) -> None: ...

    def heal(self) -> None: ...


class SecurityFaults(Protocol):
    """The security faults of a cluster with --security (`tests.jepsen.security.SecurityFaults`):
    `start` and `stop` return what the fault's record adds (its targets, and what happened)."""

    def start(self, fault: Fault) -> dict[str, Any]: ...

    def stop(self, fault: Fault) -> dict[str, Any]: ...


class Nemesis:
    """Applies faults to a cluster (processes) and a network backend. `start` returns the fault as
    resolved (the actual targets), which the caller records."""

    def __init__(self, cluster: Cluster, network: Network | None = None, *,
                 security: SecurityFaults | None = None, stop_timeout: float = 10.0,
                 roll_node_timeout: float = 90.0, poll_interval: float = 0.2) -> None:
        self.cluster = cluster
        self.network = network
        self.security = security
        self.stop_timeout = stop_timeout
        self.roll_node_timeout = roll_node_timeout
        self.poll_interval = poll_interval
        self._active: dict[int, tuple[Fault, tuple[str, ...]]] = {}
        #: Every roll done: {"fault", "total_s", "nodes": [{"node", "stopped_s", "back_s"}]}.
        self.rolls: list[dict[str, Any]] = []
        #: Every voter removed by a membership fault: {"fault", "variant", "node"}.
        self.membership_changes: list[dict[str, Any]] = []

    def _node(self, name: str) -> Node:
        for node in self.cluster.nodes():
            if node.name == name:
                return node
        raise KeyError(f"no node named {name!r}")

    def resolve(self, fault: Fault) -> tuple[str, ...]:
        if fault.variant == "leader" and fault.partition is not None:
            leader = _quietly(lambda: self.cluster.partition_leader(fault.partition))
            return (leader,) if leader else fault.nodes
        if fault.variant == "controller":
            active = _quietly(self.cluster.active_controller)
            return (active,) if active else fault.nodes
        if fault.variant == "coordinator":
            coordinator = _quietly(self.cluster.group_coordinator)
            return (coordinator,) if coordinator else fault.nodes
        return fault.nodes

    def start(self, fault: Fault) -> dict[str, Any]:
        targets: tuple[str, ...] = ()
        if fault.kind == "kill":
            targets = self.resolve(fault)
            for name in targets:
                self._kill(self._node(name))
        elif fault.kind == "pause":
            targets = self.resolve(fault)
            for name in targets:
                self._pause(self._node(name))
        elif fault.kind == "partition":
            self._require_network().partition(fault.cut)
        elif fault.kind == "link":
            self._require_network().set_links(fault.links, delay_ms=fault.delay_ms,
                                              jitter_ms=fault.jitter_ms, loss=fault.loss)
            targets = fault.nodes
        elif fault.kind == "roll":
            targets = fault.nodes
            self._active[fault.id] = (fault, targets)
            return {**fault.to_json(), "targets": list(targets), "roll": self._roll(fault)}
        elif fault.kind == "membership":
            return self._change_membership(fault)
        elif fault.kind in SECURITY_KINDS:
            done = self._require_security().start(fault)
            self._active[fault.id] = (fault, tuple(done.get("targets", ())))
            return {**fault.to_json(), **done}
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")
        self._active[fault.id] = (fault, targets)
        return {**fault.to_json(), "targets": list(targets)}

    def _roll(self, fault: Fault) -> dict[str, Any]:
        """SIGTERM, restart and wait until back, each node of ``fault.nodes`` in turn (brokers first)."""
        began = time.monotonic()
        record: dict[str, Any] = {"fault": fault.id, "nodes": [], "total_s": 0.0}
        self.rolls.append(record)
        for name in fault.nodes:
            node_began = time.monotonic()
            self._terminate(self._node(name))
            stopped = time.monotonic() - node_began
            self.cluster.restart(name)
            deadline = time.monotonic() + self.roll_node_timeout
            while not _quietly_true(lambda n=name: self.cluster.is_back(n)):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{name} was not back within {self.roll_node_timeout:.0f}s of its restart")
                time.sleep(self.poll_interval)
            record["nodes"].append({"node": name, "stopped_s": round(stopped, 3),
                                    "back_s": round(time.monotonic() - node_began, 3)})
        record["total_s"] = round(time.monotonic() - began, 3)
        return record

    def stop(self, fault: Fault) -> dict[str, Any]:
        _, targets = self._active.pop(fault.id, (fault, ()))
        if fault.kind == "kill":
            for name in targets:
                self.cluster.restart(name)
        elif fault.kind == "pause":
            for name in targets:
                self._resume(self._node(name))
        elif fault.network:
            self._require_network().heal()
        elif fault.kind == "roll":
            done = [r for r in self.rolls if r["fault"] == fault.id]
            return {**fault.to_json(), "targets": list(targets), "roll": done[-1] if done else None}
        elif fault.kind == "membership":
            membership = self._require_membership()
            for name in targets:
                if name not in membership.voters():
                    membership.add_voter(name)
            return {**fault.to_json(), "targets": list(targets), "added": list(targets),
                    "voters": sorted(membership.voters())}
        elif fault.kind in SECURITY_KINDS:
            return {**fault.to_json(), "targets": list(targets), **self._require_security().stop(fault)}
        return {**fault.to_json(), "targets": list(targets)}

    def heal_all(self) -> None:
        """Stops every active fault, resumes every stopped process and heals the network."""
        for fault, _ in list(self._active.values()):
            with contextlib.suppress(Exception):
                self.stop(fault)
        for node in self.cluster.nodes():
            proc = node.process
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
        if self.network is not None:
            self.network.heal()

    def _change_membership(self, fault: Fault) -> dict[str, Any]:
        """Remove a voter (the scheduled controller, or the leader), or replace a controller's disk
        and remove its old replica; the heal adds the controller back (`stop`)."""
        membership = self._require_membership()
        voters = membership.voters()
        (name,) = fault.nodes
        if fault.variant == "leader":
            name = _quietly(self.cluster.active_controller) or name
        record: dict[str, Any] = {**fault.to_json(), "targets": [name], "voters_before": sorted(voters)}
        if len(voters) < 2 or name not in voters:
            # A removal would leave no voter, or the target is not one (a change still pending): skip it.
            self._active[fault.id] = (fault, ())
            return {**record, "targets": [], "skipped": f"{name} is not one of several voters {sorted(voters)}"}
        self._active[fault.id] = (fault, (name,))
        if fault.variant == "replace":
            old = membership.replace_disk(name)
            membership.remove_voter(name, old)
            record["replaced"] = old
        else:
            membership.remove_voter(name)
        self.membership_changes.append({"fault": fault.id, "variant": fault.variant, "node": name})
        return {**record, "removed": name, "voters": sorted(membership.voters())}

    def _require_membership(self) -> Membership:
        if not all(hasattr(self.cluster, op) for op in ("voters", "remove_voter", "add_voter", "replace_disk")):
            raise RuntimeError("a membership fault needs a cluster with a dynamic quorum")
        return self.cluster  # type: ignore[return-value]

    def _require_security(self) -> SecurityFaults:
        if self.security is None:
            raise RuntimeError("a security fault needs a cluster with --security sasl_ssl")
        return self.security

    def _require_network(self) -> Network:
        if self.network is None:
            raise RuntimeError("a network fault needs a network backend (netns or proxy)")
        return self.network

    def _terminate(self, node: Node) -> None:
        """SIGTERM (a graceful stop: a broker's controlled shutdown, a leader's resignation) and wait
        for the exit; SIGKILL after `roll_node_timeout`."""
        faults.terminate(node.process, timeout=self.roll_node_timeout, kill_timeout=self.stop_timeout)

    def _kill(self, node: Node) -> None:
        faults.kill(node.process, timeout=self.stop_timeout)

    def _pause(self, node: Node) -> None:
        faults.pause(node.process, timeout=self.stop_timeout)

    def _resume(self, node: Node) -> None:
        faults.resume(node.process, timeout=self.stop_timeout)


def _quietly_true(fn: Callable[[], bool]) -> bool:
    try:
        return bool(fn())
    except Exception:
        return False


def _quietly(fn: Callable[[], str | None]) -> str | None:
    try:
        return fn()
    except Exception:
        return None


class ScheduleRunner:
    """Runs a schedule against a nemesis in a thread: each fault starts and stops at its time,
    the start and stop are recorded (`record(phase, fault_json)`), and everything is healed when
    the schedule ends or `abort()` is called."""

    def __init__(self, faults: Sequence[Fault], nemesis: Nemesis,
                 record: Callable[[str, dict[str, Any]], Any], *,
                 clock: Callable[[], float] = time.monotonic, log: Callable[[str], Any] = lambda s: None):
        self.faults = list(faults)
        self.nemesis = nemesis
        self.record = record
        self.clock = clock
        self.log = log
        self.errors: list[str] = []
        self._abort = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = self.clock()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._thread.start()

    def abort(self) -> None:
        self._abort.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _until(self, at: float) -> bool:
        """Waits until `at` seconds after the start; False when aborted."""
        return not self._abort.wait(max(0.0, self._t0 + at - self.clock()))

    def _run(self) -> None:
        try:
            for fault in self.faults:
                if not self._until(fault.start):
                    break
                if fault.kind == "roll":  # recorded as it begins: the window spans the whole roll
                    self.record("start", {**fault.to_json(), "targets": list(fault.nodes)})
                try:
                    resolved = self.nemesis.start(fault)
                except Exception as e:
                    self.errors.append(f"start {fault.kind} {fault.variant}: {e!r}")
                    self.log(self.errors[-1])
                    resolved = {**fault.to_json(), "error": repr(e)}
                if fault.kind != "roll" or "error" in resolved:
                    self.record("start", resolved)
                what = resolved.get("targets") or [f"{a}|{b}" for a, b in resolved.get("cut", ())]
                self.log(f"fault {fault.id} {fault.kind} {fault.variant} started: {what}")
                self._until(fault.stop)
                try:
                    resolved = self.nemesis.stop(fault)
                except Exception as e:
                    self.errors.append(f"stop {fault.kind} {fault.variant}: {e!r}")
                    self.log(self.errors[-1])
                    resolved = {**fault.to_json(), "error": repr(e)}
                self.record("stop", resolved)
                self.log(f"fault {fault.id} healed")
        finally:
            try:
                self.nemesis.heal_all()
            except Exception as e:
                self.errors.append(f"heal: {e!r}")


# --- backend 1: Linux network namespaces ------------------------------------------------------

SUBNET = ipaddress.ip_network("10.77.0.0/24")  # the campaigns' network; the root namespace is its .1
CHAIN = "KPJ_FAULTS"
SLOW_RATE = "256kbit"  # the rate limit standing in for a delay where the kernel has no netem


class CommandError(RuntimeError):
    pass


def _run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise CommandError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def netns_available() -> str | None:
    """None when network namespaces can be used here, else the reason why not."""
    if os.geteuid() != 0:
        return "not running as root"
    for tool in ("ip", "iptables", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y iproute2 iptables)"
    name = f"kpjprobe{os.getpid()}"
    add = _run(["ip", "netns", "add", name], check=False)
    if add.returncode != 0:
        return f"ip netns add failed: {add.stderr.strip()}"
    try:
        ipt = _run(["ip", "netns", "exec", name, "iptables", "-S"], check=False)
        if ipt.returncode != 0:
            return f"iptables in a namespace failed: {ipt.stderr.strip()}"
    finally:
        _run(["ip", "netns", "del", name], check=False)
    return None


class NetnsNetwork:
    """Nodes in their own network namespaces behind one bridge (see the module docstring). A context
    manager: setup on enter (after removing leftovers of the same prefix), teardown on exit; both
    idempotent. Processes started in a namespace must be stopped before teardown. Two networks up at
    once need different prefixes and different subnets."""

    def __init__(self, nodes: Sequence[str], *, prefix: str = "kpj", first_host: int = 10,
                 subnet: str = str(SUBNET)) -> None:
        if len(prefix) > 6 or not prefix.isalnum():
            raise ValueError("prefix must be at most 6 letters or digits (interface names are short)")
        self.subnet = ipaddress.ip_network(subnet)
        if first_host < 2 or first_host + len(nodes) > self.subnet.num_addresses - 1:
            raise ValueError(f"{len(nodes)} nodes from host {first_host} do not fit {self.subnet}")
        self.nodes = list(nodes)
        self.prefix = prefix
        self.bridge = f"{prefix}br"
        self.root_address = str(self.subnet.network_address + 1)
        self.addresses = {n: str(self.subnet.network_address + first_host + i) for i, n in enumerate(self.nodes)}
        self.netem = False
        self._forward_rule = ["FORWARD", "-s", str(self.subnet), "-d", str(self.subnet), "-j", "ACCEPT"]

    def namespace(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def _veth(self, node: str) -> str:
        return f"{self.prefix}v{self.nodes.index(node)}"

    def wrap(self, node: str, cmd: Sequence[str]) -> list[str]:
        """The command line that runs `cmd` inside the node's namespace."""
        return ["ip", "netns", "exec", self.namespace(node), *cmd]

    def _in(self, node: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run(self.wrap(node, cmd), check=check)

    # lifecycle

    def __enter__(self) -> NetnsNetwork:
        self.setup()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.teardown()

    def setup(self) -> None:
        reason = netns_available()
        if reason:
            raise RuntimeError(f"network namespaces are not usable: {reason}")
        self.teardown()
        for line in _run(["ip", "-o", "-4", "addr", "show"]).stdout.splitlines():
            for addr in [self.root_address, *self.addresses.values()]:
                if f" {addr}/" in line:
                    raise RuntimeError(f"{addr} is already in use here: {line.strip()}")
        try:
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", f"{self.root_address}/{self.subnet.prefixlen}", "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
            for node in self.nodes:
                ns, veth = self.namespace(node), self._veth(node)
                _run(["ip", "netns", "add", ns])
                _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
                _run(["ip", "link", "set", veth, "master", self.bridge, "up"])
                self._in(node, "ip", "addr", "add", f"{self.addresses[node]}/{self.subnet.prefixlen}", "dev", "eth0")
                self._in(node, "ip", "link", "set", "eth0", "up")
                self._in(node, "ip", "link", "set", "lo", "up")
                self._in(node, "iptables", "-N", CHAIN)
                self._in(node, "iptables", "-A", "INPUT", "-j", CHAIN)
                self._in(node, "iptables", "-A", "OUTPUT", "-j", CHAIN)
            # bridged traffic passes the root namespace's FORWARD chain when br_netfilter is loaded
            if _run(["iptables", "-C", *self._forward_rule], check=False).returncode != 0:
                _run(["iptables", "-I", *self._forward_rule])
            probe = self._in(self.nodes[0], "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
                             check=False) if self.nodes else None
            self.netem = probe is not None and probe.returncode == 0
            if self.netem:
                self._in(self.nodes[0], "tc", "qdisc", "del", "dev", "lo", "root", check=False)
        except Exception:
            self.teardown()
            raise

    def teardown(self) -> None:
        for i, node in enumerate(self.nodes):
            _run(["ip", "netns", "del", self.namespace(node)], check=False)
            _run(["ip", "link", "del", f"{self.prefix}v{i}"], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        if shutil.which("iptables"):
            while _run(["iptables", "-C", *self._forward_rule], check=False).returncode == 0:
                _run(["iptables", "-D", *self._forward_rule], check=False)

    # faults

    def partition(self, cut: Iterable[Pair]) -> None:
        for a, b in cut:
            for x, y in ((a, b), (b, a)):
                self._in(x, "iptables", "-A", CHAIN, "-s", self.addresses[y], "-j", "DROP")
                self._in(x, "iptables", "-A", CHAIN, "-d", self.addresses[y], "-j", "DROP")

    def set_links(self, pairs: Iterable[Pair], *, delay_ms: float = 0.0, jitter_ms: float = 0.0,
                  loss: float = 0.0) -> None:
        targets: dict[str, set[str]] = {}
        for a, b in pairs:
            targets.setdefault(a, set()).add(b)
            targets.setdefault(b, set()).add(a)
        for node, peers in sorted(targets.items()):
            shaped = self.netem or delay_ms > 0
            if shaped:
                self._in(node, "tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1")
                self._in(node, "tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1",
                         "htb", "rate", "10gbit")
                if self.netem:
                    rate = "10gbit"
                    leaf = ["netem", "delay", f"{delay_ms}ms"]
                    if jitter_ms:
                        leaf.append(f"{jitter_ms}ms")
                    if loss:
                        leaf += ["loss", f"{loss * 100:.3f}%"]
                else:
                    rate = SLOW_RATE
                    leaf = ["tbf", "rate", SLOW_RATE, "burst", "1600", "latency", "30s"]
                self._in(node, "tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:2",
                         "htb", "rate", rate)
                self._in(node, "tc", "qdisc", "add", "dev", "eth0", "parent", "1:2", "handle", "20:", *leaf)
                for peer in sorted(peers):
                    self._in(node, "tc", "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip",
                             "prio", "1", "u32", "match", "ip", "dst", f"{self.addresses[peer]}/32",
                             "flowid", "1:2")
            if loss and not self.netem:
                for peer in sorted(peers):
                    self._in(node, "iptables", "-A", CHAIN, "-d", self.addresses[peer], "-m", "statistic",
                             "--mode", "random", "--probability", f"{loss:.4f}", "-j", "DROP")

    def heal(self) -> None:
        for node in self.nodes:
            self._in(node, "iptables", "-F", CHAIN, check=False)
            self._in(node, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
