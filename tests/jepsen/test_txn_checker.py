"""The transaction checks on hand-written histories: a clean run passes, and each anomaly (aborted
reads, lost and duplicated committed writes, g0 and g1c cycles, nonmonotonic polls, a transform
that skipped a source record) is found, while what Kafka allows (write interleavings of concurrent
transactions, read_uncommitted reading an aborted record) is not reported."""

from __future__ import annotations

from typing import Any

from tests.jepsen.history import ASSIGN, INFO, REVOKE, TXN, TXN_FINAL_READ, TXN_POLL
from tests.jepsen.report import summary_text
from tests.jepsen.synthetic import Builder
from tests.jepsen.txn_checker import HARD, check_txn, derived_value

Write = tuple[str, int, int, Any]


def txn(b: Builder, process: int, writes: list[Write], result: str = "ok", *, member: str = "p1",
        reads: list[Write] | None = None, offsets: list[tuple[int, int]] | None = None,
        source: str | None = None, error: str | None = None, complete: bool = True) -> None:
    b.invoke(TXN, process, member=member, txn_id=f"tx-{member}", key=source, offsets=offsets,
             writes=[(t, p, None, v) for t, p, _, v in writes])
    if complete:
        b.add(result, TXN, process, member=member, txn_id=f"tx-{member}", key=source, offsets=offsets,
              writes=writes, reads=reads, error=error)


def poll(b: Builder, process: int, reads: list[Write], isolation: str = "read_committed",
         member: str = "rc1") -> None:
    b.invoke(TXN_POLL, process, member=member, isolation=isolation)
    b.add("ok", TXN_POLL, process, member=member, isolation=isolation, reads=reads)


def final_read(b: Builder, process: int, topic: str, partition: int, reads: list[Write],
               error: str | None = None) -> None:
    b.invoke(TXN_FINAL_READ, process, key=topic, partition=partition, isolation="read_committed")
    b.add("ok", TXN_FINAL_READ, process, key=topic, partition=partition, isolation="read_committed",
          reads=reads, error=error)


def anomalies(r: dict[str, Any]) -> dict[str, int]:
    return {k: r[k] for k in HARD if r[k]}


def clean_run() -> Builder:
    """Two producers, one deliberate abort, a transform, read_committed and read_uncommitted polls,
    the final read."""
    b = Builder()
    a0 = [("a", 0, 0, "p1-0"), ("b", 1, 0, "p1-1")]
    txn(b, 1, a0)  # offsets 1 hold the markers
    aborted = [("a", 0, 2, "p1-2"), ("b", 1, 2, "p1-3")]
    txn(b, 1, aborted, "fail", error="deliberate abort")
    a2 = [("a", 0, 4, "p2-0"), ("a", 1, 0, "p2-1")]
    txn(b, 2, a2, member="p2")
    poll(b, 10, [("a", 0, 0, "p1-0"), ("b", 1, 0, "p1-1"), ("a", 0, 4, "p2-0"), ("a", 1, 0, "p2-1")])
    poll(b, 11, [("a", 0, 0, "p1-0"), ("a", 0, 2, "p1-2"), ("a", 0, 4, "p2-0")], "read_uncommitted", "ru1")
    # the transform reads topic a and writes c, sending the offsets after what it read
    b.add(INFO, ASSIGN, 20, member="ctp1", partitions=[0, 1])
    txn(b, 20, [("c", 0, 0, derived_value("p1-0")), ("c", 0, 1, derived_value("p2-0")),
                ("c", 1, 0, derived_value("p2-1"))], member="ctp1", source="a",
        reads=[("a", 0, 0, "p1-0"), ("a", 0, 4, "p2-0"), ("a", 1, 0, "p2-1")], offsets=[(0, 6), (1, 2)])
    for topic, p, reads in (("a", 0, [("a", 0, 0, "p1-0"), ("a", 0, 4, "p2-0")]), ("a", 1, [("a", 1, 0, "p2-1")]),
                            ("b", 1, [("b", 1, 0, "p1-1")]),
                            ("c", 0, [("c", 0, 0, "c:p1-0"), ("c", 0, 1, "c:p2-0")]),
                            ("c", 1, [("c", 1, 0, "c:p2-1")])):
        final_read(b, 30 + p, topic, p, reads)
    return b


def test_a_clean_run_is_ok():
    b = clean_run()
    r = check_txn(b.ops, seed=3, nemesis=["kill"])
    assert anomalies(r) == {}, r["details"]
    assert r["ok"] is True and r["valid"] is True and r["workload"] == "txn"
    d = r["details"]
    assert d["transactions"] == {"committed": 3, "aborted": 1, "unknown": 0, "deliberately_aborted": 1,
                                 "transform_committed": 1}
    assert d["read_uncommitted"] == {"records": 3, "aborted_records_seen": 1}  # allowed below read_committed
    assert d["unseen_count"] == 0 and d["transform_committed_offsets"] == [["a", 0, 6], ["a", 1, 2]]
    assert r["acked"] == 7
    text = summary_text(r, [])
    assert "aborted_reads=0" in text and "g1c=0" in text


