"""The checker on hand-written histories and on generated ones whose anomalies are known."""

from __future__ import annotations

import io
import random
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.jepsen.checker import check, membership_faults, pair_ops, quantile
from tests.jepsen.history import (
    FINAL_READ,
    INVOKE,
    POLL,
    SEND,
    SESSION_DRAIN,
    Op,
    Recorder,
    read_history,
    write_history,
)
from tests.jepsen.synthetic import Builder, synthetic_run

KEYS = {"valid", "acked", "lost", "unseen", "duplicated", "inconsistent_offsets", "nonmonotonic",
        "aborted_reads", "availability", "seed", "nemesis"}
ANOMALIES = ("lost", "unseen", "duplicated", "inconsistent_offsets", "nonmonotonic", "aborted_reads")


def anomalies(results: dict[str, Any]) -> dict[str, int]:
    return {k: results[k] for k in ANOMALIES if results[k]}


# --- the history format ---------------------------------------------------------------------


def test_history_round_trip(tmp_path):
    ops = synthetic_run(3, seconds=4)
    path = tmp_path / "history.jsonl"
    write_history(path, ops)
    assert read_history(path) == ops


def test_history_rejects_bad_lines(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text('{"index": 0, "type": "bogus", "f": "send", "process": 0, "time": 0}\n')
    with pytest.raises(ValueError, match="h.jsonl:1"):
        read_history(path)


def test_recorder_writes_lines_and_pairs():
    sink = io.StringIO()
    ticks = iter(range(0, 10_000, 10))
    rec = Recorder(sink, clock=lambda: next(ticks))
    rec.invoke(SEND, 0, value=1, key="k0", partition=0)
    rec.nemesis("start", {"id": 0, "kind": "kill"})
    rec.ok(SEND, 0, value=1, key="k0", partition=0, offset=0)
    with pytest.raises(RuntimeError, match="no invocation"):
        rec.ok(POLL, 0)
    rec.invoke(POLL, 1, partition=0)
    with pytest.raises(RuntimeError, match="in flight"):
        rec.invoke(POLL, 1, partition=0)
    assert [op.index for op in rec.ops] == [0, 1, 2, 3]
    assert [op.time for op in rec.ops] == [10, 20, 30, 50]
    assert rec.in_flight()[0].process == 1
    assert len(sink.getvalue().splitlines()) == 4
    assert rec.ops[1].fault == {"id": 0, "kind": "kill", "phase": "start"}


def test_pairing_leaves_unfinished_invocations_open():
    b = Builder()
    b.invoke(SEND, 0, value=1, partition=0)
    b.invoke(SEND, 1, value=2, partition=0)
    b.add("ok", SEND, 1, value=2, partition=0, offset=0)
    pairs = pair_ops(b.ops)
    assert [(i.value, c and c.type) for i, c in pairs] == [(1, None), (2, "ok")]


def test_quantile_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.5) == 50
    assert quantile(values, 0.99) == 99
    assert quantile([7.0], 0.9) == 7


# --- hand-written histories -----------------------------------------------------------------


def test_clean_history_is_valid():
    b = Builder()
    b.send(0, 10, 0, offset=0)
    b.send(1, 11, 0, offset=1)
    b.send(0, 12, 1, offset=0)
    b.poll(5, [(0, 0, 10)])
    b.poll(5, [(0, 1, 11), (1, 0, 12)])
    b.final_read(9, 0, [(0, 0, 10), (0, 1, 11)])
    b.final_read(10, 1, [(1, 0, 12)])
    r = check(b.ops, seed=7, nemesis=["kill"])
    assert KEYS <= set(r)
    assert r["valid"] is True
    assert r["acked"] == 3
    assert anomalies(r) == {}
    assert r["availability"] == 1.0
    assert r["seed"] == 7 and r["nemesis"] == ["kill"]
    assert set(r["latency"]) == {SEND, POLL, FINAL_READ}
    assert set(r["latency"][SEND]) == {"count", "p50_ms", "p90_ms", "p99_ms", "max_ms"}
    assert r["latency"][SEND]["p50_ms"] == 1.0


