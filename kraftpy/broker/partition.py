"""One partition replica on this broker: its log, its role, and — when leading — its followers.

Theory of operation
-------------------
Kafka's ISR replication, as the leader and a follower see it::

        apply_delta(...)               apply_delta(...)
    NONE ────────────▶ FOLLOWER ◀──────────────────▶ LEADER
                        │  fetches from the leader,    │  tracks each follower's log end offset
                        │  appends batches as they     │  and last caught-up time; proposes ISR
                        │  are, learns the HW          │  changes; advances the HW

The committed metadata says who leads, in which leader epoch, and who is in the ISR
(``PartitionRegistration``); ``make_leader``/``make_follower`` apply it. Only the controller
changes the ISR. The leader *proposes* a change (``propose_isr``) which goes to the controller as
AlterPartition; until the change comes back committed, the high watermark is computed over the
*maximal ISR* — the union of the committed ISR and the proposal — so that neither a shrink nor an
expansion in flight can let the HW pass an offset that the ISR finally agreed on does not hold
(KIP-497's rule).

Invariants (leader):
* ``log.high_watermark`` never goes back while leading; it is the smallest log end offset over
  the maximal ISR, the leader's own included.
* A follower's ``last_caught_up_ms`` is the last time its fetch offset reached the leader's log
  end offset as it was at that time or at the follower's previous fetch (Kafka's rule), so a
  follower that keeps up with a busy leader never looks lagging.
* At most one ISR proposal is in flight (``pending_isr``); it is dropped when any registration
  with a newer partition epoch arrives, whether or not it was the one proposed.

A new leader records the start offset of its epoch in the leader-epoch cache before it takes
any write, so followers can find where their logs diverge (KIP-101, KIP-279).

Log work and the event loop
---------------------------
Everything here runs on the trio thread except the log's file work. An append is a write into
the page cache and runs inline. Work that creates, truncates, fsyncs, renames or deletes files —
rolling a segment (with the producer-state snapshot taken at a roll), truncation, retention,
flushes, DeleteRecords — runs in a worker thread through `run_exclusive`, which holds off every
other change to the log meanwhile: appends wait (``_busy``), reads go on (the log allows reads
beside one writer). An append checks the producer state and appends with no await in between,
and re-checks everything after any wait, so a request never acts on what it saw before it slept.

The log cleaner (compacted topics) runs beside all this: `run_cleaning` copies old segments in a
worker thread while appends and reads go on, then swaps the copies in as exclusive log work. Log
work that removes or cuts old segments (retention, truncation, DeleteRecords, closing the log)
first holds the cleaner off (`pause_cleaning`): a pass in progress is aborted and waited for, and
none starts until that work is done — Kafka's abortAndPauseCleaning.

Transactions
------------
A transactional data batch opens its producer's transaction in the producer state; the COMMIT or
ABORT marker the transaction coordinator has the leader write (`append_txn_marker`, for
WriteTxnMarkers) closes it. Leader and followers apply every batch to the producer state with the
marker decoded from a control batch, so they make the same `CompletedTxn`; an aborted one becomes an
entry of the ``.txnindex`` of the segment that holds its marker, written right after the marker as
exclusive log work (it may create the file). Every high watermark change is passed on to the
producer state, which gives the last stable offset (`last_stable_offset`): read_committed consumers
read below it.

An OSError from the log's files (appends, and the work of `run_exclusive`) reaches the caller;
unless it is a full disk (ENOSPC, EDQUOT: that append fails, the next may succeed) the replica
manager is told first (``on_storage_error``), and takes the replica offline.
"""

from __future__ import annotations

import enum
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs
import structlog
import trio

