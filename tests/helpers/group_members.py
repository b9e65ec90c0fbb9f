"""Group consumers in their own processes (tests.helpers.group_consumer), watched from a test.

`Member` starts one consumer process and collects the JSON lines it prints; `Member.wait_until`
blocks on a condition variable until a check on what it printed holds (an event, never a clock).
Waits are blocking: a trio test whose brokers run in its own event loop calls them through
``trio.to_thread.run_sync``.

    with Member("confluent", bootstrap, "events", "readers") as a:
        a.wait_until(lambda m: m.partitions)
        a.kill()                       # kill -9: the group sees it only at the session timeout
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

#: Every line any member prints gets the next number (``seq``), so lines of several members can be put
#: in the order they arrived.
_SEQUENCE = itertools.count()


class Member:
    def __init__(self, client: str, bootstrap: str, topic: str, group: str, *, instance_id: str = "",
                 assignor: str = "", session_timeout_ms: int = 6000, name: str = "",
                 cond: threading.Condition | None = None) -> None:
        self.client = client
        self.name = name or f"{client}-{id(self):x}"
        self.argv = [sys.executable, "-m", "tests.helpers.group_consumer", "--client", client, "--bootstrap",
                     bootstrap, "--topic", topic, "--group", group, "--session-timeout-ms", str(session_timeout_ms)]
        if instance_id:
            self.argv += ["--instance-id", instance_id]
        if assignor:
            self.argv += ["--assignor", assignor]
        #: Shared by the members of one test: notified on every line of any of them.
        self.cond = cond or threading.Condition()
        self.lines: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.process: subprocess.Popen[bytes] | None = None
        #: Set when the test itself ends the process (a wait does not fail on its exit then).
        self.ended_by_test = False
        self._readers: list[threading.Thread] = []

    # -- the process ------------------------------------------------------------------------------

    def start(self) -> Member:
        self.ended_by_test = False
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=env, cwd=root, start_new_session=True)
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True, name=f"{self.name}-out"),
                         threading.Thread(target=self._read_stderr, daemon=True, name=f"{self.name}-err")]
        for reader in self._readers:
            reader.start()
        return self

    def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                line = {"event": "output", "text": raw.decode(errors="replace")}
            with self.cond:
                line["seq"] = next(_SEQUENCE)
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for raw in self.process.stderr:
            with self.cond:
                self.stderr.append(raw.decode(errors="replace").rstrip())

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """kill -9: no LeaveGroup, no commit, nothing."""
        self.ended_by_test = True
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM: the consumer closes as an application would; waits for the process to exit."""
        assert self.process is not None
        self.ended_by_test = True
        if self.running:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(30)
        for reader in self._readers:
            reader.join(10)
        return code

    def __enter__(self) -> Member:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.running:
            self.kill()

    # -- what it printed --------------------------------------------------------------------------

    def events(self, event: str) -> list[dict[str, Any]]:
        with self.cond:
            return [line for line in self.lines if line.get("event") == event]

    @property
    def partitions(self) -> frozenset[int]:
        """The partitions it holds now (after the last rebalance callback it printed)."""
        with self.cond:
            for line in reversed(self.lines):
                if line.get("event") in ("assigned", "revoked"):
                    return frozenset(line["partitions"])
        return frozenset()

    @property
    def rebalances(self) -> int:
        """How many rebalance callbacks it printed."""
        with self.cond:
            return sum(1 for line in self.lines if line.get("event") in ("assigned", "revoked"))

    def records(self) -> list[tuple[int, int, str]]:
        """Every record it printed, in order, as (partition, offset, value)."""
        with self.cond:
            return [tuple(r) for line in self.lines if line.get("event") == "records" for r in line["records"]]

    def records_not_held(self) -> list[tuple[int, int, str]]:
        """Records it printed from a partition it did not hold at the time, by the rebalance callbacks
        it printed before them (a member that lost its partitions to a rebalance after reading them
        read them rightly; one that reads a partition nobody gave it does not)."""
        held: frozenset[int] = frozenset()
        out = []
        with self.cond:
            for line in self.lines:
                event = line.get("event")
                if event in ("assigned", "revoked"):
                    held = frozenset(line["partitions"])
                elif event == "records":
                    out.extend(tuple(r) for r in line["records"] if r[0] not in held)
        return out

    def committed(self) -> dict[int, int]:
        """The next offset it last committed, by partition."""
        out: dict[int, int] = {}
        for line in self.events("committed"):
            for p, o in line["offsets"].items():
                out[int(p)] = o
        return out

    def tail(self, n: int = 25) -> str:
        with self.cond:
            return "\n".join([*map(json.dumps, self.lines[-n:]), *self.stderr[-n:]])

    def wait_until(self, check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        return wait_until([self], check, what, timeout)


def wait_until(members: Iterable[Member], check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Block until ``check()`` is truthy, re-checking on every line any of ``members`` prints."""
    members = list(members)
    cond = members[0].cond
    assert all(m.cond is cond for m in members), "members waited on together share one condition"
    deadline = time.monotonic() + timeout
    with cond:
        while True:
            found = check()
            if found:
                return found
            for m in members:
                if m.process is not None and m.process.poll() is not None and not m.ended_by_test:
                    raise AssertionError(f"{m.name} exited ({m.process.returncode}) waiting for {what}:\n{m.tail()}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout}s:\n" + "\n---\n".join(
                    f"{m.name}:\n{m.tail()}" for m in members))
            cond.wait(left)


def stable_assignment(members: list[Member], partitions: int) -> bool:
    """Every member holds some partitions, none holds one another holds, and together they hold all."""
    held = [m.partitions for m in members]
    return all(held) and sum(map(len, held)) == partitions and set().union(*held) == set(range(partitions))


def balanced_assignment(members: list[Member], partitions: int) -> bool:
    """A stable assignment whose members' shares differ by at most one partition: where an incremental
    (cooperative) rebalance ends. It may pass through stable but unbalanced assignments on its way (a
    leader that revoked from one member in one generation and from another in the next)."""
    sizes = [len(m.partitions) for m in members]
    return stable_assignment(members, partitions) and max(sizes) - min(sizes) <= 1


def values_read_above_commits(members: Iterable[Member]) -> set[str]:
    """Every value the members read, in the order they printed it (their ``seq``), checking that none was
    read at an offset below what the group had committed for its partition by then (a redelivery past a
    commit: what a coordinator failover must never cause)."""
    lines = sorted((line for m in members for line in m.lines), key=lambda line: line["seq"])
    high: dict[int, int] = {}
    seen: set[str] = set()
    for line in lines:
        if line["event"] == "committed":
            for p, o in line["offsets"].items():
                high[int(p)] = max(high.get(int(p), 0), o)
        elif line["event"] == "records":
            for p, o, value in line["records"]:
                assert o >= high.get(p, 0), f"{value} at {p}:{o} redelivered below the commit {high.get(p)}"
                seen.add(value)
    return seen
