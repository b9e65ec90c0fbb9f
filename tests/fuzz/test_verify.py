"""How the fuzzer judges acknowledged batches and findings, on logs and reports made by hand."""

from __future__ import annotations

import json

from kraftpy.protocol.batch_header import stamp
from kraftpy.protocol.records import SimpleRecord, build_batch
from tests.fuzz.frames import KAFKA, Frame
from tests.fuzz.known_bugs import KnownBug
from tests.fuzz.report import Finding, Report
from tests.fuzz.verify import Ack, PartitionLog, StoredBatch, decode_stored, judge


def batch(*values: bytes) -> bytes:
    return build_batch([SimpleRecord(b"k", v, timestamp=1000) for v in values])


def stored(data: bytes, base_offset: int) -> StoredBatch:
    """The batch as the leader keeps it: base offset and leader epoch stamped."""
    data = bytearray(data)
    stamp(data, 0, base_offset, 3)
    decoded, error = decode_stored(bytes(data))
    count = decoded.header.last_offset_delta + 1 if decoded else 1
    return StoredBatch(base_offset, base_offset + count, bytes(data), decoded, error)


def ack(data: bytes, base_offset: int, frame: int = 1) -> Ack:
    return Ack("t", 0, base_offset, data, frame)


def test_an_acknowledged_batch_stored_as_sent_passes():
    a, b = batch(b"a"), batch(b"b", b"c")
    log = PartitionLog(batches=[stored(a, 0), stored(b, 1)], high_watermark=3)
    assert judge([ack(a, 0), ack(b, 1)], log) == []


def test_a_batch_missing_at_the_acknowledged_offset():
    a = batch(b"a")
    log = PartitionLog(batches=[stored(a, 0)], high_watermark=1)
    [problem] = judge([ack(batch(b"x"), 5)], log)
    assert problem.kind == "acked-missing"


def test_another_batch_at_the_acknowledged_offset():
    a = batch(b"a")
    log = PartitionLog(batches=[stored(a, 0)], high_watermark=1)
    [problem] = judge([ack(batch(b"other"), 0)], log)
    assert problem.kind == "acked-different"


def test_an_acknowledged_batch_a_consumer_cannot_decode():
    bad = bytearray(batch(b"a"))
    bad[-1] ^= 0xFF  # CRC no longer matches
    log = PartitionLog(batches=[stored(bytes(bad), 0)], high_watermark=1)
    log.poison = 0
    [problem] = judge([ack(bytes(bad), 0)], log)
    assert problem.kind == "acked-unreadable"


def test_a_readable_batch_behind_an_unreadable_one_is_lost_to_consumers():
    bad = bytearray(batch(b"a"))
    bad[-1] ^= 0xFF
    good = batch(b"b")
    log = PartitionLog(batches=[stored(bytes(bad), 0), stored(good, 1)], high_watermark=2, poison=0)
    kinds = sorted(p.kind for p in judge([ack(bytes(bad), 0), ack(good, 1)], log))
    assert kinds == ["acked-behind-poison", "acked-unreadable"]


def frame(klass: str = "valid", tags: frozenset[str] = frozenset()) -> Frame:
    return Frame(index=3, port=KAFKA, api="Produce v9", klass=klass, detail="d", data=b"\0\0\0\0", tags=tags)


def test_findings_of_a_tolerated_known_bug_do_not_fail_the_run():
    bug = KnownBug("b", "why", "where", {"t"}, tolerate=("unknown-server-error",))
    report = Report(seed=1, frames_planned=1)
    report.tolerated = [bug]
    report.add(Finding("unknown-server-error", frame(tags=frozenset({"t"}))))
    assert report.failures() == []
    report.add(Finding("unknown-server-error", frame(tags=frozenset({"other"}))))
    assert [f.kind for f in report.failures()] == ["unknown-server-error"]
    report.add(Finding("crash", None, "exit status 1"))
    assert sorted(f.kind for f in report.failures()) == ["crash", "unknown-server-error"]


def test_the_report_groups_findings_and_serialises():
    report = Report(seed=9, frames_planned=10)
    for _ in range(7):
        report.add(Finding("hang", frame("bytes:bitflip"), "no answer"))
    report.count(frame("bytes:bitflip"), "hang")
    data = json.loads(json.dumps(report.to_json(), default=str))
    [group] = data["findings"]
    assert group["count"] == 7 and len(group["examples"]) == 5
    assert group["examples"][0]["replay"] == "python -m tests.fuzz replay --seed 9 --frame 3"
    assert data["passed"] is False
    assert "hang x7" in report.summary()
