"""The group coordinator: Kafka's classic consumer-group protocol, at Kafka 3.6's versions.

Theory of operation
-------------------
A group belongs to the ``__consumer_offsets`` partition ``partition_for(group_id, N)`` (Java's
String.hashCode, as Kafka computes it, so a kraftpy cluster and a Kafka cluster place a group
alike), and is served by the broker that leads that partition. The broker tells the coordinator
when leadership arrives (:meth:`GroupCoordinator.on_elected`, with a
:class:`~kraftpy.coordinator.runtime.PartitionWriter`) and leaves (:meth:`on_resigned`); the
:class:`~kraftpy.coordinator.runtime.CoordinatorRuntime` loads a
:class:`~kraftpy.coordinator.group_shard.GroupShard` per led partition from its records.

Each API entry point takes the request object decoded at ``ctx.api_version`` and returns the
response object; the broker encodes it. Every group a request names is first routed (Kafka's
validateGroupStatus)::

    group id invalid for this API     -> INVALID_GROUP_ID (empty ids pass for OffsetCommit,
                                         OffsetFetch, DescribeGroups and DeleteGroups, as in Kafka)
    coordinator not running           -> COORDINATOR_NOT_AVAILABLE
    partition not led here            -> NOT_COORDINATOR
    partition still loading           -> COORDINATOR_LOAD_IN_PROGRESS (a Heartbeat is answered NONE
                                         and a SyncGroup REBALANCE_IN_PROGRESS, as Kafka does, so old
                                         clients simply rejoin)

then handed to its shard. A handler that must wait (a JoinGroup for the rebalance, a commit for
replication) waits on a :class:`~kraftpy.coordinator.runtime.Waiter` the shard completes.

Served versions (Kafka 3.6's, and 3.9's where KIP-848 added one): OffsetCommit 0-9, OffsetFetch 0-9,
JoinGroup 0-9, Heartbeat 0-4, LeaveGroup 0-5, SyncGroup 0-5, DescribeGroups 0-5, ListGroups 0-5,
DeleteGroups 0-2, OffsetDelete 0, and KIP-848's ConsumerGroupHeartbeat 0-1 and ConsumerGroupDescribe 0
(:mod:`kraftpy.coordinator.consumer_protocol`). FindCoordinator is the broker's: it needs the
cluster's metadata.

Transactions: :meth:`GroupCoordinator.txn_offset_commit` takes a TxnOffsetCommit (0-4) and writes
its offsets inside the producer's transaction, and :meth:`GroupCoordinator.complete_transaction`
is what the broker calls once a producer's COMMIT or ABORT marker is replicated in a
``__consumer_offsets`` partition (not yet served on the wire).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import structlog
import trio

from kraftpy.coordinator.consumer_protocol import HeartbeatRequest, RegexMatcher, TopicLookup
from kraftpy.coordinator.group import OffsetAndMetadata
from kraftpy.coordinator.group_shard import GroupShard, write_error_for_commit, write_error_for_group
from kraftpy.coordinator.key_limits import too_long
from kraftpy.coordinator.runtime import (
    CoordinatorRuntime,
    CoordinatorShard,
    PartitionWriter,
    ShardStatus,
    Waiter,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
)

_logger = structlog.get_logger(__name__)

#: DescribeGroups' authorized_operations when the client did not ask for them (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
#: What a group allows when there is no authorizer, as a bit field of AclOperation codes:
#: READ (3), DELETE (6) and DESCRIBE (8).
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

# The APIs whose group id may be empty (Kafka's GroupCoordinator.isValidGroupId): offsets for the
# empty group id are a compatibility relic Kafka keeps, and DescribeGroups/DeleteGroups can see them.
_EMPTY_ID_ALLOWED = frozenset({"offset_commit", "offset_fetch", "describe_groups", "delete_groups"})


@attrs.frozen
class GroupConfig:
    """The coordinator's settings, built by the broker from its configuration (Kafka's key names)."""

    #: offsets.topic.num.partitions: partitions of __consumer_offsets (fixed once the topic exists).
    offsets_topic_num_partitions: int = 50
    #: offsets.retention.minutes: how long offsets outlive their group's last member (or their commit).
    offsets_retention_minutes: int = 10080
    #: offsets.retention.check.interval.ms: how often expired offsets are looked for.
    offsets_retention_check_interval_ms: int = 600000
    #: offsets.commit.timeout.ms: how long a commit waits for replication (the writer applies it).
    offsets_commit_timeout_ms: int = 5000
    #: offset.metadata.max.bytes: the longest metadata string a commit may carry.
    offset_metadata_max_bytes: int = 4096
    #: group.initial.rebalance.delay.ms: how long a new group's first rebalance waits for more members.
    group_initial_rebalance_delay_ms: int = 3000
    #: group.min.session.timeout.ms: the shortest session timeout a member may ask for.
    group_min_session_timeout_ms: int = 6000
    #: group.max.session.timeout.ms: the longest session timeout a member may ask for.
    group_max_session_timeout_ms: int = 1800000
    #: group.max.size: the most members a group may have.
    group_max_size: int = 2**31 - 1
    #: group.coordinator.rebalance.protocols: "classic", and "consumer" for KIP-848 consumer groups.
    group_coordinator_rebalance_protocols: tuple[str, ...] = ("classic",)
    #: group.consumer.session.timeout.ms: a consumer-protocol member not heard from for this long is removed.
    group_consumer_session_timeout_ms: int = 45000
    #: group.consumer.heartbeat.interval.ms: how often consumer-protocol members heartbeat.
    group_consumer_heartbeat_interval_ms: int = 5000
    #: group.consumer.max.size: the most members a consumer group may have.
    group_consumer_max_size: int = 2**31 - 1
    #: group.consumer.assignors: the server-side assignors, the first the default.
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    #: group.consumer.migration.policy: disabled, upgrade, downgrade or bidirectional.
    group_consumer_migration_policy: str = "disabled"


@attrs.frozen
class RequestContext:
    client_id: str
    client_host: str
    api_version: int


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units, in signed 32-bit arithmetic."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's ``Utils.abs(groupId.hashCode) % N``
    (whose abs maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions


class GroupCoordinator:
    def __init__(self, config: GroupConfig, *, clock: Callable[[], int], node_id: int = -1,
                 partition_exists: Callable[[str, int], bool] | None = None,
                 topic_lookup: TopicLookup | None = None) -> None:
        """``clock`` returns wall-clock milliseconds (commit and state timestamps, offset expiry);
        timers run on trio's clock. ``partition_exists(topic, partition)`` answers from the broker's
        metadata whether a partition exists: commits and deletions of others are refused with
        UNKNOWN_TOPIC_OR_PARTITION, as Kafka's KafkaApis does (default: every partition exists)."""
        self.config = config
        self.clock = clock
        self.node_id = node_id
        self.partition_exists = partition_exists or (lambda topic, partition: True)
        #: Finds a topic's id and partition count in the broker's metadata (the classic members of a
        #: consumer group subscribe by name); the broker sets it.
        self.topic_lookup = topic_lookup
        self._log = _logger.bind(node_id=node_id)
        self.runtime = CoordinatorRuntime(self._make_shard, log=self._log)
        #: partition -> (leader epoch, producer id, committed, marker offset) of the transaction
        #: completions that arrived while the partition loaded, applied once it is loaded.
        self._completions_while_loading: dict[int, list[tuple[int, int, bool, int | None]]] = {}

    def _make_shard(self, shard: CoordinatorShard) -> GroupShard:
        return GroupShard(shard, self.config, self.clock, log=self._log, on_loaded_hook=self._apply_completions)

    def _apply_completions(self, machine: GroupShard) -> None:
        shard = machine.shard
        for leader_epoch, producer_id, committed, marker_offset in self._completions_while_loading.pop(
                shard.partition, []):
            if leader_epoch == shard.leader_epoch:
                machine.complete_transaction(producer_id, committed, marker_offset)

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Own the nursery of timers (heartbeat/session expiry, rebalance timeouts, initial delay,
        offsets expiry) and loads; serve until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.runtime.run)
            nursery.start_soon(self._expire_offsets_forever)
            task_status.started()

    async def _expire_offsets_forever(self) -> None:
        while True:
            await trio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            self.expire_offsets()

    def expire_offsets(self) -> int:
        """One retention pass over every loaded partition; returns how many offsets expired."""
        return sum(shard.machine.expire_offsets() for shard in self.runtime.active_shards())

    def on_elected(self, writer: PartitionWriter) -> None:
        """This broker now leads partition writer.partition at writer.leader_epoch: start loading it."""
        self.runtime.on_elected(writer)

    def on_resigned(self, partition: int, leader_epoch: int) -> None:
        """Leadership of that partition left this broker: drop its groups."""
        self.runtime.on_resigned(partition, leader_epoch)
        if self.runtime.shard(partition) is None:
            self._completions_while_loading.pop(partition, None)

    def owned_partitions(self) -> set[int]:
        """Partitions loaded or loading here."""
        return self.runtime.owned_partitions()

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def shard_for(self, group_id: str) -> GroupShard | None:
        """The loaded shard serving ``group_id`` here, if any (for tests and tools)."""
        shard = self.runtime.shard(self.partition_for(group_id))
        return shard.machine if shard is not None and shard.active else None

    def _route(self, group_id: str | None, api: str) -> tuple[ErrorCode | None, GroupShard | None]:
        if group_id is None or (not group_id and api not in _EMPTY_ID_ALLOWED) or too_long(group_id):
            return ErrorCode.INVALID_GROUP_ID, None
        if not self.runtime.running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        shard = self.runtime.shard(self.partition_for(group_id))
        if shard is None:
            return ErrorCode.NOT_COORDINATOR, None
        if shard.status is ShardStatus.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        return None, shard.machine

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------

    async def join_group(self, ctx: RequestContext, request) -> JoinGroupResponse:
        version = ctx.api_version
        error, shard = self._route(request.group_id, "join_group")
        if error is not None:
            return self._join_response(version, request.member_id, error)
        waiter: Waiter = Waiter()
        shard.join_group(
            group_id=request.group_id,
            member_id=request.member_id,
            instance_id=request.group_instance_id,
            # KIP-394: from v4 a new dynamic member first gets its id, then joins with it.
            require_known_member_id=version >= 4 and request.group_instance_id is None,
            support_skip_assignment=version >= 9,
            client_id=ctx.client_id,
            client_host=ctx.client_host,
            # v0 has no rebalance timeout: the session timeout serves for both, as in Kafka.
            rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            callback=waiter.set,
            reason=request.reason,
            lookup=self.topic_lookup,
        )
        result = await waiter.wait()
        error = await self._consumer_group_written(shard, request.group_id)
        if error is not None and result.error == ErrorCode.NONE:
            return self._join_response(version, result.member_id, write_error_for_group(error))
        response = self._join_response(version, result.member_id, result.error)
        response.generation_id = result.generation_id
        response.protocol_type = result.protocol_type
        if result.protocol_name is not None:
            response.protocol_name = result.protocol_name
        response.leader = result.leader_id
        response.skip_assignment = result.skip_assignment
        response.members = [JoinGroupResponse.JoinGroupResponseMember(
            member_id=member_id, group_instance_id=instance_id, metadata=metadata)
            for member_id, instance_id, metadata in result.members]
        return response

    @staticmethod
    async def _consumer_group_written(shard: GroupShard, group_id: str) -> BaseException | None:
        """A classic member of a consumer group is answered once the group's records (what its request
        changed, and every earlier change) are written: the write's error, or None."""
        if group_id not in shard.consumer.groups:
            return None
        written = shard.consumer.write(group_id)
        if written is None:
            return None
        _, error = await written.wait()
        return error

    @staticmethod
    def _join_response(version: int, member_id: str, error: ErrorCode) -> JoinGroupResponse:
        # Before v7 the protocol name is not nullable: an empty string says "none" (as Kafka's
        # JoinGroupResponse does).
        return JoinGroupResponse(error_code=error, generation_id=-1, member_id=member_id, leader="",
                                 protocol_name=None if version >= 7 else "")

    async def sync_group(self, ctx: RequestContext, request) -> SyncGroupResponse:
        version = ctx.api_version
        if version >= 5 and (request.protocol_type is None or request.protocol_name is None):
            # v5 made both mandatory (KafkaApis checks it before the coordinator does).
            return SyncGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        error, shard = self._route(request.group_id, "sync_group")
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance's state is lost with the old coordinator: have the member rejoin (old
            # clients do not expect COORDINATOR_LOAD_IN_PROGRESS here).
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None:
            return SyncGroupResponse(error_code=error)
        waiter: Waiter = Waiter()
        assignments = {a.member_id: a.assignment for a in request.assignments}
        shard.sync_group(request.group_id, request.generation_id, request.member_id, request.protocol_type,
                         request.protocol_name, request.group_instance_id, assignments, waiter.set)
        result = await waiter.wait()
        error = await self._consumer_group_written(shard, request.group_id)
        if error is not None and result.error == ErrorCode.NONE:
            return SyncGroupResponse(error_code=write_error_for_group(error))
        return SyncGroupResponse(error_code=result.error, protocol_type=result.protocol_type,
                                 protocol_name=result.protocol_name, assignment=result.assignment)

    async def heartbeat(self, ctx: RequestContext, request) -> HeartbeatResponse:
        error, shard = self._route(request.group_id, "heartbeat")
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return HeartbeatResponse(error_code=ErrorCode.NONE)  # loading: answered blindly, as Kafka does
        if error is not None:
            return HeartbeatResponse(error_code=error)
        return HeartbeatResponse(error_code=shard.heartbeat(request.group_id, request.member_id,
                                                            request.group_instance_id, request.generation_id))

    async def leave_group(self, ctx: RequestContext, request) -> LeaveGroupResponse:
        version = ctx.api_version
        if version >= 3:
            leaving = [(m.member_id, m.group_instance_id, m.reason) for m in request.members]
        else:
            leaving = [(request.member_id, None, None)]
        error, shard = self._route(request.group_id, "leave_group")
        if error is not None:
            top, members = error, []
        else:
            top, members = shard.leave_group(request.group_id, leaving)
            error = await self._consumer_group_written(shard, request.group_id)
            if error is not None:
                top, members = write_error_for_group(error), []
        if version >= 3:
            return LeaveGroupResponse(error_code=top, members=[
                LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=e)
                for m, i, e in members])
        # v0-2 name one member: its error is the response's.
        if top == ErrorCode.NONE:
            top = next((e for _, _, e in members if e != ErrorCode.NONE), ErrorCode.NONE)
        return LeaveGroupResponse(error_code=top)

    # -- offsets ---------------------------------------------------------------------------------

    def _requested_offsets(self, request, offset_of) -> tuple[
            dict[tuple[str, int], ErrorCode], dict[tuple[str, int], OffsetAndMetadata], list[tuple[str, int]]]:
        """The partitions an OffsetCommit or TxnOffsetCommit names, in request order (a partition named
        twice keeps its last entry): ``(errors, offsets, order)``, UNKNOWN_TOPIC_OR_PARTITION for the ones
        that do not exist and ``offset_of(partition entry)`` for the others."""
        errors: dict[tuple[str, int], ErrorCode] = {}
        offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        order: list[tuple[str, int]] = []
        for topic in request.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if tp not in errors and tp not in offsets:
                    order.append(tp)
                if not self.partition_exists(*tp):
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    offsets.pop(tp, None)
                    continue
                errors.pop(tp, None)
                offsets[tp] = offset_of(p)
        return errors, offsets, order

    async def offset_commit(self, ctx: RequestContext, request) -> OffsetCommitResponse:
        version = ctx.api_version
        now = self.clock()
        # "Now + retention" when a v2-v4 request names a retention time; else the broker's retention
        # applies (KIP-211) and no expire timestamp is written.
        expire = None
        if 2 <= version <= 4 and request.retention_time_ms != -1:
            expire = now + request.retention_time_ms
        errors, offsets, order = self._requested_offsets(request, lambda p: OffsetAndMetadata(
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch,
            metadata=p.committed_metadata if p.committed_metadata is not None else "",
            commit_timestamp=p.commit_timestamp if version == 1 and p.commit_timestamp != -1 else now,
            expire_timestamp=expire,
        ))
        if offsets:
            error, shard = self._route(request.group_id, "offset_commit")
            if error is not None:
                errors.update(dict.fromkeys(offsets, error))
            elif request.group_id in shard.consumer.groups:
                # A consumer-protocol group: the member epoch is checked instead of a generation.
                error = shard.consumer.validate_offset_commit(request.group_id, request.member_id,
                                                              request.generation_id_or_member_epoch, version)
                if error is not None:
                    errors.update(dict.fromkeys(offsets, error))
                else:
                    waiter = Waiter()
                    shard.commit_offsets(request.group_id, "", None, -1, offsets, waiter.set)
                    errors.update(await waiter.wait())
            else:
                waiter = Waiter()
                shard.commit_offsets(request.group_id, request.member_id, request.group_instance_id,
                                     request.generation_id_or_member_epoch, offsets, waiter.set)
                errors.update(await waiter.wait())
        response = OffsetCommitResponse()
        response.topics = _errors_by_topic(order, errors, OffsetCommitResponse.OffsetCommitResponseTopic,
                                           OffsetCommitResponse.OffsetCommitResponsePartition)
        return response

    async def txn_offset_commit(self, ctx: RequestContext, request) -> TxnOffsetCommitResponse:
        """TxnOffsetCommit: the offsets join the producer's transaction (pending until its marker).
        Partitions that do not exist answer UNKNOWN_TOPIC_OR_PARTITION (Kafka's KafkaApis); v0-2
        carry no member, so only v3+ requests are checked against the group's members."""
        version = ctx.api_version
        now = self.clock()
        errors, offsets, order = self._requested_offsets(request, lambda p: OffsetAndMetadata(
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch if version >= 2 else -1,
            metadata=p.committed_metadata if p.committed_metadata is not None else "",
            commit_timestamp=now,
        ))
        if offsets:
            error, shard = self._route(request.group_id, "txn_offset_commit")
            if error is not None:
                errors.update(dict.fromkeys(offsets, error))
            else:
                member_id, instance_id, generation = ("", None, -1) if version < 3 else (
                    request.member_id, request.group_instance_id, request.generation_id)
                waiter: Waiter = Waiter()
                shard.txn_offset_commit(request.group_id, request.producer_id, request.producer_epoch, member_id,
                                        instance_id, generation, offsets, waiter.set)
                errors.update(await waiter.wait())
        response = TxnOffsetCommitResponse()
        response.topics = _errors_by_topic(order, errors, TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic,
                                           TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition)
        return response

    def complete_transaction(self, partition: int, producer_id: int, committed: bool,
                             marker_offset: int | None = None) -> ErrorCode:
        """A COMMIT (``committed``) or ABORT marker of ``producer_id`` at ``marker_offset`` is
        replicated in ``__consumer_offsets`` partition ``partition``: decide the producer's pending
        offsets there. NOT_COORDINATOR when the partition is not led here. While the partition loads,
        the completion is kept and applied once it is loaded: the load may end below the marker.
        Give ``marker_offset``: then a marker the load already replayed decides nothing again, and
        offsets the producer wrote after it stay pending for its next transaction."""
        shard = self.runtime.shard(partition)
        if shard is None:
            return ErrorCode.NOT_COORDINATOR
        if not shard.active or shard.machine is None:
            self._completions_while_loading.setdefault(partition, []).append(
                (shard.leader_epoch, producer_id, committed, marker_offset))
            return ErrorCode.NONE
        shard.machine.complete_transaction(producer_id, committed, marker_offset)
        return ErrorCode.NONE

    async def offset_fetch(self, ctx: RequestContext, request) -> OffsetFetchResponse:
        version = ctx.api_version
        require_stable = version >= 7 and request.require_stable
        members: dict[str, tuple[str | None, int]] = {}
        if version >= 8:
            asked = [(g.group_id, None if g.topics is None else
                      [(t.name, p) for t in g.topics for p in t.partition_indexes]) for g in request.groups]
            if version >= 9:  # a consumer-protocol member names itself and its epoch
                members = {g.group_id: (g.member_id, g.member_epoch) for g in request.groups}
        else:
            asked = [(request.group_id, None if request.topics is None else
                      [(t.name, p) for t in request.topics for p in t.partition_indexes])]
        answers = []
        for group_id, partitions in asked:
            error, shard = self._route(group_id, "offset_fetch")
            if error is None and group_id in members and group_id in shard.consumer.groups:
                error = shard.consumer.validate_offset_fetch(group_id, *members[group_id])
            if error is not None:
                answers.append((group_id, partitions, error, []))
            else:
                answers.append((group_id, partitions, ErrorCode.NONE,
                                shard.fetch_offsets(group_id, require_stable, partitions)))
        if version >= 8:
            cls = OffsetFetchResponse.OffsetFetchResponseGroup
            return OffsetFetchResponse(groups=[
                cls(group_id=group_id, error_code=error, topics=self._fetched_topics(rows, version))
                for group_id, _, error, rows in answers])
        _, partitions, error, rows = answers[0]
        if error != ErrorCode.NONE and version < 2:
            # v0-1 have no group-level error: each partition asked carries it (as Kafka did before
            # 3.x; Kafka 3.6 answers such a request with no partitions at all).
            rows = [(tp, -1, -1, "", error) for tp in partitions or ()]
        return OffsetFetchResponse(error_code=error, topics=self._fetched_topics(rows, version))

    @staticmethod
    def _fetched_topics(rows, version: int) -> list:
        if version >= 8:
            topic_cls = OffsetFetchResponse.OffsetFetchResponseTopics
            partition_cls = OffsetFetchResponse.OffsetFetchResponsePartitions
        else:
            topic_cls = OffsetFetchResponse.OffsetFetchResponseTopic
            partition_cls = OffsetFetchResponse.OffsetFetchResponsePartition
        topics: dict[str, object] = {}
        for (topic, partition), offset, leader_epoch, metadata, error in rows:
            entry = topics.get(topic)
            if entry is None:
                entry = topics[topic] = topic_cls(name=topic)
            entry.partitions.append(partition_cls(partition_index=partition, committed_offset=offset,
                                                  committed_leader_epoch=leader_epoch, metadata=metadata,
                                                  error_code=error))
        return list(topics.values())

    async def offset_delete(self, ctx: RequestContext, request) -> OffsetDeleteResponse:
        errors: dict[tuple[str, int], ErrorCode] = {}
        order: list[tuple[str, int]] = []
        eligible: list[tuple[str, int]] = []
        for topic in request.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if tp in errors or tp in eligible:
                    continue
                order.append(tp)
                if self.partition_exists(*tp):
                    eligible.append(tp)
                else:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        error, shard = self._route(request.group_id, "offset_delete")
        if error is not None:
            return OffsetDeleteResponse(error_code=error)
        group_error, deleted, tombstones = shard.delete_offsets(request.group_id, eligible)
        if group_error != ErrorCode.NONE:
            return OffsetDeleteResponse(error_code=group_error)
        if tombstones:
            try:
                await shard.shard.write_and_wait(tombstones)
            except Exception as exc:
                code = write_error_for_commit(exc)
                deleted = {tp: (code if e == ErrorCode.NONE else e) for tp, e in deleted.items()}
        errors.update(deleted)
        response = OffsetDeleteResponse()
        by_topic: dict[str, object] = {}
        for topic, partition in order:
            entry = by_topic.get(topic)
            if entry is None:
                entry = by_topic[topic] = OffsetDeleteResponse.OffsetDeleteResponseTopic(name=topic)
                response.topics.append(entry)
            entry.partitions.append(OffsetDeleteResponse.OffsetDeleteResponsePartition(
                partition_index=partition, error_code=errors.get((topic, partition), ErrorCode.NONE)))
        return response

    # -- KIP-848 consumer groups ---------------------------------------------------------------

    async def consumer_group_heartbeat(self, ctx: RequestContext, request, lookup: TopicLookup,
                                       match: RegexMatcher | None = None,
                                       group_timeouts=None) -> ConsumerGroupHeartbeatResponse:
        """ConsumerGroupHeartbeat; ``lookup`` finds a subscribed topic's id and partition count in the
        broker's metadata, ``match`` the topics a subscribed regex matches, ``group_timeouts(group_id)``
        the group's own (session timeout, heartbeat interval), each None when not set."""
        error, shard = self._route(request.group_id, "consumer_group_heartbeat")
        if error is not None:
            return ConsumerGroupHeartbeatResponse(error_code=error, member_epoch=-1)
        session_ms, interval_ms = group_timeouts(request.group_id) if group_timeouts is not None else (None, None)
        owned = None
        if request.topic_partitions is not None:
            owned = {t.topic_id: frozenset(t.partitions) for t in request.topic_partitions if t.partitions}
        result = shard.consumer.heartbeat(HeartbeatRequest(
            group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
            instance_id=request.instance_id, rack_id=request.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=None if request.subscribed_topic_names is None
            else tuple(request.subscribed_topic_names),
            subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
            server_assignor=request.server_assignor, owned=owned, client_id=ctx.client_id,
            client_host=ctx.client_host, session_timeout_ms=session_ms, heartbeat_interval_ms=interval_ms),
            lookup, match)
        # Answered once what the heartbeat changed (and every earlier change of the group) is committed.
        written = shard.consumer.write(request.group_id)
        if written is not None:
            _, write_error = await written.wait()
            if write_error is not None and result.error == ErrorCode.NONE:
                return ConsumerGroupHeartbeatResponse(error_code=write_error_for_commit(write_error), member_epoch=-1)
        response = ConsumerGroupHeartbeatResponse(
            error_code=result.error, error_message=result.message, member_id=result.member_id,
            member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms)
        if result.assignment is not None:
            response.assignment = ConsumerGroupHeartbeatResponse.Assignment(topic_partitions=[
                ConsumerGroupHeartbeatResponse.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
                for topic_id, partitions in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))])
        return response

    async def consumer_group_describe(self, ctx: RequestContext, request, topic_name,
                                      authorized_operations=None) -> ConsumerGroupDescribeResponse:
        """ConsumerGroupDescribe; ``topic_name(topic_id)`` names a topic (None when it is gone) and
        ``authorized_operations(group_id)`` says what the caller may do with a group."""
        cls = ConsumerGroupDescribeResponse
        described = []

        def assignment(a):
            return cls.Assignment(topic_partitions=[
                cls.TopicPartitions(topic_id=t, topic_name=topic_name(t) or "", partitions=sorted(ps))
                for t, ps in sorted(a.items(), key=lambda kv: str(kv[0]))])

        for group_id in request.group_ids:
            error, shard = self._route(group_id, "consumer_group_describe")
            group = shard.consumer.groups.get(group_id) if shard is not None else None
            if error is None and group is None:
                error = ErrorCode.GROUP_ID_NOT_FOUND
            if error is not None:
                message = f"Group {group_id} not found." if error == ErrorCode.GROUP_ID_NOT_FOUND else None
                described.append(cls.DescribedGroup(error_code=error, error_message=message, group_id=group_id,
                                                    group_state="Dead"))
                continue
            ops = AUTHORIZED_OPERATIONS_OMITTED
            if request.include_authorized_operations:
                ops = authorized_operations(group_id) if authorized_operations is not None else GROUP_OPERATIONS
            described.append(cls.DescribedGroup(
                error_code=ErrorCode.NONE, group_id=group_id, group_state=group.state.value,
                group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                assignor_name=group.assignor_name or self.config.group_consumer_assignors[0],
                members=[cls.Member(
                    member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                    client_id=m.client_id, client_host=m.client_host,
                    subscribed_topic_names=sorted(m.subscribed_topics()),
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=assignment(m.assigned), target_assignment=assignment(group.target.get(m.member_id, {})))
                    for m in group.members.values()],
                authorized_operations=ops))
        return cls(groups=described)

    # -- groups ----------------------------------------------------------------------------------

    async def list_groups(self, ctx: RequestContext, request) -> ListGroupsResponse:
        """The groups this broker coordinates (those of partitions still loading are not listed yet)."""
        if not self.runtime.running:
            return ListGroupsResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        wanted = {s.lower() for s in request.states_filter} if ctx.api_version >= 4 else set()
        # v5 (KIP-848): a filter on the group type, classic or consumer (any case, as Kafka parses it).
        types = {t.lower() for t in request.types_filter} if ctx.api_version >= 5 else set()
        groups = []
        for shard in self.runtime.active_shards():
            for group_id, protocol_type, state, group_type in shard.machine.list_groups_typed():
                if (not wanted or state.lower() in wanted) and (not types or group_type in types):
                    groups.append(ListGroupsResponse.ListedGroup(group_id=group_id, protocol_type=protocol_type,
                                                                 group_state=state, group_type=group_type))
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading() else ErrorCode.NONE
        return ListGroupsResponse(error_code=error, groups=groups)

    async def describe_groups(self, ctx: RequestContext, request) -> DescribeGroupsResponse:
        include_ops = ctx.api_version >= 3 and request.include_authorized_operations
        described = []
        cls = DescribeGroupsResponse.DescribedGroup
        for group_id in request.groups:
            error, shard = self._route(group_id, "describe_groups")
            if error is not None:
                described.append(cls(error_code=error, group_id=group_id, group_state="", protocol_type="",
                                     protocol_data=""))
                continue
            if group_id in shard.consumer.groups:
                # As Kafka 3.9: a consumer-protocol group is described by ConsumerGroupDescribe.
                described.append(cls(error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=group_id, group_state="Dead",
                                     protocol_type="", protocol_data=""))
                continue
            state, protocol_type, protocol, members = shard.describe_group(group_id)
            described.append(cls(
                error_code=ErrorCode.NONE, group_id=group_id, group_state=state, protocol_type=protocol_type,
                protocol_data=protocol,
                members=[DescribeGroupsResponse.DescribedGroupMember(member_id=m, group_instance_id=i, client_id=c, client_host=h,
                                                  member_metadata=md, member_assignment=a)
                         for m, i, c, h, md, a in members],
                authorized_operations=GROUP_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED))
        return DescribeGroupsResponse(groups=described)

    async def delete_groups(self, ctx: RequestContext, request) -> DeleteGroupsResponse:
        results: dict[str, ErrorCode] = {}
        writes: list[tuple[str, Waiter]] = []
        for group_id in request.groups_names:
            if group_id in results:
                continue
            error, shard = self._route(group_id, "delete_groups")
            if error is None:
                error, tombstones = shard.delete_group(group_id)
                consumer_write = shard.consumer.pending_write(group_id)
                if consumer_write is not None:  # a consumer group's tombstones
                    writes.append((group_id, consumer_write))
                if tombstones:
                    waiter: Waiter = Waiter()
                    shard.shard.write(tombstones, lambda _offset, exc, w=waiter: w.set(exc))
                    writes.append((group_id, waiter))
            results[group_id] = error
        for group_id, waiter in writes:
            exc = await waiter.wait()
            if isinstance(exc, tuple):  # (offset, error) of a consumer group's write
                exc = exc[1]
            if exc is not None:
                results[group_id] = write_error_for_commit(exc)
        cls = DeleteGroupsResponse.DeletableGroupResult
        return DeleteGroupsResponse(results=[cls(group_id=g, error_code=e) for g, e in results.items()])


def _errors_by_topic(order: list[tuple[str, int]], errors: dict[tuple[str, int], ErrorCode], topic_cls,
                     partition_cls) -> list:
    """A commit response's topics: each partition with its error, topics and partitions in request order."""
    by_topic: dict[str, object] = {}
    for topic, partition in order:
        entry = by_topic.get(topic)
        if entry is None:
            entry = by_topic[topic] = topic_cls(name=topic)
        entry.partitions.append(partition_cls(partition_index=partition, error_code=errors[(topic, partition)]))
    return list(by_topic.values())
