"""The process under test: ``kraftpy dev`` on 127.0.0.1 ephemeral ports, watched from trio.

`DevTarget` starts ``python -m kraftpy dev`` on its own directory, waits for the line it prints
when it serves, keeps the JSON log lines of level warning and above (counted by event, the last
ones kept), and reads the process's resident memory from ``/proc/<pid>/status``. A restart reuses
the directory, so acknowledged records stay checkable across a crash.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from tests.helpers.processes import free_ports

#: Log events worth a finding when the target writes them.
NOTABLE_EVENTS = {
    "fenced brokers whose sessions expired": "broker-fenced",
}


class TargetFailed(Exception):
    """The target did not start (or restart)."""


class DevTarget:
    def __init__(self, directory: Path, *, log_level: str = "warning", memory_limit_mib: int = 2048) -> None:
        self.directory = directory
        self.log_level = log_level
        #: The process's address-space limit: an input that makes it allocate without bound ends in a
        #: MemoryError inside it (a finding) instead of pressing the whole machine.
        self.memory_limit_mib = memory_limit_mib
        self.port, self.controller_port = free_ports(2)
        self.process: trio.Process | None = None
        self.starts = 0
        #: Every stderr line, the last ones only.
        self.tail: collections.deque[str] = collections.deque(maxlen=300)
        #: (level, event) -> count, for lines of level warning and above.
        self.events: collections.Counter[tuple[str, str]] = collections.Counter()
        #: The first few lines of each (level, event) of level error and above, and non-JSON lines.
        self.samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.raw_lines = 0
        self._ready = trio.Event()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    async def start(self, nursery: trio.Nursery, timeout: float = 60.0) -> None:
        """Start the process and return once it serves; raises TargetFailed if it exits or hangs."""
        self._ready = trio.Event()
        self.process = await trio.lowlevel.open_process(
            self.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=self._limit_memory)
        self.starts += 1
        nursery.start_soon(self._pump_stdout, self.process, self._ready)
        nursery.start_soon(self._pump_stderr, self.process)
        with trio.move_on_after(timeout) as scope:
            async with trio.open_nursery() as waiters:
                async def exited() -> None:
                    await self.process.wait()
                    waiters.cancel_scope.cancel()

                async def ready() -> None:
                    await self._ready.wait()
                    waiters.cancel_scope.cancel()

                waiters.start_soon(exited)
                waiters.start_soon(ready)
        if not self._ready.is_set():
            state = (f"did not serve within {timeout:.0f}s" if scope.cancelled_caught
                     else f"exited with status {self.process.returncode}")
            if self.alive:
                self.process.kill()
            raise TargetFailed(f"kraftpy dev {state}:\n" + "\n".join(list(self.tail)[-30:]))

    def command(self) -> list[str]:
        """The target's command line (a subclass adds its settings)."""
        return [sys.executable, "-m", "kraftpy", "dev", "--dir", str(self.directory), "--port", str(self.port),
                "--controller-port", str(self.controller_port), "--log-format", "json", "--log-level", self.log_level]

    def _limit_memory(self) -> None:  # runs in the child, before exec
        limit = self.memory_limit_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    async def _pump_stdout(self, process: trio.Process, ready: trio.Event) -> None:
        assert process.stdout is not None
        async for chunk in process.stdout:
            if b"kraftpy dev is running" in chunk:
                ready.set()

    async def _pump_stderr(self, process: trio.Process) -> None:
        assert process.stderr is not None
        buf = b""
        async for chunk in process.stderr:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                self._line(raw.decode(errors="replace"))
        if buf:
            self._line(buf.decode(errors="replace"))

    def _line(self, text: str) -> None:
        if not text.strip():
            return
        self.tail.append(text)
        try:
            line = json.loads(text)
            if not isinstance(line, dict):
                raise ValueError
        except ValueError:
            self.raw_lines += 1
            key = ("raw", "non-JSON output (a traceback?)")
            self.events[key] += 1
            self.samples.setdefault(key, [])
            if len(self.samples[key]) < 40:
                self.samples[key].append({"line": text[:300]})
            return
        level = str(line.get("level", "?"))
        event = str(line.get("event", "?"))
        key = (level, event)
        self.events[key] += 1
        if level in ("error", "critical", "exception") or event in NOTABLE_EVENTS:
            kept = self.samples.setdefault(key, [])
            if len(kept) < 5:
                kept.append({k: (v if isinstance(v, int | float | bool) or v is None
                                 else str(v)[-1500:] if k == "exception" else str(v)[:400])
                             for k, v in line.items()})

    def memory_kb(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak) of the process, in KiB; empty when it is gone."""
        if not self.alive:
            return {}
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "VmSize"):
                out[key] = int(value.split()[0])
        return out

    def open_files(self) -> int:
        """How many file descriptors the process holds (0 when it is gone)."""
        if not self.alive:
            return 0
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return 0

    def reset_peak(self) -> bool:
        """Start VmHWM again from the current RSS (``clear_refs`` 5); False where the kernel refuses."""
        if not self.alive:
            return False
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    async def stop(self, timeout: float = 30.0) -> int | None:
        """Ctrl-C, then wait; SIGKILL after ``timeout``. Returns the exit status."""
        if self.process is None:
            return None
        if self.alive:
            self.process.send_signal(signal.SIGINT)
            with trio.move_on_after(timeout):
                await self.process.wait()
            if self.alive:
                self.process.kill()
                await self.process.wait()
        return self.process.returncode
