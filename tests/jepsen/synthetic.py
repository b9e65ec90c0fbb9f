"""Synthetic histories for the checker and report tests: a builder for hand-written histories and a
seeded generator of a realistic-looking run (with fault windows) for rendering reports."""

from __future__ import annotations

import random
from typing import Any

from tests.jepsen.history import (
    ASSIGN,
    COMMIT,
    COMMITTED,
    CONSUME,
    DRAIN,
    FINAL_READ,
    INVOKE,
    NEMESIS,
    NEMESIS_PROCESS,
    POLL,
    REVOKE,
    SEND,
    Op,
)


class Builder:
    """Appends ops with increasing indexes and times (1 ms apart unless `at` is given)."""

    def __init__(self, step_ns: int = 1_000_000) -> None:
        self.ops: list[Op] = []
        self.time = 0
        self.step_ns = step_ns

    def add(self, type_: str, f: str, process: int | str, at: int | None = None, **fields: Any) -> Op:
        if at is not None:
            self.time = at
        op = Op(index=len(self.ops), type=type_, f=f, process=process, time=self.time, **fields)
        self.ops.append(op)
        self.time += self.step_ns
        return op

    def invoke(self, f: str, process: int | str, **fields: Any) -> Op:
        return self.add(INVOKE, f, process, **fields)

    def send(self, process: int | str, value: Any, partition: int, result: str = "ok",
             offset: int | None = None, error: str | None = None) -> None:
        self.invoke(SEND, process, value=value, key=f"k{partition}", partition=partition)
        self.add(result, SEND, process, value=value, key=f"k{partition}", partition=partition,
                 offset=offset if result == "ok" else None, error=error)

    def poll(self, process: int | str, records: list[tuple[int, int, Any]], result: str = "ok",
             partition: int | None = None, error: str | None = None, member: str | None = None) -> None:
        self.invoke(POLL, process, partition=partition, member=member)
        self.add(result, POLL, process, partition=partition, member=member,
                 records=records if result == "ok" else None, error=error)

    def final_read(self, process: int | str, partition: int, records: list[tuple[int, int, Any]],
                   error: str | None = None) -> None:
        self.invoke(FINAL_READ, process, partition=partition)
        self.add("ok", FINAL_READ, process, partition=partition, records=records, error=error)

    def nemesis(self, phase: str, fault: dict[str, Any], at: int | None = None) -> None:
        self.add("info", NEMESIS, NEMESIS_PROCESS, at=at, fault={**fault, "phase": phase})

    # the group workload

    def assign(self, member: str, partitions: list[int], process: int | str = "events") -> None:
        self.add("info", ASSIGN, process, member=member, partitions=partitions)

    def revoke(self, member: str, partitions: list[int], process: int | str = "events",
               error: str | None = None) -> None:
        self.add("info", REVOKE, process, member=member, partitions=partitions, error=error)

    def consume(self, member: str, process: int | str, records: list[tuple[int, int, Any]],
                result: str = "ok", error: str | None = None) -> None:
        self.invoke(CONSUME, process, member=member)
        self.add(result, CONSUME, process, member=member, records=records if result == "ok" else None,
                 error=error)

    def commit(self, member: str, process: int | str, offsets: list[tuple[int, int]], result: str = "ok",
               error: str | None = None) -> None:
        self.invoke(COMMIT, process, member=member, offsets=offsets)
        self.add(result, COMMIT, process, member=member, offsets=offsets, error=error)

    def committed(self, process: int | str, offsets: list[tuple[int, int]], result: str = "ok") -> None:
        self.invoke(COMMITTED, process)
        self.add(result, COMMITTED, process, offsets=offsets if result == "ok" else None)

    def drain(self, process: int | str, offsets: list[tuple[int, int]], error: str | None = None) -> None:
        self.invoke(DRAIN, process)
        self.add("ok" if error is None else "info", DRAIN, process, offsets=offsets, error=error)


def synthetic_run(seed: int, *, seconds: int = 30, partitions: int = 3, fault_every_s: float = 8.0,
                  rate_per_s: int = 40) -> list[Op]:
    """A seeded, anomaly-free history of a queue workload over `seconds` seconds, with faults every
    `fault_every_s` seconds during which sends fail or time out and latencies grow."""
    rnd = random.Random(seed)
    events: list[tuple[int, dict[str, Any]]] = []  # (time_ns, op fields without index/time)
    windows: list[tuple[int, int]] = []
    t = fault_every_s * 1e9 * 0.5
    fault_id = 0
    while t < seconds * 1e9:
        length = fault_every_s * 1e9 * rnd.uniform(0.3, 0.6)
        windows.append((int(t), int(min(t + length, seconds * 1e9 - 1))))
        fault = {"id": fault_id, "kind": rnd.choice(["kill", "pause", "partition", "link"])}
        events.append((int(t), dict(type="info", f=NEMESIS, process=NEMESIS_PROCESS,
                                    fault={**fault, "phase": "start"})))
        events.append((windows[-1][1], dict(type="info", f=NEMESIS, process=NEMESIS_PROCESS,
                                            fault={**fault, "phase": "stop"})))
        fault_id += 1
        t += fault_every_s * 1e9 * rnd.uniform(0.8, 1.2)

    def faulty(at: int) -> bool:
        return any(a <= at <= b for a, b in windows)

    logs: list[list[Any]] = [[] for _ in range(partitions)]
    value = 0
    n_ops = seconds * rate_per_s
    for i in range(n_ops):
        start = int(i * 1e9 / rate_per_s + rnd.uniform(0, 1e9 / rate_per_s))
        process = i % 4
        p = rnd.randrange(partitions)
        bad = faulty(start)
        latency = int(rnd.lognormvariate(15.5 if bad else 14.5, 0.6))
        outcome = rnd.choices(["ok", "fail", "info"], [0.5, 0.25, 0.25] if bad else [0.98, 0.01, 0.01])[0]
        fields = dict(f=SEND, process=process, value=value, key=f"k{p}", partition=p)
        events.append((start, dict(type=INVOKE, **fields)))
        done = dict(type=outcome, **fields)
        if outcome == "ok":
            done["offset"] = len(logs[p])
            logs[p].append(value)
        elif outcome == "fail":
            done["error"] = "NOT_ENOUGH_REPLICAS"
        else:
            done["error"] = "_MSG_TIMED_OUT"
        # processes are sequential: keep each op inside its own slot
        events.append((min(start + latency, int((i + 4) * 1e9 / rate_per_s) - 1), done))
        value += 1
    history_end = seconds * 1_000_000_000
    process = 1000
    for p in range(partitions):
        events.append((history_end + p * 2, dict(type=INVOKE, f=FINAL_READ, process=process + p, partition=p)))
        events.append((history_end + p * 2 + 1, dict(type="ok", f=FINAL_READ, process=process + p, partition=p,
                                                     records=[(p, o, v) for o, v in enumerate(logs[p])])))
    events.sort(key=lambda e: e[0])
    return [Op(index=i, time=at, **fields) for i, (at, fields) in enumerate(events)]