def test_lost_write_below_a_higher_read_offset():
    b = Builder()
    b.send(0, 1, 0, offset=0)
    b.send(0, 2, 0, offset=1)
    b.send(0, 3, 0, offset=2)
    b.final_read(9, 0, [(0, 0, 1), (0, 2, 3)])
    r = check(b.ops)
    assert r["lost"] == 1 and r["unseen"] == 0
    assert r["details"]["lost"] == [{"value": 2, "partition": 0, "offset": 1}]
    assert r["nonmonotonic"] == 1 and r["details"]["nonmonotonic"][0]["kind"] == "skip"
    assert r["valid"] is False


def test_unseen_tail_is_invalid_after_a_final_read_and_unknown_without():
    b = Builder()
    b.send(0, 1, 0, offset=0)
    b.send(0, 2, 0, offset=1)
    b.poll(4, [(0, 0, 1)])
    r = check(b.ops)
    assert r["unseen"] == 1 and r["lost"] == 0
    assert r["valid"] == "unknown"
    b.final_read(9, 0, [(0, 0, 1)])
    r = check(b.ops)
    assert r["unseen"] == 1 and r["valid"] is False
    assert r["details"]["unseen_after_final_read"] == 1


def test_a_final_read_that_ran_out_of_time_leaves_its_tail_unknown():
    b = Builder()
    b.send(0, 1, 0, offset=0)
    b.send(0, 2, 0, offset=1)
    b.final_read(9, 0, [(0, 0, 1)], error="incomplete: read up to 0, high watermark 2")
    r = check(b.ops)
    assert r["unseen"] == 1 and r["lost"] == 0
    assert r["valid"] == "unknown"  # slow is not lost: only a completed final read can prove a loss
    assert r["details"]["unseen_after_final_read"] == 0 and r["details"]["final_read_partitions"] == []
    assert r["details"]["read_values"] == 1  # what it did read still counts


def test_indeterminate_sends_may_or_may_not_be_read():
    b = Builder()
    b.send(0, 1, 0, result="info", error="_MSG_TIMED_OUT")
    b.send(1, 2, 0, result="info", error="_MSG_TIMED_OUT")
    b.send(2, 3, 0, offset=1)
    b.invoke(SEND, 3, value=4, partition=0)  # never completed: indeterminate too
    b.final_read(9, 0, [(0, 0, 2), (0, 1, 3)])
    r = check(b.ops)
    assert r["valid"] is True, r
    assert anomalies(r) == {}
    assert r["details"]["sends"] == {"ok": 1, "fail": 0, "info": 3}
    assert r["availability"] == pytest.approx(1 / 3)


def test_failed_send_read_later_is_an_aborted_read():
    b = Builder()
    b.send(0, 1, 0, result="fail", error="NOT_ENOUGH_REPLICAS")
    b.send(0, 2, 0, offset=1)
    b.final_read(9, 0, [(0, 0, 1), (0, 1, 2)])
    r = check(b.ops)
    assert anomalies(r) == {"aborted_reads": 1}
    assert r["details"]["aborted_reads"] == [{"value": 1, "at": [{"partition": 0, "offset": 0}]}]
    assert r["valid"] is False


def test_duplicated_value_at_two_offsets():
    b = Builder()
    b.send(0, 1, 0, offset=0)
    b.send(0, 2, 0, offset=1)
    b.final_read(9, 0, [(0, 0, 1), (0, 1, 2), (0, 2, 1)])
    r = check(b.ops)
    assert anomalies(r) == {"duplicated": 1}
    assert [a["offset"] for a in r["details"]["duplicated"][0]["at"]] == [0, 2]


