"""Replica fetchers: followers pull from their leaders with the Fetch API, one task per source broker.

Theory of operation
-------------------
`FetcherManager` keeps one `ReplicaFetcher` task per leader broker that this broker follows
partitions of (``ReplicaManager.fetch_assignments``), starting and cancelling them as metadata
moves leaderships around. A fetcher holds one TCP connection to its leader and loops:

1. build one Fetch (topic ids; the version Kafka's followers send at the cluster's metadata.version,
   `metadata_version.fetch_request_version`: 13 up to 3.4, from 15 on with this broker's id and broker
   epoch in ``replica_state``, before in ``replica_id``) for every partition it follows
   there, each at the log end offset with the epoch of the last batch (``last_fetched_epoch``)
   and the leader epoch the follower believes in (``current_leader_epoch``). Through a fetch
   session (KIP-227, `FetchSessionHandler`): the first fetch names every partition, the next ones
   only those whose fetch state changed (or that joined), and forget those no longer fetched; the
   leader answers only the partitions with news. A session error (FETCH_SESSION_ID_NOT_FOUND after
   a leader restart or eviction, INVALID_FETCH_SESSION_EPOCH) or a lost connection makes the next
   fetch a full one again;
2. the leader long-polls until it has new data or ``replica.fetch.wait.max.ms`` passed;
3. for each partition of the answer, unless its role changed while the request was out:
   * a *diverging epoch* means the follower's log holds batches the leader does not: truncate to
     the smaller of the leader's end offset for that epoch and the follower's own (never below
     the high watermark), then fetch again — the next round checks the earlier epoch, so the
     two logs meet at their last common offset (KIP-320's fetch-based truncation);
   * records are appended as they are (``Log.append_as_follower``), a partial last batch dropped;
   * the high watermark the leader sent, capped at the follower's log end, becomes the follower's;
   * a leader log start offset beyond the follower's moves the follower's start too (retention,
     DeleteRecords);
   * OFFSET_OUT_OF_RANGE below the leader's start restarts the follower's log there;
   * FENCED_LEADER_EPOCH parks the partition until new metadata arrives; every other error
     (UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, unknown topics: the leader has not applied the
     new metadata yet) retries after ``replica.fetch.backoff.ms``.

A broken connection is retried after the back-off. ``pause``/``resume`` stop and restart all
fetching (operations and tests use it to make a follower fall behind).
"""

from __future__ import annotations

import uuid

import structlog
import trio

from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.broker.fetch_sessions import (
    SESSION_ERRORS,
    FetchSessionHandler,
    PartitionFetchState,
    PartitionKey,
)
from kraftpy.broker.partition import Partition, PartitionChanged, Role, TopicPartition
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.broker.replication_quota import SAMPLE_SECONDS, UNBOUNDED
from kraftpy.fatal import describe_os_error
from kraftpy.metadata import metadata_version
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode, InvalidResponseError
from kraftpy.protocol.messages import FetchRequest

#: How long a fetch may take beyond its max wait before the connection is considered dead.
REQUEST_TIMEOUT_S = 30.0

_logger = structlog.get_logger(__name__)

#: Only a leader epoch newer than the follower's proves the follower's metadata stale. The other
#: refusals (NOT_LEADER_OR_FOLLOWER, unknown topics) also come from a leader that has not yet
#: applied the metadata the follower acts on; no newer metadata would reach the follower then, so
#: those are retried after the back-off, as Kafka's fetcher does.
_PARK_UNTIL_METADATA = frozenset({
    ErrorCode.FENCED_LEADER_EPOCH,
})


