"""The operation history: one record per event, written and read as JSON lines.

Every client operation is recorded twice, Jepsen style: once when it is invoked (`type="invoke"`) and
once when it completes, with the same `process` and `f`:

- `ok`: it happened (a send the broker acknowledged, a poll that returned records);
- `fail`: it certainly did not happen (a send the client never handed to a broker, or that a broker
  refused before appending);
- `info`: indeterminate (a timeout, a lost connection): a send that ended `info` may or may not be
  in the log.

A process runs one operation at a time; a process whose operation ended `info` is retired and its
worker continues under a new process number, so pairing invocations with completions by process is
unambiguous. The nemesis records its faults with `process="nemesis"`, `f="nemesis"`, type `info`
and a `fault` map whose `phase` is `start` or `stop`.

The group workload adds the operations of consumers in one consumer group:

- `consume`: one poll of a group member (`member` names it), with the records it returned;
- `commit`: a synchronous offset commit of what the member processed; `offsets` holds
  `[partition, offset]` pairs (on `ok`, the ones the coordinator acknowledged);
- `committed`: the group's committed offsets read back (OffsetFetch), `offsets` on `ok`;
- `drain`: the final phase in which the healed group consumes and commits to the end; `ok` with the
  committed `offsets` when every partition was committed up to its high watermark, `info` when time
  ran out first;
- `assign` and `revoke`: events (not paired, like the nemesis's, type `info`) of a member's
  assignment changing: `partitions` were added to or taken from it (`error` is `lost` for
  partitions lost without a revocation), `member_id` is the coordinator's id for it.

The queue workload's session consumers (kafka-python, which reads through KIP-227 fetch sessions:
an incremental fetch names only what changed) record their reads as `poll` (`member` is `session`),
and add:

- `session-drain`: after healing, each session consumer reads on until it holds every partition up to
  the high watermark the invocation names (`offsets`: `[partition, high watermark]`); `ok` with the
  positions reached, `info` (its `error` naming the partitions) when time ran out first.

The transaction workload (`tests.jepsen.txn`) adds:

- `txn`: one transaction of a transactional producer or of the consume-transform-produce process
  (`member` names the client, `txn_id` its `transactional.id`). `writes` holds
  `[topic, partition, offset, value]` (the offset is null until a delivery report named it), `reads`
  the records the transform consumed for it, `offsets` the `[partition, offset]` pairs it sent with
  `send_offsets_to_transaction`. `ok`: committed; `fail`: certainly not committed (never asked to
  commit, or aborted); `info`: unknown;
- `txn-poll`: one poll of a consumer (`isolation` is `read_committed` or `read_uncommitted`),
  `reads` in the order received;
- `txn-final-read`: after healing, one read_committed pass over a topic-partition up to its end.

Fields: `index` (position in the history), `type`, `f`, `process`, `time` (monotonic nanoseconds
since the start of the test), `value` (the value a send wrote), `key` and `partition` (where it was
sent, or the partition a consumer reads), `offset` (the offset the broker answered for a send),
`records` (for reads: `[partition, offset, value]` triples in the order the consumer received them),
`error` (a short text), `fault` (nemesis records only), `member`, `member_id`, `offsets` and
`partitions` (group operations).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import attrs

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
INFO = "info"
TYPES = (INVOKE, OK, FAIL, INFO)

SEND = "send"
POLL = "poll"
FINAL_READ = "final-read"
NEMESIS = "nemesis"
CONSUME = "consume"
COMMIT = "commit"
COMMITTED = "committed"
DRAIN = "drain"
ASSIGN = "assign"
REVOKE = "revoke"
TXN = "txn"
TXN_POLL = "txn-poll"
TXN_FINAL_READ = "txn-final-read"
#: the queue workload's session consumers reading on, once healed, up to every high watermark
SESSION_DRAIN = "session-drain"
FS = (SEND, POLL, FINAL_READ, NEMESIS, CONSUME, COMMIT, COMMITTED, DRAIN, ASSIGN, REVOKE, TXN, TXN_POLL,
      TXN_FINAL_READ, SESSION_DRAIN)
#: events recorded on their own, not as an invocation and a completion
EVENT_FS = (NEMESIS, ASSIGN, REVOKE)

NEMESIS_PROCESS = "nemesis"


def _check_type(_inst: Any, _attr: attrs.Attribute, value: str) -> None:
    if value not in TYPES:
        raise ValueError(f"op type must be one of {TYPES}, not {value!r}")


def _check_f(_inst: Any, _attr: attrs.Attribute, value: str) -> None:
    if value not in FS:
        raise ValueError(f"op f must be one of {FS}, not {value!r}")


def _records(value: Any) -> list[tuple[int, int, Any]] | None:
    if value is None:
        return None
    return [(int(p), int(o), v) for p, o, v in value]


def _offsets(value: Any) -> list[tuple[int, int]] | None:
    if value is None:
        return None
    return [(int(p), int(o)) for p, o in value]


def _topic_records(value: Any) -> list[tuple[str, int, int | None, Any]] | None:
    if value is None:
        return None
    return [(str(t), int(p), None if o is None else int(o), v) for t, p, o, v in value]


def _partitions(value: Any) -> list[int] | None:
    if value is None:
        return None
    return [int(p) for p in value]


@attrs.frozen
class Op:
    """One event of the history."""

    index: int
    type: str = attrs.field(validator=_check_type)
    f: str = attrs.field(validator=_check_f)
    process: int | str
    time: int
    value: Any = None
    key: str | None = None
    partition: int | None = None
    offset: int | None = None
    records: list[tuple[int, int, Any]] | None = attrs.field(default=None, converter=_records)
    error: str | None = None
    fault: dict[str, Any] | None = None
    member: str | None = None
    member_id: str | None = None
    offsets: list[tuple[int, int]] | None = attrs.field(default=None, converter=_offsets)
    partitions: list[int] | None = attrs.field(default=None, converter=_partitions)
    reads: list[tuple[str, int, int | None, Any]] | None = attrs.field(default=None, converter=_topic_records)
    writes: list[tuple[str, int, int | None, Any]] | None = attrs.field(default=None, converter=_topic_records)
    isolation: str | None = None
    txn_id: str | None = None
    #: The producer instance that sent it (the queue workload's pipelined producers name theirs): its
    #: acknowledged sends to one partition must hold offsets in the order they were sent.
    producer: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The op as a JSON object, leaving out the fields that are None."""
        out: dict[str, Any] = {}
        for field in attrs.fields(Op):
            v = getattr(self, field.name)
            if v is None:
                continue
            if field.name in ("records", "offsets", "reads", "writes"):
                v = [list(r) for r in v]
            out[field.name] = v
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Op:
        names = {f.name for f in attrs.fields(Op)}
        unknown = set(obj) - names
        if unknown:
            raise ValueError(f"unknown op fields {sorted(unknown)} in {obj!r}")
        return cls(**obj)


