"""Moving a replica to another log directory of the same broker (KIP-113's AlterReplicaLogDirs).

Theory of operation. `LogDirMover.start` creates the *future log* of a partition in the target
directory — ``<topic>-<partition>.<id>-future``, Kafka's name, with its ``partition.metadata`` — and
starts a task in the replica manager's nursery that copies the current log into it, batch by batch,
as a follower would (the leader's bytes, their offsets and epochs; aborted transactions into the
future segments' ``.txnindex``):

* each step is exclusive log work of the partition (`Partition.run_exclusive`: one worker-thread hop,
  no append meanwhile), at most ``_STEP_BYTES`` of it, so producers wait for one step at most;
* a step first makes the future log follow what happened to the current one since the last step (a
  follower's truncation, a log start offset moved up by retention or DeleteRecords);
* once a step leaves nothing to copy, the next one runs with the log directories' lock held as well
  and *swaps*: it copies what was appended since, closes the future log, renames it
  ``<topic>-<partition>`` in the target directory, reopens it there (its offsets trusted: it was just
  closed cleanly) and renames the current directory ``<topic>-<partition>.<id>-delete``; the
  partition then serves from the new log at once (no await between the swap and the assignment).
  The old log is closed and removed ``file.delete.delay.ms`` later, so fetches still sending from
  its files finish; the producer state is snapshotted into the new directory, and the controller is
  told the replica's new directory (AssignReplicasToDirs).

A move runs whatever the replica's role, and ends early when the partition leaves the broker or goes
offline (`cancel`), when the target directory fails (it goes offline: `ReplicaManager.fail_log_dir`),
or when another move of the same partition replaces it. A restart forgets moves in progress: their
``-future`` directories are removed at start (ask again). The cleaner leaves a moving log alone.

DescribeLogDirs shows each future log (``is_future_key``) in its target directory, with its size and
its lag: how many offsets it is behind the current log.
"""

from __future__ import annotations

import bisect
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import attrs
import structlog
import trio

from kraftpy.fatal import describe_os_error
from kraftpy.storage.checkpoint import LogOffsets
from kraftpy.storage.log import Log, LogClosedError
from kraftpy.storage.log_manager import LogManager, partition_dir_name

if TYPE_CHECKING:
    from kraftpy.broker.partition import Partition, TopicPartition

T = TypeVar("T")

FUTURE_SUFFIX = "-future"
#: At most this many bytes are copied per step (one exclusive worker-thread hop).
_STEP_BYTES = 1 << 20

_logger = structlog.get_logger(__name__)


class FutureLogError(Exception):
    """The future log's files failed (``cause``): the target directory, not the partition's."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


@attrs.define
class FutureReplica:
    """A move in progress: ``part``'s log being copied into ``log`` under the log directory ``target``."""

    part: Partition
    target: Path
    log: Log
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    done: trio.Event = attrs.Factory(trio.Event)

    @property
    def lag(self) -> int:
        """How many offsets the future log is behind the current one."""
        return max(self.part.log.log_end_offset - self.log.log_end_offset, 0)


def future_dir_name(topic: str, partition: int) -> str:
    return f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{FUTURE_SUFFIX}"


