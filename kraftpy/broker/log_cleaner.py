"""The broker's log cleaner: compacts every local replica whose topic has cleanup.policy=compact.

Theory of operation
-------------------
Kafka's ``LogCleaner`` and ``LogCleanerManager`` over :mod:`kraftpy.storage.cleaner`. ``run`` (a task
of the replica manager's nursery) reads each log directory's ``cleaner-offset-checkpoint``, then
starts ``log.cleaner.threads`` cleaner tasks. Each, in a loop:

1. measures every compacted replica not being cleaned (memory only: `log_to_clean`, its cleanable
   part ending at the replica's last stable offset, so an open transaction and everything after
   it stay dirty) and takes the one with the highest dirty ratio among those due — over
   ``min.cleanable.dirty.ratio``, past ``max.compaction.lag.ms``, or holding tombstones or
   transaction markers past their delete horizon — or, when none is, waits ``log.cleaner.backoff.ms``;
2. runs one pass through `Partition.run_cleaning`: the copy in a worker thread while producers go on
   appending, the swap as exclusive log work (retention, truncation and DeleteRecords abort a pass
   and hold the cleaner off while they run);
3. records the pass's end as the partition's first dirty offset and rewrites the checkpoint of its
   log directory (in a worker thread).

Leaders and followers alike clean their own logs, as in Kafka: replicas of a compacted partition
agree on every record a cleaning keeps, not on bytes. A replica whose pass fails on a damaged
batch is not cleaned again until the broker restarts (Kafka's "uncleanable partitions"); one whose
files fail goes offline like any replica. Every pass shares one throttler
(``log.cleaner.io.max.bytes.per.second``) and its share of ``log.cleaner.dedupe.buffer.size``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog
import trio

from kraftpy.broker.partition import Partition, TopicPartition
from kraftpy.broker.settings import BrokerSettings
from kraftpy.fatal import FatalError
from kraftpy.protocol.batch_header import CorruptRecordError
from kraftpy.storage.checkpoint import CheckpointError
from kraftpy.storage.cleaner import (
    Cleaner,
    CleanerConfig,
    CleaningAborted,
    CleaningPass,
    LogToClean,
    Throttler,
    log_to_clean,
    read_cleaner_checkpoint,
    write_cleaner_checkpoint,
)
from kraftpy.storage.offset_map import SLOT_SIZE

_logger = structlog.get_logger(__name__)

#: Replicas looked at between two checkpoints of the event loop when choosing the next log to clean.
_CHUNK = 1000


class LogCleaner:
    def __init__(self, settings: BrokerSettings, partitions: Callable[[], Iterable[Partition]],
                 clock: Callable[[], int]) -> None:
        """``partitions`` lists the local replicas (the replica manager's); ``clock`` is wall-clock ms."""
        self.settings = settings
        self.partitions = partitions
        self.clock = clock
        self._log = _logger.bind(node_id=settings.node_id)
        threads = settings.log_cleaner_threads
        self.enabled = settings.log_cleaner_enable and threads > 0
        per_thread = settings.log_cleaner_dedupe_buffer_size // max(threads, 1)
        if self.enabled and per_thread < 2 * SLOT_SIZE:
            raise FatalError(f"log.cleaner.dedupe.buffer.size={settings.log_cleaner_dedupe_buffer_size} leaves "
                             f"{per_thread} bytes to each of log.cleaner.threads={threads}: an offset map needs "
                             f"at least {2 * SLOT_SIZE}")
        self.config = CleanerConfig(
            dedupe_buffer_size=per_thread,
            load_factor=settings.log_cleaner_io_buffer_load_factor,
            io_buffer_size=max(settings.log_cleaner_io_buffer_size // max(threads, 1) // 2, 4096),
        )
        self.throttler = Throttler(settings.log_cleaner_io_max_bytes_per_second)
        #: log directory -> (topic, partition) -> first dirty offset (the cleaner-offset-checkpoint files).
        self.checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        #: The earliest delete horizon of the tombstones each replica's last pass kept.
        self.horizons: dict[TopicPartition, int] = {}
        self.in_progress: set[TopicPartition] = set()
        #: Replicas whose pass failed on a damaged batch, with why; not cleaned again until a restart.
        self.uncleanable: dict[TopicPartition, str] = {}
        #: Passes swapped in since the start (tests and logs).
        self.passes = 0
        #: Set after each pass that swapped something in (tests wait on it).
        self.cleaned = trio.Event()
        self._checkpoint_lock = trio.Lock()

    # -- running ----------------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if not self.enabled:
            task_status.started()
            return
        self.checkpoints = await trio.to_thread.run_sync(self._read_checkpoints)
        async with trio.open_nursery() as nursery:
            for _ in range(self.settings.log_cleaner_threads):
                nursery.start_soon(self._run_one, Cleaner(self.config, self.throttler))
            task_status.started()

    def _read_checkpoints(self) -> dict[Path, dict[tuple[str, int], int]]:
        out = {}
        for log_dir in self.settings.log_dirs:
            try:
                out[Path(log_dir)] = read_cleaner_checkpoint(log_dir)
            except (CheckpointError, OSError) as exc:
                # Every compacted log is then dirty from its start: one pass too many, nothing lost.
                self._log.warning("cleaner offset checkpoint unreadable; cleaning from the log starts",
                                  log_dir=str(log_dir), error=str(exc))
                out[Path(log_dir)] = {}
        return out

    async def _run_one(self, cleaner: Cleaner) -> None:
        backoff = self.settings.log_cleaner_backoff_ms / 1000
        while True:
            picked = await self.grab_filthiest_log()
            if picked is None:
                await trio.sleep(backoff)
                continue
            part, to_clean = picked
            try:
                await self.clean(cleaner, part, to_clean)
            finally:
                self.in_progress.discard(part.tp)
            await trio.lowlevel.checkpoint()

    # -- choosing ---------------------------------------------------------------------------------

    def _checkpointed(self, part: Partition) -> int | None:
        return self.checkpoints.get(part.log.directory.parent, {}).get((part.tp.topic, part.tp.partition))

    async def grab_filthiest_log(self) -> tuple[Partition, LogToClean] | None:
        """The compacted replica most in need of a pass, now marked in progress (or None: none is due).
        The replicas are looked at in chunks, with a checkpoint between two: at 100,000 of them one pass
        held the event loop for 40-90 ms."""
        now = self.clock()
        best: tuple[float, Partition, LogToClean] | None = None
        for i, part in enumerate(self.partitions()):
            if i and not i % _CHUNK:
                await trio.lowlevel.checkpoint()
            log = part.log
            if (not log.config.compact or log.closed or part.tp in self.in_progress
                    or part.tp in self.uncleanable or part.cleaning):
                continue
            to_clean = log_to_clean(log, self._checkpointed(part), now, earliest_horizon=self.horizons.get(part.tp),
                                    last_stable_offset=part.last_stable_offset)
            if to_clean.total_bytes == 0 or not to_clean.due(log.config.min_cleanable_ratio):
                continue
            if best is None or to_clean.cleanable_ratio > best[0]:
                best = (to_clean.cleanable_ratio, part, to_clean)
        if best is None:
            return None
        part = best[1]
        if part.tp in self.in_progress or part.cleaning or part.log.closed:
            return None  # taken by another cleaner task, or gone, while the others were looked at
        self.in_progress.add(part.tp)
        return part, best[2]

    # -- one pass ---------------------------------------------------------------------------------

    async def clean(self, cleaner: Cleaner, part: Partition, to_clean: LogToClean) -> CleaningPass | None:
        """Run one pass over ``part``'s log and record where it ended; the pass, or None when it did not run."""
        log = part.log
        now = self.clock()
        producers = part.producer_last_offsets()
        checkpointed, horizon = self._checkpointed(part), self.horizons.get(part.tp)
        # Read here, not in the worker thread; it only grows meanwhile (a truncation aborts the pass).
        last_stable = part.last_stable_offset
        measured = [to_clean]

        def copy(abort) -> CleaningPass:
            # Measured again now that nothing can cut the log under the pass (it would abort it).
            measured[0] = log_to_clean(log, checkpointed, now, earliest_horizon=horizon,
                                       last_stable_offset=last_stable)
            return cleaner.clean(log, measured[0], now, producers, abort)

        def swap(result: CleaningPass) -> CleaningPass:
            result.swap_in(log)
            return result

        try:
            result = await part.run_cleaning(copy, swap, CleaningPass.discard)
        except CleaningAborted:
            return None
        except (CorruptRecordError, ValueError) as exc:
            self.uncleanable[part.tp] = str(exc)
            self._log.warning("log not cleanable until a restart", partition=str(part.tp), error=str(exc))
            return None
        except OSError as exc:  # the replica went offline (run_cleaning told the replica manager)
            self.uncleanable[part.tp] = str(exc)
            self._log.warning("cleaning failed", partition=str(part.tp), error=str(exc))
            return None
        if result is None:
            return None
        stats = result.stats
        if result.earliest_horizon is None:
            self.horizons.pop(part.tp, None)
        else:
            self.horizons[part.tp] = result.earliest_horizon
        await self._record(part, result.next_dirty_offset)
        self.passes += 1
        event, self.cleaned = self.cleaned, trio.Event()
        event.set()
        to_clean = measured[0]
        self._log.info(
            "log cleaned", partition=str(part.tp), first_dirty=to_clean.first_dirty_offset,
            next_dirty=result.next_dirty_offset, dirty_ratio=round(to_clean.cleanable_ratio, 3),
            segments_swapped=len(result.swaps), read_bytes=stats.map_bytes_read + stats.bytes_read,
            written_bytes=stats.bytes_written, records_kept=stats.records_kept, records_read=stats.records_read,
            keyless_dropped=stats.keyless_dropped, seconds=round(stats.elapsed_s, 3),
        )
        if stats.keyless_dropped:
            self._log.warning("records without a key dropped from a compacted log", partition=str(part.tp),
                              records=stats.keyless_dropped)
        return result

    async def _record(self, part: Partition, next_dirty: int) -> None:
        log_dir = part.log.directory.parent
        offsets = self.checkpoints.setdefault(log_dir, {})
        offsets[(part.tp.topic, part.tp.partition)] = next_dirty
        async with self._checkpoint_lock:
            try:
                await trio.to_thread.run_sync(self._write_checkpoint, log_dir, dict(offsets))
            except OSError as exc:
                self._log.warning("cleaner offset checkpoint not written", log_dir=str(log_dir), error=str(exc))

    @staticmethod
    def _write_checkpoint(log_dir: Path, offsets: dict[tuple[str, int], int]) -> None:
        # Partitions whose log is gone (a deleted topic) leave the file.
        live = {key: offset for key, offset in offsets.items() if os.path.isdir(log_dir / f"{key[0]}-{key[1]}")}
        write_cleaner_checkpoint(log_dir, live)