from kraftpy.broker import producer_state as ps
from kraftpy.broker.purgatory import Watchers
from kraftpy.fatal import NO_SPACE_ERRNOS
from kraftpy.ids import Uuid
from kraftpy.metadata.image import PartitionRegistration
from kraftpy.metadata.records import NO_LEADER, LeaderRecoveryState
from kraftpy.protocol.batch_header import (
    BatchHeader,
    CorruptRecordError,
    iter_batches,
    read_header,
    set_max_timestamp,
)
from kraftpy.protocol.control_records import (
    EndTxnMarker,
    build_end_txn_marker,
    is_end_txn_marker_header,
    read_end_txn_marker,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.record_validation import ProduceRules
from kraftpy.storage.log import AppendInfo, Log
from kraftpy.storage.txn_index import AbortedTxn

_logger = structlog.get_logger(__name__)


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


@attrs.frozen(order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@attrs.define
class _Cleaning:
    """A log cleaner pass in progress: set ``abort`` to stop it; ``done`` is set once it is over."""

    abort: threading.Event = attrs.Factory(threading.Event)
    done: trio.Event = attrs.Factory(trio.Event)


async def _run_abortable(fn: Callable[[threading.Event], Any], abort: threading.Event) -> Any:
    """``fn(abort)`` in a worker thread; a cancellation sets ``abort`` (the thread checks it) and still
    waits for the thread to return, so nothing it does outlives the caller."""
    finished = False

    async def watch() -> None:
        try:
            await trio.sleep_forever()
        finally:
            if not finished:
                abort.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        try:
            # Its error is raised below, outside the nursery (which would wrap it in a group).
            ok, result = await trio.to_thread.run_sync(_capture, fn, abort)
        finally:
            finished = True
            nursery.cancel_scope.cancel()
    if not ok:
        raise result
    return result


def _capture(fn: Callable[[threading.Event], Any], abort: threading.Event) -> tuple[bool, Any]:
    try:
        return True, fn(abort)
    except Exception as exc:
        return False, exc


class PartitionChanged(Exception):
    """The partition's role or leader changed while a follower's log work waited: it is not done."""


@attrs.frozen
class LeaderAppend:
    """What a leader append did: an error, or where the batch went (``next_offset`` is what the
    high watermark must reach for acks=all)."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    base_offset: int = -1
    next_offset: int = -1
    log_append_time_ms: int = -1


@attrs.define
class FollowerState:
    """What the leader knows of one follower, from its fetches."""

    #: The follower's fetch offset at its last fetch; -1 until it fetches in this leader epoch.
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    #: The leader's log end offset when the follower last fetched.
    leader_end_offset_at_last_fetch: int = -1
    #: The follower's fetch session that last fetched this partition, and its key there. A follower
    #: session's fetch looks only at the partitions that changed (kraftpy.broker.apis.fetch): one the
    #: follower has all of is left alone, and each fetch of that session still counts as catching up.
    session: Any = None
    session_key: Any = None

    def caught_up_ms(self, leader_end: int) -> int:
        """The last time the follower was known to have the leader's whole log (``leader_end``): its own
        last fetch of the partition, or the last fetch of the session that holds it while it has all."""
        session = self.session
        if session is not None and self.log_end_offset >= leader_end and session.holds(self.session_key):
            return max(self.last_caught_up_ms, session.last_fetch_ms)
        return self.last_caught_up_ms


class Partition:
    def __init__(
        self,
        tp: TopicPartition,
        topic_id: Uuid,
        log: Log,
        node_id: int,
        clock: Callable[[], int],
        producer_state: ps.ProducerStateManager,
    ) -> None:
        self.tp = tp
        self.topic_id = topic_id
        self.log = log
        self.node_id = node_id
        self.clock = clock
        self.producer_state = producer_state
        self._log = _logger.bind(node_id=node_id, partition=str(tp))

        self.role = Role.NONE
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        #: The ISR as committed in the metadata log.
        self.isr: tuple[int, ...] = ()
        #: An ISR change sent to the controller and not yet seen committed, and the partition epoch it was based on.
        self.pending_isr: tuple[int, ...] | None = None
        self.pending_from_epoch = -1
        self.followers: dict[int, FollowerState] = {}
        self.leader_epoch_start_offset = -1
        #: Topic settings the leader enforces (set by the replica manager from the topic's configs).
        self.min_insync_replicas = 1
        self.log_append_time = False
        #: What Produce checks in a batch for this topic (its max.message.bytes, timestamp rules, ...).
        self.produce_rules = ProduceRules()
        #: KIP-890 verification guards, by producer id: set when a leader starts asking the transaction
        #: coordinator about a producer's first transactional batch here, dropped by any marker of that
        #: producer. A verified append must find its own guard still in place (`append_as_leader`).
        self._verification_guards: dict[int, object] = {}

        #: The fetch sessions that hold this partition, and its key in each: told of the changes the
        #: watchers below are notified of that they read (kraftpy.broker.apis.fetch, "Sessions in
        #: proportion to the change"). Weak: a session the cache let go leaves no trace here.
        self.sessions: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        #: Notified when the log end offset moves (followers' fetches wait on it).
        self.append_watchers = Watchers(self._log_end_moved)
        #: Notified when the HW moves or the role changes (consumers' fetches and acks=all produces).
        self.hw_watchers = Watchers(self.changed)
        #: Follower side: bumped on every role or leader change, so a fetch in flight can tell it is stale.
        self.generation = 0
        #: Follower side: set when fetching must wait for new metadata (the leader said we are stale).
        self.fetch_blocked_generation = -1
        #: First offsets of aborted transactions whose markers are appended and whose `.txnindex`
        #: entries are still being written. Invariant: the LSO stays at or below each of them, so no
        #: read_committed fetch returns their records before it can name them as aborted.
        self._aborts_being_indexed: list[int] = []
        #: Set while `run_exclusive` has log work in a worker thread; appends wait for it.
        self._busy: trio.Event | None = None
        #: Told when log work left detached segments whose files must be removed later (the replica
        #: manager does, after file.delete.delay.ms); called once until `segments_deleted`.
        self.on_segments_detached: Callable[[Partition], None] | None = None
        self._deletion_pending = False
        #: Told (trio thread) when the log's files failed other than by a full disk (see the module doc).
        self.on_storage_error: Callable[[Partition, OSError], None] | None = None
        #: The log cleaner's pass over this log, while one runs (see `run_cleaning`).
        self._cleaning: _Cleaning | None = None
        #: How many callers hold the cleaner off this log (`pause_cleaning`); no pass starts meanwhile.
        self._cleaning_paused = 0

    def __repr__(self) -> str:
        return (f"Partition({self.tp}, {self.role.value}, leader={self.leader_id}, epoch={self.leader_epoch}, "
                f"isr={self.isr}, leo={self.log.log_end_offset}, hw={self.log.high_watermark})")

    # -- state ------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the high watermark, or the first offset of the earliest transaction still open or
        whose marker the high watermark has not passed, when lower (read_committed reads below it)."""
        return min(self.producer_state.last_stable_offset, self.log.high_watermark, *self._aborts_being_indexed)

    def _high_watermark_changed(self) -> None:
        """Tell the producer state where the high watermark is (transactions it passed are stable)."""
        self.producer_state.on_high_watermark_update(self.log.high_watermark)

    # -- role changes -----------------------------------------------------------------------------

    def make_leader(self, reg: PartitionRegistration, *, quiet: bool = False) -> bool:
        """Lead in ``reg.leader_epoch``; returns whether this is a new leadership (not just an ISR update).
        ``quiet``: one change of many (its caller logs a summary), logged at debug level."""
        now = self.clock()
        note = self._log.debug if quiet else self._log.info
        new_term = self.role is not Role.LEADER or reg.leader_epoch != self.leader_epoch
        if new_term:
            self.role = Role.LEADER
            self.leader_id = self.node_id
            self.leader_epoch = reg.leader_epoch
            self.generation += 1
            # Markers may have been replicated here as a follower since: verify anew in this term.
            self._verification_guards.clear()
            latest = self.log.latest_epoch
            if latest is None or reg.leader_epoch > latest:
                self.log.leader_epoch_cache.assign(reg.leader_epoch, self.log.log_end_offset)
            self.leader_epoch_start_offset = self.log.log_end_offset
            # ISR members start caught up: they get replica.lag.time.max.ms to fetch from the new leader.
            self.followers = {
                r: FollowerState(last_caught_up_ms=now if r in reg.isr else 0, last_fetch_ms=now)
                for r in reg.replicas if r != self.node_id
            }
            self.pending_isr = None
            note("became leader", leader_epoch=reg.leader_epoch, isr=reg.isr,
                 log_end_offset=self.log.log_end_offset, high_watermark=self.log.high_watermark)
            if reg.leader_recovery_state is LeaderRecoveryState.RECOVERING:
                # Elected from outside the ISR: whatever the old ISR had from this log's end on is gone,
                # committed records included; the old members truncate to this log when they return.
                self._log.warning("leading after an unclean election", leader_epoch=reg.leader_epoch,
                                  lost_from_offset=self.log.log_end_offset, high_watermark=self.log.high_watermark)
        self._update_registration(reg, quiet)
        if not new_term:
            for r in reg.replicas:
                if r != self.node_id and r not in self.followers:
                    self.followers[r] = FollowerState(last_caught_up_ms=now, last_fetch_ms=now)
            for r in list(self.followers):
                if r not in reg.replicas:
                    del self.followers[r]
        self.maybe_advance_high_watermark()
        self.hw_watchers.notify()
        self.append_watchers.notify()
        return new_term

    def make_follower(self, reg: PartitionRegistration, *, quiet: bool = False) -> bool:
        """Follow ``reg.leader`` (NO_LEADER: wait for one); returns whether the leader or epoch changed."""
        changed = self.role is not Role.FOLLOWER or reg.leader_epoch != self.leader_epoch or reg.leader != self.leader_id
        if changed:
            if self.role is Role.LEADER:
                (self._log.debug if quiet else self._log.info)(
                    "resigned leadership", new_leader=reg.leader, leader_epoch=reg.leader_epoch)
            self.role = Role.FOLLOWER
            self.leader_id = reg.leader
            self.leader_epoch = reg.leader_epoch
            self.followers = {}
            self.pending_isr = None
            self.generation += 1
        self._update_registration(reg, quiet)
        self.hw_watchers.notify()
        self.append_watchers.notify()
        return changed

    def make_offline(self) -> None:
        """Stop leading or following (the broker is fenced or the replica is going away)."""
        self.role = Role.NONE
        self.leader_id = NO_LEADER
        self.followers = {}
        self.pending_isr = None
        self.generation += 1
        self.hw_watchers.notify()
        self.append_watchers.notify()

    def _update_registration(self, reg: PartitionRegistration, quiet: bool = False) -> None:
        if self.pending_isr is not None and reg.partition_epoch > self.pending_from_epoch:
            self.pending_isr = None
        self.replicas = reg.replicas
        if reg.isr != self.isr:
            (self._log.debug if quiet else self._log.info)(
                "ISR changed", isr=reg.isr, old_isr=self.isr, leader=reg.leader, partition_epoch=reg.partition_epoch)
        self.isr = reg.isr
        self.partition_epoch = max(self.partition_epoch, reg.partition_epoch)

    # -- leader: followers, ISR, high watermark --------------------------------------------------

    def changed(self) -> None:
        """Tell the fetch sessions holding this partition that it has news to look at (its high watermark,
        last stable offset, log start offset, role or ISR moved)."""
        if self.sessions:
            for session, key in list(self.sessions.items()):
                session.mark(key)

    def _log_end_moved(self) -> None:
        """Only the log end moved (an append; a truncation tells every session too): news to the
        sessions that read up to it (``reads_log_end``: a follower's session here, this broker's replica
        fetcher), not to a consumer's, which reads up to the high watermark. On a leader with followers
        every append is one of these, and a consumer's parked fetch woken by it found nothing to read and
        parked again: a wasted round for every batch. When the high watermark moves, the consumers'
        sessions are told (`changed`)."""
        if self.sessions:
            for session, key in list(self.sessions.items()):
                if session.reads_log_end:
                    session.mark(key)

    def update_follower_fetch(self, replica_id: int, fetch_offset: int) -> FollowerState | None:
        """Record a follower's fetch at ``fetch_offset`` (everything below it is on the follower)."""
        state = self.followers.get(replica_id)
        if state is None:
            return None
        now = self.clock()
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.leader_end_offset_at_last_fetch:
            state.last_caught_up_ms = state.last_fetch_ms
        state.leader_end_offset_at_last_fetch = leader_end
        state.last_fetch_ms = now
        state.log_end_offset = fetch_offset
        self.maybe_advance_high_watermark()
        return state

    def maybe_advance_high_watermark(self) -> bool:
        """Move the HW to the smallest log end offset over the maximal ISR, if that is further."""
        if self.role is not Role.LEADER:
            return False
        new_hw = self.log.log_end_offset
        for r in self.maximal_isr:
            if r == self.node_id:
                continue
            state = self.followers.get(r)
            if state is None or state.log_end_offset < 0:
                return False
            new_hw = min(new_hw, state.log_end_offset)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            self._high_watermark_changed()
            self.hw_watchers.notify()
            return True
        return False

    def isr_to_shrink(self, lag_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without followers that have not caught up for ``lag_max_ms``, if any lag."""
        if self.role is not Role.LEADER or self.pending_isr is not None:
            return None
        now = self.clock()
        end = self.log.log_end_offset
        lagging = [
            r for r in self.isr
            if r != self.node_id and now - self.followers.get(r, FollowerState()).caught_up_ms(end) > lag_max_ms
        ]
        if not lagging:
            return None
        return tuple(r for r in self.isr if r not in lagging)

    def isr_to_expand(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR with ``replica_id`` added, if it has caught up: at least the HW and this epoch's start."""
        if self.role is not Role.LEADER or self.pending_isr is not None or replica_id in self.isr:
            return None
        state = self.followers.get(replica_id)
        if state is None:
            return None
        if state.log_end_offset >= self.log.high_watermark and state.log_end_offset >= self.leader_epoch_start_offset:
            return (*self.isr, replica_id)
        return None

    def propose_isr(self, new_isr: tuple[int, ...]) -> None:
        self.pending_isr = new_isr
        self.pending_from_epoch = self.partition_epoch
        self._log.info("proposing ISR change", isr=self.isr, proposed=new_isr, partition_epoch=self.partition_epoch)

    def isr_proposal_failed(self) -> None:
        self.pending_isr = None

    def isr_change_committed(self, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]) -> None:
        """The controller's answer to our AlterPartition: apply it unless metadata already moved past it."""
        if self.role is not Role.LEADER or leader_epoch != self.leader_epoch:
            self.pending_isr = None
            return
        if partition_epoch > self.partition_epoch:
            self.isr = isr
            self.partition_epoch = partition_epoch
        self.pending_isr = None
        self.maybe_advance_high_watermark()
        self.hw_watchers.notify()

    # -- log work off the event loop --------------------------------------------------------------

    async def _idle(self) -> bool:
        """Wait until no exclusive log work runs; True if it had to wait (re-check what you saw)."""
        waited = False
        while self._busy is not None:
            waited = True
            await self._busy.wait()
        return waited

    async def wait_idle(self) -> None:
        """Wait until no exclusive log work runs (role changes wait, so none races a worker thread)."""
        await self._idle()

    def _check_generation(self, generation: int | None) -> None:
        if generation is not None and generation != self.generation:
            raise PartitionChanged(f"{self.tp}: role or leader changed while the log work waited")

    async def run_exclusive(self, fn: Callable[..., Any], *args: Any, generation: int | None = None) -> Any:
        """Run the blocking ``fn(*args)`` in a worker thread while no append or other log work runs.

        ``generation``: a follower's work for the role it had then; raises `PartitionChanged` instead
        of running when the role or leader changed meanwhile."""
        await self._idle()
        self._check_generation(generation)
        done = self._busy = trio.Event()
        try:
            return await trio.to_thread.run_sync(fn, *args)
        except OSError as exc:
            self._storage_failed(exc)
            raise
        finally:
            self._busy = None
            done.set()
            if self.log.has_detached_segments and not self._deletion_pending and self.on_segments_detached:
                self._deletion_pending = True
                self.on_segments_detached(self)

    def _storage_failed(self, exc: OSError) -> None:
        if exc.errno not in NO_SPACE_ERRNOS and self.on_storage_error is not None:
            self.on_storage_error(self, exc)

    # -- the log cleaner ---------------------------------------------------------------------------

    async def run_cleaning(self, clean: Callable[[threading.Event], Any], swap: Callable[[Any], Any],
                           discard: Callable[[Any], None]) -> Any:
        """One log cleaner pass: ``clean(abort)`` in a worker thread beside appends and reads (it only
        writes new files beside the log), then ``swap(result)`` as exclusive log work — or
        ``discard(result)`` if the pass was aborted meanwhile. Returns what ``swap`` returned, or None
        when no pass could start (one runs, the cleaner is held off, the log is closed) or it was
        aborted. Errors of ``clean`` reach the caller (an OSError takes the replica offline first)."""
        await self._idle()
        if self._cleaning is not None or self._cleaning_paused or self.log.closed:
            return None
        cleaning = self._cleaning = _Cleaning()
        try:
            try:
                result = await _run_abortable(clean, cleaning.abort)
            except OSError as exc:
                self._storage_failed(exc)
                raise
            if cleaning.abort.is_set() or self.log.closed:
                await trio.to_thread.run_sync(discard, result)
                return None
            return await self.run_exclusive(swap, result)
        finally:
            self._cleaning = None
            cleaning.done.set()

    @property
    def cleaning(self) -> bool:
        """Whether a log cleaner pass runs over this log."""
        return self._cleaning is not None

    async def pause_cleaning(self) -> None:
        """Hold the log cleaner off this log until `resume_cleaning`: a pass in progress is aborted and
        waited for (Kafka's abortAndPauseCleaning)."""
        self._cleaning_paused += 1
        cleaning = self._cleaning
        if cleaning is not None:
            cleaning.abort.set()
            await cleaning.done.wait()

    def resume_cleaning(self) -> None:
        self._cleaning_paused -= 1

    async def _run_exclusive_paused(self, fn: Callable[..., Any], *args: Any, generation: int | None = None) -> Any:
        """`run_exclusive` for work that removes or cuts old segments: the cleaner is held off meanwhile."""
        try:
            await self.pause_cleaning()
            return await self.run_exclusive(fn, *args, generation=generation)
        finally:
            self.resume_cleaning()

    def producer_last_offsets(self) -> dict[int, int]:
        """Each producer in the producer state and the last offset of its last batch (the batches a
        cleaned log keeps, empty if need be)."""
        return {producer_id: entry.last_offset for producer_id, entry in self.producer_state.producers.items()}

    async def delete_detached_segments(self) -> None:
        """Remove the files of the segments the log detached (called once readers are done with them)."""
        self._deletion_pending = False
        if not self.log.closed:
            await self.run_exclusive(self.log.delete_detached_segments)

    # -- appends ----------------------------------------------------------------------------------

    def needs_verification(self, header: BatchHeader) -> bool:
        """Whether a produced transactional batch must be verified with the transaction coordinator
        (KIP-890 part 1): its producer has no transaction open in this partition yet."""
        if not header.is_transactional:
            return False
        entry = self.producer_state.entry(header.producer_id)
        return entry is None or entry.current_txn_first_offset == ps.NO_OFFSET \
            or entry.producer_epoch != header.producer_epoch

    def verification_guard(self, producer_id: int) -> object:
        """The guard of ``producer_id``'s verification in progress here (a new one when none is)."""
        guard = self._verification_guards.get(producer_id)
        if guard is None:
            guard = self._verification_guards[producer_id] = object()
        return guard

    async def append_as_leader(self, records: bytes | bytearray | memoryview, header: BatchHeader, *,
                               acks: int, now: int, leader_epoch: int | None = None,
                               verification_guard: object | None = None) -> LeaderAppend:
        """Append one batch the caller validated (`validate_produced_batch`), in the current leader
        epoch: min.insync.replicas for acks=all, the producer's sequence (a duplicate answers with the
        offsets it got before), LogAppendTime, then one write. A due segment roll happens first, in a worker thread.
        ``leader_epoch``: append only in that epoch (a writer bound to one term, as the group coordinator's
        is: leadership that left and came back while the append waited is another term).
        ``verification_guard``: the batch is transactional and was verified with the transaction
        coordinator under this guard (`verification_guard`); if a marker of its producer was written
        since, and the batch would open a transaction, it is refused with INVALID_TXN_STATE: its
        transaction has ended, and a batch appended now would open one that no marker ever closes."""
        while True:
            if await self._idle():
                continue
            if self.role is not Role.LEADER or (leader_epoch is not None and self.leader_epoch != leader_epoch):
                return LeaderAppend(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            if acks == -1 and len(self.isr) < self.min_insync_replicas:
                return LeaderAppend(ErrorCode.NOT_ENOUGH_REPLICAS,
                                    f"ISR {list(self.isr)} is smaller than min.insync.replicas={self.min_insync_replicas}")
            check = self.producer_state.validate_append(header, now)
            if check.is_duplicate:
                assert check.duplicate is not None
                return LeaderAppend(base_offset=check.duplicate.first_offset,
                                    next_offset=check.duplicate.last_offset + 1)
            if not check.should_append:
                return LeaderAppend(check.error, check.message or None)
            if verification_guard is not None and self.needs_verification(header) \
                    and self._verification_guards.get(header.producer_id) is not verification_guard:
                return LeaderAppend(ErrorCode.INVALID_TXN_STATE,
                                    f"producer {header.producer_id}'s transaction ended while its batch was "
                                    f"verified: the batch is not part of an ongoing transaction")
            log = self.log
            end = log.log_end_offset
            if log.needs_roll(header.size, end, end + header.last_offset_delta, header.max_timestamp):
                await self.run_exclusive(self._roll, end)
                continue
            append_time = -1
            if self.log_append_time:
                records = bytearray(records)
                set_max_timestamp(records, 0, 1, now)
                header = read_header(records, 0)
                append_time = now
            try:
                info = log.append_as_leader(records, self.leader_epoch, crc_verified=True)
            except OSError as exc:
                self._storage_failed(exc)
                raise
            marker = _marker_or_none(records, 0) if is_end_txn_marker_header(header) else None
            completed = self.producer_state.update(header, info.first_offset, marker=marker, now_ms=now)
            self.maybe_advance_high_watermark()
            self.append_watchers.notify()
            if completed is not None and completed.is_aborted:
                await self._index_aborted([completed])
            if log.flush_due:
                # flush.messages / flush.ms: acknowledged only once fsynced, as in Kafka.
                await self.run_exclusive(log.flush_if_due)
            return LeaderAppend(base_offset=info.first_offset, next_offset=info.last_offset + 1,
                                log_append_time_ms=append_time)

    async def append_as_follower(self, records: memoryview, *, generation: int | None = None) -> AppendInfo | None:
        """Append the whole batches of a fetch response as they are; a partial last batch is dropped.
        ``generation``: see `run_exclusive`."""
        end = 0
        headers = []
        markers: dict[int, EndTxnMarker | None] = {}
        for position, header in iter_batches(records, verify=False):
            headers.append(header)
            end = position + header.size
            if is_end_txn_marker_header(header):
                markers[len(headers) - 1] = _marker_or_none(records, position)
        if not end:
            return None
        while True:
            if await self._idle():
                continue
            self._check_generation(generation)
            log = self.log
            if log.needs_roll(end, headers[0].base_offset, headers[-1].last_offset,
                              max(h.max_timestamp for h in headers)):
                await self.run_exclusive(self._roll, max(headers[0].base_offset, log.log_end_offset),
                                         generation=generation)
                continue
            try:
                info = log.append_as_follower(records[:end])
            except OSError as exc:
                self._storage_failed(exc)
                raise
            aborted = []
            appended_ms = self.clock()
            for i, header in enumerate(headers):
                completed = self.producer_state.update(header, marker=markers.get(i), now_ms=appended_ms)
                if completed is not None and completed.is_aborted:
                    aborted.append(completed)
            self.append_watchers.notify()
            if aborted:
                await self._index_aborted(aborted)
            if log.flush_due:
                await self.run_exclusive(log.flush_if_due)
            return info

    async def _index_aborted(self, completed: list[ps.CompletedTxn]) -> None:
        """Write the aborted transactions whose markers were just appended (no await since) into the
        ``.txnindex`` of the segment holding them, as exclusive log work: it may create the file."""
        segment = self.log.active_segment
        entries = [AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
                   for txn in completed]
        # The producer state took these transactions as ended: until the entries are readable the
        # LSO is held below them (else the high watermark could carry it past their records).
        floor = min(txn.first_offset for txn in completed)
        self._aborts_being_indexed.append(floor)
        try:
            await self.run_exclusive(segment.txn_index.append_all, entries)
        finally:
            self._aborts_being_indexed.remove(floor)
            self.hw_watchers.notify()  # the last stable offset it held back may move now

    async def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                committed: bool, *, now: int, leader_epoch: int | None = None) -> LeaderAppend:
        """Append the COMMIT (``committed``) or ABORT marker of ``producer_id``'s transaction as leader
        (WriteTxnMarkers): min.insync.replicas as for acks=all, the producer and coordinator epochs
        checked (`ProducerStateManager.validate_marker`), then one write; the transaction it closes is
        indexed when aborted. The caller waits for the high watermark to pass ``next_offset``.
        ``leader_epoch``: as for `append_as_leader`."""
        marker_batch = build_end_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                            committed=committed, coordinator_epoch=coordinator_epoch,
                                            timestamp=now)
        header = read_header(marker_batch, 0)
        marker = EndTxnMarker(producer_id, producer_epoch, committed, coordinator_epoch, 0, now)
        while True:
            if await self._idle():
                continue
            if self.role is not Role.LEADER or (leader_epoch is not None and self.leader_epoch != leader_epoch):
                return LeaderAppend(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            if len(self.isr) < self.min_insync_replicas:
                return LeaderAppend(ErrorCode.NOT_ENOUGH_REPLICAS,
                                    f"ISR {list(self.isr)} is smaller than min.insync.replicas={self.min_insync_replicas}")
            check = self.producer_state.validate_marker(header, marker, now)
            if not check.should_append:
                return LeaderAppend(check.error, check.message or None)
            # Whatever verification of this producer was in flight, its transaction is ending here.
            self._verification_guards.pop(producer_id, None)
            log = self.log
            end = log.log_end_offset
            if log.needs_roll(header.size, end, end, header.max_timestamp):
                await self.run_exclusive(self._roll, end)
                continue
            try:
                info = log.append_as_leader(marker_batch, self.leader_epoch, crc_verified=True)
            except OSError as exc:
                self._storage_failed(exc)
                raise
            completed = self.producer_state.update(header, info.first_offset,
                                                   marker=attrs.evolve(marker, offset=info.first_offset),
                                                   now_ms=self.clock())
            self.maybe_advance_high_watermark()
            self.append_watchers.notify()
            if completed is not None and completed.is_aborted:
                await self._index_aborted([completed])
            if log.flush_due:
                await self.run_exclusive(log.flush_if_due)
            return LeaderAppend(base_offset=info.first_offset, next_offset=info.last_offset + 1)

    def _roll(self, base_offset: int) -> None:
        """In a worker thread: start a new segment and snapshot the producer state at its base (Kafka
        takes the producer snapshot at every roll, so a restart replays at most one segment)."""
        self.log.roll(base_offset)
        ps.take_snapshot(self.log.directory, self.producer_state, self.log.log_end_offset)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        new = min(leader_high_watermark, self.log.log_end_offset)
        if new > self.log.high_watermark:
            self.log.update_high_watermark(new)
            self._high_watermark_changed()
            self.hw_watchers.notify()

    # -- truncation and the log start --------------------------------------------------------------

    async def truncate_to(self, offset: int, *, diverged: bool = False, generation: int | None = None) -> int:
        """Cut the log at ``offset``, never below the high watermark; returns where the log now ends.

        ``diverged``: the leader named ``offset`` as where this log stops matching its own. That is
        below the high watermark only when the leader was elected from outside the ISR (a clean leader
        holds every committed record): the records past it are gone from the partition, and keeping
        them would leave this log contradicting the leader's for good, so they are cut too.
        ``generation``: see `run_exclusive`."""
        await self._idle()
        self._check_generation(generation)
        if diverged and offset < self.log.high_watermark:
            self._log.warning("truncating below the high watermark", offset=offset,
                              high_watermark=self.log.high_watermark, log_end_offset=self.log.log_end_offset)
        target = offset if diverged else max(offset, self.log.high_watermark)
        if target > offset:
            self._log.warning("truncation clamped to the high watermark", asked=offset, high_watermark=target)
        if target < self.log.log_end_offset:
            self._log.info("truncating", offset=target, log_end_offset=self.log.log_end_offset)
            await self._run_exclusive_paused(self._truncate, target, generation=generation)
            self.changed()  # below the high watermark (diverged) it moves too: news to every session
            self.append_watchers.notify()
        elif diverged:  # no record to cut; an epoch begun at the end without records still goes
            await self.run_exclusive(self.log.truncate_to, target, generation=generation)
        return self.log.log_end_offset

    def _truncate(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.reload_producer_state()

    async def truncate_fully_and_start_at(self, offset: int, *, generation: int | None = None) -> None:
        self._log.info("log restarts at the leader's start offset", offset=offset)
        await self._run_exclusive_paused(self._truncate_fully, offset, generation=generation)
        self.changed()  # a new log start offset and high watermark: news to every session
        self.append_watchers.notify()

    def _truncate_fully(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.producer_state.reset(offset)
        self.producer_state.on_high_watermark_update(self.log.high_watermark)
        ps.delete_snapshots_above(self.log.directory, offset)

    async def delete_records_before(self, offset: int, *, generation: int | None = None) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords, or the leader's start on a
        follower); segments wholly below it are detached. Returns the log start offset."""
        try:
            return await self._run_exclusive_paused(self.log.delete_records_before, offset, generation=generation)
        finally:
            self.changed()  # a new log start offset is news to the fetch sessions

    def housekeeping(self) -> int:
        """Blocking (`run_exclusive`): retention and a due flush; old producer snapshots go when the log
        start moved. Returns how many segments retention detached."""
        log = self.log
        start = log.log_start_offset
        gone = log.delete_old_segments()
        if gone:
            self._log.info("retention deleted segments", segments=gone, log_start_offset=log.log_start_offset)
        log.flush_if_due()
        if log.log_start_offset > start:
            # Snapshots below the log start are superseded, except the newest: producer state
            # outlives the data it was built from.
            offsets = ps.snapshot_offsets(log.directory)
            if len(offsets) > 1:
                ps.delete_snapshots_below(log.directory, min(offsets[-1], log.log_start_offset))
        return gone

    async def run_housekeeping(self) -> int:
        """`housekeeping` as exclusive log work, the cleaner held off when retention has segments to remove."""
        start = self.log.log_start_offset
        try:
            if self.log.retention_due():
                return await self._run_exclusive_paused(self.housekeeping)
            return await self.run_exclusive(self.housekeeping)
        finally:
            if self.log.log_start_offset != start:
                self.changed()  # a new log start offset is news to the fetch sessions

    def housekeeping_due(self) -> bool:
        """Whether `housekeeping` has file work to do (memory only: asked of every partition)."""
        return self.log.retention_due() or self.log.flush_due

    # -- producer state ---------------------------------------------------------------------------

    def headers_from(self, offset: int) -> Iterator[ps.ReplayBatch]:
        """The log's batch headers from the batch holding ``offset`` on; a transaction marker's header
        comes with the marker (its record read from the segment), an unreadable one with None."""
        segments = self.log.segments
        for i, segment in enumerate(segments):
            # Judged by the next segment's base offset first: an old segment's indexes stay unread.
            if (i + 1 < len(segments) and segments[i + 1].base_offset <= offset) or segment.next_offset <= offset:
                continue
            found = segment.translate_offset(offset)
            if found is None:
                continue
            for position, header in segment.batches_from(found[0]):
                if is_end_txn_marker_header(header):
                    yield header, _marker_or_none(segment.pread(header.size, position), 0)
                else:
                    yield header

    def reload_producer_state(self, names: Iterable[str] | None = None) -> None:
        """Blocking: rebuild the producer state from the latest snapshot and the log after it. ``names``:
        the log directory's listing when the caller has just taken it (a log being opened), else listed."""
        ps.truncate_and_reload(
            self.producer_state, self.log.directory, self.log.log_end_offset, self.headers_from,
            log_start_offset=self.log.log_start_offset, now_ms=self.clock(), names=names,
        )
        self.producer_state.on_high_watermark_update(self.log.high_watermark)

    def snapshot_producer_state(self, *, sync: bool = True) -> None:
        """Blocking: write the producer state as the snapshot at the log end (a clean shutdown);
        ``sync=False`` leaves the fsync to the caller, who syncs the whole file system at once.

        Not written when a snapshot at the log end is already there (as Kafka takes one only past the
        last): nothing was appended since, so it holds this state (producers expired since are expired
        again when it is read), and a broker of 100,000 idle partitions does not rewrite 100,000 files
        at every stop; nor for a log that never held a record (a log emptied by retention keeps its
        snapshots: its producers' state outlives their records)."""
        end = self.log.log_end_offset
        if end == 0 or ps.snapshot_path(self.log.directory, end).exists():
            return
        ps.take_snapshot(self.log.directory, self.producer_state, end, sync=sync)


def _marker_or_none(buf: bytes | bytearray | memoryview, position: int) -> EndTxnMarker | None:
    """The transaction marker batch at ``position``, or None when its record does not read as one (the
    producer state then closes the transaction without knowing how it ended)."""
    try:
        return read_end_txn_marker(buf, position, verify_crc=False)
    except CorruptRecordError:
        return None
