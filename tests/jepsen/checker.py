"""The queue checker: a pure function from a history to a results map.

Kafka's semantics for a queue workload (unique values sent to partitions, consumers reading
partitions in order):

- a send that ended `ok` was acknowledged at the offset the broker answered; it must be read;
- a send that ended `info` is indeterminate: reading it is fine, not reading it is fine;
- a send that ended `fail` did not happen: reading it later is an *aborted read*;
- *lost*: acknowledged, never read, although some read saw a higher offset in its partition
  (readers went past the place where it should be);
- *unseen*: acknowledged and never read, and no read went past its offset (typically a lost tail);
  once a final read of the partition has completed it is as bad as lost (a final read that ran out
  of time before the high watermark carries an error and covers nothing: its tail stays unknown);
- *duplicated*: one value at two different offsets (acknowledged offsets count as observations);
- *inconsistent offsets*: one offset holding two different values (ditto);
- *nonmonotonic*: one consumer process reading a partition went back (`rewind`, an offset not
  above the one before) or jumped forward (`skip`, an offset above the one before plus one: the
  topic is neither compacted nor transactional, so offsets are contiguous);
- *unexpected*: a value read that no send wrote (reported in the details, makes the run invalid);
- *reordered*: two acknowledged sends of one producer instance (the sends of the pipelined producers
  name theirs: idempotent, several records and requests in flight at once) to one partition whose
  offsets are not in the order they were sent; idempotence promises that order, and the broker must
  keep it while it appends a connection's Produce requests ahead of their answers;
- *unauthorized writes* (a cluster with `--security sasl_ssl`): sends refused with
  TOPIC_AUTHORIZATION_FAILED, by the broker or by the client's cached answer (the `acl-flap` nemesis
  removes the producers' WRITE ACL); definite failures, so any of them read is an aborted read, also
  counted as `unauthorized_writes_read`. `details.security` counts the security faults of the
  history (certificates rotated and reloads seen, ACL and credential flaps);
- *session reads behind*: a session consumer (kafka-python, reading through KIP-227 fetch sessions,
  whose incremental fetches name only what changed) that, once healed, did not reach the high
  watermark of one of its partitions within the drain's time (a `session-drain` op not `ok`, or one
  whose positions fall short): the leader was never told that partition had news for the session.
  Its polls are also checked as every poll is (nonmonotonic, aborted, unexpected reads).
  `session_reads_behind` is None for a history without session consumers.

`details.membership` (a dynamic quorum's campaign, `membership_faults`) counts the membership nemesis's
changes: voters removed (the leader among them) and added back, disks replaced, changes skipped or
refused; the runner adds the voters the quorum ended with. A membership change loses nothing either:
the checks above hold across it.

Availability is the share of `ok` among completed client operations (sends, polls, and the group
workload's consumes and commits; the final read runs after healing and is left out). Latencies are
completion time minus invocation time.

The group workload's histories are checked for the above (its members' reads are observations like
any poll) and for what `tests.jepsen.group_checker` describes: `group_lost`,
`committed_regressions` and `redelivered_after_commit`. Those three are None for a history without
group operations.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from tests.jepsen.group_checker import Capped, check_group
from tests.jepsen.history import (
    COMMIT,
    CONSUME,
    EVENT_FS,
    FAIL,
    FINAL_READ,
    INFO,
    INVOKE,
    NEMESIS,
    OK,
    POLL,
    SEND,
    SESSION_DRAIN,
    Op,
)

DETAIL_LIMIT = 32
UNAUTHORIZED = "TOPIC_AUTHORIZATION_FAILED"
SECURITY_FAULTS = ("cert-rotate", "acl-flap", "credential-flap")
CLIENT_FS = (SEND, POLL, CONSUME, COMMIT)
QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


def quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of an already sorted list."""
    if not sorted_values:
        raise ValueError("quantile of an empty list")
    rank = max(1, -(-len(sorted_values) * q // 1))  # ceil(n * q), at least 1
    return sorted_values[min(len(sorted_values), int(rank)) - 1]


def pair_ops(history: Iterable[Op]) -> list[tuple[Op, Op | None]]:
    """Pairs every client invocation with its completion (None if the history ends first)."""
    open_: dict[int | str, Op] = {}
    pairs: list[tuple[Op, Op | None]] = []
    slot: dict[int, int] = {}
    for op in history:
        if op.f in EVENT_FS:
            continue
        if op.type == INVOKE:
            if op.process in open_:
                raise ValueError(f"op {op.index}: process {op.process!r} invoked twice without completing")
            open_[op.process] = op
            slot[op.index] = len(pairs)
            pairs.append((op, None))
        else:
            inv = open_.pop(op.process, None)
            if inv is None or inv.f != op.f:
                raise ValueError(f"op {op.index}: {op.type} {op.f} of process {op.process!r} "
                                 f"matches no invocation")
            pairs[slot[inv.index]] = (inv, op)
    return pairs


def check(history: Iterable[Op], *, seed: int | None = None, nemesis: Any = None,
          detail_limit: int = DETAIL_LIMIT) -> dict[str, Any]:
    """Checks a queue history. Returns the results map (see the module docstring)."""
    history = list(history)
    pairs = pair_ops(history)

    # value -> (partition, acked offset) for ok sends; value sets for fail/info sends.
    acked: dict[Any, tuple[int | None, int | None]] = {}
    failed: set[Any] = set()
    unauthorized: dict[Any, str] = {}  # value -> "broker" (a delivery error) or "client" (refused locally)
    indeterminate: set[Any] = set()
    sent: set[Any] = set()
    for inv, comp in pairs:
        if inv.f != SEND:
            continue
        sent.add(inv.value)
        if comp is None or comp.type == INFO:
            indeterminate.add(inv.value)
        elif comp.type == FAIL:
            failed.add(inv.value)
            if UNAUTHORIZED in (comp.error or ""):
                unauthorized[inv.value] = "broker" if comp.error == UNAUTHORIZED else "client"
        else:
            partition = comp.partition if comp.partition is not None else inv.partition
            acked[inv.value] = (partition, comp.offset)

    # Observations: where each value was seen, what each offset held.
    value_places: dict[Any, dict[tuple[int, int], list[str]]] = defaultdict(lambda: defaultdict(list))
    offset_values: dict[tuple[int, int], dict[Any, list[str]]] = defaultdict(lambda: defaultdict(list))
    read_values: set[Any] = set()
    max_read_offset: dict[int, int] = {}
    final_read_partitions: set[int] = set()
    for value, (partition, offset) in acked.items():
        if partition is not None and offset is not None and offset >= 0:
            value_places[value][(partition, offset)].append("ack")
            offset_values[(partition, offset)][value].append("ack")

    nonmonotonic = Capped(detail_limit)
    last_offset: dict[tuple[int | str, int], tuple[int, int]] = {}  # (process, partition) -> (offset, op)
    for inv, comp in pairs:
        if inv.f not in (POLL, FINAL_READ, CONSUME) or comp is None or comp.type != OK:
            continue
        if inv.f == FINAL_READ and comp.error is None:
            for p in (inv.partition, comp.partition):
                if p is not None:
                    final_read_partitions.add(p)
            final_read_partitions.update(p for p, _, _ in comp.records or ())
        where = f"{comp.f}@{comp.index}"
        for partition, offset, value in comp.records or ():
            read_values.add(value)
            value_places[value][(partition, offset)].append(where)
            offset_values[(partition, offset)][value].append(where)
            if offset > max_read_offset.get(partition, -1):
                max_read_offset[partition] = offset
            if inv.f == CONSUME:
                continue  # a group member's order is checked per assignment, by check_group
            key = (comp.process, partition)
            prev = last_offset.get(key)
            if prev is not None:
                prev_offset, prev_index = prev
                if offset != prev_offset + 1:
                    nonmonotonic.add({
                        "kind": "rewind" if offset <= prev_offset else "skip",
                        "process": comp.process, "partition": partition,
                        "from": prev_offset, "to": offset, "ops": [prev_index, comp.index],
                    })
            last_offset[key] = (offset, comp.index)

    lost = Capped(detail_limit)
    unseen = Capped(detail_limit)
    unseen_after_final = 0
    for value, (partition, offset) in acked.items():
        if value in read_values:
            continue
        item = {"value": value, "partition": partition, "offset": offset}
        if partition is not None and offset is not None and max_read_offset.get(partition, -1) > offset:
            lost.add(item)
        else:
            unseen.add(item)
            if partition in final_read_partitions:
                unseen_after_final += 1

    duplicated = Capped(detail_limit)
    for value, places in value_places.items():
        if len(places) > 1:
            duplicated.add({"value": value, "at": [
                {"partition": p, "offset": o, "seen": seen[:4]} for (p, o), seen in sorted(places.items())]})

    inconsistent = Capped(detail_limit)
    for (partition, offset), values in sorted(offset_values.items(), key=lambda kv: kv[0]):
        if len(values) > 1:
            inconsistent.add({"partition": partition, "offset": offset, "values": [
                {"value": v, "seen": seen[:4]} for v, seen in values.items()]})

    aborted = Capped(detail_limit)
    for value in sorted(failed & read_values, key=repr):
        aborted.add({"value": value, "at": [{"partition": p, "offset": o} for p, o in value_places[value]]})

    unauthorized_read = Capped(detail_limit)
    for value in sorted(unauthorized.keys() & read_values, key=repr):
        unauthorized_read.add({"value": value, "refused_by": unauthorized[value],
                               "at": [{"partition": p, "offset": o} for p, o in value_places[value]]})

    unexpected = Capped(detail_limit)
    for value in sorted(read_values - sent, key=repr):
        unexpected.add({"value": value, "at": [{"partition": p, "offset": o} for p, o in value_places[value]]})

    reordered = Capped(detail_limit)
    by_producer: dict[tuple[str, int], list[tuple[int, int, Any]]] = defaultdict(list)
    for inv, comp in pairs:
        if inv.f == SEND and inv.producer is not None and comp is not None and comp.type == OK:
            partition, offset = acked[inv.value]
            if partition is not None and offset is not None and offset >= 0:
                by_producer[(inv.producer, partition)].append((inv.index, offset, inv.value))
    pipelined_acked = 0
    for (producer, partition), sends in by_producer.items():
        sends.sort()
        pipelined_acked += len(sends)
        for (_, before, earlier), (_, after, later) in zip(sends, sends[1:], strict=False):
            if after <= before:
                reordered.add({"producer": producer, "partition": partition, "sent": [earlier, later],
                               "offsets": [before, after]})

    group = check_group(pairs, history, acked, nonmonotonic, detail_limit)

    # The session consumers' drains: every partition read up to the high watermark named once healed.
    session_drains = 0
    session_behind = Capped(detail_limit)
    for inv, comp in pairs:
        if inv.f != SESSION_DRAIN:
            continue
        session_drains += 1
        reached = dict(comp.offsets or ()) if comp is not None else {}
        for partition, high in inv.offsets or ():
            if comp is None or reached.get(partition, -1) < high:
                session_behind.add({"member": inv.member, "partition": partition, "high_watermark": high,
                                    "reached": reached.get(partition)})

    # Availability, operation counts and latencies.
    counts: dict[str, dict[str, int]] = {}
    latencies: dict[str, list[float]] = defaultdict(list)
    client_ok = client_done = 0
    for inv, comp in pairs:
        c = counts.setdefault(inv.f, {"invoke": 0, OK: 0, FAIL: 0, INFO: 0, "open": 0})
        c["invoke"] += 1
        if comp is None:
            c["open"] += 1
            continue
        c[comp.type] += 1
        latencies[inv.f].append((comp.time - inv.time) / 1e6)
        if inv.f in CLIENT_FS:
            client_done += 1
            client_ok += comp.type == OK
    latency: dict[str, dict[str, float | int]] = {}
    for f, values in sorted(latencies.items()):
        values.sort()
        entry: dict[str, float | int] = {"count": len(values)}
        for name, q in QUANTILES:
            entry[f"{name}_ms"] = round(quantile(values, q), 3)
        entry["max_ms"] = round(values[-1], 3)
        latency[f] = entry

    hard = lost.count + duplicated.count + inconsistent.count + nonmonotonic.count + aborted.count \
        + unexpected.count + unseen_after_final + reordered.count + session_behind.count
    if group is not None:
        hard += group["group_lost"].count + group["committed_regressions"].count \
            + group["redelivered_after_commit"].count
    valid: bool | str
    if hard:
        valid = False
    elif unseen.count or (group is not None and group["group_unseen"].count):
        valid = "unknown"  # acknowledged values not read, but no final read covered their partitions
    else:
        valid = True

    results = {
        "valid": valid,
        "workload": "queue" if group is None else "group",
        "acked": len(acked),
        "lost": lost.count,
        "unseen": unseen.count,
        "duplicated": duplicated.count,
        "inconsistent_offsets": inconsistent.count,
        "nonmonotonic": nonmonotonic.count,
        "aborted_reads": aborted.count,
        "reordered": reordered.count,
        "unauthorized_writes": len(unauthorized),
        "unauthorized_writes_read": unauthorized_read.count,
        "session_reads_behind": session_behind.count if session_drains else None,
        "availability": round(client_ok / client_done, 6) if client_done else None,
        "seed": seed,
        "nemesis": nemesis,
        "latency": latency,
        "details": {
            "lost": lost.items,
            "unseen": unseen.items,
            "unseen_after_final_read": unseen_after_final,
            "duplicated": duplicated.items,
            "inconsistent_offsets": inconsistent.items,
            "nonmonotonic": nonmonotonic.items,
            "aborted_reads": aborted.items,
            "reordered": reordered.items,
            "pipelined_acked": pipelined_acked,
            "unexpected": unexpected.items,
            "unexpected_count": unexpected.count,
            "unauthorized_writes": {"refused_by_broker": sum(v == "broker" for v in unauthorized.values()),
                                    "refused_by_client": sum(v == "client" for v in unauthorized.values())},
            "unauthorized_writes_read": unauthorized_read.items,
            "sends": {"ok": len(acked), "fail": len(failed), "info": len(indeterminate)},
            "ops": counts,
            "read_values": len(read_values),
            "final_read_partitions": sorted(final_read_partitions),
            "session_consumers": {"drains": session_drains, "behind": session_behind.items,
                                  "polls": sum(1 for inv, comp in pairs if inv.f == POLL and inv.member == "session"
                                               and comp is not None and comp.type == OK),
                                  "records": sum(len(comp.records or ()) for inv, comp in pairs
                                                 if inv.f == POLL and inv.member == "session"
                                                 and comp is not None and comp.type == OK)},
        },
    }
    for key in ("group_lost", "committed_regressions", "redelivered_after_commit"):
        results[key] = None if group is None else group[key].count
    security = security_faults(history)
    if security:
        results["details"]["security"] = security
    if group is not None:
        results["details"]["group"] = {
            "group_lost": group["group_lost"].items,
            "group_unseen": group["group_unseen"].items,
            "group_unseen_count": group["group_unseen"].count,
            "committed_regressions": group["committed_regressions"].items,
            "redelivered_after_commit": group["redelivered_after_commit"].items,
            "redelivered_after_racing_commit": group["redelivered_after_racing_commit"].items,
            "redelivered_after_racing_commit_count": group["redelivered_after_racing_commit"].count,
            "unassigned_reads": group["unassigned_reads"].items,
            "unassigned_reads_count": group["unassigned_reads"].count,
            "drained": group["drained"],
            "acked_commits": group["acked_commits"],
            "deliveries": group["deliveries"],
            "redeliveries": group["redeliveries"],
            "committed_reads": group["committed_reads"],
            "assignment_changes": group["assignment_changes"],
            "read_values": group["group_read_values"],
        }
    return results


def security_faults(history: Iterable[Op]) -> dict[str, int]:
    """What the security nemeses did, from their records: certificates rotated and how many of those
    rotations the node was seen reloading, ACL flaps (and ACLs they removed), credential flaps (and in
    how many a new login with the old password was seen refused). Empty
    when the history has no security fault."""
    facts = {"cert_rotations": 0, "cert_reloads_seen": 0, "acl_flaps": 0, "acls_removed": 0, "credential_flaps": 0,
             "old_password_refused": 0}
    seen = False
    for op in history:
        fault = op.fault or {}
        if op.f != NEMESIS or fault.get("kind") not in SECURITY_FAULTS or "error" in fault:
            continue
        seen = True
        kind, phase = fault["kind"], fault.get("phase")
        if kind == "cert-rotate" and phase == "start":
            facts["cert_rotations"] += 1
        elif kind == "cert-rotate" and phase == "stop":
            facts["cert_reloads_seen"] += bool(fault.get("reloads"))
        elif kind == "acl-flap" and phase == "start":
            facts["acl_flaps"] += 1
            facts["acls_removed"] += int(fault.get("acls_removed") or 0)
        elif kind == "credential-flap" and phase == "start":
            facts["credential_flaps"] += 1
            facts["old_password_refused"] += bool(fault.get("old_password_refused"))
    return facts if seen else {}


def membership_faults(history: Iterable[Op]) -> dict[str, Any]:
    """What the membership nemesis did, from its records: voters removed (of them, leaders that removed
    themselves, and disks replaced), voters added back, changes skipped (no other voter) and faults
    that failed (a change the leader refused or that timed out, with their errors)."""
    facts: dict[str, Any] = {"removed": 0, "leaders_removed": 0, "disks_replaced": 0, "added": 0, "skipped": 0,
                             "errors": []}
    for op in history:
        fault = op.fault or {}
        if op.f != NEMESIS or fault.get("kind") != "membership":
            continue
        if "error" in fault:
            facts["errors"].append(f"{fault.get('phase')} {fault.get('variant')}: {fault['error']}")
        elif fault.get("phase") == "start" and "skipped" in fault:
            facts["skipped"] += 1
        elif fault.get("phase") == "start":
            facts["removed"] += 1
            facts["leaders_removed"] += fault.get("variant") == "leader"
            facts["disks_replaced"] += "replaced" in fault
        elif fault.get("phase") == "stop":
            facts["added"] += len(fault.get("added") or ())
    return facts