def test_read_at_another_offset_than_acked_is_duplicated_and_inconsistent():
    b = Builder()
    b.send(0, 1, 0, offset=0)
    b.send(0, 2, 0, offset=1)
    b.final_read(9, 0, [(0, 0, 2)])  # 2 was acked at 1 but is read at 0, where 1 was acked
    r = check(b.ops)
    assert r["duplicated"] == 1
    assert r["inconsistent_offsets"] == 1
    assert r["unseen"] == 1  # value 1 is never read, and nothing above offset 0 is read
    assert r["valid"] is False


def test_inconsistent_offsets_between_two_readers():
    b = Builder()
    b.send(0, 1, 0, offset=0)
    b.send(0, 2, 0, result="info")
    b.send(0, 3, 0, result="info")
    b.poll(4, [(0, 0, 1), (0, 1, 2)])
    b.final_read(9, 0, [(0, 0, 1), (0, 1, 3)])
    r = check(b.ops)
    assert anomalies(r) == {"inconsistent_offsets": 1}
    assert r["details"]["inconsistent_offsets"][0]["offset"] == 1


def test_nonmonotonic_rewind_and_skip_per_consumer_and_partition():
    b = Builder()
    for i in range(5):
        b.send(0, i, 0, offset=i)
    b.send(0, 100, 1, offset=0)
    b.poll(4, [(0, 0, 0), (0, 1, 1), (1, 0, 100)])
    b.poll(4, [(0, 1, 1)])          # rewind
    b.poll(4, [(0, 3, 3)])          # skip (2 is read by another consumer)
    b.poll(5, [(0, 2, 2), (0, 4, 4)])  # skip
    b.poll(6, [(0, 0, 0)])          # a new consumer starting anywhere is fine
    r = check(b.ops)
    assert anomalies(r) == {"nonmonotonic": 3}
    kinds = [(d["process"], d["kind"], d["from"], d["to"]) for d in r["details"]["nonmonotonic"]]
    assert kinds == [(4, "rewind", 1, 1), (4, "skip", 1, 3), (5, "skip", 2, 4)]


def test_unexpected_value_makes_the_run_invalid():
    b = Builder()
    b.send(0, 1, 0, offset=0)
    b.final_read(9, 0, [(0, 0, 1), (0, 1, 999)])
    r = check(b.ops)
    assert anomalies(r) == {}
    assert r["details"]["unexpected_count"] == 1
    assert r["valid"] is False


def test_failed_polls_count_against_availability_and_nemesis_is_ignored():
    b = Builder()
    b.nemesis("start", {"id": 0, "kind": "pause"})
    b.send(0, 1, 0, offset=0)
    b.poll(3, [], result="fail", error="timeout")
    b.poll(3, [(0, 0, 1)])
    b.send(0, 2, 0, result="fail")
    b.nemesis("stop", {"id": 0, "kind": "pause"})
    r = check(b.ops)
    assert r["availability"] == 0.5
    assert r["details"]["ops"][POLL] == {"invoke": 2, "ok": 1, "fail": 1, "info": 0, "open": 0}
    assert r["valid"] == "unknown" or r["valid"] is True


def test_details_are_capped_but_counts_are_not():
    b = Builder()
    for i in range(50):
        b.send(0, i, 0, offset=i)
    b.final_read(9, 0, [(0, 50, "x")])
    r = check(b.ops, detail_limit=5)
    assert r["lost"] == 50
    assert len(r["details"]["lost"]) == 5


def test_pairing_errors_are_reported():
    b = Builder()
    b.add("ok", SEND, 0, value=1, partition=0, offset=0)
    with pytest.raises(ValueError, match="matches no invocation"):
        check(b.ops)
    b = Builder()
    b.invoke(SEND, 0, value=1)
    b.invoke(SEND, 0, value=2)
    with pytest.raises(ValueError, match="invoked twice"):
        check(b.ops)


def test_synthetic_run_is_valid():
    r = check(synthetic_run(11, seconds=10))
    assert r["valid"] is True
    assert anomalies(r) == {}
    assert 0 < r["availability"] < 1


# --- generated histories with known anomalies ----------------------------------------------


