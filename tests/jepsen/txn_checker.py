"""The transaction checks: what transactional producers, read_committed consumers and a
consume-transform-produce process must never see. A pure function from a history to a results map.

The history (`tests.jepsen.history`): `txn` operations (one transaction each: `writes` as
`[topic, partition, offset, value]`, `reads` for the transform, `offsets` it sent), `txn-poll`
operations of assign() consumers (`isolation` read_committed or read_uncommitted) and
`txn-final-read` passes (read_committed, after healing). Every value is written by one transaction,
except the transform's derived values, which are a function of the source record (`c:` + its value):
a derived value written again is the transform processing a source record twice.

A transaction that ended `ok` committed; `fail` certainly did not (it was never asked to commit, or
its abort was acknowledged); `info` or no completion: unknown (a commit may have gone through).
*Readers* are every read_committed read: the consumers' polls, the final reads and the transform's
own reads. What is judged:

- **aborted_reads**: a read_committed read of a record of a transaction that did not commit: the
  read found the value at the offset a `fail` transaction's delivery report named, or the value was
  only ever written by `fail` transactions (Adya's G1a);
- **lost_committed_writes**: a committed record (of an `ok` transaction, at the offset its delivery
  report named) that a reader *went past*: one read session (a consumer process reading one
  topic-partition, from one assignment or seek to the next) read an offset below it and then one
  above it without returning it (`skipped`), or no reader ever returned it although some reader
  read beyond it or a completed final read covered its partition (`never-read`). Committed records
  no reader went past are `details.unseen` (the verdict is then `unknown`);
- **duplicated_committed_writes**: one committed value at two offsets (delivery reports and
  read_committed reads), or written by two committed transactions (the transform processed one
  source record twice: exactly-once broken);
- **g0** and **g1c**: dependency cycles between transactions. Kafka appends a transaction's records
  when they are sent, not when it commits, so two concurrent transactions may interleave in
  opposite orders in two partitions: a plain write-write cycle between concurrent transactions is
  allowed (Jepsen lists G0 as allowed for Kafka), and counted as `details.ww_interleavings`. What
  Kafka does promise is checked as cycles in a graph of moments: a transaction's invocation, each
  of its committed records' appends, its commit and its completion; edges: invocation <= append <=
  commit <= completion, consecutive committed records of a partition (ww: append < append), a read
  of a committed record (wr: commit < the reader's read <= the reader's completion, and the reader
  commits after it read; a consumer prefetches, so a read is not bounded below by its poll), and real time (a completion before an invocation). Every edge is an
  inequality between real moments, so any cycle is impossible: one with a wr edge is reported as
  `g1c`, one of ww and real-time edges only as `g0` (a record appended after a record of a
  transaction that was complete before it began);
- **nonmonotonic_polls**: within one read session, an offset not above the one before;
- **transform_lost**: a committed source record below the offset the transform committed with a
  committed transaction (`send_offsets_to_transaction`), whose derived record was never committed.
  (The derived record must be in a committed transaction's writes or read by a reader; when neither
  and the final read of its partition did not complete, it is `details.transform_unseen`.)
- **inconsistent_offsets** and **unexpected** (one offset read with two values; a value no
  transaction wrote): in `details`, and they make the run invalid.

`ok` is true when none of the above is found and nothing is unseen; `valid` is true, false, or
`unknown` (committed records not read and not covered), as for the other workloads.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from tests.jepsen.checker import QUANTILES, pair_ops, quantile
from tests.jepsen.group_checker import Capped
from tests.jepsen.history import (
    ASSIGN,
    FAIL,
    INFO,
    INVOKE,
    OK,
    REVOKE,
    TXN,
    TXN_FINAL_READ,
    TXN_POLL,
    Op,
)

DETAIL_LIMIT = 32
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
DERIVED_PREFIX = "c:"
TXN_FS = (TXN, TXN_POLL, TXN_FINAL_READ)
HARD = ("aborted_reads", "lost_committed_writes", "duplicated_committed_writes", "g0", "g1c",
        "nonmonotonic_polls", "transform_lost")

Pos = tuple[str, int, int]  # topic, partition, offset


def derived_value(value: Any) -> str:
    """The transform's output for a source record's value."""
    return f"{DERIVED_PREFIX}{value}"


def is_txn_history(history: Iterable[Op]) -> bool:
    return any(op.f in TXN_FS for op in history)


class Txn:
    """One transaction of the history."""

    __slots__ = ("inv", "comp", "status", "writes", "positions", "reads")

    def __init__(self, inv: Op, comp: Op | None) -> None:
        self.inv = inv
        self.comp = comp
        self.status = "committed" if comp is not None and comp.type == OK else \
            "aborted" if comp is not None and comp.type == FAIL else "unknown"
        self.writes = [v for *_, v in inv.writes or ()]
        # value -> position, from the delivery reports in the completion
        self.positions: dict[Any, Pos] = {}
        for t, p, o, v in (comp.writes or ()) if comp is not None else ():
            if o is not None and o >= 0:
                self.positions[v] = (t, p, o)
        self.reads = list(comp.reads or ()) if comp is not None else []

    @property
    def id(self) -> int:
        return self.inv.index

    def brief(self) -> dict[str, Any]:
        return {"op": self.id, "member": self.inv.member, "status": self.status,
                "completion": None if self.comp is None else self.comp.index}


class Reader:
    """A read_committed (or read_uncommitted) read: one op's records, and its place in real time."""

    __slots__ = ("inv", "comp", "isolation", "reads", "txn")

    def __init__(self, inv: Op, comp: Op, isolation: str, reads: list, txn: Txn | None = None) -> None:
        self.inv = inv
        self.comp = comp
        self.isolation = isolation
        self.reads = reads
        self.txn = txn


