"""A duplicated value's copies traced to their batch headers in segment files laid out as a broker's."""

from __future__ import annotations

from pathlib import Path

from kraftpy.protocol.records import SimpleRecord, build_batch
from kraftpy.storage.segment import segment_file_name
from tests.jepsen import report
from tests.jepsen.provenance import (
    attach_provenance,
    batch_holding,
    explain_duplicates,
    partition_batches,
    replica_agreement,
    verdict,
)

TOPIC = "jepsen"


def _batch(base_offset: int, values: list[int], *, pid: int = 7, epoch: int = 0, seq: int = 0,
           leader_epoch: int = 1) -> bytes:
    return build_batch([SimpleRecord(b"k", str(v).encode()) for v in values], base_offset=base_offset,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, partition_leader_epoch=leader_epoch)


def _write(data_dir: Path, partition: int, segments: dict[int, list[bytes]]) -> None:
    directory = data_dir / f"{TOPIC}-{partition}"
    directory.mkdir(parents=True, exist_ok=True)
    for base, batches in segments.items():
        (directory / segment_file_name(base)).write_bytes(b"".join(batches))
    (directory / "leader-epoch-checkpoint").write_text("0\n0\n")  # other files are ignored


def test_the_batch_holding_an_offset_across_segments(tmp_path):
    _write(tmp_path, 0, {0: [_batch(0, [1, 2], seq=0), _batch(2, [3], seq=2)],
                         3: [_batch(3, [4, 5, 6], seq=3, epoch=1, leader_epoch=2)]})
    part = tmp_path / f"{TOPIC}-0"
    assert batch_holding(part, 1) == {"base_offset": 0, "last_offset": 1, "producer_id": 7, "producer_epoch": 0,
                                      "sequence": 1, "leader_epoch": 1}
    assert batch_holding(part, 2)["sequence"] == 2
    held = batch_holding(part, 5)
    assert (held["base_offset"], held["producer_epoch"], held["sequence"], held["leader_epoch"]) == (3, 1, 5, 2)
    assert held["last_offset"] == 5
    assert batch_holding(part, 6) is None  # past the end
    assert batch_holding(tmp_path / f"{TOPIC}-9", 0) is None  # no such partition here


def test_a_corrupt_tail_before_the_offset_finds_nothing(tmp_path):
    _write(tmp_path, 0, {0: [_batch(0, [1]), b"\x00" * 30]})
    assert batch_holding(tmp_path / f"{TOPIC}-0", 0)["base_offset"] == 0
    assert batch_holding(tmp_path / f"{TOPIC}-0", 1) is None


def test_verdicts_tell_a_broker_fault_from_a_client_resend(tmp_path):
    b1, b2 = tmp_path / "b1", tmp_path / "b2"
    # value 10 appended twice in one session (what the broker must never do), value 20 in two epochs,
    # value 30 by two producers; b2 holds partition 0 only up to offset 3
    _write(b1, 0, {0: [_batch(0, [10], seq=4), _batch(1, [10], seq=4), _batch(2, [20], seq=5),
                       _batch(3, [20], epoch=1, seq=0), _batch(4, [30], pid=8, seq=0), _batch(5, [30], pid=9, seq=0)]})
    _write(b2, 0, {0: [_batch(0, [10], seq=4), _batch(1, [10], seq=4), _batch(2, [20], seq=5)]})
    duplicated = [{"value": v, "at": [{"partition": 0, "offset": a, "seen": []}, {"partition": 0, "offset": b, "seen": []}]}
                  for v, a, b in ((10, 0, 1), (20, 2, 3), (30, 4, 5), (40, 6, 7))]
    out = explain_duplicates(duplicated, TOPIC, {"b1": b1, "b2": b2})
    assert [(o["value"], o["verdict"]) for o in out] == [
        (10, "same session"), (20, "new epoch"), (30, "new producer"), (40, "unknown")]
    assert [c["held_by"] for c in out[1]["copies"]] == [["b1", "b2"], ["b1"]]
    assert [(c["producer_epoch"], c["sequence"]) for c in out[1]["copies"]] == [(0, 5), (1, 0)]
    assert out[3]["copies"][0]["held_by"] == [] and "producer_id" not in out[3]["copies"][0]
    assert verdict([]) == "unknown"

    results = {"valid": False, "acked": 6, "duplicated": 4, "seed": 1, "nemesis": ["kill"], "availability": None,
               "details": {"duplicated": duplicated, "duplicated_provenance": out}}
    text = report.summary_text(results, [])
    assert "duplicated value 10: same session: p0@0 producer 7 epoch 0 seq 4 leader epoch 1 on b1,b2" in text
    assert "duplicated value 20: new epoch:" in text and "p0@3 producer 7 epoch 1 seq 0" in text


def test_attached_only_when_the_checker_found_duplicates(tmp_path):
    _write(tmp_path / "b1", 0, {0: [_batch(0, [10], seq=0), _batch(1, [10], epoch=1, seq=0)]})
    clean = {"duplicated": 0, "details": {"duplicated": []}}
    attach_provenance(clean, TOPIC, {"b1": tmp_path / "b1"})
    assert "duplicated_provenance" not in clean["details"]
    found = {"duplicated": 1, "details": {"duplicated": [
        {"value": 10, "at": [{"partition": 0, "offset": 0}, {"partition": 0, "offset": 1}]}]}}
    attach_provenance(found, TOPIC, {"b1": tmp_path / "b1"})
    assert [p["verdict"] for p in found["details"]["duplicated_provenance"]] == ["new epoch"]


def test_replicas_that_agree_one_behind_and_one_diverged(tmp_path):
    dirs = {name: tmp_path / name for name in ("b4", "b5", "b6")}
    first, second, third = _batch(0, [1, 2]), _batch(2, [3], seq=2), _batch(3, [4], seq=3)
    other = _batch(3, [40], seq=3, leader_epoch=2)  # offset 3 written in another leader's history
    # Partition 0: the same batches on every broker, whatever the segments (rolls are each replica's own).
    _write(dirs["b4"], 0, {0: [first, second, third]})
    _write(dirs["b5"], 0, {0: [first], 2: [second, third]})
    _write(dirs["b6"], 0, {0: [first, second], 3: [third]})
    # Partition 1: b6 has not fetched the last batch.
    for name in ("b4", "b5"):
        _write(dirs[name], 1, {0: [first, second, third]})
    _write(dirs["b6"], 1, {0: [first, second]})
    # Partition 2: b5 holds another batch at offset 3.
    _write(dirs["b4"], 2, {0: [first, second, third]})
    _write(dirs["b5"], 2, {0: [first, second, other]})
    _write(dirs["b6"], 2, {0: [first, second]})
    assert [b[:2] for b in partition_batches(dirs["b5"] / f"{TOPIC}-0")] == [(0, 1), (2, 2), (3, 3)]
    found = replica_agreement(TOPIC, dirs)
    assert (found["partitions"], found["replicas"]) == (3, 9)
    assert [d["partition"] for d in found["behind"]] == [1]
    assert found["behind"][0]["replicas"]["b6"] == {"batches": 2, "last_offset": 2}
    assert [d["partition"] for d in found["diverged"]] == [2]


def test_a_torn_tail_ends_a_replicas_batches(tmp_path):
    whole = _batch(0, [1, 2])
    _write(tmp_path, 0, {0: [whole, _batch(2, [3])[:20]]})
    assert [b[:2] for b in partition_batches(tmp_path / f"{TOPIC}-0")] == [(0, 1)]
