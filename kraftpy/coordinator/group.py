"""A classic consumer group: its members, generation, protocol and committed offsets (no I/O here).

Theory of operation
-------------------
The state graph, as Kafka's GroupMetadata draws it (every arrow is :meth:`ClassicGroup.transition_to`,
which refuses any other)::

                 first join                          all expected members joined
       Empty ─────────────────> PreparingRebalance ─────────────────────────────> CompletingRebalance
         ^  ^                      ^      │                                          │      │
         │  └──────────────────────┼──────┘ every member gone (a new, empty          │      │ leader's
         │                         │          generation)                            │      │ SyncGroup
         │                         │ a join with new metadata, a leave, a failure,   │      │ stored
         │                         └──── the leader rejoining ──────── Stable <──────┼──────┘
         │                                                              │            │
         │                          (every state) ──> Dead: deleted, expired, or its partition unloaded
         └─ (Empty groups are created by a first JoinGroup or a standalone OffsetCommit)

* Empty: no members; offsets kept until they expire. Joins start a rebalance.
* PreparingRebalance: joins are parked until every known member has rejoined or the rebalance
  timeout passes; heartbeats answer REBALANCE_IN_PROGRESS; commits of the old generation pass.
* CompletingRebalance: a new generation exists; the leader was sent every member's metadata and
  the group waits for its SyncGroup. Commits answer REBALANCE_IN_PROGRESS.
* Stable: every member has its assignment; heartbeats keep sessions alive.
* Dead: the group is gone from this coordinator; nothing is served.

The coordinator relays protocols opaquely: members name protocols with their metadata, the group
picks the one every member supports that most members prefer, and the leader's assignment bytes go
back to the members untouched. The consumer protocol's subscription is read only to know which
topics a consumer group subscribes to (OffsetDelete and offset expiry need it), as Kafka does.

This module holds data and the transitions that touch only the group; the protocol (what a
JoinGroup does, timers, writes) is in :mod:`kraftpy.coordinator.group_shard`.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections import Counter
from collections.abc import Callable

import attrs

from kraftpy.protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"
#: An empty member id in JoinGroup: "I am new" (Kafka's JoinGroupRequest.UNKNOWN_MEMBER_ID).
UNKNOWN_MEMBER_ID = ""


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

#: target state -> the states it may be entered from.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
    EMPTY: frozenset({PREPARING_REBALANCE}),
}


class IllegalTransition(AssertionError):
    """A transition the state graph does not have: a bug in the coordinator, never a client's doing."""


@attrs.frozen
class OffsetAndMetadata:
    """A committed offset as the coordinator keeps it (OffsetCommitValue's fields)."""

    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None  # only commits of OffsetCommit v2-v4 with a retention time


@attrs.define
class CommittedOffset:
    """An offset with the log offset of the record that carries it: the later record wins, always."""

    record_offset: int
    value: OffsetAndMetadata


@attrs.define
class PendingTxnOffset:
    """A transactional offset (TxnOffsetCommit) waiting for its producer's COMMIT or ABORT marker.

    ``record_offset`` is None until the write is acknowledged; ``write_id`` names the write, so that
    an acknowledgement or failure applies only to the offset it wrote. ``committed`` is set when the
    producer's COMMIT arrives before the write's acknowledgement (which then makes it committed)."""

    value: OffsetAndMetadata
    write_id: int
    record_offset: int | None = None
    committed: bool = False


@attrs.frozen
class JoinResult:
    member_id: str
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    #: (member_id, group_instance_id, metadata) of every member: only the leader gets them.
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@attrs.frozen
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@attrs.define(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    #: (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    #: Set while the member's JoinGroup is parked; called once with its result.
    join_callback: Callable[[JoinResult], None] | None = None
    #: Set while the member's SyncGroup is parked.
    sync_callback: Callable[[SyncResult], None] | None = None
    #: Joined but not yet answered once: its session timer is the new-member join timeout.
    is_new: bool = False
    #: Set by a heartbeat (or anything that proves the member alive) since its session timer started.
    heartbeat_satisfied: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """The same protocols with the same metadata in the same order."""
        return len(protocols) == len(self.protocols) and all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1]) for a, b in zip(protocols, self.protocols, strict=True))

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True  # a member parked in a rebalance is alive by definition
        return self.heartbeat_satisfied

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise KeyError(f"member {self.member_id} supports none of {sorted(candidates)}")


