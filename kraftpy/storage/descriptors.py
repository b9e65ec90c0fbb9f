"""The bounded set of open log segment files, shared by every log of the process.

A broker of 100,000 partitions has at least 100,000 segments; a descriptor for each would need an
open-file limit few machines give by default. Segments therefore open their ``.log`` file when they
need it and keep the descriptor in :data:`DESCRIPTORS`, which closes the least recently used ones
once more than ``capacity`` are open (``log.open.segments.max``); a segment whose descriptor was
closed opens its file again, by its current name, the next time it reads or writes.

Theory of operation. A descriptor is only used while its segment is *pinned*: every
:class:`~kraftpy.storage.segment.LogSegment` method that touches the file pins the segment for the
duration of the call (pins nest), so a worker thread reading or appending never sees its descriptor
closed under it. Opening never closes another descriptor: :meth:`DescriptorCache.trim` does, and it
runs only on the event loop's thread, between tasks (the broker calls it after each batch of logs it
opened, and on a timer as :meth:`DescriptorCache.evict`, which takes the descriptors from their
segments on the event loop and leaves their ``close`` to a worker thread: a thousand closes a second
on the loop's thread each let go of the interpreter lock and waited to take it back from whatever
thread held it). That keeps the one unpinned use of a descriptor safe: a read on the event loop
hands back a :class:`~kraftpy.protocol.types.FileRegion` borrowing the segment's descriptor, and
the handler detaches (duplicates) it before its next ``await``, before any trim can run. Work that
uses a descriptor from a worker thread pins it (:meth:`LogSegment.pread`, ``Log.read_bytes``).

Invariants, under the lock: a segment is in ``_open`` exactly when its descriptor is >= 0; a pinned
segment is never closed by :meth:`trim`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Protocol


class _Holder(Protocol):
    _fd: int
    _pins: int

    def _reopen(self) -> int: ...


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft open-file limit to the hard one (as the JVM does on start); returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft, hard


def default_capacity(open_file_limit: int) -> int:
    """Half of the open-file limit for segments (the rest for connections, indexes being written,
    checkpoints and the metadata log), and at least 64."""
    if open_file_limit == resource.RLIM_INFINITY or open_file_limit <= 0:
        return 1 << 20
    return max(64, open_file_limit // 2)


def configure_descriptors(maximum: int) -> tuple[int, int]:
    """Set :data:`DESCRIPTORS`' capacity from log.open.segments.max (0: `default_capacity` of the
    open-file limit, raised first); returns (capacity, open-file limit)."""
    soft, _ = raise_open_file_limit()
    DESCRIPTORS.capacity = maximum or default_capacity(soft)
    return DESCRIPTORS.capacity, soft


class DescriptorCache:
    """Open segment descriptors, least recently used first; see the module doc."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[_Holder, None] = OrderedDict()
        #: Descriptors closed to stay within capacity, and files opened again: for the metrics.
        self.evictions = 0
        self.reopens = 0

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, holder: _Holder) -> None:
        """``holder`` has just opened its descriptor itself (a new or newly opened segment)."""
        with self._lock:
            self._open[holder] = None

    def pin(self, holder: _Holder) -> int:
        """Pin ``holder`` and return its descriptor, opening its file again if it was closed."""
        with self._lock:
            holder._pins += 1
            if holder._fd >= 0:
                self._open.move_to_end(holder)
                return holder._fd
            try:
                holder._fd = holder._reopen()
            except BaseException:
                holder._pins -= 1
                raise
            self._open[holder] = None
            self.reopens += 1
            return holder._fd

    def unpin(self, holder: _Holder) -> None:
        with self._lock:
            holder._pins -= 1

    @contextlib.contextmanager
    def pinned(self, holder: _Holder) -> Iterator[int]:
        """``holder``'s descriptor, pinned for the block."""
        fd = self.pin(holder)
        try:
            yield fd
        finally:
            self.unpin(holder)

    def duplicate_if_open(self, holder: _Holder) -> int | None:
        """A duplicate of ``holder``'s descriptor, the caller's to close, or None if it is not open
        (nothing is opened for it). The duplicate stays valid whatever happens to the segment meanwhile."""
        with self._lock:
            return os.dup(holder._fd) if holder._fd >= 0 else None

    def release(self, holder: _Holder) -> None:
        """Close ``holder``'s descriptor now if more than the capacity are open: for a segment no
        other thread can reach yet (a log being opened), so nothing may hold its descriptor."""
        with self._lock:
            if len(self._open) > self.capacity and not holder._pins and holder._fd >= 0:
                del self._open[holder]
                fd, holder._fd = holder._fd, -1
                os.close(fd)
                self.evictions += 1

    def closed(self, holder: _Holder) -> None:
        """``holder`` closes its descriptor for good (the segment is closed or deleted)."""
        with self._lock:
            self._open.pop(holder, None)
            if holder._fd >= 0:
                fd, holder._fd = holder._fd, -1
                os.close(fd)

    def trim(self, keep: int | None = None) -> int:
        """Close unpinned descriptors, least recently used first, until at most ``keep`` (default the
        capacity) are open. Only on the event loop's thread (see the module doc). Returns how many closed."""
        detached = self.evict(keep)
        close_descriptors(detached)
        return len(detached)

    def evict(self, keep: int | None = None) -> list[int]:
        """:meth:`trim`, except that the descriptors taken from their segments are returned, still
        open, for the caller to close (`close_descriptors`, from any thread): no segment uses them
        any more, and one that needs its file again opens it anew."""
        limit = self.capacity if keep is None else keep
        detached: list[int] = []
        with self._lock:
            if len(self._open) <= limit:
                return detached
            for holder in list(self._open):
                if len(self._open) <= limit:
                    break
                if holder._pins:
                    continue
                del self._open[holder]
                detached.append(holder._fd)
                holder._fd = -1
            self.evictions += len(detached)
        return detached


def close_descriptors(fds: list[int]) -> None:
    """Close descriptors `DescriptorCache.evict` detached."""
    for fd in fds:
        os.close(fd)


#: The process's cache: descriptors are a per-process resource, whatever number of logs share them.
DESCRIPTORS = DescriptorCache(default_capacity(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
