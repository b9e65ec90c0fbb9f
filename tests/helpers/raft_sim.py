"""A deterministic in-process KRaft cluster: real `RaftCore`s, real logs, a simulated network and
a simulated clock, every choice drawn from one seeded `random.Random`.

`SimCluster` runs voters and observers, delivers messages with delays (hence reordering), drops,
duplicates, partitions (symmetric or one-way), crashes nodes (losing the unflushed log tail, a
half-downloaded snapshot and any effect not yet applied), restarts them from what was persisted,
and jumps node clocks. Its logs are `MemoryRaftLog`s, or with ``file_logs`` real `FileRaftLog`s in a
temporary directory (on /dev/shm when there is one, so that fsync costs nothing): a crash then
closes the files without a flush, and sometimes tears the flush it interrupts (a prefix of the
unflushed bytes reaches the segment, perhaps followed by garbage), so that reopening must cut the
torn tail. Every core call on a file log runs with file writes forbidden (`forbid_file_writes`):
the core may only change memory, the FlushLog effect does the rest.

Leaders batch proposals for ``append_linger_ms``, as the driver's configuration asks, and stamp
batches with a deterministic wall clock, so the bytes replicated are the same on every run.

`Checker` verifies the safety invariants after every event and raises `InvariantViolation` on the
first breach. `run_seed` is the whole scenario for one seed: a fault phase, then a heal phase that
must end with a leader committing new records on every node.

Byzantine-input mode (``hostile_interval``): hostile messages (tests/helpers/raft_hostile.py: epochs
and offsets outside their types, other clusters, candidates and leaders that are not voters, spoofed
senders, impossible Fetch answers, bogus snapshots) reach live nodes among the normal traffic, one
on average every ``hostile_interval`` seconds, through the same `step` as every message. Each must
leave the node's epoch state, log end, high watermark and persisted state as they were, with no
durable effect; the invariants are checked after it as after every event, and any exception out of
the core fails the seed.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import heapq
import io
import itertools
import os
import random
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from kraftpy.raft import (
    Commit,
    ElectionState,
    FlushLog,
    LeaderChange,
    MemoryRaftLog,
    NotLeaderError,
    PersistQuorumState,
    RaftConfig,
    RaftCore,
    Received,
    RecordBatch,
    Send,
    SnapshotLoaded,
)
from kraftpy.raft.file_log import FileRaftLog
from kraftpy.raft.messages import FetchResponse, FetchSnapshotResponse, Message, VoteRequest, VoteResponse
from kraftpy.raft.quorum_state import Candidate, Leader, Prospective
from kraftpy.storage.log import LogConfig
from tests.helpers.raft_hostile import HostileInput

CLUSTER_ID = "sim-cluster"
#: The simulated wall clock starts here (milliseconds), so that batch timestamps look real.
WALL_CLOCK_BASE_MS = 1_700_000_000_000
#: What a core call must not do to a file (it may read).
_FORBIDDEN_OS_CALLS = (
    "open", "write", "writev", "pwrite", "pwritev", "fsync", "fdatasync", "ftruncate", "truncate",
    "rename", "replace", "unlink", "remove", "rmdir", "mkdir", "makedirs", "close", "sendfile",
)


class FileWriteInCoreCall(AssertionError):
    """The Raft core (or the log on its behalf) touched a file inside a core call."""


class FileWriteGuard:
    """While armed, every os call that opens, writes, syncs, truncates, renames, deletes or closes a
    file, and ``open``, raises `FileWriteInCoreCall`. Installed once (cheap to arm per call)."""

    def __init__(self) -> None:
        self.armed = False
        self._saved: dict[str, Any] = {}

    def install(self) -> None:
        if self._saved:
            return
        for name in _FORBIDDEN_OS_CALLS:
            if hasattr(os, name):
                self._saved[name] = getattr(os, name)
                setattr(os, name, self._guarded(f"os.{name}", self._saved[name]))
        self._saved["builtins.open"] = builtins.open
        builtins.open = io.open = self._guarded("open", builtins.open)

    def uninstall(self) -> None:
        for name, function in self._saved.items():
            if name == "builtins.open":
                builtins.open = io.open = function
            else:
                setattr(os, name, function)
        self._saved = {}

    def _guarded(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.armed:
                raise FileWriteInCoreCall(f"{name}{args!r:.80} inside a Raft core call")
            return function(*args, **kwargs)

        return guarded


@contextlib.contextmanager
def forbid_file_writes() -> Iterator[None]:
    """A `FileWriteGuard` armed for the duration of the block."""
    guard = FileWriteGuard()
    guard.install()
    guard.armed = True
    try:
        yield
    finally:
        guard.armed = False
        guard.uninstall()


def sim_directory() -> Path:
    """A fresh temporary directory, in memory (/dev/shm) where the system has one."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="kraftpy-sim-", dir=base))


