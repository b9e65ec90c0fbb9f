"""Process faults: kill, graceful stop, pause and resume of one node process.

The fault harness's nemeses (``tests/jepsen``) strike its nodes with these, and `kraftpy.testing`
strikes a test cluster's brokers with them. A process is anything shaped like `subprocess.Popen`
(`Process`): a pid, ``poll()``, ``send_signal()`` and ``wait(timeout)``. Each fault returns once it
has taken effect: a killed or stopped process has exited, a paused one is stopped (state ``T`` in
/proc), a resumed one runs again. A process that has already exited is left alone.

Waiting for a pause: ``waitpid(WUNTRACED)`` reports a child's stop as an event; for a process that
is not our child, /proc is read until the state matches (where there is no /proc, the signal is
taken as done).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Protocol


class Process(Protocol):
    pid: int

    def poll(self) -> int | None: ...

    def send_signal(self, signum: int) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def _alive(process: Process | None) -> bool:
    return process is not None and process.poll() is None


def kill(process: Process | None, *, timeout: float = 10.0) -> None:
    """SIGKILL (kill -9), and wait for the exit."""
    if not _alive(process):
        return
    assert process is not None
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=timeout)


def terminate(process: Process | None, *, timeout: float = 90.0, kill_timeout: float = 10.0) -> None:
    """SIGTERM, resuming a paused process first (a graceful stop: a broker's controlled shutdown, a
    controller's resignation), and wait for the exit; SIGKILL when it has not exited in ``timeout``."""
    if not _alive(process):
        return
    assert process is not None
    process.send_signal(signal.SIGCONT)
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(process, timeout=kill_timeout)


def pause(process: Process | None, *, timeout: float = 10.0) -> None:
    """SIGSTOP, and wait until the process is stopped."""
    if not _alive(process):
        return
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    wait_process_state(process.pid, stopped=True, timeout=timeout)


def resume(process: Process | None, *, timeout: float = 10.0) -> None:
    """SIGCONT, and wait until the process runs again."""
    if not _alive(process):
        return
    assert process is not None
    process.send_signal(signal.SIGCONT)
    wait_process_state(process.pid, stopped=False, timeout=timeout)


def resume_quietly(pid: int) -> None:
    """SIGCONT to ``pid`` if it still exists (healing everything at the end, without waiting)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def wait_process_state(pid: int, *, stopped: bool, timeout: float) -> None:
    """Waits until a process is stopped (or running again): waitpid reports the change of a child as
    an event; for a process that is not our child, /proc is read until the state matches."""
    flag = os.WUNTRACED if stopped else os.WCONTINUED
    try:
        wpid, status = os.waitpid(pid, flag)
        if wpid == pid and (os.WIFSTOPPED(status) if stopped else os.WIFCONTINUED(status)):
            return
    except ChildProcessError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = process_state(pid)
        if state is None or (state in "Tt") == stopped:
            return
        time.sleep(0.005)
    raise TimeoutError(f"process {pid} did not {'stop' if stopped else 'continue'} within {timeout}s")


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` in /proc (``R``, ``S``, ``T`` stopped, ``Z`` a zombie...), None when
    there is no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
