"""The classic group protocol for the groups of one ``__consumer_offsets`` partition.

Theory of operation
-------------------
A :class:`GroupShard` is the state machine of one :class:`~kraftpy.coordinator.runtime.CoordinatorShard`:
it is built by replaying the partition's records (``replay``), then serves JoinGroup, SyncGroup,
Heartbeat, LeaveGroup and the offset APIs for the groups that hash to that partition. A JoinGroup,
SyncGroup, Heartbeat or LeaveGroup naming a KIP-848 consumer group that has members goes to that
group instead (its classic members: :mod:`kraftpy.coordinator.consumer_group_migration`). It follows
Kafka 3.6's GroupCoordinator.scala and GroupMetadataManager.scala rule for rule; where kraftpy
differs, the comment says so and why.

Everything here is synchronous. A request that must wait (a JoinGroup until the rebalance
completes, a SyncGroup until the leader's assignment is stored, a commit until it is replicated)
passes a callback that the state machine calls exactly once; the async coordinator turns it into
a :class:`~kraftpy.coordinator.runtime.Waiter`. Kafka's delayed operations become shard timers:

    Kafka                      here (timer key)                 fires
    DelayedHeartbeat           ("heartbeat", group, member)     member's session timeout: remove it
    DelayedHeartbeat (pending) ("pending", group, member)       KIP-394 member id never used: forget it
    InitialDelayedJoin         ("join", group), "initial"       group.initial.rebalance.delay.ms
    DelayedJoin                ("join", group), "join"          rebalance timeout; or early, all joined
    DelayedSync                ("sync", group)                  rebalance timeout: drop who did not sync

Transactional offsets (TxnOffsetCommit, KIP-98/KIP-447): a transactional producer commits a group's
offsets inside its transaction. The records go to the partition as a transactional batch of the
producer's id and epoch and stay *pending* for that producer (``ClassicGroup.pending_txn_offsets``),
invisible to OffsetFetch (which answers UNSTABLE_OFFSET_COMMIT for them when require_stable asks),
until the partition's marker for the producer decides them: :meth:`GroupShard.complete_transaction`
on COMMIT makes them the group's committed offsets (the later record wins, as for plain commits),
on ABORT drops them. Loading does the same from the log: a transactional record is pending for its
producer until that producer's marker is replayed.

What is durable: a group's metadata (generation, protocol, leader, members with their
subscription and assignment) is written when a generation's assignment is stored, when a group
becomes empty, and when a static member is replaced; offsets when committed; tombstones when
offsets expire or are deleted and when a group is removed. A write's effect on memory is applied
in its callback, after the writer has the batch committed, so a reader never sees state a failover
could lose.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import structlog

from kraftpy.coordinator import consumer_group_records as cgr
from kraftpy.coordinator import records
from kraftpy.coordinator.consumer_protocol import ConsumerGroupProtocol
from kraftpy.coordinator.group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    CommittedOffset,
    JoinResult,
    Member,
    OffsetAndMetadata,
    PendingTxnOffset,
    SyncResult,
)
from kraftpy.coordinator.runtime import (
    CoordinatorShard,
    CoordinatorWriteError,
    NotLeaderError,
    TxnMarker,
    TxnRecord,
)
from kraftpy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kraftpy.coordinator.group_coordinator import GroupConfig

_logger = structlog.get_logger(__name__)

#: How long a new member's first JoinGroup may stay parked before the member is dropped (Kafka's
#: GroupCoordinator.NewMemberJoinTimeoutMs): clients that gave up and retried leave no ghosts.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

TopicPartition = tuple[str, int]
JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


def _write_error(error: BaseException) -> ErrorCode:
    """What Kafka's storeOffsets and storeGroup both make of a failed append; the rest is theirs."""
    if isinstance(error, NotLeaderError):
        return ErrorCode.NOT_COORDINATOR
    code = error.error_code if isinstance(error, CoordinatorWriteError) else ErrorCode.UNKNOWN_SERVER_ERROR
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    return code


_TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE)


def write_error_for_commit(error: BaseException) -> ErrorCode:
    """The OffsetCommit error for a failed append (Kafka's GroupMetadataManager.storeOffsets)."""
    code = _write_error(error)
    return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if code in _TOO_LARGE else code


def write_error_for_group(error: BaseException) -> ErrorCode:
    """The SyncGroup/JoinGroup error for a failed group metadata append (Kafka's storeGroup)."""
    code = _write_error(error)
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.UNKNOWN_SERVER_ERROR if code in _TOO_LARGE else code


def java_string_length(s: str | None) -> int:
    """String.length() in Java: UTF-16 code units (what offset.metadata.max.bytes is compared with)."""
    if s is None:
        return 0
    return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


