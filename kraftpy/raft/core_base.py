"""What every role of `RaftCore` shares: one node's state, and the plumbing its handlers use.

`RaftCore` (kraftpy.raft.core) is put together from one mixin per role over this base:

    RaftCore  = the public entry points, the epoch prelude of `step` and the dispatcher   core.py
    + ElectionRole   Unattached / Prospective / Candidate / Resigned timers, Vote          election.py
    + LeaderRole     appending, the accumulator, answering Fetch, the high watermark       leader.py
    + FollowerRole   the fetch loop of followers and observers, Begin/EndQuorumEpoch       follower.py
    + SnapshotRole   creating, serving and downloading snapshots (KIP-630)                 snapshots.py
    + CoreBase       the state below, commits, flushes, requests in flight, leaving a role  core_base.py

Why mixins over one object rather than one object per role: every handler needs the same few
collaborators (the log, the quorum state, the clock, the effects it returns) and may end its role
by a transition that another role's code starts (a follower's fetch timeout makes it Prospective;
a vote makes a leader), which role objects could only do through a back-reference to the core. So
the *code* is split by role while the node stays one object; the *state* a role owns lives in one
attribute that exists exactly as long as the role, as Kafka keeps it in its epoch states:
`_leader` (`LeaderState`: tracker, accumulator, held fetches) and `_fetch` (`FetchProgress`).
Transitions go through kraftpy.raft.quorum_state, the one place that switches states; `_reset_role`
then drops whatever the old role owned.

Each handler appends the effects it causes to ``out``, in the order they must be applied.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from kraftpy.raft.config import RaftConfig
from kraftpy.raft.effects import (
    Commit,
    Effect,
    ElectionState,
    FlushLog,
    PersistQuorumState,
    Send,
    VoterChangeDone,
)
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.log import RaftLog
from kraftpy.raft.messages import NO_LEADER, FetchResponse, Message
from kraftpy.raft.quorum_state import EpochState, Leader, QuorumState
from kraftpy.raft.voter_history import VoterHistory
from kraftpy.raft.voters import Endpoint, ReplicaKey, VoterSet

if TYPE_CHECKING:
    from kraftpy.raft.follower import FetchProgress
    from kraftpy.raft.leader import LeaderState

INF = float("inf")


#: A leader that has not heard from a majority of the voters for this many fetch timeouts resigns
#: (Kafka's LeaderState.CHECK_QUORUM_TIMEOUT_FACTOR): a follower gives up on the leader after one fetch
#: timeout, so the leader's margin keeps a leader whose followers are only slow (a large batch being
#: replayed) from resigning first.
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5


def wall_clock_ms() -> int:
    """The default wall clock of record timestamps: milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def coalesce(effects: list[Effect]) -> list[Effect]:
    """Drop a PersistQuorumState that a later one overrides before any message leaves, and fold
    every FlushLog into the first (with the largest offset): moving durability earlier is always
    safe, and it saves the driver a thread hop per extra flush."""
    out: list[Effect | None] = []
    unsent_persist: int | None = None
    first_flush: int | None = None
    for effect in effects:
        if isinstance(effect, PersistQuorumState):
            if unsent_persist is not None:
                out[unsent_persist] = None
            unsent_persist = len(out)
        elif isinstance(effect, Send):
            unsent_persist = None
        elif isinstance(effect, FlushLog):
            if first_flush is not None:
                earlier = out[first_flush]
                assert isinstance(earlier, FlushLog)
                out[first_flush] = FlushLog(max(earlier.up_to, effect.up_to))
                continue
            first_flush = len(out)
        out.append(effect)
    return [e for e in out if e is not None]


class RequestKind(enum.Enum):
    """What an outstanding request (other than the fetch loop's own) asked for."""

    PRE_VOTE = "pre-vote"
    VOTE = "vote"
    BEGIN_QUORUM_EPOCH = "begin-quorum-epoch"
    END_QUORUM_EPOCH = "end-quorum-epoch"
    UPDATE_VOTER = "update-voter"


