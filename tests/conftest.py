import os
import signal
import socket

import pytest
import structlog
import trio
from hypothesis import HealthCheck, settings
from trio.testing import MockClock

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


class RealSocketOnVirtualClock(Exception):
    """A test on trio's autojump clock opened a real socket (deliberately not an OSError, so that no
    connect-retry loop swallows it)."""


class _RefuseRealSockets(trio.abc.SocketFactory):
    def socket(self, family=socket.AF_INET, type=socket.SOCK_STREAM, proto=0):
        raise RealSocketOnVirtualClock(
            "autojump_clock with a real socket: the virtual clock jumps while a task waits on the kernel, "
            "so timeouts fire before the peer could answer. Use in-memory streams "
            "(trio.testing.memory_stream_pair) with this clock, or drop the clock and wait on events.")


@pytest.fixture
def autojump_clock():
    """pytest-trio's autojump clock, which refuses to open trio sockets during the test.

    The check covers every socket trio opens (`trio.socket.socket`, `open_tcp_stream`,
    `open_tcp_listeners`, `serve_tcp`), in the test and in its fixtures; it does not see sockets
    opened outside trio (a client library in a thread, a child process).
    """
    clock = MockClock(autojump_threshold=0)
    start_clock = clock.start_clock

    def start_clock_without_sockets():  # trio calls this first thing in the run
        start_clock()
        trio.socket.set_custom_socket_factory(_RefuseRealSockets())

    clock.start_clock = start_clock_without_sockets
    return clock


@pytest.fixture(autouse=True)
def _logging_as_found():
    """Each test leaves structlog's configuration as it found it. It is process-wide, and a command run
    in this process (typer's CliRunner) configures logging at its --log-level, info by default: a later
    test's `structlog.testing.capture_logs` would then miss every debug line, or not, depending on which
    tests its worker happened to run before it."""
    found = structlog.get_config()
    yield
    structlog.configure(**found)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files holding a test marked ``slow`` (real processes: tens of seconds each) first, in their
    order, then the others, each file's tests in their order. `make test` hands whole files to its
    workers in this order (``--dist loadfile --no-loadscope-reorder``): xdist's own order, files with the
    most tests first, left the one-test campaigns of a minute for last, one worker running them while the
    other had finished."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: each file's order is kept


def _signal_state() -> dict[str, int]:
    """The calling thread's ignored and blocked signals, as the kernel has them (Python's
    `signal.getsignal` does not see what C code set)."""
    try:
        status = open("/proc/thread-self/status").read().splitlines()
    except OSError:
        return {}
    return {line.split(":")[0]: int(line.split()[1], 16) for line in status if line.startswith(("SigIgn", "SigBlk"))}


_WATCHED = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


@pytest.fixture(autouse=True)
def _signals_as_found():
    """Each test leaves SIGINT and SIGTERM neither ignored nor blocked in the test process if they were
    not: a process the suite starts later inherits both (and a `pytest` it starts would not stop on
    Ctrl-C)."""
    before = _signal_state()
    yield
    after = _signal_state()
    changed = [f"{name} {kind} {'on' if after[kind] >> (signum - 1) & 1 else 'off'}"
               for kind in before for signum, name in _WATCHED.items()
               if (before[kind] ^ after.get(kind, before[kind])) >> (signum - 1) & 1]
    assert not changed, f"the test left the process's signals changed: {', '.join(changed)}"
