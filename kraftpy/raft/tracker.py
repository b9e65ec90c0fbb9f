"""The leader's fast-changing bookkeeping: where each replica's log ends and when it last fetched.

Kept apart from the frozen epoch states because it changes on every Fetch. One `LeaderTracker`
lives exactly as long as one Leader state.
"""

from __future__ import annotations

import attrs

from kraftpy.raft.messages import ReplicaState

#: An observer that has not fetched for this long is forgotten (Kafka's OBSERVER_SESSION_TIMEOUT_MS),
#: so that fetches from ever new replica ids cannot grow the leader's bookkeeping without bound.
OBSERVER_SESSION_TIMEOUT = 300.0


@attrs.define
class ReplicaProgress:
    replica_id: int
    #: The replica's log end offset as of its last Fetch; -1 before the first one.
    end_offset: int = -1
    #: Clock time of the last Fetch in this epoch; None before the first one.
    last_fetch_time: float | None = None
    #: Last time the replica was known to have everything the leader had (Kafka's
    #: lastCaughtUpTimestamp): a fetch at or past the leader's end offset of the previous fetch.
    last_caught_up_time: float | None = None
    #: The leader's end offset when this replica last fetched, and when.
    leader_end_at_last_fetch: int = -1


class LeaderTracker:
    """Replica progress and the high watermark of one leader epoch.

    Invariants:
    - `high_watermark` never decreases while this tracker lives, and starts at the leader's
      previous local high watermark;
    - it only moves to an offset past `epoch_start_offset`, i.e. once the leader-change record of
      this epoch is on a majority (Raft thesis §3.6.2: commit only entries of the current term by
      counting replicas);
    - only voters (the leader included, with its flushed end offset) count; observers never do.
    """

    def __init__(
        self,
        local_id: int,
        voters: frozenset[int],
        epoch: int,
        epoch_start_offset: int,
        high_watermark: int,
        now: float,
    ) -> None:
        self.local_id = local_id
        self.voters = voters
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.high_watermark = high_watermark
        self.elected_at = now
        self.replicas: dict[int, ReplicaProgress] = {v: ReplicaProgress(v) for v in voters}
        self.observers: dict[int, ReplicaProgress] = {}
        #: When inactive observers are next looked for (at most once a second, on a new observer).
        self._next_observer_sweep = now
        #: Voters that have neither acknowledged BeginQuorumEpoch nor fetched in this epoch.
        self.unacknowledged: set[int] = set(voters) - {local_id}

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def update_local(self, flushed_end_offset: int, now: float) -> None:
        me = self.replicas[self.local_id]
        me.end_offset = flushed_end_offset
        me.last_fetch_time = now
        me.last_caught_up_time = now

    def update_fetch(self, replica_id: int, fetch_offset: int, leader_end_offset: int, now: float) -> None:
        """Record a valid Fetch (offset and epoch matched the leader's log)."""
        if replica_id in self.voters:
            progress = self.replicas[replica_id]
        else:
            progress = self.observers.get(replica_id)
            if progress is None:
                if now >= self._next_observer_sweep:
                    self.forget_inactive_observers(now)
                progress = self.observers[replica_id] = ReplicaProgress(replica_id)
        if fetch_offset >= leader_end_offset:
            progress.last_caught_up_time = now
        elif progress.last_fetch_time is not None and fetch_offset >= progress.leader_end_at_last_fetch:
            progress.last_caught_up_time = progress.last_fetch_time
        progress.end_offset = fetch_offset
        progress.last_fetch_time = now
        progress.leader_end_at_last_fetch = leader_end_offset
        self.unacknowledged.discard(replica_id)

    def record_contact(self, replica_id: int, now: float) -> None:
        """A voter answered in this epoch without a Fetch (e.g. acknowledged BeginQuorumEpoch)."""
        self.unacknowledged.discard(replica_id)

    def maybe_advance_high_watermark(self) -> bool:
        """Move the high watermark to the largest offset a majority of voters has, if that offset
        covers an entry of this epoch and is larger than the current one. True if it moved."""
        ends = sorted((p.end_offset for p in self.replicas.values()), reverse=True)
        candidate = ends[self.majority - 1]
        if candidate > self.epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def majority_contact_time(self) -> float:
        """The latest time by which a majority of voters (the leader counts, as always in contact)
        had fetched in this epoch; voters that never fetched count as of the election. The leader
        resigns once this is a fetch timeout old (KIP-595, check quorum)."""
        times = sorted(
            (
                p.last_fetch_time if p.last_fetch_time is not None else self.elected_at
                for rid, p in self.replicas.items()
                if rid != self.local_id
            ),
            reverse=True,
        )
        others_needed = self.majority - 1
        if others_needed == 0:
            return float("inf")
        return times[others_needed - 1]

    def voters_by_end_offset(self) -> tuple[int, ...]:
        """Other voters, most up to date first (ties by id): the preferred successors."""
        others = [p for rid, p in self.replicas.items() if rid != self.local_id]
        others.sort(key=lambda p: (-p.end_offset, p.replica_id))
        return tuple(p.replica_id for p in others)

    def forget_inactive_observers(self, now: float) -> None:
        self._next_observer_sweep = now + 1.0
        idle = [rid for rid, p in self.observers.items()
                if p.last_fetch_time is not None and now - p.last_fetch_time >= OBSERVER_SESSION_TIMEOUT]
        for rid in idle:
            del self.observers[rid]

    def describe(self) -> tuple[tuple[ReplicaState, ...], tuple[ReplicaState, ...]]:
        def state(p: ReplicaProgress) -> ReplicaState:
            return ReplicaState(
                replica_id=p.replica_id,
                log_end_offset=p.end_offset,
                last_fetch_timestamp=_ms(p.last_fetch_time),
                last_caught_up_timestamp=_ms(p.last_caught_up_time),
            )

        voters = tuple(state(self.replicas[v]) for v in sorted(self.voters))
        observers = tuple(state(self.observers[o]) for o in sorted(self.observers))
        return voters, observers


def _ms(t: float | None) -> int:
    return -1 if t is None else int(t * 1000)