@attrs.define
class PendingRequest:
    """A request sent by this node whose response has not come back; dropped on any transition."""

    dest: int
    kind: RequestKind
    epoch: int


class CoreBase:
    """The state of one node and the plumbing every role uses (see the module doc)."""

    def __init__(
        self,
        config: RaftConfig,
        log: RaftLog,
        *,
        rng: random.Random,
        now: float,
        persisted: ElectionState | None = None,
        wall_clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self._log = log
        self._rng = rng
        self._now = now
        #: Milliseconds for the timestamps of the batches this node appends as leader.
        self._wall_clock = wall_clock
        self._election_timeout = config.election_timeout_ms / 1000
        self._fetch_timeout = config.fetch_timeout_ms / 1000
        #: How long a leader goes without fetches from a majority before it resigns (kraftpy.raft.leader).
        self._check_quorum_timeout = self._fetch_timeout * CHECK_QUORUM_TIMEOUT_FACTOR
        self._request_timeout = config.request_timeout_ms / 1000
        self._retry_backoff = config.retry_backoff_ms / 1000
        #: The kraft.version and voter sets of the log, by offset (KIP-853); the newest set is the one
        #: this node uses, committed or not.
        self._history = VoterHistory(config.static_voters)
        self._history.load(log)
        snapshot = log.latest_snapshot_id
        #: Invariant: never decreases in one process lifetime; `log.start_offset <= _high_watermark
        #: <= _flushed`; everything below it is committed (on a majority of voters, durably).
        self._high_watermark = max(log.start_offset, snapshot.end_offset if snapshot else 0)
        self._quorum = QuorumState(config.node_id, self._history.voters, self._election_timeout, rng, persisted, now,
                                   directory_id=config.directory_id, dynamic=self._history.is_dynamic,
                                   removal_pending=self._removal_pending())
        #: Endpoints of leaders this node has no voter record of, as their messages named them.
        self._learned_endpoints: dict[int, tuple[Endpoint, ...]] = {}
        #: Invariant: `_applied <= _high_watermark`; Commit effects delivered everything below it.
        self._applied = log.start_offset
        #: The last high watermark a Commit effect announced.
        self._reported_hwm = self._high_watermark
        #: Committed batches are waiting for the next call (each call delivers a bounded amount).
        self._commit_backlog = False
        #: Invariant: the log is durable below `_flushed` once the effects already returned are
        #: applied. A restarted log is durable to its end.
        self._flushed = log.end_offset
        #: Exactly while Leader.
        self._leader: LeaderState | None = None
        #: Exactly while Follower, or Unattached as an observer looking for the leader.
        self._fetch: FetchProgress | None = None
        self._pending: dict[int, PendingRequest] = {}
        self._next_correlation_id = rng.getrandbits(30)
        self._started = False

    # -- read-only view --------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def state(self) -> EpochState:
        return self._quorum.state

    @property
    def epoch(self) -> int:
        return self._quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self._quorum.leader_id

    @property
    def is_leader(self) -> bool:
        return isinstance(self._quorum.state, Leader)

    @property
    def is_voter(self) -> bool:
        return self._quorum.is_voter

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def voters(self) -> VoterSet:
        """The voter set this node uses: the newest in its log (or controller.quorum.voters)."""
        return self._history.voters

    @property
    def voter_history(self) -> VoterHistory:
        return self._history

    @property
    def kraft_version(self) -> int:
        """The kraft.version of the log's end (0: static voters; 1: voters in the log)."""
        return self._history.kraft_version

    @property
    def local_key(self) -> ReplicaKey:
        return self.config.key

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        """Where to reach node `node_id` on the quorum's listener: its voter record, else the endpoints
        a leader's message named, else (for -2, -3, ...) a bootstrap server. None when unknown."""
        if node_id < 0:
            index = -2 - node_id
            servers = self.config.bootstrap_servers
            return servers[index] if 0 <= index < len(servers) else None
        endpoints: tuple[Endpoint, ...] = ()
        node = self._history.voters.node(node_id)
        if node is not None:
            endpoints = node.endpoints
        if not endpoints:
            endpoints = self._learned_endpoints.get(node_id, ())
        if not endpoints and self._history.static is not None:
            static = self._history.static.node(node_id)
            endpoints = static.endpoints if static is not None else ()
        for endpoint in endpoints:
            if endpoint.name == self.config.listener_name:
                return endpoint.host, endpoint.port
        return None

    @property
    def election_state(self) -> ElectionState:
        return self._quorum.persisted

    @property
    def log(self) -> RaftLog:
        return self._log

    # -- plumbing --------------------------------------------------------------------------------

    def _advance_clock(self, now: float) -> float:
        # A clock that jumps back is treated as standing still: timers only ever fire late.
        if now > self._now:
            self._now = now
        return self._now

    def _new_correlation_id(self) -> int:
        cid = self._next_correlation_id
        self._next_correlation_id = (cid + 1) & 0x7FFFFFFF
        return cid

    def _send_request(self, dest: int, message: Message, kind: RequestKind, out: list[Effect]) -> None:
        cid = self._new_correlation_id()
        self._pending[cid] = PendingRequest(dest, kind, self.epoch)
        out.append(Send(dest, cid, message))

    def _take_pending(self, cid: int, source: int, kinds: tuple[RequestKind, ...]) -> PendingRequest | None:
        """The request a response from `source` answers, if it is one of ours of one of `kinds`."""
        pending = self._pending.get(cid)
        if pending is None or pending.dest != source or pending.kind not in kinds:
            return None
        del self._pending[cid]
        return pending

    def _leader_or_none(self) -> int:
        leader = self._quorum.leader_id
        return NO_LEADER if leader is None else leader

    def _other_voters(self) -> list[int]:
        return sorted(v for v in self._history.voters.ids if v != self.node_id)

    def _static_voter_ids(self) -> frozenset[int] | None:
        """The voter ids messages are checked against in a static quorum; None in a dynamic one."""
        return None if self._history.is_dynamic else self._history.voters.ids

    def _leader_endpoints(self) -> tuple[Endpoint, ...]:
        """The endpoints of the leader this node knows, for the messages that name it."""
        leader = self._quorum.leader_id
        if leader is None:
            return ()
        if leader == self.node_id:
            return self.config.endpoints
        node = self._history.voters.node(leader)
        if node is not None and node.endpoints:
            return node.endpoints
        return self._learned_endpoints.get(leader, ())

    def _learn_endpoints(self, leader_id: int | None, endpoints: tuple[Endpoint, ...]) -> None:
        if leader_id is not None and leader_id != self.node_id and endpoints and self._history.is_dynamic:
            self._learned_endpoints[leader_id] = endpoints
            if len(self._learned_endpoints) > 64:  # bounded: only leaders' endpoints are kept
                self._learned_endpoints.pop(next(iter(self._learned_endpoints)))

    def _voters_changed(self, now: float, out: list[Effect]) -> None:
        """The log's voter set or kraft.version changed (an append, a truncation, a snapshot): the
        quorum state and a leader's count follow at once (kraftpy.raft.leader)."""
        self._quorum.update_voters(self._history.voters, self._history.is_dynamic)
        self._quorum.removal_pending = self._removal_pending()
        if self._leader is not None:
            self._leader_voters_changed(now, out)

    def _leader_voters_changed(self, now: float, out: list[Effect]) -> None:
        """kraftpy.raft.leader: a new voter set counts from now on."""
        raise NotImplementedError

    def _flush(self, out: list[Effect]) -> None:
        """Ask for the whole log, and every change made to it, to be durable before what follows."""
        end = self._log.end_offset
        out.append(FlushLog(end))
        self._flushed = end
        if self._leader is not None:
            self._leader.tracker.update_local(end, self._now)

    def _finish(self, out: list[Effect]) -> list[Effect]:
        """What every entry point returns: its effects, then the commits they led to, coalesced."""
        self._deliver_commits(out)
        self._quorum.removal_pending = self._removal_pending()
        return coalesce(out)

    def _removal_pending(self) -> bool:
        """Is the newest voter change in the log this replica's own removal, not committed yet (it may
        then still stand: kraftpy.raft.quorum_state)?"""
        history = self._history
        latest = history.latest_offset
        if latest is None or latest < self._high_watermark or not history.is_dynamic:
            return False
        key = self.config.key
        return not history.voters.is_voter(key) and history.voters_at(latest - 1).is_voter(key)

    def _deliver_commits(self, out: list[Effect]) -> None:
        """Hand newly committed batches to the state machine, in order (Raft thesis §3.5: apply
        entries once they are committed); at most about `fetch_max_bytes` per call, so that a long
        backlog (after a restart) is read in bounded steps: `next_deadline` is then "now"."""
        batches = []
        budget = self.config.fetch_max_bytes
        self._commit_backlog = False
        while self._applied < self._high_watermark:
            if budget <= 0:
                self._commit_backlog = True
                break
            progressed = False
            for batch in self._log.read(self._applied, budget):
                if batch.next_offset > self._high_watermark:
                    break
                batches.append(batch)
                self._applied = batch.next_offset
                budget -= batch.size_in_bytes
                progressed = True
            if not progressed:
                break
        if batches or self._high_watermark > self._reported_hwm:
            self._reported_hwm = self._high_watermark
            out.append(Commit(self._high_watermark, tuple(batches)))

    # -- leaving a role --------------------------------------------------------------------------

    def _reset_role(self, now: float, out: list[Effect]) -> None:
        """Forget everything the previous state owned: requests in flight, the leader's state
        (answering the fetches it held; proposals it accumulated are dropped), the fetch loop.
        Called right after every transition."""
        leader, self._leader = self._leader, None
        if leader is not None:
            for parked in leader.parked.values():
                answer = FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, self._leader_or_none(), self.epoch,
                                       leader_endpoints=self._leader_endpoints())
                out.append(Send(parked.source, parked.correlation_id, answer))
            if leader.voter_change is not None:
                # Its record may still be committed by the next leader: the operator asks describe.
                out.append(VoterChangeDone(leader.voter_change.operation, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                           "the leadership changed before the voter change was committed"))
        self._pending.clear()
        self._fetch = None

    def _become_unattached(self, epoch: int, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_to_unattached(epoch, now)
        self._reset_role(now, out)
        if not self._quorum.may_stand:
            self._start_observer_search(now, out)

    def _become_follower(self, epoch: int, leader_id: int, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_to_follower(epoch, leader_id)
        self._reset_role(now, out)
        self._start_following(now, out)

    # -- entry points of the roles, defined by their mixins --------------------------------------

    def _start_following(self, now: float, out: list[Effect]) -> None:
        """kraftpy.raft.follower: start the fetch loop of a new Follower."""
        raise NotImplementedError

    def _start_observer_search(self, now: float, out: list[Effect]) -> None:
        """kraftpy.raft.follower: an observer without a leader fetches from voters until one names it."""
        raise NotImplementedError

    def _send_fetch(self, now: float, out: list[Effect]) -> None:
        """kraftpy.raft.follower: send the fetch loop's next Fetch (or FetchSnapshot)."""
        raise NotImplementedError

    def _fetch_failed(self, fetch: FetchProgress, now: float) -> None:
        """kraftpy.raft.follower: retry the fetch loop after the back-off."""
        raise NotImplementedError

    def _become_prospective(self, now: float, out: list[Effect]) -> None:
        """kraftpy.raft.election: start a pre-vote (KIP-996)."""
        raise NotImplementedError

    def _become_leader(self, now: float, out: list[Effect]) -> None:
        """kraftpy.raft.leader: take office after winning the vote."""
        raise NotImplementedError

    def _resign(self, now: float, out: list[Effect]) -> None:
        """kraftpy.raft.leader: give the epoch up and tell the voters (EndQuorumEpoch)."""
        raise NotImplementedError
