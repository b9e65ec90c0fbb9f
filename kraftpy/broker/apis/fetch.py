"""Fetch: consumers and follower brokers read file regions of segments, sent with ``os.sendfile``.

A fetch reads each partition as it stands (``Log.read``: a region of a segment file, no bytes
copied) — below the high watermark for consumers, up to the log end for followers — and answers
once ``min_bytes`` are readable, something needs an answer at once (an error, a diverging epoch),
or ``max_wait_ms`` passed: in between it parks in the purgatory on the partitions' watchers
(followers wait for appends, consumers for the high watermark). Only the final answer's regions
get descriptors of their own (`FileRegion.detach`), held by the connection until they are sent,
so retention or a truncation may close the segment meanwhile.

A consumer fetching with ``isolation_level`` READ_COMMITTED (1) reads below the last stable offset
instead of the high watermark, and is told of the aborted transactions whose records the answer may
hold (``aborted_transactions``, from the segments' ``.txnindex``), so it can skip them: it never
sees a record of an open or aborted transaction. READ_UNCOMMITTED (0) reads up to the high
watermark, aborted records included, with no list. Every answer names the last stable offset.

A follower's fetch is also how the leader learns its progress: its fetch offset moves the high
watermark and may bring it back into the ISR; a follower whose last fetched epoch the leader's
history does not continue gets a diverging epoch instead of records (KIP-320). From v15 (KIP-903) the
follower's fetch names its broker epoch too, and one fetching under an epoch other than its current
registration's (a process of an earlier registration) joins no ISR.

From v16 (KIP-951) a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names its
current leader and epoch, and the answer carries those leaders' endpoints on the request's listener.

Fetch sessions (KIP-227, kraftpy.broker.fetch_sessions): a full fetch may leave its partitions in the
broker's session cache; an incremental one then names only what changed, and is answered only with the
partitions that have something new. The regions read for the partitions left out are never detached,
so they cost no descriptor.

Sessions in proportion to the change
------------------------------------
An incremental fetch reads only the partitions it names and those marked since: every partition a
session holds tells it of each change it reads (`Partition.changed`, called by the partition's watchers
on a new high watermark, last stable offset, role or ISR, on truncations and on a new log start offset;
an append that moves only the log end is news to a follower's session alone, since a consumer reads up
to the high watermark: its parked fetch sleeps through the appends of a partition with followers and
wakes once the followers' fetches move the high watermark), and `FetchSession.pick` returns those, in
session order. After the fetch, `_note_session` leaves a partition marked unless it has nothing left to
say: a follower has all of it and is in its ISR, a consumer has everything below its bound (the high
watermark, or the last stable offset for read_committed), and either was told the high watermark, last
stable offset and log start offset. A partition with an error, a diverging epoch, records left to read
or a follower outside the ISR is read again on every fetch, as before. A fetch with nothing to read
parks on the session (its ``wake``), not on each partition's watchers. A follower's offsets are taken
in once, when the fetch arrives.
Partitions not read are unchanged since the follower last had all of them, so each fetch of its session
counts as catching up there (`FollowerState.caught_up_ms`). The fetch reads every partition once when
what decided the others may have changed since the session last read them all (its ``view``): replicas
came or went on this broker (``ReplicaManager.partitions_version``), the ACLs changed (each partition's
READ is decided again), or the consumer asks with another isolation level; and a follower denied
always reads them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import structlog
import trio

from kraftpy.broker.apis.common import from_wire_uuid, leader_partition, point_to_leaders
from kraftpy.broker.apis.offsets import READ_COMMITTED
from kraftpy.broker.authorization import CLUSTER_ACTION, NO_AUTHORIZATION, READ, TOPIC, BrokerAuthorizer
from kraftpy.broker.fetch_sessions import CachedPartition, FetchSessionCache, PartitionKey, new_context
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.partition import Partition
from kraftpy.broker.purgatory import wait_for_change
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.metrics import (
    FETCH_SESSION_EVICTIONS,
    FETCH_SESSION_PARTITIONS,
    FETCH_SESSIONS,
    count_fetched,
    name_request,
    waiting_remotely,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import FetchResponse
from kraftpy.protocol.types import FileRegion, part_length
from kraftpy.rpc.kafka_server import Connection
from kraftpy.storage.log import OffsetOutOfRangeError


def divergence(part: Partition, fp: Any) -> tuple[int, int] | None:
    """Where a follower's log diverges from ours, from the epoch of its last batch (KIP-320), if it does."""
    if fp.last_fetched_epoch < 0:
        return None
    epoch, end = part.log.end_offset_for_epoch(fp.last_fetched_epoch)
    if epoch < 0 or end < 0:
        # Our history knows no epoch at or below the follower's: keep only what lies below our start.
        return -1, part.log_start_offset
    if epoch < fp.last_fetched_epoch or end < fp.fetch_offset:
        return epoch, end
    return None