def dumps(op: Op) -> str:
    return json.dumps(op.to_json(), separators=(",", ":"), sort_keys=True)


def loads(line: str) -> Op:
    return Op.from_json(json.loads(line))


def write_history(path: str | Path, ops: Iterable[Op]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for op in ops:
            fh.write(dumps(op) + "\n")


def iter_history(path: str | Path) -> Iterator[Op]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield loads(line)
            except (ValueError, TypeError) as e:
                raise ValueError(f"{path}:{lineno}: bad history line: {e}") from e


def read_history(path: str | Path) -> list[Op]:
    return list(iter_history(path))


class Recorder:
    """Thread-safe history recorder: numbers the ops, stamps their time, keeps them in memory and
    appends each one as a JSON line to `sink` (flushed per line, so a crashed run keeps its history).

    Workers call `invoke(...)` and then exactly one of `ok/fail/info(...)` for the same process.
    Operations observed by another process (a group member's own clock readings, sent through a
    pipe) pass `at`, a reading of the same clock, instead of taking the time of recording.
    """

    def __init__(self, sink: TextIO | None = None, *, clock: Any = time.monotonic_ns) -> None:
        self._lock = threading.Lock()
        self._sink = sink
        self._clock = clock
        self._start = clock()
        self._ops: list[Op] = []
        self._open: dict[int | str, Op] = {}

    def now(self) -> int:
        """Nanoseconds since the recorder was created."""
        return self._clock() - self._start

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def _append(self, at: int | None = None, **fields: Any) -> Op:
        with self._lock:
            when = self.now() if at is None else at - self._start
            op = Op(index=len(self._ops), time=when, **fields)
            if op.type == INVOKE:
                if op.process in self._open:
                    raise RuntimeError(f"process {op.process!r} already has an operation in flight")
                self._open[op.process] = op
            elif op.f not in EVENT_FS:
                inv = self._open.pop(op.process, None)
                if inv is None or inv.f != op.f:
                    raise RuntimeError(f"completion {op.type} {op.f} of process {op.process!r} "
                                       f"matches no invocation")
            self._ops.append(op)
            if self._sink is not None:
                self._sink.write(dumps(op) + "\n")
                self._sink.flush()
            return op

    def invoke(self, f: str, process: int | str, **fields: Any) -> Op:
        return self._append(type=INVOKE, f=f, process=process, **fields)

    def complete(self, type_: str, f: str, process: int | str, **fields: Any) -> Op:
        if type_ not in (OK, FAIL, INFO):
            raise ValueError(f"completion type must be ok, fail or info, not {type_!r}")
        return self._append(type=type_, f=f, process=process, **fields)

    def ok(self, f: str, process: int | str, **fields: Any) -> Op:
        return self.complete(OK, f, process, **fields)

    def fail(self, f: str, process: int | str, **fields: Any) -> Op:
        return self.complete(FAIL, f, process, **fields)

    def info(self, f: str, process: int | str, **fields: Any) -> Op:
        return self.complete(INFO, f, process, **fields)

    def event(self, f: str, process: int | str, **fields: Any) -> Op:
        """Record an event that is not an operation (an assignment change)."""
        if f not in EVENT_FS:
            raise ValueError(f"{f!r} is an operation, not an event")
        return self._append(type=INFO, f=f, process=process, **fields)

    def nemesis(self, phase: str, fault: dict[str, Any]) -> Op:
        """Record the start or the stop of a fault (`phase` is `start` or `stop`)."""
        if phase not in ("start", "stop"):
            raise ValueError(f"nemesis phase must be start or stop, not {phase!r}")
        return self._append(type=INFO, f=NEMESIS, process=NEMESIS_PROCESS, fault={**fault, "phase": phase})

    def in_flight(self) -> list[Op]:
        with self._lock:
            return list(self._open.values())