class InvariantViolation(AssertionError):
    """A safety or liveness property of the simulated cluster does not hold."""


def batch_digest(previous: bytes, batch: RecordBatch) -> bytes:
    """Chains the batch's bytes: two state machines agree only if they applied the same bytes."""
    h = hashlib.blake2b(previous, digest_size=16)
    h.update(batch.data)
    return h.digest()


def describe(message: Message) -> str:
    """A message for the trace, its bytes summarised."""
    if isinstance(message, FetchResponse) and message.records:
        message = attrs.evolve(message, records=b"")
        return f"{message!r:.140} (+records)"
    if isinstance(message, FetchSnapshotResponse) and message.unaligned_records:
        message = attrs.evolve(message, unaligned_records=b"")
        return f"{message!r:.140} (+chunk)"
    return f"{message!r:.160}"


@attrs.define
class SimNode:
    node_id: int
    config: RaftConfig
    log: MemoryRaftLog | FileRaftLog = attrs.Factory(MemoryRaftLog)
    #: What the quorum-state file holds (survives crashes).
    persisted: ElectionState | None = None
    core: RaftCore | None = None
    clock_offset: float = 0.0
    incarnation: int = 0
    #: The node's state machine: everything committed below `applied_end`, as a digest chain.
    applied_end: int = 0
    digest: bytes = b""
    #: Monotonicity watermarks for the current process lifetime.
    max_epoch: int = 0
    max_hwm: int = 0

    @property
    def alive(self) -> bool:
        return self.core is not None

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.config.voters


@attrs.define(order=True)
class _InFlight:
    deliver_at: float
    seq: int
    src: int = attrs.field(order=False)
    dst: int = attrs.field(order=False)
    received: Received = attrs.field(order=False)


