"""Steady write-back of appended log data (``log.writeback.interval.bytes``).

A broker's appends go to the page cache; without an fsync policy (Kafka's default, and kraftpy's)
the kernel writes them to disk on its own schedule: nothing until the dirty data reaches
``vm.dirty_background_ratio`` of memory (gigabytes on a machine of a few dozen) or is 30 seconds
old, then as fast as the flusher threads go. On a busy machine that burst takes the CPU and the disk
from the broker for a second or more, every few seconds, and every produce and fetch then waits:
the latency spikes Kafka's operators tune ``vm.dirty_*`` against. kraftpy asks the kernel instead to
start writing each stretch of ``log.writeback.interval.bytes`` as soon as it has been appended, so the
dirty data stays small and the disk is written at the rate the log grows.

Theory of operation. `Log` calls `Writeback.appended` after each append to its active segment; once
a segment holds that many whole pages past the point it last asked for (``LogSegment.writeback_from``),
the range is queued (ranges of one segment merge) and the runner task, in the broker's nursery, hands
what is queued to a worker thread, one hop for all of it, which calls ``sync_file_range(fd, offset,
length, SYNC_FILE_RANGE_WRITE)`` on a duplicate of each segment's descriptor. That call only starts
the writes: nothing waits for them, no acknowledgement depends on them, and durability is what it was
(an fsync, by the flush policy or at a clean shutdown, still decides what is on disk). It does not
consume a write error either: the kernel reports one to the next fsync of the file, as before. The
event loop never makes the call (submitting a megabyte of writes can block for milliseconds).

A range ends on a page boundary: the page the log still appends into is never asked for. The kernel
locks each page it writes back while it maps the page to disk blocks, and an append into a locked
page waits, on the event loop, for every request. On ext4 that mapping allocates the blocks, and an
allocation that must read a block bitmap waits behind whatever the disk is doing (an fsync's cache
flush, a deleted file's discards). On a 3 + 3 cluster at 330,000 records/s the kernel's stacks of
the brokers' event loops showed them waiting there, in the append's write, during stalls of 100 ms
and more.

Segments whose descriptor the cache has closed (``log.open.segments.max``) are skipped: their data
was written long enough ago for the kernel's own write-back to take it. On systems without
``sync_file_range`` (not Linux) the setting does nothing and the kernel's write-back is all there is.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
import trio

from kraftpy.storage.descriptors import DESCRIPTORS

if TYPE_CHECKING:
    from kraftpy.storage.segment import LogSegment

#: sync_file_range's flag that starts the write-out of the range's dirty pages without waiting.
SYNC_FILE_RANGE_WRITE = 2
#: Clears the offset within a page: ranges asked for end on a page boundary.
_PAGE_MASK = ~(mmap.PAGESIZE - 1)

#: What sync_file_range answers on a file it cannot write back (a pipe, some FUSE or network file
#: systems): not an error of the disk.
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.ESPIPE, errno.EOPNOTSUPP})

#: ``start_write(fd, offset, length)``: start writing a file's range to disk; raises OSError.
StartWrite = Callable[[int, int, int], None]

_logger = structlog.get_logger(__name__)


def kernel_start_write() -> StartWrite | None:
    """``sync_file_range(..., SYNC_FILE_RANGE_WRITE)`` from the C library, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int

    def start_write(fd: int, offset: int, length: int) -> None:
        if function(fd, offset, length, SYNC_FILE_RANGE_WRITE) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return start_write


class Writeback:
    """The write-back of one broker's logs: `appended` queues ranges, `run` has them written."""

    def __init__(self, interval_bytes: int, start_write: StartWrite | None = None) -> None:
        #: log.writeback.interval.bytes (0: off).
        self.interval_bytes = interval_bytes
        self._start_write = start_write if start_write is not None else kernel_start_write()
        self._lock = threading.Lock()
        #: Ranges to write, by segment: (start, end) byte positions.
        self._pending: dict[LogSegment, tuple[int, int]] = {}
        self._wake = trio.Event()
        self._woken = False
        #: While the runner runs: its trio token and thread (a queued range wakes it from any thread).
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: int | None = None
        #: For the metrics: bytes asked to be written, and calls that failed (monotonic).
        self.requested_bytes = 0
        self.errors = 0
        self._told_unsupported = False

    @property
    def enabled(self) -> bool:
        """Whether ranges are written back: the setting is on and the system has the call."""
        return self.interval_bytes > 0 and self._start_write is not None

    def appended(self, segment: LogSegment) -> None:
        """``segment`` was appended to: queue what it holds past ``writeback_from`` once that is
        ``interval_bytes`` or more. Cheap when it is not (one comparison on the append path)."""
        start = segment.writeback_from
        # Whole pages only: the page the log still appends into stays out. Writing a page back locks it,
        # and the next append into it (a write on the event loop) would wait for that write to be under
        # way, which on a busy disk is a stall of every request the broker serves.
        end = segment.size & _PAGE_MASK
        token = self._token  # read once: the runner may stop meanwhile (an append on another thread)
        if end - start < self.interval_bytes or token is None:
            return
        segment.writeback_from = end
        with self._lock:
            queued = self._pending.get(segment)
            self._pending[segment] = (start, end) if queued is None else (min(queued[0], start), end)
            if self._woken:
                return
            self._woken = True
        if threading.get_ident() == self._thread:
            self._wake.set()
        else:
            try:
                token.run_sync_soon(self._wake.set)
            except trio.RunFinishedError:  # the broker stopped: nothing left to write back for
                pass

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Have the queued ranges written, until cancelled; returns at once if write-back is off."""
        if not self.enabled:
            task_status.started()
            return
        _logger.info("log data written back steadily", log_writeback_interval_bytes=self.interval_bytes)
        self._thread = threading.get_ident()
        self._token = trio.lowlevel.current_trio_token()
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                with self._lock:
                    batch, self._pending = self._pending, {}
                    self._woken = False
                await trio.to_thread.run_sync(self._write_out, batch)
        finally:
            self._token = None
            self._thread = None
            with self._lock:
                self._pending.clear()
                self._woken = False

    def _write_out(self, batch: dict[LogSegment, tuple[int, int]]) -> None:
        """In a worker thread: start the write of each range."""
        assert self._start_write is not None
        for segment, (start, end) in batch.items():
            try:
                # A duplicate can fail too (EMFILE: the process at its open-file limit).
                fd = DESCRIPTORS.duplicate_if_open(segment)
                if fd is None:
                    continue
                try:
                    self._start_write(fd, start, end - start)
                finally:
                    os.close(fd)
                self.requested_bytes += end - start
            except OSError as exc:
                # Advisory: the kernel's own write-back still takes the data; nothing is lost.
                if exc.errno in _UNSUPPORTED:
                    if not self._told_unsupported:
                        self._told_unsupported = True
                        _logger.info("the file system of a log does not take write-back requests; the kernel "
                                     "writes its data back on its own", path=str(segment.path), error=str(exc))
                    continue
                self.errors += 1
                _logger.debug("write-back of a log range not started", path=str(segment.path), error=str(exc))
