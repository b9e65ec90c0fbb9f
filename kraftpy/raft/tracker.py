"""The leader's fast-changing bookkeeping: where each replica's log ends and when it last fetched.

Kept apart from the frozen epoch states because it changes on every Fetch. One `LeaderTracker`
lives exactly as long as one Leader state.

Replicas are known by key (node id and directory id, KIP-853): a fetch from a replica whose key is
not the voter's of its id - a controller whose disk was replaced - is an observer's, and counts for
nothing. The voter set can change while the tracker lives (the leader appended a VotersRecord: the
new set counts from then on, Raft thesis §4.1); `update_voters` moves progress between voters and
observers, so that a new voter, caught up as an observer, counts at once.
"""

from __future__ import annotations

import attrs

from kraftpy.raft.messages import ReplicaState
from kraftpy.raft.voters import ReplicaKey, VoterNode, VoterSet

#: An observer that has not fetched for this long is forgotten (Kafka's OBSERVER_SESSION_TIMEOUT_MS),
#: so that fetches from ever new replica ids cannot grow the leader's bookkeeping without bound.
OBSERVER_SESSION_TIMEOUT = 300.0


@attrs.define
class ReplicaProgress:
    key: ReplicaKey
    #: The replica's log end offset as of its last Fetch; -1 before the first one.
    end_offset: int = -1
    #: Clock time of the last Fetch in this epoch; None before the first one.
    last_fetch_time: float | None = None
    #: Last time the replica was known to have everything the leader had (Kafka's
    #: lastCaughtUpTimestamp): a fetch at or past the leader's end offset of the previous fetch.
    last_caught_up_time: float | None = None
    #: The leader's end offset when this replica last fetched, and when.
    leader_end_at_last_fetch: int = -1
    #: The replica that last fetched for it (a static voter is known by id only; its fetches name
    #: their directory, which a kraft.version upgrade then writes).
    fetched_as: ReplicaKey | None = None

    @property
    def replica_id(self) -> int:
        return self.key.id