class GroupShard:
    """The groups of one ``__consumer_offsets`` partition (a ShardStateMachine)."""

    def __init__(self, shard: CoordinatorShard, config: GroupConfig, clock: Callable[[], int], *, log=None,
                 on_loaded_hook: Callable[[GroupShard], None] | None = None) -> None:
        """``on_loaded_hook`` runs once the shard is loaded (the coordinator hands it the transaction
        completions that arrived during the load)."""
        self.shard = shard
        self._on_loaded_hook = on_loaded_hook
        self.timers = shard.timers
        self.config = config
        self.clock = clock
        self.log = (log or _logger).bind(partition=shard.partition)
        self.groups: dict[str, ClassicGroup] = {}
        self._write_ids = itertools.count(1)
        # Loading state: the last record per key wins, as compaction would keep it.
        self._loaded_offsets: dict[tuple[str, str, int], CommittedOffset] = {}
        self._loaded_groups: dict[str, tuple[int, object]] = {}
        #: Loading: producer id -> (group, topic, partition) -> its transactional offset, until its marker.
        self._loaded_pending: dict[int, dict[tuple[str, str, int], CommittedOffset]] = {}
        #: producer id -> the groups with offsets pending in its transaction (Kafka's openGroupsForProducer).
        self.producer_groups: dict[int, set[str]] = {}
        self.skipped_records = 0
        #: The KIP-848 consumer groups of this partition (their offsets live in ``groups``, as an empty
        #: classic group's).
        self.consumer = ConsumerGroupProtocol(self)

    # -- loading ---------------------------------------------------------------------------------

    def replay(self, offset: int, key: bytes | None, value: bytes | None, producer_id: int | None = None) -> None:
        """One record; ``producer_id`` when it is in that producer's transactional batch."""
        if key is None:
            self.skipped_records += 1
            self.log.warning("__consumer_offsets record without a key skipped", offset=offset)
            return
        try:
            decoded = records.decode_key(key)
            if isinstance(decoded, records.OffsetKey):
                k = (decoded.group, decoded.topic, decoded.partition)
                # Kafka's loadGroupsAndOffsets: a transactional record is pending for its producer.
                target = (self._loaded_offsets if producer_id is None
                          else self._loaded_pending.setdefault(producer_id, {}))
                if value is None:
                    target.pop(k, None)
                else:
                    v = records.decode_offset_value(value)
                    target[k] = CommittedOffset(offset, OffsetAndMetadata(
                        offset=v.offset, leader_epoch=v.leader_epoch, metadata=v.metadata,
                        commit_timestamp=v.commit_timestamp,
                        expire_timestamp=None if v.expire_timestamp == -1 else v.expire_timestamp))
            elif isinstance(decoded, records.GroupKey):
                if value is None:
                    self._loaded_groups.pop(decoded.group, None)
                else:
                    self._loaded_groups[decoded.group] = records.decode_group_value(value)
            elif decoded.version in cgr.BY_KEY_VERSION and producer_id is None:
                self.consumer.replay(decoded.version, key, value)
            else:
                self.skipped_records += 1
                self.log.warning("__consumer_offsets record of an unknown key version skipped", offset=offset,
                                 key_version=decoded.version)
        except records.CoordinatorRecordError as exc:
            self.skipped_records += 1
            self.log.warning("corrupt __consumer_offsets record skipped", offset=offset, error=str(exc))

    def replay_transactional(self, record: TxnRecord) -> None:
        self.replay(record.offset, record.key, record.value, producer_id=record.producer_id)

    def replay_marker(self, marker: TxnMarker) -> None:
        """The producer's transaction ended: a COMMIT makes its offsets loaded ones (the later record
        wins), an ABORT drops them."""
        pending = self._loaded_pending.pop(marker.producer_id, None)
        if not pending or not marker.committed:
            return
        for k, committed in pending.items():
            current = self._loaded_offsets.get(k)
            if current is None or current.record_offset < committed.record_offset:
                self._loaded_offsets[k] = committed

    def on_loaded(self) -> None:
        now = self.clock()
        offsets_by_group: dict[str, dict[TopicPartition, CommittedOffset]] = defaultdict(dict)
        for (group_id, topic, partition), committed in self._loaded_offsets.items():
            offsets_by_group[group_id][(topic, partition)] = committed
        pending_by_group: dict[str, dict[int, dict[TopicPartition, PendingTxnOffset]]] = defaultdict(dict)
        for producer_id, pending in self._loaded_pending.items():
            for (group_id, topic, partition), committed in pending.items():
                pending_by_group[group_id].setdefault(producer_id, {})[(topic, partition)] = PendingTxnOffset(
                    committed.value, write_id=0, record_offset=committed.record_offset)
                self.producer_groups.setdefault(producer_id, set()).add(group_id)
        for group_id, (version, value) in self._loaded_groups.items():
            group = self._group_from_record(group_id, version, value, now)
            group.offsets = offsets_by_group.pop(group_id, {})
            self.groups[group_id] = group
        for group_id in dict.fromkeys([*offsets_by_group, *pending_by_group]):
            if group_id not in self.groups:
                group = ClassicGroup(group_id, EMPTY, now)
                group.offsets = offsets_by_group.get(group_id, {})
                self.groups[group_id] = group
        for group_id, pending in pending_by_group.items():
            self.groups[group_id].pending_txn_offsets = pending
        self._loaded_offsets.clear()
        self._loaded_groups.clear()
        self._loaded_pending.clear()
        for group in list(self.groups.values()):
            self._on_group_loaded(group)
        self.consumer.on_loaded()
        self.log.info("groups loaded", groups=len(self.groups),
                      offsets=sum(len(g.offsets) for g in self.groups.values()))
        if self._on_loaded_hook is not None:
            self._on_loaded_hook(self)

    def _group_from_record(self, group_id: str, version: int, value, now: int) -> ClassicGroup:
        group = ClassicGroup(group_id, STABLE if value.members else EMPTY, now)
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.state_timestamp = None if value.current_state_timestamp == -1 else value.current_state_timestamp
        for m in value.members:
            group.add(Member(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.session_timeout if version == 0 else m.rebalance_timeout,
                session_timeout_ms=m.session_timeout, protocol_type=value.protocol_type,
                protocols=[(value.protocol, m.subscription)], assignment=m.assignment))
        if value.leader in group.members:
            group.leader_id = value.leader
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def _on_group_loaded(self, group: ClassicGroup) -> None:
        assert group.state in (STABLE, EMPTY)
        if group.size() > self.config.group_max_size:
            self._prepare_rebalance(group, f"freshly-loaded group is over capacity ({self.config.group_max_size}); "
                                           "rebalancing in order to give a chance for consumers to commit offsets")
        for member in list(group.members.values()):
            self._schedule_heartbeat(group, member, member.session_timeout_ms)

    def on_unloaded(self) -> None:
        self.consumer.clear()
        for group in self.groups.values():
            self._unload_group(group)
        self.groups.clear()

    def _unload_group(self, group: ClassicGroup) -> None:
        group.transition_to(DEAD, self.clock())
        for member in list(group.members.values()):
            group.maybe_invoke_join(member, JoinResult(member.member_id, ErrorCode.NOT_COORDINATOR))
            group.maybe_invoke_sync(member, SyncResult(ErrorCode.NOT_COORDINATOR))

    def _live(self, group: ClassicGroup) -> bool:
        """Whether ``group`` is still the one this shard serves (timers and writes outlive groups)."""
        return self.shard.active and not group.is_(DEAD) and self.groups.get(group.group_id) is group

    # -- timers ----------------------------------------------------------------------------------

    def _schedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        """Kafka's completeAndScheduleNextExpiration: the member proved alive; expect the next proof
        within ``timeout_ms``. A member parked in a rebalance needs none (its timer is dropped)."""
        key = ("heartbeat", group.group_id, member.member_id)
        member.heartbeat_satisfied = False
        if member.has_satisfied_heartbeat():
            self.timers.cancel(key)
            return
        member_id = member.member_id
        self.timers.schedule(key, timeout_ms / 1000, lambda: self._on_heartbeat_expired(group, member_id))

    def _cancel_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        self.timers.cancel(("heartbeat", group.group_id, member_id))

    def _on_heartbeat_expired(self, group: ClassicGroup, member_id: str) -> None:
        if not self._live(group) or not group.has(member_id):
            return
        member = group.get(member_id)
        if not member.has_satisfied_heartbeat():
            self.log.info("member failed, removing it from the group", group=group.group_id, member=member_id,
                          session_timeout_ms=member.session_timeout_ms)
            self._remove_member_and_update_group(group, member, f"removing member {member_id} on heartbeat expiration")

    def _schedule_pending_member_expiration(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        self.timers.schedule(("pending", group.group_id, member_id), timeout_ms / 1000,
                             lambda: self._on_pending_member_expired(group, member_id))

    def _on_pending_member_expired(self, group: ClassicGroup, member_id: str) -> None:
        if not self._live(group) or group.has(member_id) or not group.is_pending_member(member_id):
            return
        self.log.info("pending member removed after session timeout", group=group.group_id, member=member_id)
        self._remove_pending_member_and_update_group(group, member_id)

    def _schedule_initial_join(self, group: ClassicGroup, delay_ms: int, remaining_ms: int) -> None:
        group.join_timer = "initial"
        self.timers.schedule(("join", group.group_id), delay_ms / 1000,
                             lambda: self._on_initial_join_expired(group, delay_ms, remaining_ms))

    def _on_initial_join_expired(self, group: ClassicGroup, delay_ms: int, remaining_ms: int) -> None:
        if group.join_timer != "initial":
            return
        group.join_timer = None
        if group.new_member_added and remaining_ms != 0:
            # Members keep arriving: wait once more, up to the group's rebalance timeout in all.
            group.new_member_added = False
            self._schedule_initial_join(group, min(self.config.group_initial_rebalance_delay_ms, remaining_ms),
                                        max(remaining_ms - delay_ms, 0))
        else:
            self._on_complete_join(group)

    def _schedule_join(self, group: ClassicGroup) -> None:
        group.join_timer = "join"
        self.timers.schedule(("join", group.group_id), group.rebalance_timeout_ms() / 1000,
                             lambda: self._on_join_expired(group))
        self._maybe_complete_join(group)

    def _on_join_expired(self, group: ClassicGroup) -> None:
        if group.join_timer != "join":
            return
        group.join_timer = None
        self._on_complete_join(group)

    def _maybe_complete_join(self, group: ClassicGroup) -> None:
        """Kafka's tryCompleteJoin: complete the rebalance's join phase once every member has joined."""
        if group.join_timer == "join" and group.has_all_members_joined():
            self.timers.cancel(("join", group.group_id))
            group.join_timer = None
            self._on_complete_join(group)

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        generation = group.generation_id
        group.sync_timer_generation = generation
        self.timers.schedule(("sync", group.group_id), group.rebalance_timeout_ms() / 1000,
                             lambda: self._on_sync_expired(group, generation))

    def _maybe_complete_sync(self, group: ClassicGroup) -> None:
        if group.sync_timer_generation is None:
            return
        if (group.sync_timer_generation != group.generation_id
                or group.state in (DEAD, EMPTY, PREPARING_REBALANCE) or not group.pending_sync_members):
            self.timers.cancel(("sync", group.group_id))
            group.sync_timer_generation = None

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self._maybe_complete_sync(group)

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self._maybe_complete_sync(group)

    def _on_sync_expired(self, group: ClassicGroup, generation: int) -> None:
        if group.sync_timer_generation != generation:
            return
        group.sync_timer_generation = None
        if not self._live(group) or generation != group.generation_id:
            return
        if group.state in (COMPLETING_REBALANCE, STABLE) and group.pending_sync_members:
            missing = sorted(group.pending_sync_members)
            for member_id in missing:
                group.remove(member_id)
                self._cancel_heartbeat(group, member_id)
            self.log.info("members removed: no SyncGroup before the rebalance timeout", group=group.group_id,
                          members=missing)
            self._prepare_rebalance(group, f"removing {missing} on pending sync request expiration")

    # -- rebalance -------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        was_empty = group.is_(EMPTY)
        group.transition_to(PREPARING_REBALANCE, self.clock())
        self.log.info("preparing to rebalance group", group=group.group_id, old_generation=group.generation_id,
                      reason=reason)
        if was_empty:
            delay = self.config.group_initial_rebalance_delay_ms
            self._schedule_initial_join(group, delay, max(group.rebalance_timeout_ms() - delay, 0))
        else:
            self._schedule_join(group)

    def _on_complete_join(self, group: ClassicGroup) -> None:
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                group.remove(member.member_id)
                self._cancel_heartbeat(group, member.member_id)
                self.log.info("member removed: did not rejoin", group=group.group_id, member=member.member_id)
        if group.is_(DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait again, until session timeouts remove the silent members.
            self.log.warning("group could not complete rebalance because no members rejoined", group=group.group_id)
            self._schedule_join(group)
            return
        group.init_next_generation(self.clock())
        if group.is_(EMPTY):
            self.log.info("group is now empty", group=group.group_id, generation=group.generation_id)

            def stored(error: ErrorCode) -> None:
                if error != ErrorCode.NONE:
                    # The previous generation stays in the log; it has no live members, so it is harmless.
                    self.log.warning("failed to write empty group metadata", group=group.group_id, error=error.name)

            self._store_group(group, {}, stored)
            return
        self.log.info("stabilized group", group=group.group_id, generation=group.generation_id,
                      protocol=group.protocol_name, members=group.size())
        for member in list(group.members.values()):
            is_leader = group.is_leader(member.member_id)
            group.maybe_invoke_join(member, JoinResult(
                member_id=member.member_id, error=ErrorCode.NONE, generation_id=group.generation_id,
                protocol_type=group.protocol_type, protocol_name=group.protocol_name, leader_id=group.leader_id or "",
                members=group.current_member_metadata() if is_leader else ()))
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        assert group.is_(COMPLETING_REBALANCE)
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        assert group.is_(COMPLETING_REBALANCE)
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        self._propagate_assignment(group, ErrorCode.NONE)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error == ErrorCode.NONE
        for member in list(group.members.values()):
            result = SyncResult(error, group.protocol_type if ok else None, group.protocol_name if ok else None,
                                member.assignment)
            if group.maybe_invoke_sync(member, result):
                # Restart the session: a member's expiry is ignored while it waits for its assignment.
                self._schedule_heartbeat(group, member, member.session_timeout_ms)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        # A new member may be parked in JoinGroup; answer it so that a live client rejoins.
        group.maybe_invoke_join(member, JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
        # Kafka leaves a parked SyncGroup of a removed member unanswered; answering it frees the client.
        group.maybe_invoke_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self._cancel_heartbeat(group, member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _remove_pending_member_and_update_group(self, group: ClassicGroup, member_id: str) -> None:
        group.remove(member_id)
        self.timers.cancel(("pending", group.group_id, member_id))
        if group.is_(PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # -- durable group state ---------------------------------------------------------------------

    def _store_group(self, group: ClassicGroup, assignment: dict[str, bytes],
                     callback: Callable[[ErrorCode], None]) -> None:
        batch = [self.group_metadata_record(group, assignment)]
        self.shard.write(batch, lambda _offset, error: callback(
            ErrorCode.NONE if error is None else write_error_for_group(error)))

    def group_metadata_record(self, group: ClassicGroup, assignment: dict[str, bytes]) -> tuple[bytes, bytes]:
        """The GroupMetadata record of ``group`` with each member's ``assignment``."""
        value = records.GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=-1 if group.state_timestamp is None else group.state_timestamp,
            members=[records.MemberMetadata(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms, subscription=m.metadata(group.protocol_name),
                assignment=assignment[m.member_id]) for m in group.members.values()],
        )
        return records.group_metadata_key(group.group_id), records.group_metadata_value(value)

    # -- online migration (kraftpy.coordinator.consumer_group_migration) --------------------------

    def cancel_classic_timers(self, group: ClassicGroup) -> None:
        """The group's members moved to a consumer group: none of its classic timers may fire."""
        for member_id in [*group.members, *group.pending_members]:
            self._cancel_heartbeat(group, member_id)
            self.timers.cancel(("pending", group.group_id, member_id))
        self.timers.cancel(("join", group.group_id))
        self.timers.cancel(("sync", group.group_id))

    def start_downgraded_group(self, group: ClassicGroup, reason: str) -> None:
        """A consumer group became ``group`` (Stable, with members): their sessions start and a
        rebalance has them rejoin as a classic group."""
        for member in group.members.values():
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        self._prepare_rebalance(group, reason)

    def _consumer_group_with_members(self, group_id: str):
        group = self.consumer.groups.get(group_id)
        return group if group is not None and group.members else None

    def _tombstones(self, group: ClassicGroup, removed: Iterable[TopicPartition]) -> list[tuple[bytes, None]]:
        """Tombstones for ``removed`` offsets; and, if that leaves an Empty group with nothing, the
        group dies: it leaves the cache and its metadata gets a tombstone too (unless it never had a
        generation, so never wrote any: a standalone group)."""
        batch: list[tuple[bytes, None]] = [(records.offset_commit_key(group.group_id, t, p), None) for t, p in removed]
        if group.is_(EMPTY) and not group.has_offsets() and not group.pending_members:
            group.transition_to(DEAD, self.clock())
            self.log.info("group transitioned to Dead", group=group.group_id, generation=group.generation_id)
        if group.is_(DEAD) and self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
            self.timers.cancel(("join", group.group_id))
            self.timers.cancel(("sync", group.group_id))
            if group.generation_id > 0:
                batch.append((records.group_metadata_key(group.group_id), None))
        return batch

    # -- JoinGroup -------------------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, instance_id: str | None, require_known_member_id: bool,
                   support_skip_assignment: bool, client_id: str, client_host: str, rebalance_timeout_ms: int,
                   session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                   callback: JoinCallback, reason: str | None, lookup=None) -> None:
        """``lookup`` finds a topic's id and partition count (a classic member of a consumer group
        needs it)."""
        if not (self.config.group_min_session_timeout_ms <= session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            callback(JoinResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        consumer_group = self._consumer_group_with_members(group_id)
        if consumer_group is not None:
            # A consumer group with members serves the classic member itself (KIP-848 migration).
            callback(self.consumer.classic.join(
                consumer_group, member_id, instance_id, require_known_member_id, client_id, client_host,
                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, lookup))
            return
        self.consumer.drop_empty(group_id)
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        created = False
        if group is None:
            if not is_unknown:
                callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            group = ClassicGroup(group_id, EMPTY, self.clock())
            self.groups[group_id] = group
            created = True
        join_reason = reason if reason is not None else "not provided"
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif is_unknown:
            self._new_member_join(group, instance_id, require_known_member_id, support_skip_assignment, client_id,
                                  client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                  callback, join_reason)
        else:
            self._current_member_join(group, member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                      session_timeout_ms, protocol_type, protocols, callback, join_reason)
        if group.is_(PREPARING_REBALANCE):
            self._maybe_complete_join(group)
        if (created and group.is_(EMPTY) and not group.members and not group.pending_members
                and not group.has_offsets()):
            # A refused first join leaves nothing behind (Kafka keeps the empty group until its
            # next expiry pass; nothing is lost by not creating it).
            del self.groups[group_id]

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_(PREPARING_REBALANCE):
            # Awaiting members, not the group size: the size may exceed a lowered max, and counting
            # those who rejoined lets the last ones be turned away.
            return ((group.has(member_id) and group.get(member_id).is_awaiting_join)
                    or group.num_awaiting_join < self.config.group_max_size)
        return group.has(member_id) or group.size() < self.config.group_max_size

    def _new_member_join(self, group: ClassicGroup, instance_id: str | None, require_known_member_id: bool,
                         support_skip_assignment: bool, client_id: str, client_host: str, rebalance_timeout_ms: int,
                         session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                         callback: JoinCallback, reason: str) -> None:
        if group.is_(DEAD):
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_member_id = group.generate_member_id(client_id, instance_id)
        if instance_id is not None:
            old_member_id = group.current_static_member_id(instance_id)
            if old_member_id is not None:
                self.log.info("static member rejoins with a new member id", group=group.group_id,
                              instance_id=instance_id, old_member=old_member_id, member=new_member_id,
                              state=group.state.value, reason=reason)
                self._update_static_member_and_rebalance(group, old_member_id, new_member_id, instance_id, protocols,
                                                         rebalance_timeout_ms, session_timeout_ms, callback, reason,
                                                         support_skip_assignment)
            else:
                self._add_member_and_rebalance(group, new_member_id, instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                               callback, reason)
        elif require_known_member_id:
            # KIP-394: hand out the id first; the member joins with it (a client that dies between the
            # two requests leaves only a pending id, forgotten after its session timeout).
            group.add_pending_member(new_member_id)
            self._schedule_pending_member_expiration(group, new_member_id, session_timeout_ms)
            callback(JoinResult(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(group, new_member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, callback, reason)

    def _validate_current_member(self, group: ClassicGroup, member_id: str, instance_id: str | None,
                                 operation: str) -> ErrorCode | None:
        if instance_id is not None:
            current = group.current_static_member_id(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                self.log.info("static member fenced", group=group.group_id, instance_id=instance_id,
                              member=member_id, current_member=current, operation=operation)
                return ErrorCode.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _current_member_join(self, group: ClassicGroup, member_id: str, instance_id: str | None, client_id: str,
                             client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                             protocols: list[tuple[str, bytes]], callback: JoinCallback, reason: str) -> None:
        if group.is_(DEAD):
            callback(JoinResult(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            callback(JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            if instance_id is not None:
                # An id handed to a dynamic member, presented with an instance id: Kafka fails the
                # request (an internal error); it is the client's mistake, so say it is unknown.
                callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            self.timers.cancel(("pending", group.group_id, member_id))
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, callback, reason)
            return
        error = self._validate_current_member(group, member_id, instance_id, "join-group")
        if error is not None:
            callback(JoinResult(member_id, error))
            return
        member = group.get(member_id)
        if group.is_(PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              callback, f"member {member_id} joining during PreparingRebalance; "
                                                        f"client reason: {reason}")
        elif group.is_(COMPLETING_REBALANCE):
            if member.matches(protocols):
                # The member lost our JoinGroup answer: send the same generation again.
                callback(self._current_generation(group, member_id, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  callback, f"updating metadata for member {member_id} during "
                                                            f"CompletingRebalance; client reason: {reason}")
        elif group.is_(STABLE):
            if group.is_leader(member_id):
                # The leader rejoins to have the assignment redone (say its subscribed topics changed).
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  callback, f"leader {member_id} re-joining group during Stable; "
                                                            f"client reason: {reason}")
            elif not member.matches(protocols):
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  callback, f"updating metadata for member {member_id} during "
                                                            f"Stable; client reason: {reason}")
            else:
                callback(self._current_generation(group, member_id, with_members=False))
        else:
            self.log.warning("rejoining member in an unexpected group state", group=group.group_id,
                             member=member_id, state=group.state.value)
            callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _current_generation(self, group: ClassicGroup, member_id: str, *, with_members: bool,
                            leader_id: str | None = None, skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            member_id=member_id, error=ErrorCode.NONE, generation_id=group.generation_id,
            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
            leader_id=(group.leader_id if leader_id is None else leader_id) or "",
            skip_assignment=skip_assignment,
            members=group.current_member_metadata()
            if with_members and group.state in (COMPLETING_REBALANCE, STABLE) else ())

    def _add_member_and_rebalance(self, group: ClassicGroup, member_id: str, instance_id: str | None, client_id: str,
                                  client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                                  protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback,
                                  reason: str) -> None:
        member = Member(member_id=member_id, group_instance_id=instance_id, client_id=client_id,
                        client_host=client_host, rebalance_timeout_ms=rebalance_timeout_ms,
                        session_timeout_ms=session_timeout_ms, protocol_type=protocol_type,
                        protocols=list(protocols), is_new=True)
        if group.is_(PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        # A new member cannot heartbeat before it has its id, and its socket is parked meanwhile:
        # bound its wait (it retries if it is alive) instead of its session.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id} with group instance id "
                                             f"{instance_id}; client reason: {reason}")

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, protocols: list[tuple[str, bytes]],
                                     rebalance_timeout_ms: int, session_timeout_ms: int, callback: JoinCallback,
                                     reason: str) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(self, group: ClassicGroup, old_member_id: str, new_member_id: str,
                                            instance_id: str, protocols: list[tuple[str, bytes]],
                                            rebalance_timeout_ms: int, session_timeout_ms: int,
                                            callback: JoinCallback, reason: str,
                                            support_skip_assignment: bool) -> None:
        """KIP-345: a static member restarted (new member id, same instance id). In a Stable group whose
        protocol would not change, it takes its old place and assignment without a rebalance."""
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._cancel_heartbeat(group, old_member_id)
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        old_protocols = member.protocols
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)

        if group.is_(STABLE):
            if group.protocol_name == group.select_protocol():
                self.log.info("static member rejoined a Stable group without a rebalance", group=group.group_id,
                              instance_id=instance_id, member=new_member_id)
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def stored(error: ErrorCode) -> None:
                    if not self._live(group):
                        group.maybe_invoke_join(member, JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.NOT_COORDINATOR))
                        return
                    if error != ErrorCode.NONE:
                        self.log.warning("failed to persist a replaced static member; reverting", group=group.group_id,
                                         instance_id=instance_id, error=error.name)
                        group.update_member(member, old_protocols, old_rebalance_timeout_ms, old_session_timeout_ms,
                                            None)
                        old = group.replace_static_member(instance_id, new_member_id, old_member_id)
                        self._cancel_heartbeat(group, new_member_id)
                        self._schedule_heartbeat(group, old, old.session_timeout_ms)
                        callback(JoinResult(UNKNOWN_MEMBER_ID, error, generation_id=group.generation_id,
                                            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                                            leader_id=current_leader or ""))
                    elif support_skip_assignment:
                        # JoinGroup v9: the leader learns it leads, but skips the assignor (the group is
                        # stable; a new assignment would be ignored).
                        is_leader = group.is_leader(new_member_id)
                        group.maybe_invoke_join(member, self._current_generation(
                            group, new_member_id, with_members=is_leader, skip_assignment=is_leader))
                    else:
                        # Before v9: name the old leader id so that a rejoining leader does not assign.
                        group.maybe_invoke_join(member, self._current_generation(
                            group, new_member_id, with_members=False, leader_id=current_leader or ""))

                self._store_group(group, assignment, stored)
            else:
                self._maybe_prepare_rebalance(group, f"group's selected protocol will change because static member "
                                                     f"{new_member_id} with instance id {instance_id} joined with "
                                                     f"other protocols; client reason: {reason}")
        elif group.is_(COMPLETING_REBALANCE):
            # The leader may already be assigning with the old member id: rebalance again.
            self._prepare_rebalance(group, f"updating metadata for static member {new_member_id} with instance id "
                                           f"{instance_id}; client reason: {reason}")
        # PreparingRebalance: the member simply waits with the others.

    # -- SyncGroup -------------------------------------------------------------------------------

    def sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                   protocol_name: str | None, instance_id: str | None, assignments: dict[str, bytes],
                   callback: SyncCallback) -> None:
        consumer_group = self._consumer_group_with_members(group_id)
        if consumer_group is not None:
            callback(self.consumer.classic.sync(consumer_group, generation_id, member_id, instance_id, protocol_type,
                                                protocol_name))
            return
        group = self.groups.get(group_id)
        if group is None:
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.is_(DEAD):
            callback(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        error = self._validate_current_member(group, member_id, instance_id, "sync-group")
        if error is None:
            if generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            elif protocol_type is not None and protocol_type != group.protocol_type:
                error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            elif protocol_name is not None and protocol_name != group.protocol_name:
                error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            callback(SyncResult(error))
            return
        if group.is_(EMPTY):
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif group.is_(PREPARING_REBALANCE):
            callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_(COMPLETING_REBALANCE):
            member = group.get(member_id)
            if member.sync_callback is not None:
                member.sync_callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))  # a retried SyncGroup
            member.sync_callback = callback
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                self.log.info("assignment received from leader", group=group.group_id, leader=member_id,
                              generation=group.generation_id, members=group.size(),
                              static_members=len(group.static_members))
                missing = [m for m in group.members if m not in assignments]
                if missing:
                    self.log.warning("setting empty assignments for members", group=group.group_id,
                                     generation=group.generation_id, members=missing)
                assignment = {m: bytes(assignments.get(m, b"")) for m in group.members}
                generation = group.generation_id

                def stored(error: ErrorCode) -> None:
                    # Another member may have joined meanwhile: act only if this generation still waits.
                    if self._live(group) and group.is_(COMPLETING_REBALANCE) and group.generation_id == generation:
                        if error != ErrorCode.NONE:
                            self._reset_and_propagate_assignment_error(group, error)
                            self._maybe_prepare_rebalance(group, f"error {error.name} when storing group assignment "
                                                                 f"during SyncGroup (member: {member_id})")
                        else:
                            self._set_and_propagate_assignment(group, assignment)
                            group.transition_to(STABLE, self.clock())

                self._store_group(group, assignment, stored)
        else:  # STABLE
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            callback(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
            self._schedule_heartbeat(group, member, member.session_timeout_ms)

    # -- Heartbeat -------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        consumer_group = self._consumer_group_with_members(group_id)
        if consumer_group is not None:
            return self.consumer.classic.heartbeat(consumer_group, member_id, instance_id, generation_id)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, member_id, instance_id, "heartbeat")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.get(member_id)
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        return ErrorCode.REBALANCE_IN_PROGRESS if group.is_(PREPARING_REBALANCE) else ErrorCode.NONE

    # -- LeaveGroup ------------------------------------------------------------------------------

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None, str | None]]
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """``leaving``: (member_id, group_instance_id, reason); returns the top-level error and one
        (member_id, group_instance_id, error) per leaving member."""
        consumer_group = self._consumer_group_with_members(group_id)
        if consumer_group is not None:
            return ErrorCode.NONE, self.consumer.classic.leave(consumer_group, leaving)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i, _ in leaving]
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results = []
        for member_id, instance_id, reason in leaving:
            why = reason if reason is not None else "not provided"
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal of a static member by instance id
                # (AdminClient.removeMembersFromConsumerGroup).
                current = group.current_static_member_id(instance_id) if instance_id is not None else None
                if current is None:
                    results.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                    continue
                self._leave(group, current, why)
                results.append((member_id, instance_id, ErrorCode.NONE))
            elif group.is_pending_member(member_id):
                self._remove_pending_member_and_update_group(group, member_id)
                self.log.info("pending member left the group", group=group_id, member=member_id)
                results.append((member_id, instance_id, ErrorCode.NONE))
            else:
                error = self._validate_current_member(group, member_id, instance_id, "leave-group")
                if error is None:
                    self._leave(group, member_id, why)
                results.append((member_id, instance_id, error or ErrorCode.NONE))
        return ErrorCode.NONE, results

    def _leave(self, group: ClassicGroup, member_id: str, reason: str) -> None:
        member = group.get(member_id)
        self.log.info("member left the group", group=group.group_id, member=member_id,
                      instance_id=member.group_instance_id, reason=reason)
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on LeaveGroup; "
                                                            f"client reason: {reason}")

    # -- offsets ---------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                       offsets: dict[TopicPartition, OffsetAndMetadata],
                       callback: Callable[[dict[TopicPartition, ErrorCode]], None]) -> None:
        group = self.groups.get(group_id)
        created = False
        if group is None:
            if generation_id >= 0:
                # A commit for a generation this coordinator does not know (it ended, or is older).
                callback(dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION))
                return
            # Offsets only, no group management: a standalone (simple) consumer's group.
            group = ClassicGroup(group_id, EMPTY, self.clock())
            self.groups[group_id] = group
            created = True
        error = self._validate_offset_commit(group, generation_id, member_id, instance_id)
        if error is None and group.is_(COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet.
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None:
            callback(dict.fromkeys(offsets, error))
            if created and not group.has_offsets():
                del self.groups[group_id]
            return
        if group.state in (STABLE, PREPARING_REBALANCE):
            # A commit proves the member alive (PreparingRebalance commits of the old generation are
            # allowed: the heartbeat tells the member to rejoin).
            member = group.get(member_id)
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        self._store_offsets(group, offsets, callback)

    def _validate_offset_commit(self, group: ClassicGroup, generation_id: int, member_id: str,
                                instance_id: str | None) -> ErrorCode | None:
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(EMPTY):
            return None  # an admin client or a consumer without group management
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or instance_id is not None:
            error = self._validate_current_member(group, member_id, instance_id, "offset-commit")
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            return error
        if not group.is_(EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID  # only members commit for a group with members
        return None

    def _store_offsets(self, group: ClassicGroup, offsets: dict[TopicPartition, OffsetAndMetadata],
                       callback: Callable[[dict[TopicPartition, ErrorCode]], None]) -> None:
        limit = self.config.offset_metadata_max_bytes
        valid = {tp: o for tp, o in offsets.items() if java_string_length(o.metadata) <= limit}
        if not valid:
            callback(dict.fromkeys(offsets, ErrorCode.OFFSET_METADATA_TOO_LARGE))
            return
        write_id = next(self._write_ids)
        batch = [(records.offset_commit_key(group.group_id, topic, partition),
                  records.offset_commit_value(o.offset, o.leader_epoch, o.metadata, o.commit_timestamp,
                                              o.expire_timestamp))
                 for (topic, partition), o in valid.items()]
        group.prepare_offset_commit(write_id, valid)

        def done(first_offset: int, error: BaseException | None) -> None:
            if error is None:
                for i, (tp, o) in enumerate(valid.items()):
                    group.complete_offset_commit(write_id, tp, CommittedOffset(first_offset + i, o))
                code = ErrorCode.NONE
            else:
                for tp in valid:
                    group.complete_offset_commit(write_id, tp, None)
                code = write_error_for_commit(error)
                self.log.debug("offset commit failed", group=group.group_id, error=code.name)
            callback({tp: code if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})

        self.shard.write(batch, done)

    # -- transactional offsets -------------------------------------------------------------------

    def txn_offset_commit(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                          instance_id: str | None, generation_id: int, offsets: dict[TopicPartition, OffsetAndMetadata],
                          callback: Callable[[dict[TopicPartition, ErrorCode]], None]) -> None:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets): write ``offsets`` inside the producer's
        transaction; they stay pending until :meth:`complete_transaction`. A v3+ request naming a
        member or generation is checked like an OffsetCommit (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
        ILLEGAL_GENERATION); without them (v0-2) any group, with members or not, accepts it."""
        group = self.groups.get(group_id)
        created = False
        if group is None:
            group = ClassicGroup(group_id, EMPTY, self.clock())
            self.groups[group_id] = group
            created = True
        error = self._validate_txn_offset_commit(group, generation_id, member_id, instance_id)
        if error is not None:
            callback(dict.fromkeys(offsets, error))
            if created and not group.has_offsets():
                del self.groups[group_id]
            return
        limit = self.config.offset_metadata_max_bytes
        valid = {tp: o for tp, o in offsets.items() if java_string_length(o.metadata) <= limit}
        if not valid:
            callback(dict.fromkeys(offsets, ErrorCode.OFFSET_METADATA_TOO_LARGE))
            if created and not group.has_offsets():
                del self.groups[group_id]
            return
        write_id = next(self._write_ids)
        batch = [(records.offset_commit_key(group.group_id, topic, partition),
                  records.offset_commit_value(o.offset, o.leader_epoch, o.metadata, o.commit_timestamp,
                                              o.expire_timestamp))
                 for (topic, partition), o in valid.items()]
        group.prepare_txn_offset_commit(producer_id, write_id, valid)
        self.producer_groups.setdefault(producer_id, set()).add(group_id)

        def done(first_offset: int, error: BaseException | None) -> None:
            if error is None:
                for i, tp in enumerate(valid):
                    group.on_txn_offset_commit_append(producer_id, write_id, tp, first_offset + i)
                code = ErrorCode.NONE
            else:
                for tp in valid:
                    group.fail_pending_txn_offset_commit(producer_id, write_id, tp)
                code = write_error_for_commit(error)
                self.log.debug("transactional offset commit failed", group=group.group_id, producer_id=producer_id,
                               error=code.name)
            callback({tp: code if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})

        self.shard.write(batch, done, producer_id=producer_id, producer_epoch=producer_epoch)

    def _validate_txn_offset_commit(self, group: ClassicGroup, generation_id: int, member_id: str,
                                    instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateOffsetCommit with isTransactional: members are checked only when named."""
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or instance_id is not None:
            error = self._validate_current_member(group, member_id, instance_id, "txn-offset-commit")
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            return error
        return None

    def complete_transaction(self, producer_id: int, committed: bool, marker_offset: int | None = None) -> int:
        """The producer's COMMIT (``committed``) or ABORT marker, at ``marker_offset`` when known, is in
        this partition and replicated: its pending offsets become committed, or are dropped (Kafka's
        handleTxnCompletion). Returns how many offsets were decided."""
        decided = 0
        for group_id in self.producer_groups.pop(producer_id, set()):
            group = self.groups.get(group_id)
            if group is None or group.is_(DEAD):
                continue
            decided += group.complete_pending_txn_offset_commit(producer_id, committed, marker_offset)
            if producer_id in group.pending_txn_offsets:
                # Offsets of a later transaction (written after the marker) wait for their own.
                self.producer_groups.setdefault(producer_id, set()).add(group_id)
        if decided:
            self.log.debug("transactional offsets decided", producer_id=producer_id, committed=committed,
                           offsets=decided)
        return decided

    def fetch_offsets(self, group_id: str, require_stable: bool, partitions: list[TopicPartition] | None
                      ) -> list[tuple[TopicPartition, int, int, str, ErrorCode]]:
        """(tp, offset, leader_epoch, metadata, error) for ``partitions`` (None: every committed one).
        Never a stale offset: a partition with a commit in flight answers UNSTABLE_OFFSET_COMMIT when
        ``require_stable`` asks (KIP-447), else its last committed offset."""
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return [(tp, -1, -1, "", ErrorCode.NONE) for tp in partitions or ()]
        wanted = list(group.offsets) if partitions is None else partitions
        out = []
        for tp in wanted:
            if require_stable and group.has_pending_offset_commits_for(tp):
                out.append((tp, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
                continue
            entry = group.offsets.get(tp)
            if entry is None:
                out.append((tp, -1, -1, "", ErrorCode.NONE))
            else:
                v = entry.value
                out.append((tp, v.offset, v.leader_epoch, v.metadata, ErrorCode.NONE))
        return out

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode], list[tuple[bytes, None]]]:
        """OffsetDelete: (group error, per-partition errors, tombstones to write)."""
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}, []
        if group.is_(EMPTY):
            eligible, errors = list(partitions), {}
        elif group.is_consumer_group:
            eligible = [tp for tp in partitions if not group.is_subscribed_to_topic(tp[0])]
            errors = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if group.is_subscribed_to_topic(tp[0])}
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}, []
        batch: list[tuple[bytes, None]] = []
        if eligible:
            removed = group.remove_offsets(eligible)
            batch = self._tombstones(group, removed)
            for tp in eligible:
                errors[tp] = ErrorCode.NONE
            self.log.info("offsets deleted", group=group_id, partitions=len(removed))
        return ErrorCode.NONE, errors, batch

    def delete_group(self, group_id: str) -> tuple[ErrorCode, list[tuple[bytes, None]]]:
        """DeleteGroups for one group: (error, tombstones to write)."""
        consumer_error = self.consumer.delete_group(group_id)
        if consumer_error is not None and consumer_error != ErrorCode.NONE:
            return consumer_error, []
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return (ErrorCode.NONE if consumer_error is not None else ErrorCode.GROUP_ID_NOT_FOUND), []
        if not group.is_(EMPTY):
            return ErrorCode.NON_EMPTY_GROUP, []
        group.transition_to(DEAD, self.clock())
        removed = group.remove_all_offsets()
        batch = self._tombstones(group, removed)
        self.log.info("group deleted", group=group_id, offsets=len(removed))
        return ErrorCode.NONE, batch

    def expire_offsets(self) -> int:
        """The retention pass (offsets.retention.minutes): expired offsets and empty groups get
        tombstones. Kafka writes these with acks=0 since a lost tombstone is written again next pass;
        here the write is acknowledged like any other, and only logged if it fails."""
        now = self.clock()
        retention_ms = self.config.offsets_retention_minutes * 60_000
        removed_total = 0
        batch: list[tuple[bytes, None]] = []
        for group in list(self.groups.values()):
            consumer_group = self.consumer.groups.get(group.group_id)
            if consumer_group is not None and consumer_group.members:
                continue  # a consumer group's offsets wait until it is empty
            removed = group.remove_offsets(group.expired_offsets(now, retention_ms))
            removed_total += len(removed)
            batch.extend(self._tombstones(group, removed))
        if batch:
            def done(_offset: int, error: BaseException | None) -> None:
                if error is not None:
                    self.log.warning("expired offsets' tombstones not written; next pass retries",
                                     error=f"{type(error).__name__}: {error}")

            self.shard.write(batch, done)
        if removed_total:
            self.log.info("expired offsets removed", offsets=removed_total)
        # A consumer group without members and without offsets goes (its records get tombstones).
        self.consumer.remove_empty_groups(lambda group_id: group_id in self.groups)
        return removed_total

    # -- listing ---------------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str]]:
        return [(group_id, protocol_type, state) for group_id, protocol_type, state, _ in self.list_groups_typed()]

    def list_groups_typed(self) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type: classic or consumer) of every group."""
        consumer = self.consumer.groups
        return [*((g.group_id, g.protocol_type or "", g.state.value, "classic") for g in self.groups.values()
                  if g.group_id not in consumer),
                *((g.group_id, "consumer", g.state.value, "consumer") for g in consumer.values())]

    def describe_group(self, group_id: str):
        """(state, protocol_type, protocol, members as (id, instance, client, host, metadata, assignment))."""
        group = self.groups.get(group_id)
        if group is None:
            return DEAD.value, "", "", []
        if group.is_(STABLE):
            protocol = group.protocol_name or ""
            members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.metadata(protocol),
                        m.assignment) for m in group.members.values()]
            return group.state.value, group.protocol_type or "", protocol, members
        members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
                   for m in group.members.values()]
        return group.state.value, group.protocol_type or "", "", members