def _future(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except OSError as exc:
        raise FutureLogError(exc) from exc


def copy_step(current: Log, future: Log, max_bytes: int = _STEP_BYTES) -> int:
    """Blocking, as exclusive log work: bring ``future`` up to what ``current`` holds, at most
    ``max_bytes`` of batches; returns how many offsets it is still behind. An OSError of the future
    log is raised as `FutureLogError` (an OSError here is the current log's)."""
    if future.log_end_offset > current.log_end_offset:  # the current log was truncated
        _future(lambda: future.truncate_to(current.log_end_offset))
    if current.log_start_offset > future.log_end_offset:
        _future(lambda: future.truncate_fully_and_start_at(current.log_start_offset))
    elif current.log_start_offset > future.log_start_offset:
        future.update_high_watermark(current.high_watermark)
        _future(lambda: future.delete_records_before(current.log_start_offset))
    start = future.log_end_offset
    if start < current.log_end_offset:
        data = current.read_bytes(start, max_bytes, whole_batches=True)
        aborted = current.collect_aborted_transactions(start, current.log_end_offset) if data else []
        if data:
            _future(lambda: future.append_as_follower(data))
            end = future.log_end_offset
            for txn in aborted:
                if start <= txn.last_offset < end:
                    segments = future.segments
                    i = max(bisect.bisect_right([s.base_offset for s in segments], txn.last_offset) - 1, 0)
                    _future(lambda s=segments[i], t=txn: s.txn_index.append_all([t]))
    future.update_high_watermark(current.high_watermark)
    return current.log_end_offset - future.log_end_offset


@attrs.frozen
class Swapped:
    new_log: Log
    old_log: Log
    #: The old log's directory, renamed for deletion; the old log is still open (see the module doc).
    doomed: Path


class LogDirMover:
    """The moves of this broker's replicas between its log directories (see the module doc)."""

    def __init__(self, log_manager: LogManager, log_manager_lock: trio.Lock, node_id: int) -> None:
        self.log_manager = log_manager
        self.log_manager_lock = log_manager_lock
        self.futures: dict[TopicPartition, FutureReplica] = {}
        #: Set (and replaced) after every copy step and at the end of every move: a hint, the waiter checks.
        self.progressed = trio.Event()
        self._log = _logger.bind(node_id=node_id)
        #: Set by the replica manager.
        self.on_swapped: Callable[[Partition, Path, Swapped], None] | None = None
        self.on_target_failed: Callable[[Path, str], None] | None = None
        self.on_removable: Callable[[Path], None] | None = None

    async def start(self, nursery: trio.Nursery, part: Partition, target: Path) -> None:
        """Begin moving ``part`` to the log directory ``target`` (one of the online ones, not its own);
        a move of the same partition to another directory is cancelled first. Raises OSError when the
        future log cannot be created (the caller takes ``target`` offline)."""
        existing = self.futures.get(part.tp)
        if existing is not None:
            if existing.target == target:
                return
            await self.cancel(part.tp)
        directory = target / future_dir_name(part.tp.topic, part.tp.partition)
        from kraftpy.broker.replica_manager import write_partition_metadata  # noqa: PLC0415 (a cycle)

        def create() -> Log:
            log = Log.open(directory, part.log.config, clock=part.log.clock)
            try:
                log.truncate_fully_and_start_at(part.log.log_start_offset)
                write_partition_metadata(directory, part.topic_id)
            except OSError:
                log.abandon()
                raise
            return log

        future_log = await trio.to_thread.run_sync(create)
        future = self.futures[part.tp] = FutureReplica(part, target, future_log)
        self._log.info("moving replica to another log directory", partition=str(part.tp), target=str(target),
                       future=directory.name)
        nursery.start_soon(self._run, future)

    async def cancel(self, tp: TopicPartition) -> None:
        """Stop the move of ``tp`` (if any) and wait until its future log is closed and queued for removal."""
        future = self.futures.get(tp)
        if future is None:
            return
        future.scope.cancel()
        await future.done.wait()

    def cancel_soon(self, tp: TopicPartition) -> None:
        """Trio thread, no waiting: stop the move of ``tp``; its task cleans up."""
        future = self.futures.get(tp)
        if future is not None:
            future.scope.cancel()

    def cancel_in(self, log_dir: Path) -> None:
        """Stop every move whose future log is in ``log_dir`` (it failed)."""
        for future in list(self.futures.values()):
            if future.target == log_dir:
                future.scope.cancel()

    async def _run(self, future: FutureReplica) -> None:
        part = future.part
        swapped = False
        try:
            with future.scope:
                await part.pause_cleaning()
                try:
                    swapped = await self._copy_then_swap(future)
                finally:
                    part.resume_cleaning()
        except FutureLogError as exc:
            reason = f"{exc.cause.filename or future.log.directory}: {describe_os_error(exc.cause)}"
            self._log.error("moving a replica failed: its target log directory failed", partition=str(part.tp),
                            reason=reason)
            if self.on_target_failed is not None:
                self.on_target_failed(future.target, reason)
        except (OSError, LogClosedError) as exc:
            # The partition's own log failed (it went offline with its directory) or was closed.
            self._log.warning("moving a replica stopped: its log failed or closed", partition=str(part.tp),
                              error=str(exc))
        finally:
            if self.futures.get(part.tp) is future:
                del self.futures[part.tp]
            if not swapped:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(future.log.abandon)
                if self.on_removable is not None:
                    self.on_removable(future.log.directory)
            future.done.set()
            self._progress()

    def _progress(self) -> None:
        event, self.progressed = self.progressed, trio.Event()
        event.set()

    async def _copy_then_swap(self, future: FutureReplica) -> bool:
        part = future.part
        while True:
            if part.log.closed:
                return False
            lag = await part.run_exclusive(copy_step, part.log, future.log)
            self._progress()
            await trio.lowlevel.checkpoint()
            if lag > 0:
                continue
            async with self.log_manager_lock:
                if part.log.closed:
                    return False
                result = await part.run_exclusive(self._swap, part.log, future.log)
                if result is None:
                    continue  # appended meanwhile beyond one step: copy on
                old_directory = part.log.directory
                part.log = result.new_log  # no await since the swap: no append saw the old log after it
            self._log.info("replica moved to another log directory", partition=str(part.tp),
                           source=str(old_directory.parent), target=str(future.target),
                           log_end_offset=result.new_log.log_end_offset)
            if self.on_swapped is not None:
                self.on_swapped(part, old_directory, result)
            return True

    def _swap(self, current: Log, future: Log) -> Swapped | None:
        """Blocking, as exclusive log work under the log directories' lock: the last copy, then the
        future log becomes the partition's (see the module doc); None if more than one step was left."""
        if copy_step(current, future) > 0:
            return None
        final = self.log_manager.log_dir_of(future.directory)
        assert final is not None
        destination = final / partition_dir_name(*_key(current.directory.name))
        # Everything is flushed by the close: the reopened log trusts it all.
        offsets = LogOffsets(log_start_offset=future.log_start_offset, recovery_point=future.log_end_offset,
                             high_watermark=future.high_watermark)
        _future(lambda: future.close(sync=True))
        _future(lambda: os.replace(future.directory, destination))
        new_log = _future(lambda: self.log_manager.adopt_log(destination, current.config, offsets))
        doomed = current.directory.with_name(f"{current.directory.name}.{uuid.uuid4().hex}-delete")
        try:
            os.replace(current.directory, doomed)
        except OSError:
            new_log.abandon()  # the partition goes offline with its directory
            raise
        self.log_manager.forget(current.directory)
        return Swapped(new_log, current, doomed)


def _key(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")
    return topic, int(partition)