@attrs.define
class Model:
    """A queue run simulated from a seed: what was sent, what the logs really hold, what was read."""

    partitions: int
    sends: list[tuple[int, int, str, bool]]  # value, partition, outcome, written (for info)
    rnd: random.Random
    logs: list[list[tuple[int, int]]] = attrs.Factory(list)  # per partition: (offset, value)
    acked: dict[int, tuple[int, int]] = attrs.Factory(dict)

    def __attrs_post_init__(self) -> None:
        self.logs = [[] for _ in range(self.partitions)]
        for value, p, outcome, written in self.sends:
            if outcome == "ok" or (outcome == "info" and written):
                offset = len(self.logs[p])
                self.logs[p].append((offset, value))
                if outcome == "ok":
                    self.acked[value] = (p, offset)

    def history(self, extra_poll_repeat: bool = False, corrupt_read: bool = False) -> list[Op]:
        """Sends, then consumers polling contiguous chunks, then a final read of each partition; the
        per-process events are interleaved at random, keeping each process's own order."""
        rnd = self.rnd
        logical: list[list[tuple[dict[str, Any], dict[str, Any]]]] = []  # per process
        procs: list[list[tuple[dict[str, Any], dict[str, Any]]]] = [[] for _ in range(3)]
        for value, p, outcome, _ in self.sends:
            inv = dict(f=SEND, value=value, key=f"k{p}", partition=p)
            done = dict(inv, type=outcome)
            if outcome == "ok":
                done["offset"] = self.acked[value][1]
            procs[rnd.randrange(3)].append((inv, done))
        logical.extend(procs)
        polls: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for p, log in enumerate(self.logs):
            pos = rnd.randrange(len(log)) if log else 0  # a consumer starting somewhere
            consumer: list[tuple[dict[str, Any], dict[str, Any]]] = []
            while pos < len(log):
                n = rnd.randint(1, 4)
                chunk = [(p, o, v) for o, v in log[pos:pos + n]]
                pos += n
                consumer.append((dict(f=POLL, partition=p), dict(f=POLL, partition=p, type="ok", records=chunk)))
            if extra_poll_repeat and consumer:
                i = rnd.randrange(len(consumer))
                consumer.insert(i + 1, consumer[i])
                extra_poll_repeat = False
            polls.extend(consumer)
            logical.append(consumer)
        if corrupt_read:
            nonempty = [c for c in polls if c[1]["records"]]
            inv, done = rnd.choice(nonempty)
            records = list(done["records"])
            p, o, _ = records[0]
            records[0] = (p, o, -1)  # a value nobody sent
            done["records"] = records
        for p, log in enumerate(self.logs):
            logical.append([(dict(f=FINAL_READ, partition=p),
                             dict(f=FINAL_READ, partition=p, type="ok", records=[(p, o, v) for o, v in log]))])
        return interleave(logical, rnd)


def interleave(per_process: list[list[tuple[dict[str, Any], dict[str, Any]]]], rnd: random.Random) -> list[Op]:
    queues = [[e for inv, done in ops for e in ((INVOKE, inv), (done["type"], done))] for ops in per_process]
    heads = [0] * len(queues)
    out: list[Op] = []
    while True:
        live = [i for i, q in enumerate(queues) if heads[i] < len(q)]
        if not live:
            return out
        i = rnd.choice(live)
        type_, fields = queues[i][heads[i]]
        heads[i] += 1
        fields = {k: v for k, v in fields.items() if k != "type"}
        out.append(Op(index=len(out), type=type_, process=i, time=len(out) * 1000, **fields))


@st.composite
def models(draw: st.DrawFn, min_sends: int = 1) -> Model:
    partitions = draw(st.integers(1, 3))
    n = draw(st.integers(min_sends, 30))
    sends = []
    for value in range(n):
        p = draw(st.integers(0, partitions - 1))
        outcome = draw(st.sampled_from(["ok", "ok", "ok", "fail", "info"]))
        written = draw(st.booleans())
        sends.append((value, p, outcome, written))
    return Model(partitions, sends, random.Random(draw(st.integers(0, 2**32))))