class LeaderTracker:
    """Replica progress and the high watermark of one leader epoch.

    Invariants:
    - `high_watermark` never decreases while this tracker lives, and starts at the leader's
      previous local high watermark;
    - it only moves to an offset past `epoch_start_offset`, i.e. once the leader-change record of
      this epoch is on a majority (Raft thesis §3.6.2: commit only entries of the current term by
      counting replicas);
    - only voters of the current set count (the leader with its flushed end offset, while it is one);
      observers never do.
    """

    def __init__(
        self,
        local_key: ReplicaKey | int,
        voters: VoterSet | frozenset[int],
        epoch: int,
        epoch_start_offset: int,
        high_watermark: int,
        now: float,
    ) -> None:
        self.local_key = local_key if isinstance(local_key, ReplicaKey) else ReplicaKey(local_key)
        self.local_id = self.local_key.id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.high_watermark = high_watermark
        self.elected_at = now
        #: The leader's own progress (its flushed log).
        self.local = ReplicaProgress(self.local_key)
        self.voter_set = voters if isinstance(voters, VoterSet) else VoterSet.of_ids(voters)
        #: Progress of each voter, by id (the leader's own when it is one).
        self.replicas: dict[int, ReplicaProgress] = {}
        self.observers: dict[ReplicaKey, ReplicaProgress] = {}
        #: When inactive observers are next looked for (at most once a second, on a new observer).
        self._next_observer_sweep = now
        #: Voters that have neither acknowledged BeginQuorumEpoch nor fetched in this epoch.
        self.unacknowledged: set[int] = set()
        #: What each voter last told the leader of itself in this epoch (UpdateVoter): its directory id,
        #: endpoints and kraft.version range. What a kraft.version upgrade writes for a static voter.
        self.reported: dict[int, VoterNode] = {}
        self._set_voters(self.voter_set, initial=True)

    @property
    def voters(self) -> frozenset[int]:
        return self.voter_set.ids

    @property
    def majority(self) -> int:
        return self.voter_set.majority

    @property
    def leader_is_voter(self) -> bool:
        return self.voter_set.is_voter(self.local_key)

    def _set_voters(self, voters: VoterSet, initial: bool = False) -> None:
        old = self.replicas
        self.voter_set = voters
        self.replicas = {}
        for node in voters.nodes:
            key = node.key
            if key.matches(self.local_key):
                progress = self.local
            else:
                progress = old.get(key.id)
                if progress is not None and progress.key.directory_id is None and key.directory_id is not None \
                        and (progress.fetched_as is None or key.matches(progress.fetched_as)):
                    progress.key = key  # the static voter, now known with its directory (an upgrade)
                if progress is None or not key.matches(progress.key):
                    found = [k for k in self.observers if key.matches(k)]
                    progress = self.observers.pop(found[0]) if found else ReplicaProgress(key)
                    if initial or progress.last_fetch_time is None:
                        self.unacknowledged.add(key.id)
            self.replicas[key.id] = progress
        for replica_id, progress in old.items():
            if replica_id not in self.replicas and progress is not self.local:
                self.observers.setdefault(progress.key, progress)
        self.unacknowledged &= {v for v in voters.ids if v != self.local_id}

    def update_voters(self, voters: VoterSet) -> None:
        """The leader appended a new voter set: count by it from now on."""
        if voters != self.voter_set:
            self._set_voters(voters)

    def update_local(self, flushed_end_offset: int, now: float) -> None:
        me = self.local
        me.end_offset = flushed_end_offset
        me.last_fetch_time = now
        me.last_caught_up_time = now

    def _progress(self, key: ReplicaKey, now: float) -> ReplicaProgress:
        voter = self.replicas.get(key.id)
        if voter is not None and voter.key.matches(key) and voter is not self.local:
            return voter
        progress = self.observers.get(key)
        if progress is None:
            if now >= self._next_observer_sweep:
                self.forget_inactive_observers(now)
            progress = self.observers[key] = ReplicaProgress(key)
        return progress

    def update_fetch(self, replica: ReplicaKey | int, fetch_offset: int, leader_end_offset: int, now: float) -> None:
        """Record a valid Fetch (offset and epoch matched the leader's log)."""
        key = replica if isinstance(replica, ReplicaKey) else ReplicaKey(replica)
        progress = self._progress(key, now)
        if fetch_offset >= leader_end_offset:
            progress.last_caught_up_time = now
        elif progress.last_fetch_time is not None and fetch_offset >= progress.leader_end_at_last_fetch:
            progress.last_caught_up_time = progress.last_fetch_time
        progress.end_offset = fetch_offset
        progress.last_fetch_time = now
        progress.leader_end_at_last_fetch = leader_end_offset
        progress.fetched_as = key
        if self.replicas.get(key.id) is progress:
            self.unacknowledged.discard(key.id)

    def record_contact(self, replica_id: int, now: float) -> None:
        """A voter answered in this epoch without a Fetch (e.g. acknowledged BeginQuorumEpoch)."""
        self.unacknowledged.discard(replica_id)

    def is_voter_key(self, key: ReplicaKey) -> bool:
        return self.voter_set.is_voter(key)

    def observer(self, key: ReplicaKey) -> ReplicaProgress | None:
        """The progress of replica `key` if it fetched as an observer (not a voter) in this epoch."""
        progress = self.observers.get(key)
        if progress is None or progress.last_fetch_time is None:
            return None
        return progress

    def maybe_advance_high_watermark(self) -> bool:
        """Move the high watermark to the largest offset a majority of voters has, if that offset
        covers an entry of this epoch and is larger than the current one. True if it moved."""
        ends = sorted((p.end_offset for p in self.replicas.values()), reverse=True)
        if not ends:
            return False
        candidate = ends[self.majority - 1]
        if candidate > self.epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def majority_contact_time(self) -> float:
        """The latest time by which a majority of voters (the leader counts, as always in contact,
        while it is one) had fetched in this epoch; voters that never fetched count as of the
        election. The leader resigns once this is a fetch timeout old (KIP-595, check quorum)."""
        times = sorted(
            (
                p.last_fetch_time if p.last_fetch_time is not None else self.elected_at
                for p in self.replicas.values()
                if p is not self.local
            ),
            reverse=True,
        )
        others_needed = self.majority - (1 if self.leader_is_voter else 0)
        if others_needed <= 0:
            return float("inf")
        if len(times) < others_needed:
            return self.elected_at
        return times[others_needed - 1]

    def voters_by_end_offset(self) -> tuple[int, ...]:
        """Other voters, most up to date first (ties by id): the preferred successors."""
        others = [p for rid, p in self.replicas.items() if p is not self.local]
        others.sort(key=lambda p: (-p.end_offset, p.replica_id))
        return tuple(p.replica_id for p in others)

    def forget_inactive_observers(self, now: float) -> None:
        self._next_observer_sweep = now + 1.0
        idle = [key for key, p in self.observers.items()
                if p.last_fetch_time is not None and now - p.last_fetch_time >= OBSERVER_SESSION_TIMEOUT]
        for key in idle:
            del self.observers[key]

    def describe(self) -> tuple[tuple[ReplicaState, ...], tuple[ReplicaState, ...]]:
        def state(p: ReplicaProgress) -> ReplicaState:
            return ReplicaState(
                replica_id=p.replica_id,
                log_end_offset=p.end_offset,
                last_fetch_timestamp=_ms(p.last_fetch_time),
                last_caught_up_timestamp=_ms(p.last_caught_up_time),
                # A static voter is known by id: its directory is the one it fetched with.
                replica_directory_id=p.key.directory_id or (p.fetched_as.directory_id if p.fetched_as else None),
            )

        voters = tuple(state(self.replicas[v]) for v in sorted(self.voters))
        observers = [p for p in self.observers.values() if p.last_fetch_time is not None]
        if not self.leader_is_voter:
            observers.append(self.local)
        observers.sort(key=lambda p: (p.key.id, str(p.key.directory_id)))
        return voters, tuple(state(p) for p in observers)


def _ms(t: float | None) -> int:
    return -1 if t is None else int(t * 1000)
