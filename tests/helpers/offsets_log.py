"""An in-memory `__consumer_offsets` partition and its `PartitionWriter`, for coordinator tests.

`OffsetsLog` is a real log, only in memory: records get consecutive offsets, and a high watermark
says how far they are committed. By default every append is committed at once (a one-replica
partition); with ``auto_commit=False`` appends stay uncommitted until the test calls `commit`, which
shows that the coordinator answers a commit only after replication. A new leader epoch
(`new_epoch`, a failover) makes every writer of an older epoch raise `NotLeaderError`, including an
append that is waiting for its commit. `fail_next` makes the next appends fail with a given error.

Transactions: an append with a producer id is a transactional batch of that producer (its offsets are
in `transactional`); `append_marker` writes a producer's COMMIT or ABORT marker, which takes an offset
as in a real log. Loading yields them as the runtime's `TxnRecord` and `TxnMarker`.

    log = OffsetsLog(partition=0)
    coordinator.on_elected(log.writer())
    log.auto_commit = False        # hold replication back
    ...
    log.commit()                   # the high watermark reaches the log end
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Sequence

import trio

from kraftpy.coordinator.group_coordinator import GroupConfig, GroupCoordinator, RequestContext
from kraftpy.coordinator.runtime import (
    NO_PRODUCER_ID,
    CoordinatorWriteError,
    NotLeaderError,
    TxnMarker,
    TxnRecord,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)


class OffsetsLog:
    def __init__(self, partition: int = 0, *, leader_epoch: int = 0, auto_commit: bool = True) -> None:
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.auto_commit = auto_commit
        #: (offset, key, value) in offset order; offsets are increasing (consecutive until compacted).
        self.records: list[tuple[int, bytes | None, bytes | None]] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        #: Record counts of the batches appended, in order (each append is one batch).
        self.batches: list[int] = []
        #: Errors the next appends raise, first one first.
        self.fail_next: list[BaseException] = []
        #: When set to an unset event, loading (read_committed) waits for it: a slow load.
        self.read_gate: trio.Event | None = None
        #: The offset the next record gets (compaction leaves it; truncation lowers it).
        self.log_end_offset = 0
        #: offset -> (producer id, producer epoch) of each record written in a transactional batch.
        self.transactional: dict[int, tuple[int, int]] = {}
        #: offset -> the transaction marker there.
        self.markers: dict[int, TxnMarker] = {}
        self._changed = trio.Event()

    def writer(self, leader_epoch: int | None = None) -> OffsetsWriter:
        return OffsetsWriter(self, self.leader_epoch if leader_epoch is None else leader_epoch)

    def new_epoch(self) -> int:
        """Leadership moved (and, in these tests, came back in a new epoch): old writers stop working."""
        self.leader_epoch += 1
        self._notify()
        return self.leader_epoch

    def commit(self, up_to: int | None = None) -> None:
        """Advance the high watermark (to the log end by default); it never goes back."""
        target = self.log_end_offset if up_to is None else up_to
        if target > self.high_watermark:
            self.high_watermark = target
            self._notify()

    def truncate_uncommitted(self) -> None:
        """Drop what is above the high watermark (an unclean leader change would)."""
        self.records = [r for r in self.records if r[0] < self.high_watermark]
        self.transactional = {o: t for o, t in self.transactional.items() if o < self.high_watermark}
        self.markers = {o: m for o, m in self.markers.items() if o < self.high_watermark}
        self.log_end_offset = self.high_watermark

    def append_marker(self, producer_id: int, producer_epoch: int, committed: bool) -> int:
        """Write the producer's COMMIT (``committed``) or ABORT marker; its offset. Committed at once
        when ``auto_commit`` is on."""
        offset = self.log_end_offset
        self.markers[offset] = TxnMarker(offset, producer_id, producer_epoch, committed)
        self.log_end_offset = offset + 1
        if self.auto_commit:
            self.commit(offset + 1)
        return offset

    def compact(self) -> None:
        """Keep the last record of each key below the high watermark and drop tombstones, as a cleaner
        with delete.retention.ms=0 would (offsets stay; only records go)."""
        last: dict[bytes | None, int] = {}
        committed = [r for r in self.records if r[0] < self.high_watermark]
        for i, (_, key, _) in enumerate(committed):
            last[key] = i
        kept = [r for i, r in enumerate(committed) if last[r[1]] == i and r[2] is not None]
        self.records = kept + [r for r in self.records if r[0] >= self.high_watermark]

    def live(self) -> dict[bytes | None, bytes | None]:
        """Key -> last value of every committed key (None: deleted), what compaction would keep."""
        out: dict[bytes | None, bytes | None] = {}
        for offset, key, value in self.records:
            if offset < self.high_watermark:
                out[key] = value
        return out

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()


class OffsetsWriter:
    """A `PartitionWriter` over an `OffsetsLog`, valid in one leader epoch."""

    def __init__(self, log: OffsetsLog, leader_epoch: int) -> None:
        self.log = log
        self.partition = log.partition
        self.leader_epoch = leader_epoch

    def _check(self) -> None:
        if self.log.leader_epoch != self.leader_epoch:
            raise NotLeaderError(f"partition {self.partition} moved to epoch {self.log.leader_epoch}")

    async def append(self, records: Sequence[tuple[bytes, bytes | None]], *, producer_id: int = NO_PRODUCER_ID,
                     producer_epoch: int = -1, transactional: bool = False) -> int:
        self._check()
        assert records, "one batch has at least one record"
        assert transactional == (producer_id != NO_PRODUCER_ID), "the coordinator writes only transactional batches"
        log = self.log
        if log.fail_next:
            raise log.fail_next.pop(0)
        base = log.log_end_offset
        for i, (key, value) in enumerate(records):
            assert isinstance(key, bytes) and (value is None or isinstance(value, bytes))
            log.records.append((base + i, key, value))
            if transactional:
                log.transactional[base + i] = (producer_id, producer_epoch)
        log.log_end_offset = base + len(records)
        log.batches.append(len(records))
        last = base + len(records) - 1
        if log.auto_commit:
            log.commit(last + 1)
        while log.high_watermark <= last:
            self._check()
            await log.wait_changed()
        self._check()
        return last

    async def read_committed(self) -> AsyncIterator[tuple[int, bytes | None, bytes | None] | TxnRecord | TxnMarker]:
        self._check()
        log = self.log
        end = log.high_watermark
        if log.read_gate is not None:
            await log.read_gate.wait()
            self._check()
        items: list = list(log.records)
        if log.markers:
            items = sorted(items + list(log.markers.values()),
                           key=lambda item: item.offset if isinstance(item, TxnMarker) else item[0])
        for item in items:
            offset = item.offset if isinstance(item, TxnMarker) else item[0]
            if offset >= end:
                break
            await trio.lowlevel.checkpoint()
            self._check()
            txn = None if isinstance(item, TxnMarker) else log.transactional.get(offset)
            yield item if txn is None else TxnRecord(offset, item[1], item[2], *txn)


def storage_error() -> CoordinatorWriteError:
    return CoordinatorWriteError(ErrorCode.KAFKA_STORAGE_ERROR, "disk gone")


# --- a group coordinator over in-memory logs ---------------------------------------------------------

#: Wall-clock milliseconds at trio time 0, so that timestamps look like real ones.
EPOCH_MS = 1_700_000_000_000


def trio_clock_ms() -> int:
    """Wall-clock milliseconds that move with trio's (virtual, in tests) clock."""
    return EPOCH_MS + int(trio.current_time() * 1000)