FAST = settings(max_examples=60, deadline=None)


@FAST
@given(models())
def test_generated_clean_histories_are_valid(model):
    r = check(model.history())
    assert anomalies(r) == {}, r["details"]
    assert r["valid"] is True
    assert r["acked"] == sum(1 for _, _, outcome, _ in model.sends if outcome == "ok")


@FAST
@given(models(), st.data())
def test_generated_lost_write(model, data):
    # an acknowledged record that is not the last of its partition disappears from the log
    candidates = [(p, i) for p, log in enumerate(model.logs) for i, (_, v) in enumerate(log[:-1])
                  if v in model.acked]
    if not candidates:
        return
    p, i = data.draw(st.sampled_from(candidates))
    _, value = model.logs[p].pop(i)
    r = check(model.history())
    assert r["lost"] == 1 and r["details"]["lost"][0]["value"] == value
    assert {k: v for k, v in anomalies(r).items() if k != "nonmonotonic"} == {"lost": 1}
    assert all(d["kind"] == "skip" for d in r["details"]["nonmonotonic"])
    assert r["valid"] is False


@FAST
@given(models())
def test_generated_unseen_tail(model):
    candidates = [p for p, log in enumerate(model.logs) if log and log[-1][1] in model.acked]
    if not candidates:
        return
    _, value = model.logs[candidates[0]].pop()
    r = check(model.history())
    assert anomalies(r) == {"unseen": 1}
    assert r["details"]["unseen"][0]["value"] == value
    assert r["valid"] is False


@FAST
@given(models(), st.data())
def test_generated_duplicate(model, data):
    if not model.acked:
        return
    value = data.draw(st.sampled_from(sorted(model.acked)))
    p = model.acked[value][0]
    model.logs[p].append((len(model.logs[p]), value))
    r = check(model.history())
    assert anomalies(r) == {"duplicated": 1}
    assert r["details"]["duplicated"][0]["value"] == value


@FAST
@given(models(), st.data())
def test_generated_aborted_read(model, data):
    failed = [(v, p) for v, p, outcome, _ in model.sends if outcome == "fail"]
    if not failed:
        return
    value, p = data.draw(st.sampled_from(failed))
    model.logs[p].append((len(model.logs[p]), value))
    r = check(model.history())
    assert anomalies(r) == {"aborted_reads": 1}
    assert r["details"]["aborted_reads"][0]["value"] == value


@FAST
@given(models())
def test_generated_rewinding_consumer(model):
    if not any(model.logs):
        return
    r = check(model.history(extra_poll_repeat=True))
    assert set(anomalies(r)) == {"nonmonotonic"}
    assert all(d["kind"] == "rewind" for d in r["details"]["nonmonotonic"])


@FAST
@given(models())
def test_generated_inconsistent_read(model):
    if not any(model.logs):
        return
    r = check(model.history(corrupt_read=True))
    assert anomalies(r) == {"inconsistent_offsets": 1}
    assert r["details"]["unexpected_count"] == 1
    assert r["valid"] is False


# --- pipelined producers --------------------------------------------------------------------


def pipelined_history(offsets: list[int], producer: str = "w0.0") -> list[Op]:
    """One producer instance's sends to partition 0, all in flight at once, acknowledged at
    ``offsets`` (in the order sent), then a final read of what they wrote."""
    rec = Recorder(clock=iter(range(0, 10**9, 10)).__next__)
    for i in range(len(offsets)):
        rec.invoke(SEND, i, value=i, key="k0", partition=0, producer=producer)
    for i, offset in enumerate(offsets):
        rec.ok(SEND, i, value=i, key="k0", partition=0, offset=offset, producer=producer)
    rec.invoke(FINAL_READ, "final", partition=0)
    by_offset = sorted((offset, value) for value, offset in enumerate(offsets))
    rec.ok(FINAL_READ, "final", partition=0, records=[(0, offset, value) for offset, value in by_offset])
    return rec.ops