class FetcherManager:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.settings = replicas.settings
        self._scopes: dict[int, trio.CancelScope] = {}
        self.paused = False
        #: Completed fetch rounds, for tests and metrics; `round_done` is set (and replaced) after each.
        self.rounds = 0
        #: Fetch requests sent, and how many of them were full (not incremental) ones.
        self.requests = 0
        self.full_requests = 0
        #: Partition fetch states taken again by rounds (those of the partitions that changed), and the
        #: rebuilds of every state (replicas or fetch assignments changed).
        self.states_taken = 0
        self.full_rebuilds = 0
        self.round_done = trio.Event()

    def pause(self) -> None:
        """Stop fetching from every leader (the follower falls behind)."""
        self.paused = True
        self.replicas._signal_assignments()

    def resume(self) -> None:
        self.paused = False
        self.replicas._signal_assignments()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                changed = self.replicas.assignments_changed
                wanted = set() if self.paused else {
                    leader for leader, parts in self.replicas.fetch_assignments.items() if parts
                }
                for leader in set(self._scopes) - wanted:
                    self._scopes.pop(leader).cancel()
                for leader in wanted - set(self._scopes):
                    scope = trio.CancelScope()
                    self._scopes[leader] = scope
                    nursery.start_soon(self._run_fetcher, leader, scope)
                await changed.wait()

    async def _run_fetcher(self, leader: int, scope: trio.CancelScope) -> None:
        with scope:
            await ReplicaFetcher(self, leader).run()


