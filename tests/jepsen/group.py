"""The group workload's consumers: member processes in one consumer group, replaced now and then,
a reader of the group's committed offsets, and the final drain.

- `--consumers` slots each run one member process at a time (`tests.jepsen.member`: confluent-kafka,
  subscribe(), synchronous commits of what it processed). Every ~`churn_interval` seconds (seeded)
  one slot's member is stopped, cleanly (SIGTERM: it commits, leaves the group and exits) or by
  SIGKILL (a crash: the coordinator only notices when its session times out), and a new member
  takes the slot; with static membership the slot's `group.instance.id` carries over. A member that
  exits on its own is a harness error, and its slot gets a new member.
- Each member's lines become history records with the member's own clock readings; its process
  numbers are mapped to the history's.
- A reader outside the group reads the group's committed offsets (OffsetFetch through
  `Consumer.committed`) about once a second, recorded as `committed` operations.
- `drain` (after the nemesis is healed and the producers have stopped) lets the members consume and
  commit until the committed offset of every partition reaches its high watermark; `stop` then
  closes them.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from tests.jepsen.history import COMMITTED, DRAIN, EVENT_FS, INVOKE, Recorder

ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition_for(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition whose leader coordinates `group`, as Kafka maps it
    (`Utils.abs(groupId.hashCode) % partitions`, where Utils.abs(Integer.MIN_VALUE) is 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@attrs.define
class MemberProcess:
    name: str
    slot: int
    popen: subprocess.Popen
    processes: dict[int, int] = attrs.Factory(dict)
    ended_by: str | None = None  # why the harness stopped it: "term", "kill"
    reader: threading.Thread | None = None


class GroupWorkload:
    def __init__(self, *, bootstrap: str, recorder: Recorder, topic: str, group: str, partitions: int, seed: int,
                 members: int, assignor: str, churn_interval: float, static: bool, session_timeout_ms: int,
                 op_timeout: float, out: Path, next_process: Callable[[], int], client_config: Callable[..., dict],
                 log: Callable[[str], Any], python: str = sys.executable,
                 client_properties: Path | None = None) -> None:
        self.bootstrap = bootstrap
        self.client_properties = client_properties
        self.recorder = recorder
        self.topic = topic
        self.group = group
        self.partitions = partitions
        self.seed = seed
        self.slots = members
        self.assignor = assignor
        self.churn_interval = churn_interval
        self.static = static
        self.session_timeout_ms = session_timeout_ms
        self.op_timeout = op_timeout
        self.out = out
        self.next_process = next_process
        self.client_config = client_config
        self.log = log
        self.python = python
        self.errors: list[str] = []
        self.current: dict[int, MemberProcess] = {}
        self.all: list[MemberProcess] = []
        self.stopping = False
        self.replacements = {"term": 0, "kill": 0}
        self._names = 0
        self._lock = threading.Lock()
        self._stop_churn = threading.Event()
        self._stop_reader = threading.Event()
        self._threads: list[threading.Thread] = []
        self._reader_process = next_process()
        self._reader = None
        (out / "logs").mkdir(parents=True, exist_ok=True)

    # members

    def member_command(self, name: str, slot: int) -> list[str]:
        cmd = [self.python, "-m", "tests.jepsen.member", "--bootstrap", self.bootstrap, "--topic", self.topic,
               "--group", self.group, "--member", name, "--assignor", self.assignor,
               "--session-timeout-ms", str(self.session_timeout_ms)]
        if self.static:
            cmd += ["--instance-id", f"{self.group}-slot-{slot}"]
        if self.client_properties is not None:
            cmd += ["--client-config", str(self.client_properties)]
        return cmd

    def spawn(self, slot: int) -> MemberProcess:
        with self._lock:
            self._names += 1
            name = f"m{self._names}"
        logfile = open(self.out / "logs" / "members.log", "ab")  # noqa: SIM115 - closed below
        try:
            popen = subprocess.Popen(self.member_command(name, slot), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=logfile, cwd=Path(__file__).resolve().parents[2],
                                     start_new_session=True)
        finally:
            logfile.close()
        member = MemberProcess(name=name, slot=slot, popen=popen)
        member.reader = threading.Thread(target=self._pump, args=(member,), name=f"member-{name}", daemon=True)
        with self._lock:
            self.current[slot] = member
            self.all.append(member)
        member.reader.start()
        return member

    def _pump(self, member: MemberProcess) -> None:
        assert member.popen.stdout is not None
        for raw in member.popen.stdout:
            try:
                self._record(member, json.loads(raw))
            except Exception as e:
                self.errors.append(f"{member.name}: bad line {raw[:200]!r}: {e!r}")
        code = member.popen.wait()
        if member.ended_by is None and not self.stopping:
            self.errors.append(f"member {member.name} exited on its own (exit {code}); see logs/members.log")
            self.log(self.errors[-1])
            with self._lock:
                replace = self.current.get(member.slot) is member
            if replace:
                self.spawn(member.slot)

    def _record(self, member: MemberProcess, line: dict[str, Any]) -> None:
        type_, f, local, at = line.pop("type"), line.pop("f"), line.pop("proc"), line.pop("at")
        if local not in member.processes:
            member.processes[local] = self.next_process()
        process = member.processes[local]
        if f in EVENT_FS:
            self.recorder.event(f, process, at=at, member=member.name, **line)
        elif type_ == INVOKE:
            self.recorder.invoke(f, process, at=at, member=member.name, **line)
        else:
            self.recorder.complete(type_, f, process, at=at, member=member.name, **line)

    def end(self, member: MemberProcess, how: str, timeout: float = 30.0) -> None:
        """Stops a member: `term` (it commits and leaves) or `kill` (SIGKILL)."""
        member.ended_by = how
        p = member.popen
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.log(f"member {member.name} did not stop within {timeout:.0f}s of SIGTERM; killed")
                p.kill()
                p.wait()
        if member.reader is not None:
            member.reader.join(timeout=10)

    def _churn(self) -> None:
        rnd = random.Random(f"kraftpy-jepsen-group-{self.seed}")
        while not self._stop_churn.wait(self.churn_interval * rnd.uniform(0.6, 1.4)):
            slot = rnd.randrange(self.slots)
            how = rnd.choice(["term", "term", "kill"])
            with self._lock:
                member = self.current.get(slot)
            if member is None:
                continue
            self.end(member, how)
            self.replacements[how] += 1
            new = self.spawn(slot)
            self.log(f"group member {member.name} {'stopped' if how == 'term' else 'killed'}; {new.name} joins")

    # the committed offsets

    def _reader_consumer(self) -> Any:
        from confluent_kafka import Consumer

        if self._reader is None:
            self._reader = Consumer(self.client_config(**{
                "group.id": self.group, "enable.auto.commit": False, "socket.timeout.ms": 5000,
                "reconnect.backoff.max.ms": 1000}))
        return self._reader

    def read_committed(self) -> dict[int, int] | None:
        """One `committed` operation: the group's committed offsets (partitions without one left
        out), or None when the read failed."""
        from confluent_kafka import TopicPartition

        process = self._reader_process
        self.recorder.invoke(COMMITTED, process)
        try:
            result = self._reader_consumer().committed(
                [TopicPartition(self.topic, p) for p in range(self.partitions)], timeout=self.op_timeout)
        except Exception as e:
            self.recorder.info(COMMITTED, process, error=f"committed: {e}")
            self._reader_process = self.next_process()
            return None
        errors = sorted({tp.error.name() for tp in result if tp.error is not None})
        if errors:
            self.recorder.info(COMMITTED, process, error=",".join(errors))
            self._reader_process = self.next_process()
            return None
        offsets = {tp.partition: tp.offset for tp in result if tp.offset >= 0}
        self.recorder.ok(COMMITTED, process, offsets=sorted(offsets.items()))
        return offsets

    def _read_loop(self) -> None:
        while not self._stop_reader.wait(1.0):
            self.read_committed()

    def high_watermarks(self, timeout: float) -> dict[int, int] | None:
        from confluent_kafka import TopicPartition

        deadline = time.monotonic() + timeout
        high: dict[int, int] = {}
        while len(high) < self.partitions and time.monotonic() < deadline:
            for p in range(self.partitions):
                if p not in high:
                    with contextlib.suppress(Exception):
                        high[p] = self._reader_consumer().get_watermark_offsets(
                            TopicPartition(self.topic, p), timeout=3)[1]
        return high if len(high) == self.partitions else None

    # the run

    def start(self) -> None:
        for slot in range(self.slots):
            self.spawn(slot)
        for target, name in ((self._churn, "group-churn"), (self._read_loop, "group-committed")):
            t = threading.Thread(target=self._guard, args=(target,), name=name, daemon=True)
            self._threads.append(t)
            t.start()

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:
            self.errors.append(f"{threading.current_thread().name}: {e!r}")
            self.log(f"group worker failed: {e!r}")

    def stop_churn(self) -> None:
        self._stop_churn.set()
        for t in self._threads:
            if t.name == "group-churn":
                t.join(timeout=60)

    def drain(self, timeout: float) -> bool:
        """Waits until the group has committed every partition up to its high watermark; records a
        `drain` operation (`ok` with the committed offsets, or `info` when time ran out)."""
        self._stop_reader.set()
        for t in self._threads:
            if t.name == "group-committed":
                t.join(timeout=self.op_timeout + 10)
        process = self.next_process()
        self.recorder.invoke(DRAIN, process)
        deadline = time.monotonic() + timeout
        high = self.high_watermarks(timeout)
        if high is None:
            self.recorder.info(DRAIN, process, error="no high watermark")
            return False
        committed: dict[int, int] | None = None
        while time.monotonic() < deadline:
            committed = self.read_committed()
            if committed is not None and all(committed.get(p, 0) >= h for p, h in high.items()):
                self.recorder.ok(DRAIN, process, offsets=sorted(committed.items()))
                self.log(f"group drained: committed {committed} (high watermarks {high})")
                return True
            time.sleep(1.0)  # the members are consuming: look again
        self.recorder.info(DRAIN, process, offsets=sorted((committed or {}).items()),
                           error=f"incomplete: committed {committed}, high watermarks {high}")
        self.log(f"group drain incomplete: committed {committed}, high watermarks {high}")
        return False

    def stop(self) -> None:
        """Closes every member (SIGTERM: each commits and leaves), then reads the committed offsets
        once more."""
        self.stop_churn()
        self.stopping = True
        self._stop_reader.set()
        with self._lock:
            members = list(self.current.values())
        threads = [threading.Thread(target=self.end, args=(m, "term")) for m in members]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for t in self._threads:
            t.join(timeout=self.op_timeout + 10)
        self.read_committed()
        if self._reader is not None:
            self._reader.close()

    def kill_all(self) -> None:
        """Whatever is still running (a harness failure): killed."""
        self.stopping = True
        for m in self.all:
            if m.popen.poll() is None:
                m.ended_by = m.ended_by or "kill"
                m.popen.kill()
                m.popen.wait()