def test_a_pipelined_producers_sends_must_hold_offsets_in_the_order_sent():
    in_order = check(pipelined_history([0, 1, 2, 3]))
    assert in_order["valid"] is True and in_order["reordered"] == 0
    assert in_order["details"]["pipelined_acked"] == 4

    # The broker appended the third request before the second: every record is there once, read in
    # offset order, so no other check notices — only the order they were sent in.
    swapped = check(pipelined_history([0, 2, 1, 3]))
    assert swapped["reordered"] == 1 and swapped["valid"] is False
    assert swapped["details"]["reordered"] == [
        {"producer": "w0.0", "partition": 0, "sent": [1, 2], "offsets": [2, 1]}]
    assert anomalies(swapped) == {}


def test_sends_of_different_producer_instances_may_interleave_in_any_order():
    ops = pipelined_history([1, 0])
    renamed = [attrs.evolve(op, producer="w0.1") if op.f == SEND and op.value == 1 else op for op in ops]
    results = check(renamed)
    assert results["reordered"] == 0 and results["valid"] is True


def test_membership_faults_are_counted_from_the_nemesis_records():
    def nemesis(index: int, **fault: Any) -> Op:
        return Op(index=index, type="info", f="nemesis", process="nemesis", time=index, fault=fault)

    history = [
        nemesis(0, kind="membership", variant="leader", phase="start", removed="c2"),
        nemesis(1, kind="membership", variant="leader", phase="stop", added=["c2"]),
        nemesis(2, kind="membership", variant="replace", phase="start", removed="c3", replaced="old-disk"),
        nemesis(3, kind="membership", variant="replace", phase="stop", added=["c3"]),
        nemesis(4, kind="membership", variant="remove", phase="start", skipped="c1 is not one of several voters"),
        nemesis(5, kind="membership", variant="remove", phase="start", error="RpcError('REQUEST_TIMED_OUT')"),
        nemesis(6, kind="kill", variant="one", phase="start"),
    ]
    assert membership_faults(history) == {
        "removed": 2, "leaders_removed": 1, "disks_replaced": 1, "added": 2, "skipped": 1,
        "errors": ["start remove: RpcError('REQUEST_TIMED_OUT')"]}
    assert membership_faults(history[6:]) == {"removed": 0, "leaders_removed": 0, "disks_replaced": 0, "added": 0,
                                              "skipped": 0, "errors": []}


def test_a_session_consumer_that_did_not_reach_a_high_watermark_makes_the_run_invalid():
    def history(reached: list[tuple[int, int]], result: str = "ok"):
        b = Builder()
        b.send(0, 1, 0, offset=0)
        b.send(0, 2, 1, offset=0)
        b.poll(5, [(0, 0, 1)], member="session")
        b.invoke(SESSION_DRAIN, 6, member="session-0", offsets=[(0, 1), (1, 1)])
        b.add(result, SESSION_DRAIN, 6, member="session-0", offsets=reached)
        b.final_read(9, 0, [(0, 0, 1)])
        b.final_read(10, 1, [(1, 0, 2)])
        return check(b.ops)

    caught_up = history([(0, 1), (1, 1)])
    assert caught_up["valid"] is True and caught_up["session_reads_behind"] == 0
    assert caught_up["details"]["session_consumers"] == {"drains": 1, "behind": [], "polls": 1, "records": 1}
    # Partition 1's record never reached the session consumer although the partition was healthy.
    behind = history([(0, 1), (1, 0)], result="info")
    assert behind["valid"] is False and behind["session_reads_behind"] == 1
    assert behind["details"]["session_consumers"]["behind"] == [
        {"member": "session-0", "partition": 1, "high_watermark": 1, "reached": 0}]
    # Positions short of the high watermark count even in an `ok` drain.
    assert history([(0, 1), (1, 0)])["session_reads_behind"] == 1
    # No session consumer: no such check.
    b = Builder()
    b.send(0, 1, 0, offset=0)
    b.final_read(9, 0, [(0, 0, 1)])
    assert check(b.ops)["session_reads_behind"] is None