def test_a_read_committed_read_of_an_aborted_record_is_an_aborted_read():
    b = clean_run()
    poll(b, 12, [("a", 0, 2, "p1-2")])
    r = check_txn(b.ops)
    assert anomalies(r) == {"aborted_reads": 1}
    item = r["details"]["aborted_reads"][0]
    assert item["value"] == "p1-2" and item["at"] == ["a", 0, 2] and item["writer"]["status"] == "aborted"
    assert r["ok"] is False and r["valid"] is False


def test_a_value_only_aborted_transactions_wrote_is_an_aborted_read_wherever_it_is_read():
    b = Builder()
    txn(b, 1, [("a", 0, 0, "x")], "fail", error="deliberate abort")
    txn(b, 2, [("a", 0, 2, "y")])
    poll(b, 10, [("a", 0, 1, "x"), ("a", 0, 2, "y")])  # at an offset no report named
    assert anomalies(check_txn(b.ops)) == {"aborted_reads": 1}


def test_a_committed_record_nobody_read_behind_a_read_is_lost_and_without_one_unseen():
    b = Builder()
    txn(b, 1, [("a", 0, 0, "x"), ("a", 0, 1, "y")])
    txn(b, 2, [("a", 0, 3, "z")], member="p2")
    r = check_txn(b.ops)
    assert anomalies(r) == {} and r["valid"] == "unknown" and r["ok"] is False  # nothing read: unseen
    assert r["details"]["unseen_count"] == 3
    poll(b, 10, [("a", 0, 3, "z")])  # the reader went past x and y (a new session: nothing skipped)
    r = check_txn(b.ops)
    assert anomalies(r) == {"lost_committed_writes": 2}
    assert {i["kind"] for i in r["details"]["lost_committed_writes"]} == {"never-read"}


def test_a_completed_final_read_covers_its_partition():
    b = Builder()
    txn(b, 1, [("a", 0, 0, "x")])
    final_read(b, 30, "a", 0, [])
    assert anomalies(check_txn(b.ops)) == {"lost_committed_writes": 1}
    b = Builder()
    txn(b, 1, [("a", 0, 0, "x")])
    final_read(b, 30, "a", 0, [], error="incomplete")
    assert check_txn(b.ops)["valid"] == "unknown"


def test_a_session_that_reads_around_a_committed_record_skipped_it():
    b = Builder()
    txn(b, 1, [("a", 0, 0, "w"), ("a", 0, 1, "x"), ("a", 0, 2, "y")])
    poll(b, 10, [("a", 0, 0, "w")])
    poll(b, 10, [("a", 0, 2, "y")])
    poll(b, 11, [("a", 0, 1, "x")])  # another reader has it: still skipped by the first
    r = check_txn(b.ops)
    assert anomalies(r) == {"lost_committed_writes": 1}
    item = r["details"]["lost_committed_writes"][0]
    assert item["kind"] == "skipped" and item["value"] == "x" and item["between"] == [0, 2]


def test_a_committed_value_at_two_offsets_or_committed_twice_is_duplicated():
    b = Builder()
    txn(b, 1, [("a", 0, 0, "x")])
    poll(b, 10, [("a", 0, 0, "x"), ("a", 0, 3, "x")])
    r = check_txn(b.ops)
    assert anomalies(r)["duplicated_committed_writes"] == 1
    # the transform commits the derived record of one source record twice: exactly-once broken
    b = Builder()
    txn(b, 1, [("a", 0, 0, "s")])
    txn(b, 20, [("c", 0, 0, "c:s")], member="ctp1", source="a", reads=[("a", 0, 0, "s")], offsets=[(0, 2)])
    txn(b, 21, [("c", 0, 2, "c:s")], member="ctp2", source="a", reads=[("a", 0, 0, "s")], offsets=[(0, 2)])
    r = check_txn(b.ops)
    assert anomalies(r) == {"duplicated_committed_writes": 1}
    assert len(r["details"]["duplicated_committed_writes"][0]["committed_by"]) == 2