class ReplicaFetcher:
    #: Told of every move of a followed partition's log end, not only of its high watermark
    #: (`Partition.sessions`).
    reads_log_end = True

    def __init__(self, manager: FetcherManager, leader: int) -> None:
        self.manager = manager
        self.replicas = manager.replicas
        self.settings = manager.settings
        self.leader = leader
        self.node_id = self.settings.node_id
        self._log = _logger.bind(node_id=self.node_id, leader=leader)
        #: Partition -> trio time before which it is not fetched (after UNKNOWN_LEADER_EPOCH).
        self._retry_at: dict[TopicPartition, float] = {}
        #: The fetch session with this leader (KIP-227); it outlives a connection, and the first fetch
        #: on a new connection is a full one that closes it.
        self.session = FetchSessionHandler()
        #: What each partition fetched from this leader asks for, kept from round to round, and the
        #: partition with its generation and log end offset when that was taken: a round looks again
        #: only at the partitions in `_stale` (told by the partitions themselves, `mark`, or processed in
        #: the last answer), so that it costs what changed, not how many partitions this leader has for
        #: us. Built anew in full when replicas or fetch assignments changed (`_built_against`).
        self._wanted: dict[PartitionKey, PartitionFetchState] = {}
        self._entries: dict[PartitionKey, tuple[Partition, int, int]] = {}
        self._keys: dict[TopicPartition, PartitionKey] = {}
        self._stale: set[TopicPartition] = set()
        self._built_against: tuple | None = None
        self._topic_ids: dict = {}
        #: The last request left partitions out of the session (throttled): the next one compares every
        #: wanted partition with the session, so they join it again.
        self._compare_all = False

    def mark(self, tp: TopicPartition) -> None:
        """``tp`` changed, as the partition tells its sessions (an append, a truncation, a new high
        watermark, role or log start offset): the next round takes its fetch state again."""
        self._stale.add(tp)

    async def run(self) -> None:
        backoff = self.settings.replica_fetch_backoff_ms / 1000
        while True:
            endpoint = self.replicas.leader_endpoint(self.leader)
            if endpoint is None:
                await self.replicas.assignments_changed.wait()
                continue
            try:
                conn = await KafkaConnection.connect(
                    *endpoint, client_id=f"broker-{self.node_id}-fetcher", max_frame_bytes=2**31 - 1,
                    tls=self.settings.inter_broker_tls, sasl=self.settings.inter_broker_sasl,
                )
            except ConnectionClosed as exc:
                self._log.info("cannot reach the leader", error=str(exc))
                await trio.sleep(backoff)
                continue
            async with conn:
                try:
                    while True:
                        await self.fetch_once(conn)
                except (ConnectionClosed, InvalidResponseError, trio.TooSlowError) as exc:
                    self._log.info("fetch connection lost", error=str(exc))
            await trio.sleep(backoff)

    def _fetchable(self) -> list[Partition]:
        now = trio.current_time()
        out = []
        # In name order (a key each, compared in C: attrs' own ordering built two tuples a comparison,
        # and ran every round over every partition this leader has for us).
        for tp in sorted(self.replicas.fetch_assignments.get(self.leader, ()), key=_tp_order):
            part = self.replicas.partitions.get(tp)
            if (
                part is None
                or part.role is not Role.FOLLOWER
                or part.leader_id != self.leader
                or part.fetch_blocked_generation == part.generation
                or self._retry_at.get(tp, 0.0) > now
            ):
                continue
            out.append(part)
        return out

    def _want(self, part: Partition) -> PartitionKey:
        """Take ``part``'s fetch state now (it is fetched), and have it tell this fetcher of its changes."""
        topic_id = self._topic_ids.get(part.topic_id)
        if topic_id is None:
            topic_id = self._topic_ids[part.topic_id] = uuid.UUID(bytes=part.topic_id.raw)
        key = (topic_id, part.tp.partition)
        latest = part.log.latest_epoch
        self._wanted[key] = PartitionFetchState(
            topic=part.tp.topic,
            topic_id=topic_id,
            partition=part.tp.partition,
            fetch_offset=part.log_end_offset,
            current_leader_epoch=part.leader_epoch,
            last_fetched_epoch=latest if latest is not None else -1,
            log_start_offset=part.log_start_offset,
            partition_max_bytes=self.settings.replica_fetch_max_bytes,
        )
        self._entries[key] = (part, part.generation, part.log_end_offset)
        self._keys[part.tp] = key
        part.sessions[self] = part.tp
        return key

    def _fetchable_now(self, tp: TopicPartition, now: float) -> Partition | None:
        part = self.replicas.partitions.get(tp)
        if (
            part is None
            or tp not in self.replicas.fetch_assignments.get(self.leader, ())
            or part.role is not Role.FOLLOWER
            or part.leader_id != self.leader
            or part.fetch_blocked_generation == part.generation
            or self._retry_at.get(tp, 0.0) > now
        ):
            return None
        return part

    def _refresh(self) -> set[PartitionKey] | None:
        """Bring `_wanted` up to date: in full when replicas or assignments changed since it was built
        (returns None), else only for the stale partitions and those whose retry time came (returns the
        keys that may have changed)."""
        against = (self.replicas.assignments_changed, self.replicas.partitions_version)
        if against != self._built_against:
            self._built_against = against
            self._stale.clear()
            self._wanted.clear()
            self._entries.clear()
            self._keys.clear()
            self.manager.full_rebuilds += 1
            for part in self._fetchable():
                self._want(part)
            return None
        now = trio.current_time()
        stale, self._stale = self._stale, set()
        if self._retry_at:
            # A retry time that came is spent: the partition is taken again this once (and fetched;
            # another error sets a new one), not in every round after it.
            due = [tp for tp, at in self._retry_at.items() if at <= now]
            for tp in due:
                del self._retry_at[tp]
            stale.update(due)
        changed: set[PartitionKey] = set()
        for tp in stale:
            key = self._keys.pop(tp, None)
            if key is not None:
                del self._wanted[key]
                del self._entries[key]
                changed.add(key)
            part = self._fetchable_now(tp, now)
            if part is not None:
                changed.add(self._want(part))
                self.manager.states_taken += 1
            else:
                part = self.replicas.partitions.get(tp)
                if part is not None and (part.role is not Role.FOLLOWER or part.leader_id != self.leader):
                    part.sessions.pop(self, None)  # it follows another leader, or leads: its changes are not ours
        return changed

    async def fetch_once(self, conn: KafkaConnection) -> None:
        changed = self._refresh()
        wanted = self._wanted
        # Replication throttles (see replication_quota): throttled partitions this broker is not in the
        # ISR of are left out while the follower's quota is exceeded.
        throttles = self.replicas.throttles
        throttled: set[TopicPartition] = set()
        if throttles.follower.bound < UNBOUNDED:
            throttled = {part.tp for part, _, _ in self._entries.values() if self.node_id not in part.isr
                         and throttles.follower_throttles(part.tp.topic, part.tp.partition)}
        if self._compare_all:
            changed, self._compare_all = None, False
        if throttled and throttles.follower.is_exceeded():
            wanted = {key: state for key, state in wanted.items() if self._entries[key][0].tp not in throttled}
            changed, self._compare_all = None, True
            throttles.follower.held_back += len(throttled)
            self._log.debug("replication throttled: partitions not fetched", partitions=sorted(map(str, throttled)),
                            rate=int(throttles.follower.rate()), bound=throttles.follower.bound)
            if not wanted:
                await trio.sleep(SAMPLE_SECONDS)
                return
        if not wanted:
            changed_event = self.replicas.assignments_changed
            delay = min(self._retry_at.values(), default=None)
            with trio.move_on_at(delay if delay is not None else trio.current_time() + 3600):
                await changed_event.wait()
            return
        sent = self._entries
        built = self.session.build(wanted, changed)
        image = self.replicas.image
        version = metadata_version.fetch_request_version(image.features.metadata_version)
        registration = image.cluster.broker(self.node_id)
        request = FetchRequest(
            replica_id=self.node_id,
            replica_state=FetchRequest.ReplicaState(
                replica_id=self.node_id, replica_epoch=registration.epoch if registration is not None else -1),
            max_wait_ms=self.settings.replica_fetch_wait_max_ms,
            min_bytes=self.settings.replica_fetch_min_bytes,
            max_bytes=self.settings.replica_fetch_response_max_bytes,
            isolation_level=0,
            session_id=built.session_id,
            session_epoch=built.epoch,
        )
        topics: dict = {}
        for (topic_id, _), state in built.to_send.items():
            topic = topics.get(topic_id)
            if topic is None:
                topic = topics[topic_id] = FetchRequest.FetchTopic(topic=state.topic, topic_id=topic_id)
                request.topics.append(topic)
            topic.partitions.append(FetchRequest.FetchPartition(
                partition=state.partition,
                current_leader_epoch=state.current_leader_epoch,
                fetch_offset=state.fetch_offset,
                last_fetched_epoch=state.last_fetched_epoch,
                log_start_offset=state.log_start_offset,
                partition_max_bytes=state.partition_max_bytes,
            ))
        forgotten: dict = {}
        for (topic_id, partition), state in built.to_forget:
            topic = forgotten.get(topic_id)
            if topic is None:
                topic = forgotten[topic_id] = FetchRequest.ForgottenTopic(topic=state.topic, topic_id=topic_id)
                request.forgotten_topics_data.append(topic)
            topic.partitions.append(partition)
        self.manager.requests += 1
        if built.full:
            self.manager.full_requests += 1
        timeout = self.settings.replica_fetch_wait_max_ms / 1000 + REQUEST_TIMEOUT_S
        try:
            with trio.fail_after(timeout):
                response = await conn.request(ApiKey.FETCH, version, request)
        except BaseException:
            self.session.handle_error()
            raise
        answered = [(topic.topic_id, data.partition_index) for topic in response.responses for data in topic.partitions]
        if not self.session.handle_response(response.error_code, response.session_id, answered):
            if response.error_code in SESSION_ERRORS:
                # The leader lost the session (restart, eviction) or it is out of step: fetch in full at once.
                self._log.info("fetch session reset", session_id=built.session_id, epoch=built.epoch,
                               error=ErrorCode(response.error_code).name)
                return
            if response.error_code != ErrorCode.NONE:
                self._log.warning("fetch refused", error=ErrorCode(response.error_code).name)
            else:
                self._log.info("fetch response does not match the session; fetching in full",
                               session_id=built.session_id, epoch=built.epoch)
            await trio.sleep(self.settings.replica_fetch_backoff_ms / 1000)
            return
        for topic in response.responses:
            for data in topic.partitions:
                entry = sent.get((topic.topic_id, data.partition_index))
                if entry is None:
                    continue
                part, generation, fetch_offset = entry
                self._stale.add(part.tp)  # what the answer does to it is taken in the next round
                if part.tp in throttled and data.records is not None:
                    throttles.follower.record(len(data.records))
                if part.generation != generation or part.role is not Role.FOLLOWER or part.log_end_offset != fetch_offset:
                    continue  # the partition changed while the fetch was out
                try:
                    await self._process(part, generation, fetch_offset, data)
                except PartitionChanged:
                    continue  # it changed while its log work waited: the next round starts afresh
                except OSError as exc:
                    # A full disk: this partition waits and tries again (the others go on). Any other
                    # file error took the replica offline (Partition.on_storage_error): not fetched again.
                    self._log.warning("cannot write fetched batches", partition=str(part.tp),
                                      error=describe_os_error(exc))
                    self._retry_at[part.tp] = trio.current_time() + self.settings.replica_fetch_backoff_ms / 1000
        self.manager.rounds += 1
        done, self.manager.round_done = self.manager.round_done, trio.Event()
        done.set()

    async def _process(self, part: Partition, generation: int, fetch_offset: int, data) -> None:
        """Apply one partition's answer; every step that may wait re-checks that the partition still
        follows the same leader (`PartitionChanged` otherwise)."""
        error = data.error_code
        if error == ErrorCode.NONE:
            diverging = data.diverging_epoch
            if diverging.epoch >= 0 or diverging.end_offset >= 0:
                await self._truncate_on_divergence(part, generation, diverging.epoch, diverging.end_offset)
                return
            records = data.records
            if records is not None and len(records):
                try:
                    await part.append_as_follower(memoryview(records), generation=generation)
                except ValueError as exc:
                    self._log.warning("cannot append fetched batches", partition=str(part.tp), error=str(exc))
                    self._retry_at[part.tp] = trio.current_time() + self.settings.replica_fetch_backoff_ms / 1000
                    return
            if part.generation != generation:
                raise PartitionChanged(str(part.tp))
            part.update_follower_high_watermark(data.high_watermark)
            if data.log_start_offset > part.log_start_offset:
                target = min(data.log_start_offset, part.high_watermark)
                if target > part.log_start_offset:
                    # As Kafka's follower does (LeaderOffsetIncremented): what the leader's retention or a
                    # DeleteRecords removed goes here too, whether or not this broker's own retention would.
                    start = await part.delete_records_before(target, generation=generation)
                    self._log.info("log start follows the leader's", partition=str(part.tp), log_start_offset=start)
            self._retry_at.pop(part.tp, None)
        elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
            if 0 <= fetch_offset < data.log_start_offset:
                await part.truncate_fully_and_start_at(data.log_start_offset, generation=generation)
            else:
                await part.truncate_to(max(data.high_watermark, 0), generation=generation)
        elif error in _PARK_UNTIL_METADATA:
            self._log.info("partition waits for new metadata", partition=str(part.tp), error=ErrorCode(error).name)
            part.fetch_blocked_generation = part.generation
        else:
            self._log.info("fetch error; retrying", partition=str(part.tp), error=ErrorCode(error).name)
            self._retry_at[part.tp] = trio.current_time() + self.settings.replica_fetch_backoff_ms / 1000

    async def _truncate_on_divergence(self, part: Partition, generation: int, epoch: int,
                                      leader_end_offset: int) -> None:
        own_epoch, own_end = part.log.end_offset_for_epoch(epoch)
        if own_epoch < 0 or own_end < 0:
            target = min(leader_end_offset, part.log_end_offset)
        else:
            target = min(leader_end_offset, own_end)
        self._log.info("log diverges from the leader's", partition=str(part.tp), epoch=epoch,
                       leader_end_offset=leader_end_offset, truncate_to=target)
        await part.truncate_to(target, diverged=True, generation=generation)


def _tp_order(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition
