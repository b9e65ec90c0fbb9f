"""The coordinator runtime: one shard per led partition of an internal topic, loaded, served, dropped.

Theory of operation
-------------------
A coordinator (groups today, transactions later) keeps its state in an internal compacted topic
and serves the keys that hash to the partitions its broker leads. Like Kafka's CoordinatorRuntime,
it never touches the log itself: the broker hands it a :class:`PartitionWriter` for each partition
it comes to lead, and takes it back when leadership leaves.

For every such partition the runtime keeps one :class:`CoordinatorShard`, tied to one leader
epoch, whose life is::

    on_elected(writer) ──> LOADING ──(replayed read_committed())──> ACTIVE ──> CLOSED
                              │                                              ^
                              └────────── on_resigned / newer epoch ─────────┘

* LOADING: the shard's state machine replays every committed record of the partition; requests
  for its keys are answered COORDINATOR_LOAD_IN_PROGRESS by the coordinator.
* ACTIVE: the state machine serves requests. State changes that must survive a failover are
  *written*: :meth:`CoordinatorShard.write` queues records with a completion callback, and a single
  appender task per shard sends what is queued as one batch through the writer and, once the
  writer says the batch is committed (acks=all), calls each callback with the offset of its first
  record. One appender per shard keeps the log's order equal to the order of the writes, so replaying
  the log rebuilds exactly the state the callbacks built; coalescing what queued up while the
  previous batch replicated gives many concurrent writers one replication round trip each.
* CLOSED: the shard's tasks are cancelled, queued and in-flight writes fail with
  :class:`NotLeaderError`, and the state machine is told to drop its state (``on_unloaded``).

Transactions: the group coordinator also writes records *inside a producer's transaction*
(TxnOffsetCommit): such a write names the producer id and epoch, goes out as a transactional batch of
that producer, and is never coalesced with other writes. The partition's COMMIT or ABORT marker for
the producer later decides it. Loading sees the same: ``read_committed`` yields a transactional
record as a :class:`TxnRecord` and a marker as a :class:`TxnMarker`, which the state machine gets
through ``replay_transactional`` and ``replay_marker`` (plain records stay ``(offset, key, value)``).

Timers (session timeouts, rebalance deadlines) live in the shard (:class:`Timers`) and die with it.
Everything that changes state runs on the trio thread in plain functions, never across an
``await``: a handler runs the state machine's synchronous code and then, if it must wait for a
rebalance or a write, waits on a :class:`Waiter` that the state machine completes.

Epochs: a shard serves one leader epoch. ``on_elected`` with a newer epoch replaces the shard;
an older one, or one equal to the shard's, is ignored; ``on_resigned(p, e)`` closes the shard of
``p`` unless it was elected in an epoch newer than ``e`` (as Kafka's coordinator epochs do).
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs
import structlog
import trio

from kraftpy.metrics import waiting_remotely
from kraftpy.protocol.errors import ErrorCode

_logger = structlog.get_logger(__name__)

T = TypeVar("T")

#: A batch the appender builds from queued writes stays under this many key+value bytes (one write
#: larger than this still goes, alone): well under the broker's default message.max.bytes.
MAX_BATCH_BYTES = 512 * 1024
#: How long a shard whose load failed for a reason other than leadership waits before loading again.
LOAD_RETRY_SECONDS = 1.0


class NotLeaderError(Exception):
    """The writer's partition is no longer led here (its leader epoch moved)."""


class CoordinatorWriteError(Exception):
    """An append that failed otherwise; ``error_code`` is Kafka's code for why (the coordinator maps it
    to what its clients expect, e.g. storage or timeout errors to COORDINATOR_NOT_AVAILABLE)."""

    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = ErrorCode(error_code)


#: No producer: an ordinary (non-transactional) write.
NO_PRODUCER_ID = -1


@attrs.frozen
class TxnRecord:
    """A record of a transactional batch, as ``read_committed`` yields it: undecided until its
    producer's marker follows."""

    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int
    producer_epoch: int


@attrs.frozen
class TxnMarker:
    """A COMMIT (``committed``) or ABORT marker of a producer's transaction, as ``read_committed`` yields it."""

    offset: int
    producer_id: int
    producer_epoch: int
    committed: bool


#: What ``read_committed`` yields: a plain record as (offset, key, value), or a transactional one, or a marker.
LoadedRecord = tuple[int, bytes | None, bytes | None] | TxnRecord | TxnMarker