def test_concurrent_transactions_may_interleave_both_ways():
    b = Builder()
    b.invoke(TXN, 1, member="p1", writes=[("a", 0, None, "x1"), ("a", 1, None, "y1")])
    b.invoke(TXN, 2, member="p2", writes=[("a", 0, None, "x2"), ("a", 1, None, "y2")])
    b.add("ok", TXN, 1, member="p1", writes=[("a", 0, 0, "x1"), ("a", 1, 1, "y1")])
    b.add("ok", TXN, 2, member="p2", writes=[("a", 0, 1, "x2"), ("a", 1, 0, "y2")])
    r = check_txn(b.ops)
    assert anomalies(r) == {}
    assert r["details"]["ww_interleavings"] == 1  # allowed: Kafka appends when a record is sent


def test_a_record_appended_before_a_transaction_that_ended_before_it_began_is_g0():
    b = Builder()
    txn(b, 1, [("a", 0, 5, "x")])  # committed and acknowledged first
    txn(b, 2, [("a", 0, 2, "y")], member="p2")  # began after, yet sits below it
    r = check_txn(b.ops)
    assert anomalies(r) == {"g0": 1}
    moments = [m["moment"] for m in r["details"]["g0"][0]["cycle"]]
    assert "append" in moments and "time" in moments


def test_reading_a_transaction_that_had_not_begun_is_g1c():
    b = Builder()
    b.invoke(TXN_POLL, 10, member="rc1", isolation="read_committed")
    b.add("ok", TXN_POLL, 10, member="rc1", isolation="read_committed", reads=[("a", 0, 0, "x")])
    txn(b, 1, [("a", 0, 0, "x")])  # invoked only after the poll returned its record
    r = check_txn(b.ops)
    assert anomalies(r) == {"g1c": 1}
    assert any(step["then"] == "wr" for step in r["details"]["g1c"][0]["cycle"])


def test_two_transactions_that_each_read_the_other_form_a_g1c_cycle():
    b = Builder()
    b.invoke(TXN, 1, member="t1", key="a", writes=[("a", 0, None, "x")])
    b.invoke(TXN, 2, member="t2", key="a", writes=[("a", 1, None, "y")])
    b.add("ok", TXN, 1, member="t1", key="a", writes=[("a", 0, 0, "x")], reads=[("a", 1, 0, "y")])
    b.add("ok", TXN, 2, member="t2", key="a", writes=[("a", 1, 0, "y")], reads=[("a", 0, 0, "x")])
    r = check_txn(b.ops)
    assert r["g1c"] == 1 and r["g0"] == 0


def test_a_reader_going_back_in_a_partition_is_nonmonotonic_unless_it_was_reassigned():
    b = Builder()
    txn(b, 1, [("a", 0, 0, "x"), ("a", 0, 1, "y")])
    poll(b, 10, [("a", 0, 0, "x"), ("a", 0, 1, "y")])
    poll(b, 10, [("a", 0, 1, "y")])
    r = check_txn(b.ops)
    assert anomalies(r) == {"nonmonotonic_polls": 1}
    assert r["details"]["nonmonotonic_polls"][0] | {"ops": None} == {
        "reader": "rc1", "process": 10, "isolation": "read_committed", "topic": "a", "partition": 0,
        "from": 1, "to": 1, "ops": None}
    b = Builder()
    txn(b, 1, [("a", 0, 0, "x"), ("a", 0, 1, "y")])
    poll(b, 10, [("a", 0, 0, "x"), ("a", 0, 1, "y")])
    b.add(INFO, REVOKE, 10, member="rc1", partitions=[0])
    b.add(INFO, ASSIGN, 10, member="rc1", partitions=[0])
    poll(b, 10, [("a", 0, 1, "y")])
    assert anomalies(check_txn(b.ops)) == {}


def test_a_source_record_below_the_committed_offset_without_its_derived_record_is_transform_lost():
    b = Builder()
    txn(b, 1, [("a", 0, 0, "s0"), ("a", 0, 1, "s1")])
    txn(b, 20, [("c", 0, 0, "c:s0")], member="ctp1", source="a", reads=[("a", 0, 0, "s0")], offsets=[(0, 3)])
    final_read(b, 30, "a", 0, [("a", 0, 0, "s0"), ("a", 0, 1, "s1")])
    r = check_txn(b.ops)
    assert anomalies(r) == {"transform_lost": 1}
    assert r["details"]["transform_lost"][0]["source"] == "s1"


def test_a_transaction_of_unknown_outcome_may_have_committed():
    b = Builder()
    txn(b, 1, [("a", 0, 0, "x")], "info", error="commit: _TIMED_OUT")
    txn(b, 2, [("a", 0, 2, "y")], "info", complete=False)  # its client was killed
    poll(b, 10, [("a", 0, 0, "x")])
    final_read(b, 30, "a", 0, [("a", 0, 0, "x")])
    r = check_txn(b.ops)
    assert anomalies(r) == {} and r["valid"] is True
    assert r["details"]["transactions"]["unknown"] == 2