class Checker:
    """Safety invariants, checked after every event (Raft thesis §3.6 and KIP-595):

    - at most one leader per epoch, and every node that knows a leader of an epoch names the same;
    - a node's epoch and high watermark never go back in one lifetime, and its persisted epoch never
      goes back across restarts; a node never persists two different votes in one epoch, and a
      granted vote is persisted before the response leaves;
    - every committed batch is the same on every node (each Commit is checked against the global
      committed history, and every state machine's digest chain matches it);
    - the committed end is durable on a majority of voters (flushed log or snapshot);
    - a node's high watermark never passes its flushed log; observers never stand for election.
    """

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.leader_of_epoch: dict[int, int] = {}
        self.votes: dict[tuple[int, int], int] = {}
        self.batches: dict[int, RecordBatch] = {}
        self.committed_end = 0
        self.last_batch: RecordBatch | None = None
        self.digest_at: dict[int, bytes] = {0: b""}
        self.max_persisted_epoch: dict[int, int] = {}
        self._durable_cache: dict[int, tuple[tuple, bool]] = {}

    def fail(self, message: str) -> None:
        raise InvariantViolation(f"t={self.cluster.now:.3f}: {message}")

    def on_persist(self, node: SimNode, state: ElectionState) -> None:
        previous = self.max_persisted_epoch.get(node.node_id, 0)
        if state.epoch < previous:
            self.fail(f"node {node.node_id} persisted epoch {state.epoch} after {previous}")
        self.max_persisted_epoch[node.node_id] = state.epoch
        if state.voted_id is not None:
            key = (node.node_id, state.epoch)
            if self.votes.setdefault(key, state.voted_id) != state.voted_id:
                self.fail(
                    f"node {node.node_id} voted for {self.votes[key]} and {state.voted_id} in {state.epoch}"
                )

    def on_vote_granted(self, node: SimNode, request: VoteRequest) -> None:
        expected = ElectionState(request.candidate_epoch, voted_id=request.candidate_id)
        if node.persisted != expected:
            self.fail(f"node {node.node_id} granted {request} with persisted state {node.persisted}")

    def on_leader(self, epoch: int, leader_id: int, who: int) -> None:
        known = self.leader_of_epoch.setdefault(epoch, leader_id)
        if known != leader_id:
            self.fail(f"two leaders in epoch {epoch}: {known} and {leader_id} (seen by node {who})")

    def on_commit(self, node: SimNode, commit: Commit) -> None:
        for batch in commit.batches:
            if batch.base_offset != node.applied_end:
                self.fail(
                    f"node {node.node_id} committed batch at {batch.base_offset}, applied {node.applied_end}"
                )
            known = self.batches.get(batch.base_offset)
            if known is None:
                if batch.base_offset != self.committed_end:
                    self.fail(
                        f"node {node.node_id} committed {batch.base_offset}, history ends {self.committed_end}"
                    )
                self.batches[batch.base_offset] = batch
                self.digest_at[batch.next_offset] = batch_digest(self.digest_at[self.committed_end], batch)
                self.committed_end = batch.next_offset
                self.last_batch = batch
            elif known != batch:
                self.fail(f"node {node.node_id} committed {batch}, others committed {known}")
            node.digest = batch_digest(node.digest, batch)
            node.applied_end = batch.next_offset
            if node.digest != self.digest_at[node.applied_end]:
                self.fail(f"node {node.node_id} state machine diverged at {node.applied_end}")
        if commit.high_watermark < node.applied_end:
            self.fail(f"node {node.node_id} applied {node.applied_end} past its high watermark")

    def on_snapshot_loaded(self, node: SimNode, end_offset: int, data: bytes) -> None:
        expected = self.digest_at.get(end_offset)
        if expected is None or data != expected:
            self.fail(f"node {node.node_id} loaded a snapshot at {end_offset} unlike the committed history")

    def check_all(self) -> None:
        cluster = self.cluster
        for node in cluster.nodes.values():
            core = node.core
            if core is None:
                continue
            nid = node.node_id
            epoch, hwm = core.epoch, core.high_watermark
            if epoch < node.max_epoch:
                self.fail(f"node {nid} epoch went back {node.max_epoch} -> {epoch}")
            node.max_epoch = epoch
            if hwm < node.max_hwm:
                self.fail(f"node {nid} high watermark went back {node.max_hwm} -> {hwm}")
            node.max_hwm = hwm
            log = node.log
            if hwm > log.flushed_offset and hwm > log.start_offset:
                self.fail(f"node {nid} high watermark {hwm} past flushed {log.flushed_offset}")
            if not node.is_voter and isinstance(core.state, Leader | Candidate | Prospective):
                self.fail(f"observer {nid} is {core.state}")
            leader = core.leader_id
            if leader is not None:
                self.on_leader(epoch, leader, nid)
        end = self.committed_end
        if end > 0:
            durable = 0
            majority = len(cluster.voters) // 2 + 1
            for node in cluster.nodes.values():
                if node.is_voter and self._holds_committed_end(node, end):
                    durable += 1
                    if durable >= majority:
                        break
            if durable < majority:
                self.fail(f"committed end {end} durable on only {durable} of {len(cluster.voters)} voters")

    def _holds_committed_end(self, node: SimNode, end: int) -> bool:
        """The node's durable log (or snapshot) holds the committed history up to `end`. Cached for
        as long as nothing it depends on changed (a log's content below its flushed offset changes
        only through a truncation, which lowers that offset first)."""
        log = node.log
        snapshot = log.latest_snapshot_id
        key = (node.incarnation, end, log.flushed_offset, log.start_offset, snapshot)
        cached = self._durable_cache.get(node.node_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        held = (snapshot is not None and snapshot.end_offset >= end) or (
            end <= log.flushed_offset and log.batch_containing(end - 1) == self.last_batch
        )
        self._durable_cache[node.node_id] = (key, held)
        return held


class SimCluster:
    """Voters 1..n and observers n+1.., all driven from `seed`."""

    def __init__(
        self,
        seed: int,
        voters: int = 3,
        observers: int = 0,
        *,
        election_timeout_ms: int = 1000,
        fetch_timeout_ms: int = 2000,
        fetch_max_bytes: int = 4096,
        snapshot_chunk_bytes: int = 8,
        append_linger_ms: int = 0,
        file_logs: bool = False,
        segment_bytes: int = 4096,
        trace_len: int = 60,
        hostile_interval: float | None = None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0.0
        self.voters = frozenset(range(1, voters + 1))
        #: Where the file logs live (None: memory logs); removed by `close`.
        self.directory = sim_directory() if file_logs else None
        self.log_config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=256)
        #: Of the crashes that interrupt a flush with unflushed bytes, the share that tears it.
        self.torn_write_rate = 0.5
        self.guard = FileWriteGuard()
        if file_logs:
            self.guard.install()
        self.nodes: dict[int, SimNode] = {}
        for nid in range(1, voters + observers + 1):
            config = RaftConfig(
                node_id=nid,
                voters=self.voters,
                cluster_id=CLUSTER_ID,
                election_timeout_ms=election_timeout_ms,
                fetch_timeout_ms=fetch_timeout_ms,
                fetch_max_bytes=fetch_max_bytes,
                snapshot_chunk_bytes=snapshot_chunk_bytes,
                append_linger_ms=append_linger_ms,
            )
            self.nodes[nid] = SimNode(nid, config, self._open_log(nid))
        self.queue: list[_InFlight] = []
        self._seq = itertools.count()
        #: Directed links that drop everything: (src, dst).
        self.blocked: set[tuple[int, int]] = set()
        self.drop_rate = 0.0
        self.dup_rate = 0.0
        self.spike_rate = 0.0
        self.delay = (0.001, 0.010)
        #: Probability that a crash happens part-way through applying one batch of effects.
        self.crash_mid_apply_rate = 0.0
        self.checker = Checker(self)
        #: Recent events: text, or (time, src, dst, message) formatted only for a failure report.
        self.trace: deque[str | tuple[float, int, int, Message]] = deque(maxlen=trace_len)
        self._proposals = itertools.count()
        self.events = 0
        #: Each node's last request of each type: (dest, correlation id, message).
        self.last_requests: dict[int, dict[type, tuple[int, int, Message]]] = {}
        #: Byzantine-input mode: hostile messages, one every `hostile_interval` seconds on average.
        self.hostile_interval = hostile_interval
        self.hostile = HostileInput(self, random.Random(seed ^ 0xB7_2A71))
        self.hostile_rng = random.Random(seed ^ 0x51_7E)
        self.next_hostile_at = self._draw_hostile_time() if hostile_interval else float("inf")
        self.hostile_sent = 0
        for node in self.nodes.values():
            self.start_node(node)

    # -- nodes -----------------------------------------------------------------------------------

    def local_time(self, node: SimNode) -> float:
        return self.now + node.clock_offset

    def wall_clock(self, node: SimNode) -> Callable[[], int]:
        """The node's wall clock in milliseconds: deterministic, and jumping with its clock."""
        return lambda: WALL_CLOCK_BASE_MS + int(self.local_time(node) * 1000)

    def _open_log(self, node_id: int) -> MemoryRaftLog | FileRaftLog:
        if self.directory is None:
            return MemoryRaftLog()
        return FileRaftLog.open(self.directory / f"node-{node_id}", self.log_config)

    def call(self, node: SimNode, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call into a node's core as a driver does; with file logs, no file may be written meanwhile."""
        if self.directory is None:
            return method(*args, **kwargs)
        self.guard.armed = True
        try:
            return method(*args, **kwargs)
        finally:
            self.guard.armed = False

    def start_node(self, node: SimNode) -> None:
        node.applied_end = 0
        node.digest = b""
        node.max_epoch = 0
        node.max_hwm = 0
        node.core = self.call(
            node,
            RaftCore,
            node.config,
            node.log,
            rng=random.Random(self.rng.getrandbits(64)),
            now=self.local_time(node),
            persisted=node.persisted,
            wall_clock=self.wall_clock(node),
        )
        if node.persisted is not None and node.core.epoch != node.persisted.epoch:
            self.checker.fail(
                f"node {node.node_id} restarted in epoch {node.core.epoch}, persisted {node.persisted}"
            )
        self.trace.append(f"{self.now:.3f} start {node.node_id} {node.core.state}")
        self.apply(node, self.call(node, node.core.start, self.local_time(node)))

    def crash(self, node: SimNode) -> None:
        """Kill the node: its log keeps what was flushed (a file log: and perhaps a torn write),
        reopened at once as a restart would find it."""
        if node.core is None:
            return
        self.trace.append(f"{self.now:.3f} crash {node.node_id}")
        log = node.log
        if isinstance(log, MemoryRaftLog):
            log.crash()
        else:
            torn = None
            if self.rng.random() < self.torn_write_rate:
                rng = self.rng

                def torn(tail: bytes) -> bytes:
                    kept = tail[: rng.randrange(len(tail) + 1)]
                    garbage = rng.randbytes(rng.randrange(1, 64)) if rng.random() < 0.5 else b""
                    self.trace.append(f"{self.now:.3f} torn write: {len(kept)} of {len(tail)} bytes "
                                      f"+ {len(garbage)} garbage")
                    return kept + garbage

            log.crash(torn)
            node.log = self._open_log(node.node_id)
        node.core = None
        node.incarnation += 1

    def close(self) -> None:
        """Close the file logs and remove their directory."""
        self.guard.uninstall()
        if self.directory is None:
            return
        for node in self.nodes.values():
            if isinstance(node.log, FileRaftLog):
                node.log.abandon()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = None

    def restart(self, node: SimNode) -> None:
        if node.core is None:
            self.start_node(node)

    def alive_nodes(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.core is not None]

    def leader(self) -> SimNode | None:
        """The live node that believes it leads the highest epoch, if any."""
        leaders = [n for n in self.alive_nodes() if n.core is not None and n.core.is_leader]
        return max(leaders, key=lambda n: n.core.epoch if n.core else -1, default=None)

    # -- effects ---------------------------------------------------------------------------------

    def apply(self, node: SimNode, effects: list, cause: Message | None = None) -> None:
        if self.crash_mid_apply_rate and effects and self.rng.random() < self.crash_mid_apply_rate:
            cut = self.rng.randrange(len(effects))
            self.trace.append(f"{self.now:.3f} crash {node.node_id} after {cut}/{len(effects)} effects")
            self._apply_all(node, effects[:cut], cause)
            self.crash(node)
            return
        self._apply_all(node, effects, cause)

    def _apply_all(self, node: SimNode, effects: list, cause: Message | None) -> None:
        for effect in effects:
            match effect:
                case PersistQuorumState(state=state):
                    self.checker.on_persist(node, state)
                    node.persisted = state
                case FlushLog(up_to=up_to):
                    node.log.flush(up_to)
                case Send(dest=dest, correlation_id=cid, message=message):
                    if message.is_request:
                        self.last_requests.setdefault(node.node_id, {})[type(message)] = (dest, cid, message)
                    if (
                        isinstance(message, VoteResponse)
                        and message.vote_granted
                        and isinstance(cause, VoteRequest)
                        and not cause.pre_vote
                    ):
                        self.checker.on_vote_granted(node, cause)
                    self.send(node.node_id, dest, cid, message)
                case Commit():
                    self.checker.on_commit(node, effect)
                case LeaderChange(epoch=epoch, leader_id=leader_id):
                    self.trace.append(f"{self.now:.3f} node {node.node_id} leader change {leader_id}@{epoch}")
                    if leader_id is not None:
                        self.checker.on_leader(epoch, leader_id, node.node_id)
                case SnapshotLoaded(snapshot_id=snapshot_id):
                    size = node.log.snapshot_size(snapshot_id)
                    data = node.log.read_snapshot(snapshot_id, 0, size or 0)
                    self.checker.on_snapshot_loaded(node, snapshot_id.end_offset, data)
                    node.applied_end = snapshot_id.end_offset
                    node.digest = data
                case _:
                    raise TypeError(effect)

    # -- network ---------------------------------------------------------------------------------

    def send(self, src: int, dst: int, cid: int, message: Message) -> None:
        if dst not in self.nodes:
            return
        copies = 1
        if self.rng.random() < self.drop_rate:
            copies = 0
        elif self.rng.random() < self.dup_rate:
            copies = 2
        for _ in range(copies):
            delay = self.rng.uniform(*self.delay)
            if self.rng.random() < self.spike_rate:
                delay += self.rng.uniform(0.1, 1.5)
            item = _InFlight(self.now + delay, next(self._seq), src, dst, Received(src, cid, message))
            heapq.heappush(self.queue, item)

    def deliver(self, item: _InFlight) -> None:
        node = self.nodes[item.dst]
        if node.core is None or (item.src, item.dst) in self.blocked:
            sender = self.nodes.get(item.src)
            message = item.received.message
            if (sender is not None and sender.core is not None and getattr(message, "is_request", False)
                    and self.rng.random() < 0.5):
                # Half the time the transport says so at once (connection refused / reset).
                self.trace.append(f"{self.now:.3f} {item.src}->{item.dst} unreachable")
                effects = self.call(sender, sender.core.unreachable, item.dst, item.received.correlation_id,
                                    self.local_time(sender))
                self.apply(sender, effects)
            return
        message = item.received.message
        self.trace.append((self.now, item.src, item.dst, message))
        effects = self.call(node, node.core.step, item.received, self.local_time(node))
        self.apply(node, effects, message)

    def _draw_hostile_time(self) -> float:
        assert self.hostile_interval is not None
        return self.now + self.hostile_rng.expovariate(1 / self.hostile_interval)

    def inject_hostile(self) -> None:
        """Hand one hostile message to a live node, as if it came over the network, and check that
        it was refused: nothing about the node's epoch state, log or commits moved, nothing durable
        was asked for. (Called on its own schedule in Byzantine-input mode; tests may call it too.)"""
        if self.hostile_interval:
            self.next_hostile_at = self._draw_hostile_time()
        hostile = self.hostile.next()
        if hostile is None:
            return
        node = self.nodes[hostile.dest]
        core = node.core
        assert core is not None
        self.hostile_sent += 1
        self.trace.append(f"{self.now:.3f} hostile {hostile.kind} {hostile.source}->{hostile.dest} "
                          f"{describe(hostile.message)}")

        def observed() -> tuple:
            return core.state, core.high_watermark, node.log.end_offset, node.log.start_offset, node.persisted

        before = observed()
        received = Received(hostile.source, hostile.correlation_id, hostile.message)
        effects = self.call(node, core.step, received, self.local_time(node))
        durable = [e for e in effects if isinstance(e, PersistQuorumState | FlushLog | LeaderChange)]
        if durable or observed() != before:
            self.checker.fail(
                f"node {node.node_id} acted on a hostile message ({hostile.kind}): {describe(hostile.message)}; "
                f"{before} -> {observed()}, effects {durable}"
            )
        self.apply(node, effects, hostile.message)

    def partition(self, groups: list[set[int]]) -> None:
        """Cut every link between different groups, both ways."""
        self.blocked = {(a, b) for ga in groups for gb in groups if ga is not gb for a in ga for b in gb}
        self.trace.append(f"{self.now:.3f} partition {groups}")

    def block_one_way(self, src: int, dst: int) -> None:
        self.blocked.add((src, dst))
        self.trace.append(f"{self.now:.3f} block {src}->{dst}")

    def heal(self) -> None:
        self.blocked.clear()
        self.drop_rate = self.dup_rate = self.spike_rate = 0.0
        self.crash_mid_apply_rate = 0.0
        self.trace.append(f"{self.now:.3f} heal")

    # -- clients and state machines ----------------------------------------------------------------

    def propose(self, node: SimNode | None = None, tag: str = "r") -> tuple[int, int] | None:
        """Propose one batch on `node` (default: the leader); (epoch, last offset) or None."""
        node = node or self.leader()
        if node is None or node.core is None:
            return None
        n = next(self._proposals)
        records = [f"{tag}{n}.{i}".encode() for i in range(1 + self.rng.randrange(3))]
        try:
            result = self.call(node, node.core.propose, records, self.local_time(node))
        except NotLeaderError:
            return None
        self.apply(node, result.effects)
        return result.epoch, result.last_offset

    def resign(self, node: SimNode | None = None) -> None:
        """The leader (or `node`) shuts down gracefully: it resigns (EndQuorumEpoch)."""
        node = node or self.leader()
        if node is not None and node.core is not None:
            self.apply(node, self.call(node, node.core.resign, self.local_time(node)))

    def take_snapshot(self, node: SimNode, delete_prefix: bool) -> None:
        core = node.core
        if core is None:
            return
        latest = node.log.latest_snapshot_id
        end = node.applied_end
        if end <= node.log.start_offset or (latest is not None and end <= latest.end_offset):
            return
        result = self.call(node, core.create_snapshot, end, node.digest, delete_log_before=delete_prefix)
        self.trace.append(
            f"{self.now:.3f} node {node.node_id} snapshot {result.snapshot_id} delete={delete_prefix}")
        self.apply(node, result.effects)

    # -- the event loop --------------------------------------------------------------------------

    def _next_timer(self) -> tuple[float, SimNode | None]:
        best, who = float("inf"), None
        for node in self.nodes.values():
            if node.core is None:
                continue
            at = node.core.next_deadline() - node.clock_offset
            if at < best:
                best, who = at, node
        return best, who

    def run_until(self, t_end: float, actions: deque[tuple[float, object]] | None = None) -> None:
        """Advance to `t_end`, handling messages, timers and scheduled (time, callable) actions."""
        actions = actions if actions is not None else deque()
        stuck = 0
        while True:
            t_msg = self.queue[0].deliver_at if self.queue else float("inf")
            t_timer, timer_node = self._next_timer()
            t_action = actions[0][0] if actions else float("inf")
            t_hostile = self.next_hostile_at
            t_next = min(t_msg, t_timer, t_action, t_hostile)
            if t_next > t_end:
                self.now = max(self.now, t_end)
                return
            previous = self.now
            self.now = max(self.now, t_next)
            if t_action == t_next:
                _, action = actions.popleft()
                action()  # type: ignore[operator]
            elif t_hostile == t_next:
                self.inject_hostile()
            elif t_msg == t_next:
                self.deliver(heapq.heappop(self.queue))
            else:
                assert timer_node is not None and timer_node.core is not None
                core = timer_node.core
                local = max(self.local_time(timer_node), core.next_deadline())
                self.apply(timer_node, self.call(timer_node, core.tick, local))
            self.events += 1
            stuck = stuck + 1 if self.now == previous else 0
            if stuck > 10_000:
                self.checker.fail("no progress: 10000 events without time passing")
            self.checker.check_all()

    def run_for(self, seconds: float) -> None:
        self.run_until(self.now + seconds)

    def all_caught_up(self, offset: int) -> bool:
        """Every node is alive and its state machine applied past `offset`."""
        return all(n.core is not None and n.applied_end > offset for n in self.nodes.values())

    def failure_report(self) -> str:
        lines = [f"seed={self.seed} t={self.now:.3f} events={self.events}"]
        for node in self.nodes.values():
            core = node.core
            desc = "down" if core is None else f"{core.state} hwm={core.high_watermark}"
            lines.append(
                f"  node {node.node_id}: {desc} log=[{node.log.start_offset},{node.log.end_offset}) "
                f"flushed={node.log.flushed_offset} applied={node.applied_end} persisted={node.persisted}"
            )
        lines.append("  last events:")
        for event in self.trace:
            if isinstance(event, tuple):
                at, src, dst, message = event
                event = f"{at:.3f} {src}->{dst} {describe(message)}"
            lines.append(f"    {event}")
        return "\n".join(lines)


@attrs.frozen
class SeedResult:
    seed: int
    voters: int
    observers: int
    file_logs: bool
    append_linger_ms: int
    events: int
    committed_end: int
    epochs: int
    recovery_time: float
    #: Hostile messages injected (Byzantine-input mode), all refused.
    hostile: int = 0


#: Byzantine-input mode: the mean time between two hostile messages (two a second, against some
#: tens to hundreds of normal messages a second).
HOSTILE_INTERVAL = 0.5


def run_seed(
    seed: int, fault_seconds: float = 12.0, recovery_bound: float = 30.0, *, byzantine: bool = False
) -> SeedResult:
    """One randomized scenario: faults for `fault_seconds` of simulated time, then everything heals
    and a leader must commit a new batch on every node within `recovery_bound` simulated seconds.

    The seed also picks the cluster: 1, 3 or 5 voters, 0-2 observers, memory logs or (one seed in
    five) file logs, whose crashes interrupt flushes more often and may tear them, and a linger
    time for the leader's batches (0, 5 or 50 ms). With `byzantine`, hostile messages arrive
    throughout, healing included (`SimCluster.inject_hostile`)."""
    rng = random.Random(seed ^ 0x5EED)
    voters = rng.choice([1, 3, 3, 5, 5])
    observers = rng.choice([0, 1, 2])
    file_logs = rng.random() < 0.2
    linger_ms = rng.choice([0, 0, 5, 50])
    cluster = SimCluster(seed, voters=voters, observers=observers, file_logs=file_logs, append_linger_ms=linger_ms,
                         hostile_interval=HOSTILE_INTERVAL if byzantine else None)
    try:
        return _run_scenario(cluster, rng, fault_seconds, recovery_bound)
    finally:
        cluster.close()


def _run_scenario(cluster: SimCluster, rng: random.Random, fault_seconds: float, recovery_bound: float) -> SeedResult:
    if cluster.directory is not None:
        cluster.crash_mid_apply_rate = rng.choice([0.002, 0.01, 0.02])
    else:
        cluster.crash_mid_apply_rate = rng.choice([0.0, 0.0, 0.002])
    node_ids = sorted(cluster.nodes)

    def random_node() -> SimNode:
        return cluster.nodes[rng.choice(node_ids)]

    def fault() -> None:
        kind = rng.choices(
            [
                "crash",
                "restart",
                "partition",
                "one_way",
                "heal_links",
                "lossy",
                "clock",
                "snapshot",
                "resign",
            ],
            weights=[3, 4, 2, 2, 3, 2, 2, 3, 1],
        )[0]
        if kind == "crash":
            cluster.crash(random_node())
        elif kind == "restart":
            for node in cluster.nodes.values():
                if node.core is None and rng.random() < 0.7:
                    cluster.restart(node)
        elif kind == "partition":
            shuffled = node_ids[:]
            rng.shuffle(shuffled)
            cut = rng.randrange(1, len(shuffled)) if len(shuffled) > 1 else 1
            cluster.partition([set(shuffled[:cut]), set(shuffled[cut:])])
        elif kind == "one_way" and len(node_ids) > 1:
            a, b = rng.sample(node_ids, 2)
            cluster.block_one_way(a, b)
        elif kind == "heal_links":
            cluster.blocked.clear()
        elif kind == "lossy":
            cluster.drop_rate = rng.choice([0.0, 0.05, 0.2, 0.4])
            cluster.dup_rate = rng.choice([0.0, 0.05, 0.2])
            cluster.spike_rate = rng.choice([0.0, 0.02, 0.1])
        elif kind == "clock":
            node = random_node()
            node.clock_offset += rng.choice([rng.uniform(0.5, 5.0), -rng.uniform(0.1, 2.0)])
            cluster.trace.append(f"{cluster.now:.3f} clock {node.node_id} offset {node.clock_offset:.3f}")
        elif kind == "snapshot":
            cluster.take_snapshot(random_node(), delete_prefix=rng.random() < 0.8)
        elif kind == "resign":
            cluster.resign()

    actions: deque[tuple[float, object]] = deque()
    t = 0.0
    while True:
        t += rng.expovariate(1 / 0.4)
        if t >= fault_seconds:
            break
        actions.append((t, fault if rng.random() < 0.45 else cluster.propose))

    try:
        cluster.run_until(fault_seconds, actions)
        cluster.heal()
        for node in cluster.nodes.values():
            cluster.restart(node)
        healed_at = cluster.now
        deadline = healed_at + recovery_bound
        target: int | None = None
        while cluster.now < deadline:
            cluster.run_for(0.1)
            if target is not None and cluster.all_caught_up(target):
                break
            if target is None or cluster.checker.committed_end <= target:
                proposed = cluster.propose(tag="heal")
                if proposed is not None and target is None:
                    target = proposed[1]
        if target is None or not cluster.all_caught_up(target):
            cluster.checker.fail(
                f"no leader committed on every node within {recovery_bound}s after healing (target {target})"
            )
        recovery = cluster.now - healed_at
    except InvariantViolation as exc:
        raise InvariantViolation(f"{exc}\n{cluster.failure_report()}") from exc
    except Exception as exc:
        raise InvariantViolation(f"{type(exc).__name__}: {exc}\n{cluster.failure_report()}") from exc
    return SeedResult(
        seed=cluster.seed,
        voters=len(cluster.voters),
        observers=len(cluster.nodes) - len(cluster.voters),
        file_logs=cluster.directory is not None,
        append_linger_ms=next(iter(cluster.nodes.values())).config.append_linger_ms,
        events=cluster.events,
        committed_end=cluster.checker.committed_end,
        epochs=len(cluster.checker.leader_of_epoch),
        recovery_time=recovery,
        hostile=cluster.hostile_sent,
    )