class FetchApi:
    #: Set by the broker: READ on each topic (consumers), CLUSTER_ACTION on the cluster (followers).
    authz: BrokerAuthorizer = NO_AUTHORIZATION
    #: Set by the broker: its client quotas (kraftpy.broker.quotas.ClientQuotas), for consumer_byte_rate.
    quotas: Any = None

    def __init__(self, replicas: ReplicaManager, metadata: MetadataCache) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self._log = structlog.get_logger(__name__).bind(node_id=replicas.node_id)
        node = str(replicas.node_id)
        evictions = FETCH_SESSION_EVICTIONS.labels(node)
        #: Incremental fetch sessions (KIP-227): max.incremental.fetch.session.cache.slots of them.
        self.sessions = FetchSessionCache(replicas.settings.max_incremental_fetch_session_cache_slots,
                                          on_evict=evictions.inc)
        # Read when scraped, not set by every fetch (two locked writes a request).
        sessions = self.sessions
        FETCH_SESSIONS.labels(node).set_function(lambda: len(sessions))
        FETCH_SESSION_PARTITIONS.labels(node).set_function(lambda: sessions.total_partitions)
        #: Followers' fetches, and the partitions they looked at (each look after a wake-up counted too):
        #: what a follower's fetch costs here, which follows what changed, not the session's size.
        self.follower_fetches = 0
        self.follower_partitions_looked_at = 0
        #: The same of consumers' fetches.
        self.consumer_fetches = 0
        self.consumer_partitions_looked_at = 0

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.FETCH: self.handle_fetch}

    async def handle_fetch(self, header: Any, request: Any, conn: Connection) -> FetchResponse:
        version = header.request_api_version
        uses_topic_ids = version >= 13
        # From v15 (KIP-903) a follower names itself in ReplicaState, beside its broker epoch.
        if version >= 15:
            replica_id, replica_epoch = request.replica_state.replica_id, request.replica_state.replica_epoch
        else:
            replica_id, replica_epoch = request.replica_id, -1
        is_replica = replica_id >= 0
        name_request("FetchFollower" if is_replica else "FetchConsumer")
        image = self.metadata.image
        #: Each partition once, however often it is named (Kafka keys a fetch's partitions): the last
        #: mention's offsets stand, in the first mention's place.
        fetch_data: dict[PartitionKey, CachedPartition] = {}
        for topic in request.topics:
            topic_key = topic.topic_id if uses_topic_ids else topic.topic
            for fp in topic.partitions:
                fetch_data[(topic_key, fp.partition)] = CachedPartition.from_request(topic.topic, topic.topic_id, fp)
        forgotten = [(ft.topic_id if uses_topic_ids else ft.topic, p)
                     for ft in request.forgotten_topics_data for p in ft.partitions]
        context = new_context(self.sessions, trio.current_time() * 1000, version=version,
                              session_id=request.session_id, epoch=request.session_epoch, is_follower=is_replica,
                              fetch_data=fetch_data, forgotten=forgotten, lazy=True)
        if context.error != ErrorCode.NONE:
            self._log.debug("fetch session refused", session_id=request.session_id,
                            epoch=request.session_epoch, error=context.error.name)
            return FetchResponse(throttle_time_ms=0, error_code=context.error, session_id=0)
        follower_denied = is_replica and not self.authz.allows_cluster(conn, CLUSTER_ACTION)
        read_committed = not is_replica and request.isolation_level == READ_COMMITTED
        # An incremental fetch looks only at the partitions it names and those that changed since (see
        # "Sessions in proportion to the change"), unless replicas came or went here, the ACLs changed or
        # the isolation level is another since the session last looked at all of its partitions.
        view = (self.replicas.partitions_version, self.authz.version, read_committed)
        session = context.session if context.kind == "incremental" else None
        picking = session is not None and not follower_denied and session.version == view
        if is_replica:
            self.follower_fetches += 1
        else:
            self.consumer_fetches += 1
        if session is not None:
            session.last_fetch_ms = self.replicas.clock()
            context.partitions = session.pick(fetch_data) if picking else list(session.partitions.items())
        items, diverging = self._resolve(context.partitions, uses_topic_ids, image, conn, is_replica,
                                         follower_denied, replica_id, replica_epoch)

        # Replication throttles (see replication_quota): a throttled partition the follower is not in the
        # ISR of is left out of the answer while the leader's quota is exceeded.
        throttles = self.replicas.throttles
        held: set[int] = set()
        deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
        max_bytes, min_bytes = request.max_bytes, request.min_bytes
        quota_bytes = self.quotas.max_fetch_bytes(header, conn) if self.quotas is not None and not is_replica else None
        if quota_bytes is not None:  # a consumer reads at most what its byte-rate quota allows at once
            max_bytes = min(max_bytes, quota_bytes)
            min_bytes = min(min_bytes, max_bytes)
        while True:
            throttled = self._throttled(items, replica_id) if is_replica else set()
            held = throttled if throttled and throttles.leader.is_exceeded() else set()
            total, datas, answer_now = self._read(items, max_bytes, is_replica, diverging, held, read_committed,
                                                  context.kind == "incremental")
            if (
                total >= min_bytes
                or answer_now
                or request.max_wait_ms <= 0
                or trio.current_time() >= deadline
            ):
                break
            if picking:
                # Parked on the session itself: any of its partitions that changes wakes it.
                woken = trio.Event()
                session.wake = woken.set
                try:
                    with waiting_remotely(), trio.move_on_at(deadline):
                        await woken.wait()
                finally:
                    session.wake = None
                context.partitions = session.pick(fetch_data)
                # A follower's offsets were taken in when the fetch came: its state is not touched again
                # (it said what it had then, not now).
                items, diverging = self._resolve(context.partitions, uses_topic_ids, image, conn, is_replica,
                                                 follower_denied, replica_id, replica_epoch, take_offsets=False)
                continue
            parts = [part for _, _, part, error in items if part is not None and error == ErrorCode.NONE]
            if not parts:
                break
            watchers = [p.append_watchers if is_replica else p.hw_watchers for p in parts]
            with waiting_remotely():
                await wait_for_change(watchers, deadline)
        if held:
            throttles.leader.held_back += 1
            self._log.debug("replication throttled: partitions held back", replica=replica_id,
                            partitions=[str(items[i][2].tp) for i in sorted(held)],
                            rate=int(throttles.leader.rate()), bound=throttles.leader.bound)
        for i in throttled - held:
            if datas[i] is None:
                continue
            records = datas[i].records
            throttles.leader.record(part_length(records) if records is not None else 0)
        if self.quotas is not None and not is_replica:
            throttle = self.quotas.throttle_fetch(header, conn, total)
            if throttle > 0:
                # Over consumer_byte_rate: no records, only the throttle time (Kafka's getThrottledResponse);
                # the session, if any, is left as it was.
                session = context.session if context.kind == "incremental" else None
                return FetchResponse(throttle_time_ms=throttle, error_code=ErrorCode.NONE,
                                     session_id=session.id if session is not None else 0, responses=[])
        # An incremental fetch answers only the partitions with something new (KIP-227).
        sizes = [part_length(data.records) if data is not None and data.records is not None else 0 for data in datas]
        error, session_id, carried = context.finish(self.sessions, trio.current_time() * 1000,
                                                    list(zip(datas, sizes, strict=True)))
        if error == ErrorCode.NONE and session_id != 0 and not follower_denied:
            self._note_session(self.sessions.get(session_id), items, diverging, held, replica_id, read_committed,
                               view=None if picking else view)
        responses = []
        topic_response = None
        for i in carried:
            (topic_key, _), fp, part, _ = items[i]
            data = datas[i]
            # Descriptors of their own for what is sent: no await since the read above.
            if isinstance(data.records, FileRegion):
                data.records = conn.hold(data.records.detach())
                if not is_replica and part is not None:
                    count_fetched(part.node_id, part.tp.topic, data.records.length)
            wire_key = fp.topic_id if uses_topic_ids else fp.topic
            if topic_response is None or (topic_response.topic_id if uses_topic_ids else topic_response.topic) != wire_key:
                topic_response = FetchResponse.FetchableTopicResponse(topic=fp.topic, topic_id=fp.topic_id)
                responses.append(topic_response)
            topic_response.partitions.append(data)
        node_endpoints = self._current_leaders(items, datas, carried, conn.listener) if version >= 16 else []
        return FetchResponse(throttle_time_ms=0, error_code=error, session_id=session_id, responses=responses,
                             node_endpoints=node_endpoints)

    def _resolve(self, partitions: list, uses_topic_ids: bool, image: Any, conn: Connection, is_replica: bool,
                 follower_denied: bool, replica_id: int, replica_epoch: int,
                 take_offsets: bool = True) -> tuple[list, dict[int, tuple[int, int]]]:
        """Each partition of the fetch as (key, partition request, Partition | None, error), and the
        follower's diverging epochs by index; with ``take_offsets``, a follower's fetch offsets are taken
        in on the way (its progress, the high watermark, the ISR)."""
        items = []
        names: dict[Any, str | None] = {}  # a topic of the fetch (its id from v13) -> its name, if known
        for (topic_key, _), cached in partitions:
            if topic_key not in names:
                if uses_topic_ids:
                    topic_id = from_wire_uuid(cached.topic_id)
                    topic_image = image.topics.get_by_id(topic_id) if topic_id is not None else None
                    names[topic_key] = topic_image.name if topic_image is not None else None
                else:
                    names[topic_key] = cached.topic
        unauthorized: set[str] = set() if is_replica else self.authz.denied(
            conn, READ, TOPIC, {n for n in names.values() if n is not None})
        unknown = ErrorCode.UNKNOWN_TOPIC_ID if uses_topic_ids else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for key, fp in partitions:
            name = names[key[0]]
            if name is None:
                item = (key, fp, None, unknown)
            elif follower_denied or name in unauthorized:
                item = (key, fp, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            else:
                part, error = leader_partition(self.replicas, self.metadata, name, fp.partition,
                                               fp.current_leader_epoch)
                if part is not None and is_replica and replica_id not in part.replicas:
                    error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                item = (key, fp, part, error)
            items.append(item)

        diverging: dict[int, tuple[int, int]] = {}
        if not is_replica:
            self.consumer_partitions_looked_at += len(items)
        else:
            self.follower_partitions_looked_at += len(items)
            for i, (_, fp, part, error) in enumerate(items):
                if part is None or error != ErrorCode.NONE:
                    continue
                diverged = divergence(part, fp)
                if diverged is not None:
                    diverging[i] = diverged
                elif take_offsets and part.log_start_offset <= fp.fetch_offset <= part.log_end_offset:
                    if part.update_follower_fetch(replica_id, fp.fetch_offset) is not None:
                        self.replicas.maybe_expand_isr(part, replica_id, replica_epoch)
        return items, diverging

    def _throttled(self, items: list, replica_id: int) -> set[int]:
        """The indexes of the partitions a follower's fetch may be held back on (replication throttles):
        throttled ones the follower is not in the ISR of."""
        throttles = self.replicas.throttles
        return {i for i, (_, fp, part, error) in enumerate(items)
                if part is not None and error == ErrorCode.NONE and replica_id not in part.isr
                and throttles.leader_throttles(part.tp.topic, part.tp.partition)}

    def _note_session(self, session: Any, items: list, diverging: dict, held: set[int], replica_id: int,
                      read_committed: bool, *, view: Any) -> None:
        """After a fetch of ``session``: each partition looked at tells the session of its changes from now
        on (and, for a follower, counts its fetches as the follower's: `FollowerState.caught_up_ms`), and
        stays marked unless it has nothing left to say (see "Sessions in proportion to the change").
        ``view``: what the fetch saw when it looked at every partition (None: it looked at some)."""
        if session is None:
            return
        dirty = session.dirty
        is_replica = replica_id >= 0
        for i, (key, cached, part, error) in enumerate(items):
            if part is None:
                dirty.add(key)
                continue
            part.sessions[session] = key
            log = part.log
            if is_replica:
                state = part.followers.get(replica_id)
                if state is not None:
                    state.session, state.session_key = session, key
                # Nothing left to say: the follower has all of it, is in its ISR, and was told its
                # high watermark, last stable offset and log start offset.
                settled = (i not in diverging and i not in held and replica_id in part.isr
                           and cached.fetch_offset == log.log_end_offset)
            else:
                # Nothing left to say: the consumer has everything below its bound (the high watermark,
                # the last stable offset for read_committed) and was told where the log stands.
                upper = part.last_stable_offset if read_committed else part.high_watermark
                settled = upper <= cached.fetch_offset <= log.log_end_offset
            if (
                settled
                and error == ErrorCode.NONE
                and part.is_leader
                and cached.high_watermark == part.high_watermark
                and cached.last_stable_offset == part.last_stable_offset
                and cached.local_log_start_offset == log.log_start_offset
            ):
                dirty.discard(key)
            else:
                dirty.add(key)
        if view is not None:
            session.version = view

    def _current_leaders(self, items: list, datas: list, carried: Iterable[int], listener: str) -> list[Any]:
        """KIP-951 (Fetch v16+): a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names
        its leader and epoch as this broker's metadata has them, and the answer lists those leaders'
        endpoints on the request's listener: the consumer moves without a metadata request."""
        refused = []
        for i in carried:
            data = datas[i]
            if data.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                fp = items[i][1]
                name = fp.topic or self._topic_name(fp.topic_id)
                if name:
                    refused.append((name, fp.partition, data))
        return point_to_leaders(self.metadata, refused, listener, FetchResponse.NodeEndpoint)

    def _topic_name(self, wire_topic_id: Any) -> str | None:
        topic_id = from_wire_uuid(wire_topic_id)
        topic_image = self.metadata.image.topics.get_by_id(topic_id) if topic_id is not None else None
        return topic_image.name if topic_image is not None else None


    @staticmethod
    def _read(items: list, max_bytes: int, is_replica: bool, diverging: dict[int, tuple[int, int]],
              held: set[int] | frozenset[int] = frozenset(), read_committed: bool = False,
              incremental: bool = False):
        """Read every partition as it stands; returns (bytes readable, partition data, answer at once).
        The partitions in ``held`` (throttled) answer no records. The regions borrow the segments'
        descriptors. ``read_committed``: a consumer's read stops at the last stable offset and names
        the aborted transactions it may hold. ``incremental``: the partition requests are the session's
        (`CachedPartition`), and one with nothing to read and nothing changed since its last answer gets
        None instead of data (the answer would leave it out anyway)."""
        total = 0
        answer_now = False
        datas: list = []
        PartitionData = FetchResponse.PartitionData
        for i, (_, fp, part, error) in enumerate(items):
            if incremental and part is not None and error == ErrorCode.NONE and i not in diverging:
                log = part.log
                offset = fp.fetch_offset
                if (
                    part.high_watermark == fp.high_watermark
                    and log.log_start_offset == fp.local_log_start_offset
                    and part.is_leader
                    and log.log_start_offset <= offset
                    and (offset == log.log_end_offset if is_replica else offset >= (
                        fp.last_stable_offset if read_committed else fp.high_watermark) and offset <= log.log_end_offset)
                    and part.last_stable_offset == fp.last_stable_offset
                ):
                    datas.append(None)
                    continue
            # Never a null record set, even with an error: librdkafka rejects MessageSetSize -1 as a
            # parse failure and drops the whole response, so its consumer would never see the error
            # (and retry the same fetch forever). Kafka answers errors with empty records too.
            data = PartitionData(partition_index=fp.partition, error_code=error, high_watermark=-1,
                                 last_stable_offset=-1, log_start_offset=-1, records=b"")
            datas.append(data)
            if part is None or error != ErrorCode.NONE:
                answer_now = True
                continue
            if not part.is_leader:
                data.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                answer_now = True
                continue
            log = part.log
            high_watermark = part.high_watermark
            last_stable_offset = part.last_stable_offset
            data.high_watermark = high_watermark
            data.last_stable_offset = last_stable_offset
            data.log_start_offset = log.log_start_offset
            if read_committed:
                data.aborted_transactions = []
            upper = last_stable_offset if read_committed else high_watermark
            if i in diverging:
                data.diverging_epoch.epoch, data.diverging_epoch.end_offset = diverging[i]
                answer_now = True
                continue
            offset = fp.fetch_offset
            if offset < log.log_start_offset or offset > log.log_end_offset:
                data.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                answer_now = True
                continue
            if (not is_replica and offset >= upper) or i in held:
                continue
            budget = min(fp.partition_max_bytes, max_bytes - total)
            if budget <= 0 and total > 0:
                continue
            try:
                region = log.read(offset, max(budget, 0), max_offset=None if is_replica else upper,
                                  min_one_batch=total == 0, whole_batches=is_replica)
            except OffsetOutOfRangeError:
                data.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                answer_now = True
                continue
            if region.length:
                data.records = region
                total += region.length
                if read_committed:
                    # Kafka bounds the search by the offset after the read too, loosely (an index
                    # entry or the segment's end): naming a transaction past the records is harmless.
                    AbortedTransaction = FetchResponse.AbortedTransaction
                    data.aborted_transactions = [
                        AbortedTransaction(producer_id=txn.producer_id, first_offset=txn.first_offset)
                        for txn in log.collect_aborted_transactions(offset, upper)]
        return total, datas, answer_now
