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

Membership mode (``membership``, `run_membership_seed`): a dynamic quorum (KIP-853). The voters start
from a bootstrap snapshot, as `kraftpy storage format --initial-controllers` leaves them (or, in an
``upgrade`` cluster, from controller.quorum.voters, moved to kraft.version 1 during the run), with
spare controllers that start as observers knowing no voter (``--no-initial-controllers``: they find
the leader through the bootstrap servers). Among the faults, the leader is asked to add a spare or
removed replica, to remove a voter (the leader itself included), and a voter's disk is replaced
(crash, a new directory id and an empty log, back as an observer, then removed and added again); a
voter restarts now and then with a new endpoint (UpdateVoter). The checker then also verifies after
every event that each new leader's log holds everything committed, its voter history included, and
that no two voter sets that could elect a leader have disjoint majorities.

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

from kraftpy.ids import Uuid
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
from kraftpy.raft.effects import VoterChangeDone
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.file_log import FileRaftLog
from kraftpy.raft.messages import FetchResponse, FetchSnapshotResponse, Message, VoteRequest, VoteResponse
from kraftpy.raft.quorum_state import Candidate, Leader, Prospective
from kraftpy.raft.snapshot_control import BOOTSTRAP_SNAPSHOT_ID, control_batch, split_snapshot
from kraftpy.raft.voter_history import VoterHistory
from kraftpy.raft.voters import KRAFT_VERSION_DYNAMIC, Endpoint, ReplicaKey, VoterNode, VoterSet
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
    #: Whether the node was a leader at the last check (to check a new leader once).
    was_leader: bool = False

    @property
    def alive(self) -> bool:
        return self.core is not None

    @property
    def is_voter(self) -> bool:
        """A voter of the static set (membership mode asks the node's core instead)."""
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

    With membership changes (KIP-853; Raft thesis §4.1), also:

    - every new leader's log holds the committed history (Leader Completeness), and its voter
      history gives the voter set of the committed history at the committed end: a committed voter
      change is in every later leader's log;
    - a leader is a voter of its own set when it takes office (or one whose own removal is not
      committed yet), and a replica that is neither never stands;
    - a leader changes the voter set one voter at a time: each VotersRecord it appends keeps every
      majority of the new set overlapping every majority of the set before, which was committed when
      it appended it (at most one uncommitted change); so no two voter sets in use ever have
      disjoint majorities;
    - the committed end is durable on replicas that meet every majority of the committed voter set.
    """

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.leader_of_epoch: dict[int, int] = {}
        self.votes: dict[tuple[int, Uuid | None, int], int] = {}
        self.batches: dict[int, RecordBatch] = {}
        self.committed_end = 0
        self.last_batch: RecordBatch | None = None
        self.digest_at: dict[int, bytes] = {0: b""}
        self.max_persisted_epoch: dict[tuple[int, Uuid | None], int] = {}
        self._durable_cache: dict[int, tuple[tuple, bool]] = {}
        #: The kraft.version and voter sets of the committed history (membership mode).
        self.committed_voters = VoterHistory(cluster.static_voter_set)
        if cluster.initial_voter_set is not None:
            self.committed_voters.add_kraft_version(-1, KRAFT_VERSION_DYNAMIC)
            self.committed_voters.add_voters(-1, cluster.initial_voter_set)
        #: Per node, the newest voter-history offset already checked for one-at-a-time changes.
        self._checked_change: dict[int, int] = {}
        #: Voter changes seen appended by leaders, and of those, membership changes.
        self.voter_records = 0
        #: What the last durability check of membership mode looked at (nothing changed: no new check).
        self._durable_membership_checked: tuple | None = None

    def fail(self, message: str) -> None:
        raise InvariantViolation(f"t={self.cluster.now:.3f}: {message}")

    def on_persist(self, node: SimNode, state: ElectionState) -> None:
        replica = (node.node_id, node.config.directory_id)  # a replaced disk is a new replica
        previous = self.max_persisted_epoch.get(replica, 0)
        if state.epoch < previous:
            self.fail(f"node {node.node_id} persisted epoch {state.epoch} after {previous}")
        self.max_persisted_epoch[replica] = state.epoch
        if state.voted_id is not None:
            key = (*replica, state.epoch)
            if self.votes.setdefault(key, state.voted_id) != state.voted_id:
                self.fail(
                    f"node {node.node_id} voted for {self.votes[key]} and {state.voted_id} in {state.epoch}"
                )

    def on_vote_granted(self, node: SimNode, request: VoteRequest) -> None:
        persisted = node.persisted
        if persisted is None or (persisted.epoch, persisted.voted_id) != (request.candidate_epoch, request.candidate_id):
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
                self.committed_voters.add_batch(batch)
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

    def on_snapshot_control(self, node: SimNode, end_offset: int, kraft_version: int, voters: VoterSet) -> None:
        """A snapshot's control records must be the committed history's at its end."""
        expected = (self.committed_voters.kraft_version_at(end_offset - 1), self.committed_voters.voters_at(end_offset - 1))
        if (kraft_version, voters) != expected:
            self.fail(f"node {node.node_id} loaded a snapshot at {end_offset} with kraft.version {kraft_version} and "
                      f"voters {voters}, the committed history has {expected}")

    # -- membership (KIP-853) ----------------------------------------------------------------------

    def _holds_in_memory(self, node: SimNode, end: int) -> bool:
        log = node.log
        snapshot = log.latest_snapshot_id
        return (snapshot is not None and snapshot.end_offset >= end) or log.batch_containing(end - 1) == self.last_batch

    def on_new_leader(self, node: SimNode) -> None:
        """Leader Completeness, the voter history included, and a leader is a voter when elected."""
        core = node.core
        assert core is not None
        if not core._quorum.may_stand:
            self.fail(f"node {node.node_id} leads epoch {core.epoch} without being a voter of {core.voters}")
        end = self.committed_end
        if end == 0:
            return
        if not self._holds_in_memory(node, end):
            self.fail(f"new leader {node.node_id} of epoch {core.epoch} lacks the committed history to {end}")
        expected = self.committed_voters.voters_at(end - 1)
        held = core.voter_history.voters_at(end - 1)
        static = self.committed_voters.latest_offset is None or self.committed_voters.kraft_version_at(end - 1) == 0
        # A static set (kraft.version 0) is controller.quorum.voters: its ids, whatever endpoints a config names.
        if (held.ids != expected.ids) if static else (held != expected):
            self.fail(f"new leader {node.node_id} of epoch {core.epoch} has voters {held} at {end - 1}, "
                      f"committed: {expected}")

    def check_voter_changes(self, node: SimNode) -> None:
        """Each VotersRecord a leader appended in its epoch: one voter at a time (overlapping
        majorities), the set before it committed (at most one uncommitted change)."""
        core = node.core
        assert core is not None
        history = core.voter_history
        latest = history.latest_offset
        if latest is None or latest <= self._checked_change.get(node.node_id, -2):
            return
        self._checked_change[node.node_id] = latest
        batch = node.log.batch_containing(latest)
        leader_state = core._leader
        if batch is None or batch.epoch != core.epoch or leader_state is None:
            return  # not appended by this leader (a follower's, or a snapshot's)
        new, before = history.voters_at(latest), history.voters_at(latest - 1)
        self.voter_records += 1
        if not before.overlaps(new):
            self.fail(f"leader {node.node_id} changed the voters {before} -> {new} at {latest}: disjoint majorities")
        if {k.id for k in before.keys()} == {k.id for k in new.keys()} and \
                batch.base_offset == leader_state.tracker.epoch_start_offset:
            return  # a new leader refreshing its own record in its first batch: same voters
        before_offset = max((o for o, _ in history._voters if o < latest), default=-1)
        committed = max(self.committed_end, core.high_watermark)
        if before_offset >= committed:
            self.fail(f"leader {node.node_id} appended voters {new} at {latest} while the change at "
                      f"{before_offset} was not committed (committed to {committed})")

    def check_no_disjoint_majorities(self) -> None:
        """The voter sets of every replica that could win an election now (it may stand and its log
        holds the committed history) have pairwise overlapping majorities: no two of them could elect
        two leaders, or commit two histories, with disjoint majorities."""
        live = [node for node in self.cluster.nodes.values() if node.core is not None]
        if len({node.core.voters for node in live}) < 2:  # type: ignore[union-attr]
            return  # the common case: one set everywhere
        end = self.committed_end
        sets: set[VoterSet] = set()
        for node in live:
            core = node.core
            assert core is not None
            if core._quorum.may_stand and (end == 0 or self._holds_in_memory(node, end)):
                sets.add(core.voters)
        found = list(sets)
        for i, a in enumerate(found):
            for b in found[i + 1:]:
                if not a.overlaps(b):
                    self.fail(f"voter sets {a} and {b} are both in use and have disjoint majorities")

    def check_durable_membership(self) -> None:
        """The committed end is durable on replicas that meet every majority of the committed set."""
        end = self.committed_end
        if end == 0:
            return
        voters = self.committed_voters.voters_at(end - 1)
        nodes = self.cluster.nodes.values()
        key = (end, voters, tuple((n.incarnation, n.log.flushed_offset, n.log.start_offset) for n in nodes))
        if key == self._durable_membership_checked:
            return
        self._durable_membership_checked = key
        replicas = {ReplicaKey(n.node_id, n.config.directory_id): n for n in nodes}
        # Replicas whose disk was replaced are gone for good: no majority can count them any more.
        existing = [key for key in voters.keys() if any(key.matches(r) for r in replicas)]
        held = sum(1 for key in existing for r, n in replicas.items()
                   if key.matches(r) and self._holds_committed_end(n, end))
        if len(existing) >= voters.majority and held < len(existing) - voters.majority + 1:
            self.fail(f"committed end {end} durable on {held} replicas of {voters}: a majority could miss it")

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
            if cluster.membership:
                if not core._quorum.may_stand and isinstance(core.state, Candidate | Prospective):
                    self.fail(f"node {nid}, not a voter of {core.voters}, is {core.state}")
                if core.is_leader and not node.was_leader:
                    self.on_new_leader(node)
                node.was_leader = core.is_leader
                if core.is_leader:
                    self.check_voter_changes(node)
            elif not node.is_voter and isinstance(core.state, Leader | Candidate | Prospective):
                self.fail(f"observer {nid} is {core.state}")
            leader = core.leader_id
            if leader is not None:
                self.on_leader(epoch, leader, nid)
        if cluster.membership:
            self.check_durable_membership()
            self.check_no_disjoint_majorities()
            return
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
    """Voters 1..n and observers n+1.., all driven from `seed`. With ``membership`` the quorum is
    dynamic (see the module doc): the voters 1..n start from a bootstrap snapshot (or, with
    ``upgrade``, from a static voter set upgraded to kraft.version 1 later), and ``spares``
    controllers n+1..n+spares start as observers that know no voter; brokers (``observers``) follow."""

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
        membership: bool = False,
        spares: int = 0,
        upgrade: bool = False,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0.0
        self.voters = frozenset(range(1, voters + 1))
        self.membership = membership
        #: Where the file logs live (None: memory logs); removed by `close`.
        self.directory = sim_directory() if file_logs else None
        self.log_config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=256)
        #: Of the crashes that interrupt a flush with unflushed bytes, the share that tears it.
        self.torn_write_rate = 0.5
        self.guard = FileWriteGuard()
        if file_logs:
            self.guard.install()
        self._config_args = dict(
            cluster_id=CLUSTER_ID,
            election_timeout_ms=election_timeout_ms,
            fetch_timeout_ms=fetch_timeout_ms,
            fetch_max_bytes=fetch_max_bytes,
            snapshot_chunk_bytes=snapshot_chunk_bytes,
            append_linger_ms=append_linger_ms,
            voter_change_timeout_ms=10_000,
        )
        #: Nodes of an upgraded cluster restarted with controller.quorum.bootstrap.servers instead of
        #: controller.quorum.voters (what the operator does once kraft.version is 1).
        self.converted: set[int] = set()
        #: Each node's directory id (a new one when its disk is replaced) and controller port.
        self.directory_ids: dict[int, Uuid] = {}
        self.ports: dict[int, int] = {}
        #: The controllers (voters and spares) a membership cluster may add; brokers never are.
        self.controllers = frozenset(range(1, voters + spares + 1))
        self.static_voter_set: VoterSet | None = None
        self.initial_voter_set: VoterSet | None = None
        self.nodes: dict[int, SimNode] = {}
        for nid in range(1, voters + spares + observers + 1):
            self.directory_ids[nid] = Uuid.random(self.rng) if membership else None  # type: ignore[assignment]
            self.ports[nid] = 9000 + nid
        if membership:
            if upgrade:
                self.static_voter_set = VoterSet.of_ids(self.voters, {v: [self._endpoint(v)] for v in self.voters})
            else:
                self.initial_voter_set = VoterSet(tuple(
                    VoterNode(ReplicaKey(nid, self.directory_ids[nid]), (self._endpoint(nid),)) for nid in self.voters))
        else:
            self.static_voter_set = VoterSet.of_ids(self.voters)
        for nid in range(1, voters + spares + observers + 1):
            self.nodes[nid] = SimNode(nid, self._node_config(nid), self._open_log(nid))
            if self.initial_voter_set is not None and nid in self.voters:
                self._write_bootstrap_snapshot(self.nodes[nid])
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
        #: Requests sent to a bootstrap server: (sender, correlation id) -> the id the sender used.
        self._aliases: dict[tuple[int, int], int] = {}
        #: Voter changes asked of leaders: operation -> what, and how each one ended.
        self._operations = itertools.count(1)
        self.operations: dict[int, str] = {}
        self.outcomes: dict[int, tuple[int, str | None]] = {}
        self.moves = 0
        #: Byzantine-input mode: hostile messages, one every `hostile_interval` seconds on average.
        self.hostile_interval = hostile_interval
        self.hostile = HostileInput(self, random.Random(seed ^ 0xB7_2A71))
        self.hostile_rng = random.Random(seed ^ 0x51_7E)
        self.next_hostile_at = self._draw_hostile_time() if hostile_interval else float("inf")
        self.hostile_sent = 0
        for node in self.nodes.values():
            self.start_node(node)

    def _endpoint(self, nid: int) -> Endpoint:
        return Endpoint("CONTROLLER", f"node-{nid}", self.ports[nid])

    def _node_config(self, nid: int) -> RaftConfig:
        if not self.membership:
            return RaftConfig(node_id=nid, voters=self.voters, **self._config_args)
        is_controller = nid in self.controllers
        static = self.static_voter_set is not None and nid not in self.converted
        return RaftConfig(
            node_id=nid,
            voters=self.static_voter_set.ids if static and self.static_voter_set is not None else frozenset(),
            directory_id=self.directory_ids[nid],
            endpoints=(self._endpoint(nid),) if is_controller else (),
            voter_endpoints=[(v, self.static_voter_set.node(v).endpoints[0]) for v in sorted(self.voters)]  # type: ignore[union-attr]
            if static else (),
            bootstrap_servers=[("node", v) for v in sorted(self.controllers)],
            **self._config_args,
        )

    def _write_bootstrap_snapshot(self, node: SimNode) -> None:
        """What `kraftpy storage format --initial-controllers` leaves: the voters, at offset 0."""
        assert self.initial_voter_set is not None
        node.log.create_snapshot(BOOTSTRAP_SNAPSHOT_ID,
                                 control_batch(KRAFT_VERSION_DYNAMIC, self.initial_voter_set, BOOTSTRAP_SNAPSHOT_ID))
        node.log.flush(0)

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

    def replace_disk(self, node: SimNode) -> None:
        """The node's disk is replaced: it crashes, and comes back formatted with
        --no-initial-controllers, a new replica (a new directory id) with an empty log and no
        quorum state, an observer until it is added."""
        self.crash(node)
        self.trace.append(f"{self.now:.3f} replace disk of {node.node_id}")
        if isinstance(node.log, FileRaftLog):
            node.log.abandon()
            shutil.rmtree(node.log.directory, ignore_errors=True)
        self.directory_ids[node.node_id] = Uuid.random(self.rng)
        node.config = self._node_config(node.node_id)
        node.log = self._open_log(node.node_id)
        node.persisted = None
        self.start_node(node)

    def convert_to_bootstrap_config(self, node: SimNode) -> None:
        """Restart the node configured with controller.quorum.bootstrap.servers instead of
        controller.quorum.voters, as an operator does once the cluster runs kraft.version 1."""
        self.crash(node)
        self.converted.add(node.node_id)
        node.config = self._node_config(node.node_id)
        self.trace.append(f"{self.now:.3f} node {node.node_id} restarts with bootstrap servers")
        self.start_node(node)

    def move_endpoint(self, node: SimNode) -> None:
        """The node restarts listening on another port: as a voter it tells the leader (UpdateVoter)."""
        self.crash(node)
        self.ports[node.node_id] += 100
        self.moves += 1
        node.config = self._node_config(node.node_id)
        self.trace.append(f"{self.now:.3f} node {node.node_id} moves to port {self.ports[node.node_id]}")
        self.start_node(node)

    # -- voter changes (KIP-853) -------------------------------------------------------------------

    def _operation(self, what: str) -> int:
        operation = next(self._operations)
        self.operations[operation] = what
        self.trace.append(f"{self.now:.3f} operation {operation}: {what}")
        return operation

    def add_voter(self, node: SimNode, leader: SimNode | None = None) -> int | None:
        """Ask the leader to add `node` (a running controller) as a voter; the operation's id."""
        leader = leader or self.leader()
        if leader is None or leader.core is None or node.core is None:
            return None
        operation = self._operation(f"add {node.config.key} on {leader.node_id}")
        self.apply(leader, self.call(leader, leader.core.add_voter, operation, node.config.local_node,
                                     self.local_time(leader)))
        return operation

    def remove_voter(self, key: ReplicaKey, leader: SimNode | None = None) -> int | None:
        leader = leader or self.leader()
        if leader is None or leader.core is None:
            return None
        operation = self._operation(f"remove {key} on {leader.node_id}")
        self.apply(leader, self.call(leader, leader.core.remove_voter, operation, key, self.local_time(leader)))
        return operation

    def upgrade_kraft_version(self, leader: SimNode | None = None) -> int | None:
        leader = leader or self.leader()
        if leader is None or leader.core is None:
            return None
        operation = self._operation(f"kraft.version 1 on {leader.node_id}")
        self.apply(leader, self.call(leader, leader.core.upgrade_kraft_version, operation, KRAFT_VERSION_DYNAMIC,
                                     self.local_time(leader)))
        return operation

    def succeeded(self, operation: int | None) -> bool:
        return operation is not None and self.outcomes.get(operation, (-1, None))[0] == ErrorCode.NONE

    def replica_key(self, node: SimNode) -> ReplicaKey:
        return ReplicaKey(node.node_id, node.config.directory_id)

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
                    control, data = split_snapshot(node.log.read_snapshot(snapshot_id, 0, size or 0))
                    if control is not None:
                        self.checker.on_snapshot_control(node, snapshot_id.end_offset, control.kraft_version,
                                                         control.voters)
                    self.checker.on_snapshot_loaded(node, snapshot_id.end_offset, data)
                    node.applied_end = snapshot_id.end_offset
                    node.digest = data
                case VoterChangeDone(operation=operation, error_code=code, message=why):
                    self.outcomes[operation] = (code, why)
                    self.trace.append(f"{self.now:.3f} operation {operation} done: {ErrorCode(code).name} {why or ''}")
                case _:
                    raise TypeError(effect)

    # -- network ---------------------------------------------------------------------------------

    def send(self, src: int, dst: int, cid: int, message: Message) -> None:
        if dst < 0 and message.is_request:
            # A bootstrap server: the node behind it, whose answer comes back as from `dst`.
            servers = self.nodes[src].config.bootstrap_servers
            index = -2 - dst
            if not 0 <= index < len(servers):
                return
            self._aliases[(src, cid)] = dst
            dst = servers[index][1]
        elif not message.is_request and (dst, cid) in self._aliases:
            alias = self._aliases.pop((dst, cid))
            self._send(src, dst, cid, message, as_source=alias)
            return
        self._send(src, dst, cid, message)

    def _send(self, src: int, dst: int, cid: int, message: Message, as_source: int | None = None) -> None:
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
            source = src if as_source is None else as_source
            item = _InFlight(self.now + delay, next(self._seq), src, dst, Received(source, cid, message))
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
                dest = self._aliases.pop((item.src, item.received.correlation_id), item.dst)
                effects = self.call(sender, sender.core.unreachable, dest, item.received.correlation_id,
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


# -- membership (KIP-853) ----------------------------------------------------------------------------


@attrs.frozen
class MembershipResult:
    seed: int
    voters: int
    spares: int
    observers: int
    upgrade: bool
    file_logs: bool
    events: int
    committed_end: int
    epochs: int
    #: Voter changes committed (adds, removes, upgrades), and VotersRecords leaders appended.
    changes: int
    voter_records: int
    replaced: int
    final_voters: str
    #: Voter changes asked of leaders, by kind ("add", "remove", "remove-leader", "kraft.version",
    #: "refused", "given up"), as (kind, count) pairs.
    change_counts: tuple[tuple[str, int], ...] = ()
    #: Endpoint moves (a voter restarted on another port).
    moved: int = 0


def run_membership_seed(seed: int, fault_seconds: float = 30.0, recovery_bound: float = 40.0) -> MembershipResult:
    """One randomized membership scenario: a dynamic quorum of 1-3 voters and 1-2 spare controllers
    (sometimes a static quorum upgraded to kraft.version 1 first), faults as in `run_seed` with voters
    added, removed (the leader too), replaced (a new disk) and moved (a new endpoint) among them;
    then everything heals, pending replacements are finished, and a leader must commit on every node
    within `recovery_bound` simulated seconds."""
    rng = random.Random(seed ^ 0x3E3B)
    voters = rng.choice([1, 1, 2, 3, 3])
    spares = rng.choice([1, 2, 2])
    observers = rng.choice([0, 0, 1])
    upgrade = rng.random() < 0.2
    file_logs = rng.random() < 0.15
    cluster = SimCluster(seed, voters=voters, spares=spares, observers=observers, membership=True, upgrade=upgrade,
                         file_logs=file_logs, append_linger_ms=rng.choice([0, 0, 5]))
    try:
        return _run_membership(cluster, rng, fault_seconds, recovery_bound, upgrade)
    finally:
        cluster.close()


def _run_membership(cluster: SimCluster, rng: random.Random, fault_seconds: float, recovery_bound: float,
                    upgrade: bool) -> MembershipResult:
    cluster.crash_mid_apply_rate = rng.choice([0.0, 0.002, 0.01]) if cluster.directory is not None else \
        rng.choice([0.0, 0.0, 0.002])
    node_ids = sorted(cluster.nodes)
    controllers = sorted(cluster.controllers)
    #: Nodes whose disk was replaced: the replica key they had, until it is out of the voter set and
    #: the new replica is in.
    replaced: dict[int, ReplicaKey] = {}
    replacements = 0

    def leader_voters() -> VoterSet | None:
        leader = cluster.leader()
        return leader.core.voters if leader is not None and leader.core is not None else None

    def existing(voters: VoterSet) -> int:
        """Voters whose replica still exists (not on a replaced disk)."""
        return sum(1 for k in voters.keys() if cluster.replica_key(cluster.nodes[k.id]) == k)

    def add() -> None:
        voters = leader_voters()
        if voters is None or len(voters) >= 5:
            return
        candidates = [cluster.nodes[n] for n in controllers
                      if n not in voters and cluster.nodes[n].core is not None and n not in replaced]
        if candidates:
            node = rng.choice(candidates)
            grown = voters.add(VoterNode(cluster.replica_key(node)))
            # As an operator would: never a change after which the replicas left cannot form a majority.
            if grown is not None and existing(grown) >= grown.majority:
                cluster.add_voter(node)

    def remove() -> None:
        voters = leader_voters()
        if voters is None or len(voters) <= 1:
            return
        key = rng.choice(voters.keys())
        shrunk = voters.remove(key)
        if shrunk is not None and existing(shrunk) >= shrunk.majority:
            cluster.remove_voter(key)

    def replace() -> None:
        voters = leader_voters()
        leader = cluster.leader()
        if voters is None or leader is None or leader.core is None or replaced:
            return
        keys = [k for k in voters.keys() if cluster.replica_key(cluster.nodes[k.id]) == k]
        # Only while the others can still form a majority: losing one is what replacing a disk survives.
        # That must hold for every voter set that may yet be in force: the leader's committed one (its
        # newer set may be truncated away) and the last of every controller's log (an uncommitted set
        # there is in force if that controller wins an election). A crashed controller's log is not
        # looked into: no replacement then.
        if len(keys) - 1 < voters.majority:
            return
        node = cluster.nodes[rng.choice(keys).id]
        possible = [leader.core.voter_history.voters_at(leader.core.high_watermark - 1)]
        for nid in controllers:
            core = cluster.nodes[nid].core
            if core is None:
                return
            possible.append(core.voters)
        if any(existing(s) - (cluster.replica_key(node) in s.keys()) < s.majority for s in possible):
            return
        replaced[node.node_id] = cluster.replica_key(node)
        cluster.replace_disk(node)

    def finish_replacements() -> None:
        voters = leader_voters()
        if voters is None:
            return
        for nid, old in list(replaced.items()):
            if voters.is_voter(old) and voters.key_of(nid) == old:
                cluster.remove_voter(old)
            elif nid not in voters:
                if cluster.nodes[nid].core is not None:
                    cluster.add_voter(cluster.nodes[nid])
            else:
                del replaced[nid]
            return

    upgraded = [not upgrade]

    def convert() -> None:
        """Once kraft.version 1 is committed, the operator moves each node to bootstrap servers (a
        replica configured with static voters follows only their leaders); voters change after that."""
        if not upgraded[0]:
            upgraded[0] = any(cluster.succeeded(op) for op, what in cluster.operations.items() if "kraft" in what)
            if not upgraded[0]:
                cluster.upgrade_kraft_version()
                return
        left = [n for n in node_ids if n not in cluster.converted]
        if left:
            cluster.convert_to_bootstrap_config(cluster.nodes[rng.choice(left)])

    def fault() -> None:
        nonlocal replacements
        static = upgrade and len(cluster.converted) < len(node_ids)
        kind = rng.choices(
            ["crash", "restart", "partition", "heal_links", "lossy", "snapshot", "resign",
             "add", "remove", "replace", "finish", "move", "convert"],
            weights=[3, 4, 1, 3, 1, 3, 1, 0 if static else 5, 0 if static else 4, 0 if static else 1,
                     0 if static else 4, 1, 6 if static else 0],
        )[0]
        if kind == "crash":
            cluster.crash(cluster.nodes[rng.choice(node_ids)])
        elif kind == "restart":
            for node in cluster.nodes.values():
                if node.core is None and rng.random() < 0.7:
                    cluster.restart(node)
        elif kind == "partition":
            shuffled = node_ids[:]
            rng.shuffle(shuffled)
            cut = rng.randrange(1, len(shuffled))
            cluster.partition([set(shuffled[:cut]), set(shuffled[cut:])])
        elif kind == "heal_links":
            cluster.blocked.clear()
        elif kind == "lossy":
            cluster.drop_rate = rng.choice([0.0, 0.05, 0.2])
            cluster.dup_rate = rng.choice([0.0, 0.05])
            cluster.spike_rate = rng.choice([0.0, 0.02])
        elif kind == "snapshot":
            cluster.take_snapshot(cluster.nodes[rng.choice(node_ids)], delete_prefix=rng.random() < 0.8)
        elif kind == "resign":
            cluster.resign()
        elif kind == "add":
            add()
        elif kind == "remove":
            remove()
        elif kind == "replace":
            before = len(replaced)
            replace()
            replacements += len(replaced) - before
        elif kind == "finish":
            finish_replacements()
        elif kind == "move":
            node = cluster.nodes[rng.choice(controllers)]
            if node.core is not None:
                cluster.move_endpoint(node)
        elif kind == "convert":
            convert()

    actions: deque[tuple[float, object]] = deque()
    t = 0.0
    while True:
        t += rng.expovariate(1 / 0.4)
        if t >= fault_seconds:
            break
        actions.append((t, fault if rng.random() < 0.55 else cluster.propose))

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
            if replaced:
                finish_replacements()
                continue
            if upgrade and len(cluster.converted) < len(node_ids) and upgraded[0]:
                convert()
            if target is not None and cluster.all_caught_up(target):
                break
            if target is None or cluster.checker.committed_end <= target:
                proposed = cluster.propose(tag="heal")
                if proposed is not None and target is None:
                    target = proposed[1]
        if target is None or not cluster.all_caught_up(target):
            cluster.checker.fail(
                f"no leader committed on every node within {recovery_bound}s after healing (target {target}, "
                f"replacements pending {replaced})"
            )
    except InvariantViolation as exc:
        raise InvariantViolation(f"{exc}\n{cluster.failure_report()}") from exc
    except Exception as exc:
        raise InvariantViolation(f"{type(exc).__name__}: {exc}\n{cluster.failure_report()}") from exc
    leader = cluster.leader()
    counts: dict[str, int] = {}
    for operation, what in cluster.operations.items():
        code = cluster.outcomes.get(operation, (None, None))[0]
        verb, key, *_, on = what.split()
        kind = "given up" if code is None or code == ErrorCode.NOT_LEADER_OR_FOLLOWER else (
            "refused" if code != ErrorCode.NONE else
            "remove-leader" if verb == "remove" and key.split(":")[0] == on else verb)
        counts[kind] = counts.get(kind, 0) + 1
    return MembershipResult(
        seed=cluster.seed,
        voters=len(cluster.voters),
        spares=len(cluster.controllers) - len(cluster.voters),
        observers=len(cluster.nodes) - len(cluster.controllers),
        upgrade=upgrade,
        file_logs=cluster.directory is not None,
        events=cluster.events,
        committed_end=cluster.checker.committed_end,
        epochs=len(cluster.checker.leader_of_epoch),
        changes=sum(1 for code, _ in cluster.outcomes.values() if code == ErrorCode.NONE),
        voter_records=cluster.checker.voter_records,
        replaced=replacements,
        final_voters=str(leader.core.voters) if leader is not None and leader.core is not None else "",
        change_counts=tuple(sorted(counts.items())),
        moved=cluster.moves,
    )