class ClassicGroup:
    """One classic group. Invariants (checked by :meth:`check_invariants` in the tests):

    * ``leader_id`` is a member's id, or None exactly when there are no members;
    * ``static_members`` maps each static member's instance id to its member id, and nothing else;
    * ``num_awaiting_join`` counts the members whose JoinGroup is parked;
    * ``supported_protocols[p]`` counts the members that support protocol ``p``;
    * a pending member (KIP-394: given an id, not yet rejoined with it) is not a member.
    """

    def __init__(self, group_id: str, state: GroupState, now_ms: int) -> None:
        self.group_id = group_id
        self.state = state
        self.state_timestamp: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        #: (topic, partition) -> ids of the commit writes in flight for it.
        self.pending_offset_commits: dict[tuple[str, int], set[int]] = {}
        #: producer id -> (topic, partition) -> the offset its open transaction commits (Kafka's
        #: pendingTransactionalOffsetCommits): not visible until the producer's COMMIT marker.
        #: Invariant: no inner dict is empty.
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], PendingTxnOffset]] = {}
        #: Topics the consumer group subscribes to; None when unknown (not a consumer group, or
        #: metadata that does not parse).
        self.subscribed_topics: set[str] | None = None
        #: Set when a member joins during the initial rebalance delay (the delay may be extended).
        self.new_member_added = False
        #: The rebalance timer running while PreparingRebalance: "initial" (the initial delay, never
        #: completed early), "join" (completed as soon as every member has joined) or None.
        self.join_timer: str | None = None
        #: The generation whose SyncGroups the sync timer waits for, or None.
        self.sync_timer_generation: int | None = None

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
                f"members={list(self.members)})")

    # -- state -----------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[PREPARING_REBALANCE]

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalTransition(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp = now_ms

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # -- members ---------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> Member:
        return self.members[member_id]

    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def add_pending_member(self, member_id: str) -> None:
        assert member_id not in self.members, "a pending member is not yet a member"
        self.pending_members.add(member_id)

    def current_static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def add(self, member: Member, callback: Callable[[JoinResult], None] | None = None) -> None:
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self.static_members, "instance id already a member"
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        member.join_callback = callback
        if member.is_awaiting_join:
            self.num_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocol_names())
            self.supported_protocols += Counter()  # drop zero counts
            if member.is_awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(self, member: Member, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, callback: Callable[[JoinResult], None] | None) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        self.supported_protocols += Counter()
        member.protocols = list(protocols)
        self.supported_protocols.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and member.join_callback is not None and callback is not member.join_callback:
            # A second JoinGroup while the first is parked (a client retrying): the first is answered so
            # that nothing waits forever; only the newest is completed with the rebalance.
            member.join_callback(JoinResult(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
        if callback is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.join_callback = callback

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """Give a static member a new member id (a restart); a parked request of the old id is fenced."""
        member = self.members.pop(old_member_id)
        self.maybe_invoke_join(member, JoinResult(old_member_id, ErrorCode.FENCED_INSTANCE_ID))
        self.maybe_invoke_sync(member, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            # The new incarnation owes the SyncGroup the old one did not send.
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[instance_id] = new_member_id
        return member

    def maybe_invoke_join(self, member: Member, result: JoinResult) -> None:
        if member.join_callback is not None:
            callback, member.join_callback = member.join_callback, None
            self.num_awaiting_join -= 1
            callback(result)

    def maybe_invoke_sync(self, member: Member, result: SyncResult) -> bool:
        if member.sync_callback is None:
            return False
        callback, member.sync_callback = member.sync_callback, None
        callback(result)
        return True

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False if none did (or no leader)."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"

    # -- online migration (KIP-848) -------------------------------------------------------------

    def clear_membership(self, now_ms: int) -> None:
        """The group became a consumer group (its members moved there): what stays is an Empty group
        holding the offsets. Not a transition of the graph above: the members are not gone, they are
        served elsewhere, so no rebalance and no Empty-state bookkeeping happen."""
        self.members.clear()
        self.static_members.clear()
        self.pending_members.clear()
        self.pending_sync_members.clear()
        self.num_awaiting_join = 0
        self.supported_protocols = Counter()
        self.protocol_type = self.protocol_name = self.leader_id = None
        self.generation_id = 0
        self.subscribed_topics = None
        self.join_timer = None
        self.sync_timer_generation = None
        self.new_member_added = False
        self.state = EMPTY
        self.state_timestamp = now_ms

    def is_offsets_only(self) -> bool:
        """Empty, without members or pending members: what a consumer group's offsets live in."""
        return self.is_(EMPTY) and not self.members and not self.pending_members

    def adopt_members(self, generation_id: int, members: list[Member], now_ms: int) -> None:
        """A consumer group whose members all use the classic protocol became this group (Kafka's
        ClassicGroup.fromConsumerGroup): Stable at ``generation_id``, each member with its assignment.
        Only an Empty group without members adopts (the offsets holder of the consumer group)."""
        assert self.is_(EMPTY) and not self.members and members
        for member in members:
            self.add(member)
        self.generation_id = generation_id
        self.protocol_name = self.select_protocol()
        self.subscribed_topics = self.compute_subscribed_topics()
        self.state = STABLE
        self.state_timestamp = now_ms

    # -- protocols -------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, count in self.supported_protocols.items() if count == n}

    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        if self.is_(EMPTY):
            return bool(protocol_type) and bool(protocols)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(self.supported_protocols[p] == n for p in protocols)

    def select_protocol(self) -> str:
        """The protocol every member supports that most members list first among those (ties: the
        one named by the earliest member, so the choice does not depend on dictionary order)."""
        assert self.members, "cannot select a protocol for an empty group"
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        first_seen: dict[str, int] = {}
        for i, member in enumerate(self.members.values()):
            choice = member.vote(candidates)
            votes[choice] += 1
            first_seen.setdefault(choice, i)
        return max(votes, key=lambda p: (votes[p], -first_seen[p]))

    def current_member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        assert self.state not in (DEAD, PREPARING_REBALANCE) and self.protocol_name is not None
        return tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members.clear()

    # -- subscriptions ---------------------------------------------------------------------------

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Unknown subscriptions count as subscribed (the safe answer), as Kafka does."""
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    # -- offsets ---------------------------------------------------------------------------------

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_offset_commits) or bool(self.pending_txn_offsets)

    def has_pending_commit(self, tp: tuple[str, int]) -> bool:
        return bool(self.pending_offset_commits.get(tp))

    def has_pending_offset_commits_for(self, tp: tuple[str, int]) -> bool:
        """A commit in flight or a transaction's offset not yet decided (Kafka's
        hasPendingOffsetCommitsForTopicPartition: what OffsetFetch's require_stable waits out)."""
        return self.has_pending_commit(tp) or any(tp in p for p in self.pending_txn_offsets.values())

    # -- transactional offsets (Kafka's GroupMetadata *TxnOffsetCommit*) ---------------------------

    def prepare_txn_offset_commit(self, producer_id: int, write_id: int, offsets) -> None:
        """TxnOffsetCommit's write of ``offsets`` (tp -> OffsetAndMetadata) was queued; a later one of
        the same producer for the same partition replaces it."""
        pending = self.pending_txn_offsets.setdefault(producer_id, {})
        for tp, value in offsets.items():
            pending[tp] = PendingTxnOffset(value, write_id)

    def on_txn_offset_commit_append(self, producer_id: int, write_id: int, tp: tuple[str, int],
                                    record_offset: int) -> None:
        """The write ``write_id`` of ``tp`` is in the log at ``record_offset``."""
        entry = self.pending_txn_offsets.get(producer_id, {}).get(tp)
        if entry is None or entry.write_id != write_id:
            return  # decided, deleted or replaced meanwhile
        entry.record_offset = record_offset
        if entry.committed:
            self._drop_pending_txn(producer_id, tp)
            self._apply_committed(tp, CommittedOffset(record_offset, entry.value))

    def fail_pending_txn_offset_commit(self, producer_id: int, write_id: int, tp: tuple[str, int]) -> None:
        entry = self.pending_txn_offsets.get(producer_id, {}).get(tp)
        if entry is not None and entry.write_id == write_id:
            self._drop_pending_txn(producer_id, tp)

    def complete_pending_txn_offset_commit(self, producer_id: int, committed: bool,
                                           marker_offset: int | None = None) -> int:
        """The producer's transaction ended (``committed``: COMMIT) with a marker at ``marker_offset``
        (None: unknown). Its offsets become the group's committed offsets, or are dropped; an offset
        written after the marker belongs to a later transaction and stays. Returns how many were decided."""
        pending = self.pending_txn_offsets.get(producer_id)
        if not pending:
            return 0
        decided = 0
        for tp, entry in list(pending.items()):
            if marker_offset is not None and entry.record_offset is not None and entry.record_offset > marker_offset:
                continue
            decided += 1
            if committed and entry.record_offset is None:
                # The marker follows the record in the log, so the record is committed too: it is
                # applied when its acknowledgement (which gives its log offset) arrives.
                entry.committed = True
                continue
            self._drop_pending_txn(producer_id, tp)
            if committed:
                assert entry.record_offset is not None
                self._apply_committed(tp, CommittedOffset(entry.record_offset, entry.value))
        return decided

    def _drop_pending_txn(self, producer_id: int, tp: tuple[str, int]) -> None:
        pending = self.pending_txn_offsets[producer_id]
        del pending[tp]
        if not pending:
            del self.pending_txn_offsets[producer_id]

    def _apply_committed(self, tp: tuple[str, int], committed: CommittedOffset) -> None:
        """The later record wins (Kafka's olderThan): a plain commit written after the transaction's stays."""
        current = self.offsets.get(tp)
        if current is None or current.record_offset < committed.record_offset:
            self.offsets[tp] = committed

    def prepare_offset_commit(self, write_id: int, tps) -> None:
        for tp in tps:
            self.pending_offset_commits.setdefault(tp, set()).add(write_id)

    def complete_offset_commit(self, write_id: int, tp: tuple[str, int], committed: CommittedOffset | None) -> None:
        """A commit write finished (``committed`` None: it failed). It applies only if the partition
        still waits for that write (a deletion meanwhile wins) and no later record is already applied."""
        pending = self.pending_offset_commits.get(tp)
        if pending is None or write_id not in pending:
            return
        pending.discard(write_id)
        if not pending:
            del self.pending_offset_commits[tp]
        if committed is not None:
            self._apply_committed(tp, committed)

    def remove_offsets(self, tps) -> dict[tuple[str, int], OffsetAndMetadata]:
        removed = {}
        for tp in tps:
            self.pending_offset_commits.pop(tp, None)
            for producer_id in [p for p, pending in self.pending_txn_offsets.items() if tp in pending]:
                self._drop_pending_txn(producer_id, tp)
            entry = self.offsets.pop(tp, None)
            if entry is not None:
                removed[tp] = entry.value
        return removed

    def remove_all_offsets(self) -> dict[tuple[str, int], OffsetAndMetadata]:
        pending_txn = [tp for pending in self.pending_txn_offsets.values() for tp in pending]
        return self.remove_offsets(dict.fromkeys([*self.offsets, *self.pending_offset_commits, *pending_txn]))

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """Which offsets retention removes now (Kafka 2.1+, KIP-211):

        * a group with a protocol that is Empty: ``retention`` after it became empty (or after the
          commit, for metadata written before 2.1 that has no state timestamp);
        * a Stable consumer group: offsets of topics it no longer subscribes to, ``retention`` after
          their commit;
        * a standalone group (offsets only, never a member): ``retention`` after the commit;
        * commits carrying an explicit expire timestamp (OffsetCommit v2-v4): at that timestamp.

        Offsets with a commit in flight never expire.
        """
        if self.protocol_type is not None and self.is_(EMPTY):
            def base(entry: CommittedOffset) -> int:
                return self.state_timestamp if self.state_timestamp is not None else entry.value.commit_timestamp
            keep_topics: set[str] = set()
        elif self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None and self.is_(STABLE):
            def base(entry: CommittedOffset) -> int:
                return entry.value.commit_timestamp
            keep_topics = self.subscribed_topics
        elif self.protocol_type is None:
            def base(entry: CommittedOffset) -> int:
                return entry.value.commit_timestamp
            keep_topics = set()
        else:
            return []
        expired = []
        for tp, entry in self.offsets.items():
            if tp[0] in keep_topics or self.has_pending_commit(tp):
                continue
            expire = entry.value.expire_timestamp
            if (now_ms >= expire) if expire is not None else (now_ms - base(entry) >= retention_ms):
                expired.append(tp)
        return expired

    # -- checks ----------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        assert (self.leader_id is None) == (not self.members), (self.leader_id, list(self.members))
        assert self.leader_id is None or self.leader_id in self.members
        assert self.static_members == {m.group_instance_id: m.member_id for m in self.members.values()
                                       if m.group_instance_id is not None}
        assert self.num_awaiting_join == sum(1 for m in self.members.values() if m.is_awaiting_join)
        expected = Counter()
        for m in self.members.values():
            expected.update(m.protocol_names())
        assert +self.supported_protocols == expected, (self.supported_protocols, expected)
        assert not (self.pending_members & set(self.members))
        assert self.pending_sync_members <= set(self.members)
        assert all(self.pending_txn_offsets.values()), "no producer without pending offsets"
        if self.state in (COMPLETING_REBALANCE, STABLE):
            assert self.members and self.protocol_name is not None
        if self.state is EMPTY:
            assert not self.members


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def parse_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a consumer protocol subscription, read with version 0's layout (a prefix of every
    later version, as Kafka reads it): int16 version, int32 count, count int16-length strings,
    nullable int32-length user data. None when the bytes do not follow it."""
    try:
        pos = _INT16.size
        (count,) = _INT32.unpack_from(metadata, pos)
        pos += _INT32.size
        if count < 0 or count > len(metadata):
            return None
        topics = set()
        for _ in range(count):
            (n,) = _INT16.unpack_from(metadata, pos)
            pos += _INT16.size
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(bytes(metadata[pos:pos + n]).decode("utf-8"))
            pos += n
        (n,) = _INT32.unpack_from(metadata, pos)
        pos += _INT32.size
        if n > 0 and pos + n > len(metadata):
            return None
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