class PartitionWriter(Protocol):
    """One partition of an internal topic led by this broker in one leader epoch, as the broker gives it."""

    partition: int
    leader_epoch: int

    async def append(self, records: Sequence[tuple[bytes, bytes | None]], *, producer_id: int = NO_PRODUCER_ID,
                     producer_epoch: int = -1, transactional: bool = False) -> int:
        """Append these (key, value) records (value None = tombstone) as ONE record batch (uncompressed,
        magic 2, CreateTime = now) and wait until it is committed (high watermark past it, as acks=all
        waits, bounded by offsets.commit.timeout.ms). Returns the batch's last offset. Raises
        NotLeaderError when leadership moves, CoordinatorWriteError(REQUEST_TIMED_OUT / NOT_ENOUGH_REPLICAS /
        KAFKA_STORAGE_ERROR / INVALID_PRODUCER_EPOCH ...) otherwise.

        With ``producer_id`` and ``transactional``, the batch belongs to that producer's transaction
        (a transactional batch of that id and epoch): the partition's producer state opens the
        transaction, and its later marker decides the records."""
        ...

    def read_committed(self) -> AsyncIterator[LoadedRecord]:
        """Every committed record of the partition from its log start offset, as (offset, key, value),
        a :class:`TxnRecord` for a record of a transactional batch, and a :class:`TxnMarker` for a
        transaction marker: what loading replays. A new leader learns its high watermark from its followers' fetches, so it
        may start below records the previous leader acknowledged: the replay first waits until the high
        watermark reaches the start of the writer's leader epoch (everything the old term committed),
        then reads up to the high watermark at that time. File work off the event loop."""
        ...