def _tarjan(nodes: int, edges: list[list[int]]) -> list[list[int]]:
    """Strongly connected components with more than one node (iterative Tarjan)."""
    index = [-1] * nodes
    low = [0] * nodes
    on_stack = [False] * nodes
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(nodes):
        if index[root] != -1:
            continue
        work = [(root, 0)]
        while work:
            v, i = work[-1]
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            recurse = False
            succ = edges[v]
            while i < len(succ):
                w = succ[i]
                i += 1
                if index[w] == -1:
                    work[-1] = (v, i)
                    work.append((w, 0))
                    recurse = True
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


class MomentGraph:
    """Nodes are moments (an invocation, an append, a commit, a read, a completion); an edge a -> b
    says a happened no later than b, and some edges strictly before. Any cycle is impossible."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.labels: list[Any] = []
        self.edges: list[list[int]] = []
        self.kinds: dict[tuple[int, int], str] = {}

    def node(self, label: Any) -> int:
        n = self.ids.get(label)
        if n is None:
            n = self.ids[label] = len(self.labels)
            self.labels.append(label)
            self.edges.append([])
        return n

    def edge(self, a: Any, b: Any, kind: str) -> None:
        x, y = self.node(a), self.node(b)
        if (x, y) not in self.kinds:
            self.edges[x].append(y)
            self.kinds[(x, y)] = kind

    def cycles(self) -> list[list[int]]:
        return _tarjan(len(self.labels), self.edges)

    def witness(self, component: list[int]) -> list[tuple[Any, str]]:
        """One cycle inside a strongly connected component, as (moment, kind of the edge leaving it).
        It starts with a wr edge when the component has one, else a ww edge."""
        inside = set(component)
        inner = [(x, y) for x in component for y in self.edges[x] if y in inside]
        x, y = next((e for e in inner if self.kinds[e] == "wr"),
                    next((e for e in inner if self.kinds[e] == "ww"), inner[0]))
        parent: dict[int, int | None] = {y: None}
        frontier = [y]
        last = y if x in self.edges[y] else None
        while frontier and last is None:
            nxt = []
            for a in frontier:
                for b in self.edges[a]:
                    if b == x:
                        last = a
                        break
                    if b in inside and b not in parent:
                        parent[b] = a
                        nxt.append(b)
                if last is not None:
                    break
            frontier = nxt
        assert last is not None, "a strongly connected component holds a cycle through each edge"
        path = [last]
        while parent[path[-1]] is not None:
            path.append(parent[path[-1]])
        path.reverse()  # y ... last, and last -> x -> y closes it
        cycle = [x, *path]
        return [(self.labels[a], self.kinds[(a, cycle[(i + 1) % len(cycle)])]) for i, a in enumerate(cycle)]


def check_txn(history: Iterable[Op], *, seed: int | None = None, nemesis: Any = None,
              detail_limit: int = DETAIL_LIMIT) -> dict[str, Any]:
    """Checks a transaction-workload history (see the module docstring)."""
    history = list(history)
    pairs = pair_ops(history)

    txns: list[Txn] = []
    readers: list[Reader] = []
    final_covered: set[tuple[str, int]] = set()
    for inv, comp in pairs:
        if inv.f == TXN:
            t = Txn(inv, comp)
            txns.append(t)
            if t.reads:
                readers.append(Reader(inv, comp, READ_COMMITTED, t.reads, t))
        elif inv.f in (TXN_POLL, TXN_FINAL_READ) and comp is not None and comp.type == OK:
            isolation = comp.isolation or inv.isolation or READ_COMMITTED
            readers.append(Reader(inv, comp, isolation, list(comp.reads or ())))
            if inv.f == TXN_FINAL_READ and comp.error is None and inv.key is not None:
                final_covered.add((inv.key, inv.partition))

    # Who wrote what, and where the delivery reports put it.
    writers: dict[Any, list[Txn]] = defaultdict(list)
    committed_pos: dict[Pos, Any] = {}  # position -> value, from committed transactions' reports
    aborted_pos: dict[Pos, Txn] = {}
    for t in txns:
        for v in t.writes:
            writers[v].append(t)
        for v, pos in t.positions.items():
            if t.status == "committed":
                committed_pos[pos] = v
            elif t.status == "aborted":
                aborted_pos[pos] = t

    # Reads: observations, sessions, what read_committed returned.
    rc_read_values: set[Any] = set()
    rc_read_at: dict[Any, set[Pos]] = defaultdict(set)
    max_rc_offset: dict[tuple[str, int], int] = {}
    offset_values: dict[Pos, dict[Any, list[int]]] = defaultdict(lambda: defaultdict(list))
    aborted_reads = Capped(detail_limit)
    unexpected = Capped(detail_limit)
    nonmonotonic = Capped(detail_limit)
    skipped: list[dict[str, Any]] = []
    ru_reads = ru_aborted = 0
    sessions: dict[tuple[Any, str, int], tuple[int, int]] = {}  # -> (last offset, op index)
    session_epoch: dict[Any, int] = defaultdict(int)
    events = sorted((op for op in history if op.f in (ASSIGN, REVOKE)), key=lambda op: op.index)
    committed_offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
    for (t_, p_, o_) in committed_pos:
        committed_offsets[(t_, p_)].append(o_)
    for offs in committed_offsets.values():
        offs.sort()

    ordered = sorted(readers, key=lambda r: r.comp.index)
    ev_i = 0
    for r in ordered:
        while ev_i < len(events) and events[ev_i].index < r.comp.index:
            ev = events[ev_i]
            session_epoch[ev.member or ev.process] += 1
            ev_i += 1
        rc = r.isolation == READ_COMMITTED
        who = r.comp.process
        epoch = session_epoch[r.comp.member or who]
        for topic, p, o, v in r.reads:
            pos = (topic, p, o)
            if rc:
                offset_values[pos][v].append(r.comp.index)
                rc_read_values.add(v)
                rc_read_at[v].add(pos)
                if o > max_rc_offset.get((topic, p), -1):
                    max_rc_offset[(topic, p)] = o
                ws = writers.get(v)
                if ws is None:
                    unexpected.add({"value": v, "at": list(pos), "op": r.comp.index})
                elif pos in aborted_pos or all(w.status == "aborted" for w in ws):
                    w = aborted_pos.get(pos) or ws[0]
                    aborted_reads.add({"value": v, "at": list(pos), "read_op": r.comp.index,
                                       "reader": r.comp.member or who, "writer": w.brief()})
            else:
                ru_reads += 1
                ws = writers.get(v)
                ru_aborted += bool(ws) and (pos in aborted_pos or all(w.status == "aborted" for w in ws))
            key = (who, epoch, topic, p)
            prev = sessions.get(key)
            if prev is not None:
                last, last_op = prev
                if o <= last:
                    nonmonotonic.add({"reader": r.comp.member or who, "process": who, "isolation": r.isolation,
                                      "topic": topic, "partition": p, "from": last, "to": o,
                                      "ops": [last_op, r.comp.index]})
                elif o > last + 1:
                    offs = committed_offsets.get((topic, p), [])
                    i = bisect.bisect_right(offs, last)
                    while i < len(offs) and offs[i] < o:
                        skipped.append({"kind": "skipped", "value": committed_pos[(topic, p, offs[i])],
                                        "at": [topic, p, offs[i]], "reader": r.comp.member or who,
                                        "isolation": r.isolation, "between": [last, o],
                                        "ops": [last_op, r.comp.index]})
                        i += 1
            sessions[key] = (o, r.comp.index)

    # Lost and unseen committed records.
    lost = Capped(detail_limit)
    for item in skipped:
        lost.add(item)
    skipped_values = {item["value"] for item in skipped}
    unseen = Capped(detail_limit)
    for pos, v in sorted(committed_pos.items(), key=lambda kv: kv[0]):
        if v in rc_read_values or v in skipped_values:
            continue
        topic, p, o = pos
        item = {"kind": "never-read", "value": v, "at": list(pos)}
        if max_rc_offset.get((topic, p), -1) > o or (topic, p) in final_covered:
            lost.add(item)
        else:
            unseen.add(item)

    # Duplicates and inconsistent offsets.
    committed_values = {v for v, ws in writers.items() if any(w.status == "committed" for w in ws)}
    duplicated = Capped(detail_limit)
    for v in sorted(committed_values | rc_read_values, key=repr):
        ws = writers.get(v, [])
        places = {pos for w in ws if w.status == "committed" for vv, pos in w.positions.items() if vv == v}
        places |= {pos for pos in rc_read_at.get(v, ()) if pos not in aborted_pos}
        committing = [w for w in ws if w.status == "committed"]
        if len(places) > 1 or len(committing) > 1:
            duplicated.add({"value": v, "at": sorted(list(x) for x in places),
                            "committed_by": [w.brief() for w in committing]})
    inconsistent = Capped(detail_limit)
    for pos, values in sorted(offset_values.items(), key=lambda kv: kv[0]):
        ack = committed_pos.get(pos)
        vals = set(values) | ({ack} if ack is not None else set())
        if len(vals) > 1:
            inconsistent.add({"at": list(pos), "values": sorted(vals, key=repr)})

    # Exactly-once: every committed source record below a committed transform offset was transformed.
    # A transform transaction names its source topic in `key`; its `offsets` are of that topic.
    transform_lost = Capped(detail_limit)
    transform_unseen = Capped(detail_limit)
    sent: dict[tuple[str, int], int] = {}
    for t in txns:
        if t.status == "committed" and t.inv.offsets and t.inv.key:
            for p, o in (t.comp.offsets if t.comp is not None and t.comp.offsets else t.inv.offsets):
                sent[(t.inv.key, p)] = max(sent.get((t.inv.key, p), -1), o)
    for pos, v in sorted(committed_pos.items()):
        upto = sent.get((pos[0], pos[1]))
        if upto is None or pos[2] >= upto:
            continue
        d = derived_value(v)
        if d in committed_values or d in rc_read_values:
            continue
        item = {"source": v, "at": list(pos), "derived": d, "committed_offset": upto}
        maybe = [w for w in writers.get(d, []) if w.status == "unknown"]
        places = {(tt, pp) for w in maybe for tt, pp, _, vv in w.inv.writes or () if vv == d}
        (transform_unseen if maybe and not places <= final_covered else transform_lost).add(item)

    # Dependency cycles.
    g0, g1c, interleavings = _cycles(txns, readers, committed_pos, detail_limit)

    # Availability, counts, latency.
    counts: dict[str, dict[str, int]] = {}
    latencies: dict[str, list[float]] = defaultdict(list)
    client_ok = client_done = 0
    for inv, comp in pairs:
        c = counts.setdefault(inv.f, {INVOKE: 0, OK: 0, FAIL: 0, INFO: 0, "open": 0})
        c[INVOKE] += 1
        if comp is None:
            c["open"] += 1
            continue
        c[comp.type] += 1
        latencies[inv.f].append((comp.time - inv.time) / 1e6)
        if inv.f in (TXN, TXN_POLL):
            client_done += 1
            client_ok += comp.type in (OK, FAIL) if inv.f == TXN else comp.type == OK
    latency: dict[str, dict[str, float | int]] = {}
    for f, values in sorted(latencies.items()):
        values.sort()
        entry: dict[str, float | int] = {"count": len(values)}
        for name, q in QUANTILES:
            entry[f"{name}_ms"] = round(quantile(values, q), 3)
        entry["max_ms"] = round(values[-1], 3)
        latency[f] = entry

    found = {
        "aborted_reads": aborted_reads, "lost_committed_writes": lost, "duplicated_committed_writes": duplicated,
        "g0": g0, "g1c": g1c, "nonmonotonic_polls": nonmonotonic, "transform_lost": transform_lost,
    }
    hard = sum(c.count for c in found.values()) + inconsistent.count + unexpected.count
    valid: bool | str
    if hard:
        valid = False
    elif unseen.count or transform_unseen.count:
        valid = "unknown"
    else:
        valid = True
    status_counts = defaultdict(int)
    deliberate = 0
    for t in txns:
        status_counts[t.status] += 1
        deliberate += t.comp is not None and t.comp.type == FAIL and (t.comp.error or "").startswith("deliberate")
    results: dict[str, Any] = {
        "valid": valid,
        "ok": valid is True,
        "workload": "txn",
        "acked": sum(len(t.positions) for t in txns if t.status == "committed"),
        **{k: c.count for k, c in found.items()},
        "availability": round(client_ok / client_done, 6) if client_done else None,
        "seed": seed,
        "nemesis": nemesis,
        "latency": latency,
        "details": {
            **{k: c.items for k, c in found.items()},
            "unseen": unseen.items,
            "unseen_count": unseen.count,
            "transform_unseen": transform_unseen.items,
            "transform_unseen_count": transform_unseen.count,
            "inconsistent_offsets": inconsistent.items,
            "inconsistent_offsets_count": inconsistent.count,
            "unexpected": unexpected.items,
            "unexpected_count": unexpected.count,
            "ww_interleavings": interleavings,
            "transactions": {"committed": status_counts["committed"], "aborted": status_counts["aborted"],
                             "unknown": status_counts["unknown"], "deliberately_aborted": deliberate,
                             "transform_committed": sum(1 for t in txns if t.status == "committed" and t.reads)},
            "read_committed_values": len(rc_read_values),
            "read_uncommitted": {"records": ru_reads, "aborted_records_seen": ru_aborted},
            "transform_committed_offsets": sorted([t, p, o] for (t, p), o in sent.items()),
            "final_read_partitions": sorted(list(x) for x in final_covered),
            "ops": counts,
        },
    }
    return results


def _cycles(txns: list[Txn], readers: list[Reader], committed_pos: dict[Pos, Any],
            detail_limit: int) -> tuple[Capped, Capped, int]:
    """g0 and g1c over the graph of moments (module docstring), and the number of write-write
    interleavings between concurrent transactions (allowed)."""
    g = MomentGraph()
    by_value = writer_by_value(txns)
    committed = {t.id: t for t in txns if t.status == "committed"}
    # a transaction of unknown outcome whose record a read_committed reader returned committed too
    for r in readers:
        if r.isolation == READ_COMMITTED:
            for *_, v in r.reads:
                w = by_value.get(v)
                if w is not None and w.status == "unknown":
                    committed[w.id] = w

    # Real time. A recorded invocation is no later than the operation's start, a recorded completion
    # no earlier than its end: end -> (its recorded time) -> ... -> (a later or equal recorded time)
    # -> invocation. Time points are chained in order.
    points: set[int] = set()

    def ended(op_id: int, at: int) -> None:
        g.edge(("end", op_id), ("time", at), "rt")
        points.add(at)

    def began(op_id: int, at: int) -> None:
        g.edge(("time", at), ("inv", op_id), "rt")
        points.add(at)

    for t in txns:
        began(t.id, t.inv.time)
        if t.comp is not None:
            ended(t.id, t.comp.time)
    for r in readers:
        if r.txn is None and r.isolation == READ_COMMITTED:
            began(r.inv.index, r.inv.time)
            ended(r.inv.index, r.comp.time)
    ordered_points = sorted(points)
    for a, b in zip(ordered_points, ordered_points[1:], strict=False):
        g.edge(("time", a), ("time", b), "rt")

    # each committed transaction: invocation <= appends <= commit <= completion
    for t in committed.values():
        g.edge(("inv", t.id), ("commit", t.id), "txn")
        if t.status == "committed" and t.comp is not None:
            g.edge(("commit", t.id), ("end", t.id), "txn")
    # appends: committed positions (delivery reports, read_committed reads) in partition order
    positions: dict[Pos, Any] = dict(committed_pos)
    for r in readers:
        if r.isolation == READ_COMMITTED:
            for topic, p, o, v in r.reads:
                w = by_value.get(v)
                if w is not None and w.id in committed:
                    positions.setdefault((topic, p, o), v)
    by_partition: dict[tuple[str, int], list[int]] = defaultdict(list)
    writer_at: dict[Pos, int] = {}
    for pos, v in positions.items():
        w = by_value.get(v)
        if w is None or w.id not in committed:
            continue
        writer_at[pos] = w.id
        by_partition[(pos[0], pos[1])].append(pos[2])
        g.edge(("inv", w.id), ("append", pos), "txn")
        g.edge(("append", pos), ("commit", w.id), "txn")
    ww_pairs: set[tuple[int, int]] = set()
    for (topic, p), offsets in by_partition.items():
        offsets.sort()
        for o1, o2 in zip(offsets, offsets[1:], strict=False):
            g.edge(("append", (topic, p, o1)), ("append", (topic, p, o2)), "ww")
            a, b = writer_at[(topic, p, o1)], writer_at[(topic, p, o2)]
            if a != b:
                ww_pairs.add((a, b))
    # reads: the writer's commit < the read <= the reader's completion (and its own commit)
    for r in readers:
        if r.isolation != READ_COMMITTED:
            continue
        rid = r.inv.index
        # no edge from the reader's invocation: a consumer may have fetched the records before
        g.edge(("read", rid), ("end", rid), "txn")
        if rid in committed:
            g.edge(("read", rid), ("commit", rid), "txn")
        for *_, v in r.reads:
            w = by_value.get(v)
            if w is not None and w.id in committed and w.id != rid:
                g.edge(("commit", w.id), ("read", rid), "wr")

    g0, g1c = Capped(detail_limit), Capped(detail_limit)
    for component in g.cycles():
        steps = g.witness(component)
        item = {"cycle": [_moment(m, writer_at) | {"then": k} for m, k in steps]}
        (g1c if any(k == "wr" for _, k in steps) else g0).add(item)
    interleavings = sum(1 for a, b in ww_pairs if a < b and (b, a) in ww_pairs)
    return g0, g1c, interleavings


def _moment(label: tuple[str, Any], writer_at: dict[Pos, int]) -> dict[str, Any]:
    kind, what = label
    if kind == "append":
        return {"moment": "append", "op": writer_at.get(what), "at": list(what)}
    if kind == "time":
        return {"moment": "time", "ns": what}
    return {"moment": kind, "op": what}


def writer_by_value(txns: list[Txn]) -> dict[Any, Txn]:
    """Each value's writer: a committed one when there is one, else the first."""
    out: dict[Any, Txn] = {}
    for t in txns:
        for v in t.writes:
            if v not in out or (t.status == "committed" and out[v].status != "committed"):
                out[v] = t
    return out
