"""Close the logs a test opened and left open, once it is done.

Tests of the storage and raft logs open logs and, on their way, often leave them open (a test that
stops at a crash, or simply ends). Their segment descriptors would stay in the process's descriptor
cache until it evicted them, so that a test worker came to hold more than a thousand descriptors.
`close_leftover_logs` is a fixture body: it records every `Log` and `FileRaftLog` the test opens and
abandons (closes without flushing, as a crash would) those still open when the test ends. Logs opened by
fixtures of a wider scope are set up before it starts recording, and are left alone.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator

import pytest

from kraftpy.raft.file_log import FileRaftLog
from kraftpy.storage.log import Log


def close_leftover_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    opened: list[weakref.ref] = []
    for cls in (Log, FileRaftLog):
        original = cls.__dict__["open"].__func__

        def recording(klass, *args, _original=original, **kwargs):
            log = _original(klass, *args, **kwargs)
            opened.append(weakref.ref(log))
            return log

        monkeypatch.setattr(cls, "open", classmethod(recording))
    yield
    for ref in reversed(opened):
        log = ref()
        if log is None:
            continue
        closed = log.storage.closed if isinstance(log, FileRaftLog) else log.closed
        if not closed:
            with contextlib.suppress(Exception):
                log.abandon()