def consumer_subscription(*topics: str, user_data: bytes | None = None) -> bytes:
    """A consumer protocol subscription, version 0 layout (what the coordinator parses for topics)."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for topic in topics:
        data = topic.encode()
        out += struct.pack(">h", len(data)) + data
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data
    return bytes(out)


class GroupHarness:
    """A `GroupCoordinator` on in-memory `__consumer_offsets` partitions, and the requests of a client.

    Request helpers build the wire objects of ``kraftpy.protocol.messages`` at a given version and
    return the coordinator's response objects, exactly what the broker's handlers pass through.
    """

    def __init__(self, *, partitions: int = 1, existing: set[tuple[str, int]] | None = None, **config) -> None:
        defaults = dict(offsets_topic_num_partitions=partitions, group_initial_rebalance_delay_ms=100,
                        group_min_session_timeout_ms=1000)
        defaults.update(config)
        self.config = GroupConfig(**defaults)
        self.logs = {p: OffsetsLog(p) for p in range(partitions)}
        self.existing = existing
        self.coordinator = self.new_coordinator()

    def new_coordinator(self):
        exists = None if self.existing is None else (lambda t, p: (t, p) in self.existing)
        return GroupCoordinator(self.config, clock=trio_clock_ms, node_id=1, partition_exists=exists)

    async def start(self, nursery: trio.Nursery, *, elect: bool = True) -> None:
        await nursery.start(self.coordinator.run)
        if elect:
            for log in self.logs.values():
                self.coordinator.on_elected(log.writer())
            await self.loaded()

    async def loaded(self) -> None:
        for shard in list(self.coordinator.runtime.shards.values()):
            await shard.loaded.wait()

    def shard(self, group_id: str):
        return self.coordinator.shard_for(group_id)

    def group(self, group_id: str):
        shard = self.shard(group_id)
        return None if shard is None else shard.groups.get(group_id)

    def timer_failures(self) -> int:
        return sum(s.timers.failures for s in self.coordinator.runtime.shards.values())

    @staticmethod
    def ctx(version: int, client_id: str = "client"):
        return RequestContext(client_id=client_id, client_host="/127.0.0.1", api_version=version)

    # -- whole flows ------------------------------------------------------------------------------

    async def join_all(self, group: str, members: list[str], **kw) -> dict[str, object]:
        """Join (or rejoin) every member id at once (``""``: a new member); {member id: JoinGroup response}."""
        results: dict[int, object] = {}

        async def one(i: int, member_id: str) -> None:
            results[i] = await (self.join_new(group, **kw) if member_id == "" else self.join(group, member_id, **kw))

        async with trio.open_nursery() as nursery:
            for i, member_id in enumerate(members):
                nursery.start_soon(one, i, member_id)
        return {r.member_id: r for r in (results[i] for i in range(len(members)))}

    async def sync_all(self, group: str, joined: dict[str, object], assign=None) -> dict[str, object]:
        """Every joined member syncs; the leader hands out ``assign(member_id)`` (default: the id's bytes)."""
        assign = assign or (lambda member_id: member_id.encode())
        leader = next(r.leader for r in joined.values())
        generation = next(r.generation_id for r in joined.values())
        results = {}

        async def one(member_id: str) -> None:
            assignments = {m: assign(m) for m in joined} if member_id == leader else None
            response = joined[member_id]
            results[member_id] = await self.sync(group, generation, member_id, assignments,
                                                 protocol_type=response.protocol_type,
                                                 protocol_name=response.protocol_name)

        async with trio.open_nursery() as nursery:
            for member_id in joined:
                nursery.start_soon(one, member_id)
        return results

    async def stable(self, group: str, n: int, **kw) -> dict[str, object]:
        """A new group of ``n`` members, joined and synced; {member id: JoinGroup response}."""
        joined = await self.join_all(group, [""] * n, **kw)
        synced = await self.sync_all(group, joined)
        assert all(s.error_code == ErrorCode.NONE for s in synced.values()), synced
        return joined

    # -- requests ---------------------------------------------------------------------------------

    async def join(self, group: str, member_id: str = "", *, instance_id: str | None = None, version: int = 9,
                   protocols=(("range", b"r"),), protocol_type: str = "consumer", session_timeout_ms: int = 10000,
                   rebalance_timeout_ms: int = 30000, reason: str | None = None, client_id: str = "client"):
        request = JoinGroupRequest(
            group_id=group, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            member_id=member_id, group_instance_id=instance_id, protocol_type=protocol_type,
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols],
            reason=reason)
        return await self.coordinator.join_group(self.ctx(version, client_id), request)

    async def join_new(self, group: str, **kw):
        """A new dynamic member's join at v4+: get the id (MEMBER_ID_REQUIRED), then join with it."""
        first = await self.join(group, **kw)
        if first.error_code != ErrorCode.MEMBER_ID_REQUIRED:
            return first
        return await self.join(group, first.member_id, **kw)

    async def sync(self, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None, *,
                   instance_id: str | None = None, version: int = 5, protocol_type: str | None = "consumer",
                   protocol_name: str | None = "range"):
        request = SyncGroupRequest(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance_id,
            protocol_type=protocol_type, protocol_name=protocol_name,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in (assignments or {}).items()])
        return await self.coordinator.sync_group(self.ctx(version), request)

    async def heartbeat(self, group: str, generation: int, member_id: str, *, instance_id: str | None = None,
                        version: int = 4):
        return await self.coordinator.heartbeat(self.ctx(version), HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance_id))

    async def leave(self, group: str, *members: tuple[str, str | None], version: int = 5):
        request = LeaveGroupRequest(group_id=group, member_id=members[0][0] if version < 3 else "",
                                    members=[LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i)
                                             for m, i in members])
        return await self.coordinator.leave_group(self.ctx(version), request)

    async def commit(self, group: str, offsets: dict[tuple[str, int], int], *, generation: int = -1,
                     member_id: str = "", instance_id: str | None = None, version: int = 8,
                     metadata: str | None = "", retention_time_ms: int = -1):
        topics: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=metadata))
        request = OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=instance_id, retention_time_ms=retention_time_ms,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])
        response = await self.coordinator.offset_commit(self.ctx(version), request)
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    async def txn_commit(self, group: str, offsets: dict[tuple[str, int], int], *, producer_id: int,
                         producer_epoch: int = 0, generation: int = -1, member_id: str = "",
                         instance_id: str | None = None, version: int = 3, metadata: str | None = ""):
        """A TxnOffsetCommit; {(topic, partition): error}."""
        topics: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=metadata))
        request = TxnOffsetCommitRequest(
            transactional_id="txn", group_id=group, producer_id=producer_id, producer_epoch=producer_epoch,
            generation_id=generation, member_id=member_id, group_instance_id=instance_id,
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in topics.items()])
        response = await self.coordinator.txn_offset_commit(self.ctx(version), request)
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    async def fetch(self, group: str, partitions: list[tuple[str, int]] | None = None, *, version: int = 8,
                    require_stable: bool = False):
        """{(topic, partition): (offset, error)} and the group-level error."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            topics = by_topic
        if version >= 8:
            request = OffsetFetchRequest(require_stable=require_stable, groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id=group, topics=None if topics is None else [
                    OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                    for t, ps in topics.items()])])
            response = await self.coordinator.offset_fetch(self.ctx(version), request)
            g = response.groups[0]
            return {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                    for t in g.topics for p in t.partitions}, g.error_code
        request = OffsetFetchRequest(group_id=group, require_stable=require_stable, topics=None if topics is None else [
            OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics.items()])
        response = await self.coordinator.offset_fetch(self.ctx(version), request)
        return {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                for t in response.topics for p in t.partitions}, response.error_code

    async def delete_offsets(self, group: str, partitions: list[tuple[str, int]]):
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        request = OffsetDeleteRequest(group_id=group, topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
            name=t, partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(
                partition_index=p) for p in ps]) for t, ps in by_topic.items()])
        response = await self.coordinator.offset_delete(self.ctx(0), request)
        return response.error_code, {(t.name, p.partition_index): p.error_code
                                     for t in response.topics for p in t.partitions}

    async def delete_groups(self, *groups: str, version: int = 2):
        response = await self.coordinator.delete_groups(self.ctx(version), DeleteGroupsRequest(groups_names=list(groups)))
        return {r.group_id: r.error_code for r in response.results}

    async def list_groups(self, *states: str, version: int = 4):
        response = await self.coordinator.list_groups(self.ctx(version), ListGroupsRequest(states_filter=list(states)))
        return response.error_code, {g.group_id: g.group_state for g in response.groups}

    async def describe(self, group: str, *, version: int = 5, include_operations: bool = False):
        response = await self.coordinator.describe_groups(self.ctx(version), DescribeGroupsRequest(
            groups=[group], include_authorized_operations=include_operations))
        return response.groups[0]