class Waiter(Generic[T]):
    """A one-shot result: the state machine sets it (once; later sets are ignored), a handler awaits it."""

    __slots__ = ("_event", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: Any = None

    def set(self, value: T) -> bool:
        if self._event.is_set():
            return False
        self._value = value
        self._event.set()
        return True

    def is_set(self) -> bool:
        return self._event.is_set()

    @property
    def value(self) -> T:
        assert self._event.is_set(), "waiter not set yet"
        return self._value

    async def wait(self) -> T:
        with waiting_remotely():  # a request waiting for a coordinator's answer: its remote time
            await self._event.wait()
        return self._value


class Timers:
    """Deadlines on trio's clock, each under a key: scheduling a key again replaces its deadline.

    Callbacks are plain functions run by :meth:`run`, one at a time, in deadline order. A callback
    that raises is logged and the others still run: a bug in one group's timer must not stop the
    others' (the coordinator's tests check that none does).
    """

    def __init__(self, log=None) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        #: key -> (sequence number of its live heap entry, callback). Invariant: every key here has
        #: exactly one heap entry with that sequence number; other heap entries are stale.
        self._live: dict[Hashable, tuple[int, Callable[[], None]]] = {}
        self._seq = 0
        self._changed = trio.Event()
        self._log = log or _logger
        #: Callbacks that raised (tests assert this stays 0).
        self.failures = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def schedule(self, key: Hashable, delay_seconds: float, callback: Callable[[], None]) -> None:
        self._seq += 1
        deadline = trio.current_time() + max(delay_seconds, 0.0)
        self._live[key] = (self._seq, callback)
        heapq.heappush(self._heap, (deadline, self._seq, key))
        if self._heap[0][1] == self._seq:
            self._changed.set()
        if len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def cancel(self, key: Hashable) -> bool:
        return self._live.pop(key, None) is not None

    def clear(self) -> None:
        self._live.clear()
        self._heap.clear()

    def _compact(self) -> None:
        self._heap = [e for e in self._heap if self._live.get(e[2], (None,))[0] == e[1]]
        heapq.heapify(self._heap)

    def fire_due(self) -> int:
        """Run every callback whose deadline has passed; returns how many ran."""
        fired = 0
        now = trio.current_time()
        while self._heap and self._heap[0][0] <= now:
            _, seq, key = heapq.heappop(self._heap)
            live = self._live.get(key)
            if live is None or live[0] != seq:
                continue
            del self._live[key]
            fired += 1
            try:
                live[1]()
            except Exception:
                self.failures += 1
                self._log.exception("coordinator timer failed", timer=repr(key))
        return fired

    async def run(self) -> None:
        while True:
            self.fire_due()
            while self._heap and self._heap[0][1] != self._live.get(self._heap[0][2], (None,))[0]:
                heapq.heappop(self._heap)
            deadline = self._heap[0][0] if self._heap else math.inf
            self._changed = trio.Event()
            with trio.move_on_at(deadline):
                await self._changed.wait()


class ShardStateMachine(Protocol):
    """What a coordinator keeps for one partition: built by replaying its records, then served."""

    def replay(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply one committed record while loading."""

    def replay_transactional(self, record: TxnRecord) -> None:
        """Apply one committed record of a transactional batch while loading (undecided until its
        producer's marker is replayed). Only partitions that hold transactional batches call it."""

    def replay_marker(self, marker: TxnMarker) -> None:
        """Apply one transaction marker while loading."""

    def on_loaded(self) -> None:
        """Loading finished: the shard is ACTIVE (timers and writes may start)."""

    def on_unloaded(self) -> None:
        """The shard closed: answer whatever waits (NOT_COORDINATOR) and drop the state."""


class ShardStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    CLOSED = "closed"


WriteCallback = Callable[[int, BaseException | None], None]


@attrs.define(eq=False)
class _Write:
    records: list[tuple[bytes, bytes | None]]
    size: int
    #: Called once: (offset of the first record, None) when committed, (-1, error) when not.
    on_done: WriteCallback
    #: (producer id, producer epoch) of a transactional write, None for an ordinary one. Writes are
    #: coalesced into one batch only when this is equal (a batch has one producer).
    txn: tuple[int, int] | None = None


class CoordinatorShard:
    """One led partition in one leader epoch: its state machine, timers and write queue."""

    def __init__(self, writer: PartitionWriter, make_machine: Callable[[CoordinatorShard], ShardStateMachine],
                 *, log=None) -> None:
        self.writer = writer
        self.partition = writer.partition
        self.leader_epoch = writer.leader_epoch
        self.status = ShardStatus.LOADING
        self.log = (log or _logger).bind(partition=self.partition, leader_epoch=self.leader_epoch)
        self.timers = Timers(self.log)
        self.machine: ShardStateMachine | None = None
        self.loaded = trio.Event()
        self._make_machine = make_machine
        self._scope = trio.CancelScope()
        self._queue: list[_Write] = []
        self._inflight: list[_Write] = []
        self._queued = trio.Event()
        #: Batches appended and committed (for tests and metrics).
        self.batches_appended = 0

    @property
    def active(self) -> bool:
        return self.status is ShardStatus.ACTIVE

    def write(self, records: Sequence[tuple[bytes, bytes | None]], on_done: WriteCallback, *,
              producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> None:
        """Queue records for the next batch; ``on_done`` runs once they are committed or have failed.
        With ``producer_id``, the records go in a transactional batch of that producer and epoch."""
        if self.status is ShardStatus.CLOSED:
            self._call(on_done, -1, NotLeaderError(f"partition {self.partition} is no longer led here"))
            return
        records = list(records)
        size = sum(len(k) + (len(v) if v is not None else 0) for k, v in records)
        txn = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        self._queue.append(_Write(records, size, on_done, txn))
        self._queued.set()

    async def write_and_wait(self, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Queue records and wait until committed; returns the first record's offset or raises."""
        waiter: Waiter[tuple[int, BaseException | None]] = Waiter()
        self.write(records, lambda offset, error: waiter.set((offset, error)))
        offset, error = await waiter.wait()
        if error is not None:
            raise error
        return offset

    def _call(self, on_done: WriteCallback, offset: int, error: BaseException | None) -> None:
        try:
            on_done(offset, error)
        except Exception:
            self.timers.failures += 1
            self.log.exception("coordinator write callback failed")

    async def run(self) -> None:
        """Load, then serve (timers and appender) until closed or cancelled."""
        with self._scope:
            try:
                if not await self._load():
                    return
                assert self.machine is not None
                self.status = ShardStatus.ACTIVE
                try:
                    self.machine.on_loaded()
                except Exception:
                    # A bug, not a client's doing: this partition stays unserved (NOT_COORDINATOR),
                    # the broker's other partitions go on.
                    self.log.exception("coordinator failed to start serving its partition")
                    self.machine = None
                    return
                self.loaded.set()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.timers.run)
                    nursery.start_soon(self._append_loop)
            finally:
                with trio.CancelScope(shield=True):
                    self.close()

    async def _load(self) -> bool:
        """Replay the partition into a new state machine; False when leadership moved meanwhile."""
        started = trio.current_time()
        while True:
            machine = self._make_machine(self)
            records = 0
            try:
                async for item in self.writer.read_committed():
                    if isinstance(item, TxnRecord):
                        machine.replay_transactional(item)
                    elif isinstance(item, TxnMarker):
                        machine.replay_marker(item)
                    else:
                        machine.replay(*item)
                    records += 1
            except NotLeaderError:
                self.log.info("coordinator load stopped: leadership moved")
                return False
            except Exception as exc:
                self.log.warning("coordinator load failed, retrying", error=f"{type(exc).__name__}: {exc}",
                                 retry_in_s=LOAD_RETRY_SECONDS)
                await trio.sleep(LOAD_RETRY_SECONDS)
                continue
            self.machine = machine
            self.log.info("coordinator loaded", records=records,
                          load_ms=round((trio.current_time() - started) * 1000, 1))
            return True

    async def _append_loop(self) -> None:
        while True:
            while not self._queue:
                self._queued = trio.Event()
                await self._queued.wait()
            batch: list[_Write] = []
            size = 0
            txn = self._queue[0].txn
            while self._queue and (not batch or size + self._queue[0].size <= MAX_BATCH_BYTES) \
                    and self._queue[0].txn == txn:
                w = self._queue.pop(0)
                batch.append(w)
                size += w.size
            records = [r for w in batch for r in w.records]
            self._inflight = batch
            error: BaseException | None = None
            last = -1
            try:
                if txn is None:
                    last = await self.writer.append(records)
                else:
                    last = await self.writer.append(records, producer_id=txn[0], producer_epoch=txn[1],
                                                    transactional=True)
            except (NotLeaderError, CoordinatorWriteError) as exc:
                error = exc
            except Exception as exc:
                self.log.exception("coordinator append failed")
                error = CoordinatorWriteError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
            self._inflight = []
            if self.status is ShardStatus.CLOSED:
                return
            if error is None:
                self.batches_appended += 1
            offset = last - len(records) + 1
            for w in batch:
                self._call(w.on_done, offset if error is None else -1, error)
                offset += len(w.records)

    def close(self) -> None:
        """Stop serving: cancel the shard's tasks, fail its writes, drop its state. Idempotent."""
        if self.status is ShardStatus.CLOSED:
            return
        was_active = self.status is ShardStatus.ACTIVE
        self.status = ShardStatus.CLOSED
        self._scope.cancel()
        self.timers.clear()
        pending, self._queue, self._inflight = self._inflight + self._queue, [], []
        error = NotLeaderError(f"partition {self.partition} is no longer led here")
        for w in pending:
            self._call(w.on_done, -1, error)
        if was_active and self.machine is not None:
            try:
                self.machine.on_unloaded()
            except Exception:
                self.log.exception("coordinator unload failed")
        self.loaded.set()


class CoordinatorRuntime:
    """The shards of one coordinator, by partition, with their leader epochs; owns their tasks."""

    def __init__(self, make_machine: Callable[[CoordinatorShard], ShardStateMachine], *, log=None) -> None:
        self._make_machine = make_machine
        self._log = log or _logger
        self.shards: dict[int, CoordinatorShard] = {}
        #: The newest leader epoch heard of per partition, elected or resigned (never goes back).
        self._epochs: dict[int, int] = {}
        self._nursery: trio.Nursery | None = None
        self._waiting: list[CoordinatorShard] = []

    @property
    def running(self) -> bool:
        return self._nursery is not None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for shard in self._waiting:
                    nursery.start_soon(shard.run)
                self._waiting.clear()
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for shard in list(self.shards.values()):
                shard.close()
            self.shards.clear()

    def on_elected(self, writer: PartitionWriter) -> None:
        partition, epoch = writer.partition, writer.leader_epoch
        known = self._epochs.get(partition)
        current = self.shards.get(partition)
        if known is not None and epoch < known:
            self._log.info("coordinator election ignored: stale epoch", partition=partition,
                           leader_epoch=epoch, newest_epoch=known)
            return
        if current is not None and current.leader_epoch >= epoch and current.status is not ShardStatus.CLOSED:
            return
        self._epochs[partition] = epoch
        if current is not None:
            current.close()
        shard = CoordinatorShard(writer, self._make_machine, log=self._log)
        self.shards[partition] = shard
        self._log.info("coordinator elected", partition=partition, leader_epoch=epoch)
        if self._nursery is not None:
            self._nursery.start_soon(shard.run)
        else:
            self._waiting.append(shard)

    def on_resigned(self, partition: int, leader_epoch: int) -> None:
        known = self._epochs.get(partition)
        if known is None or leader_epoch > known:
            self._epochs[partition] = leader_epoch
        shard = self.shards.get(partition)
        if shard is None or shard.leader_epoch > leader_epoch:
            return
        del self.shards[partition]
        if shard in self._waiting:
            self._waiting.remove(shard)
        self._log.info("coordinator resigned", partition=partition, leader_epoch=leader_epoch)
        shard.close()

    def shard(self, partition: int) -> CoordinatorShard | None:
        shard = self.shards.get(partition)
        if shard is None or shard.status is ShardStatus.CLOSED:
            return None
        return shard

    def owned_partitions(self) -> set[int]:
        return {p for p, s in self.shards.items() if s.status is not ShardStatus.CLOSED}

    def active_shards(self) -> list[CoordinatorShard]:
        # A snapshot first: the metrics collector calls this from a worker thread.
        return [s for s in list(self.shards.values()) if s.active]

    def is_loading(self) -> bool:
        return any(s.status is ShardStatus.LOADING for s in self.shards.values())
