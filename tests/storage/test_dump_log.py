"""`kraftpy dump-log`: batches, records with --deep, index files, and a corrupt batch."""

from __future__ import annotations

from kraftpy.cli.main import app
from kraftpy.protocol.records import Compression, SimpleRecord, build_batch
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig
from tests.helpers.cli_runner import CliRunner

from ._support import ManualClock

runner = CliRunner()


def make_log(tmp_path):
    log = Log.open(tmp_path, LogConfig(index_interval_bytes=10), clock=ManualClock())
    log.append_as_leader(build_batch([SimpleRecord(b"k1", b"v1", timestamp=5),
                                      SimpleRecord(None, b"\x00\x1b[31mred\n", (("h", b"x"), ("n", None)),
                                                   timestamp=6)]), 3)
    log.append_as_leader(build_batch([SimpleRecord(b"k2", b"v" * 50, timestamp=7)], compression=Compression.GZIP,
                                     producer_id=9, producer_epoch=1, base_sequence=0), 3)
    log.append_as_leader(build_batch([SimpleRecord(b"k3", None, timestamp=8)]), 4)
    log.close()
    return tmp_path / "00000000000000000000.log"


def test_dump_prints_every_batch(tmp_path):
    path = make_log(tmp_path)
    result = runner.invoke(app, ["dump-log", str(path)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("baseOffset")]
    assert len(lines) == 3
    assert "baseOffset: 0 lastOffset: 1 count: 2 leaderEpoch: 3 codec: none" in lines[0]
    assert "position: 0 " in lines[0] and "crcValid: true" in lines[0]
    assert "codec: gzip producerId: 9 producerEpoch: 1 baseSequence: 0" in lines[1]
    assert "baseOffset: 3 lastOffset: 3 count: 1 leaderEpoch: 4" in lines[2]
    assert "| offset" not in result.output


def test_deep_prints_records_safely(tmp_path):
    path = make_log(tmp_path)
    result = runner.invoke(app, ["dump-log", "--deep", str(path)])
    assert result.exit_code == 0, result.output
    records = [line for line in result.output.splitlines() if line.startswith("| offset")]
    assert len(records) == 4
    assert records[0] == "| offset: 0 timestamp: 5 key: b'k1' value: b'v1' headers: []"
    assert "\x1b" not in result.output
    assert r"value: b'\x00\x1b[31mred\n' headers: ['h': b'x', 'n': None]" in records[1]
    assert "key: b'k3' value: None" in records[3]


def test_index_files_are_dumped(tmp_path):
    make_log(tmp_path)
    result = runner.invoke(app, ["dump-log", str(tmp_path / "00000000000000000000.index"),
                                 str(tmp_path / "00000000000000000000.timeindex")])
    assert result.exit_code == 0, result.output
    assert "offset: 2 position: " in result.output
    assert "timestamp: 7 offset: 2" in result.output


def test_corrupt_batch_exits_non_zero_naming_the_position(tmp_path):
    path = make_log(tmp_path)
    data = bytearray(path.read_bytes())
    second = 12 + int.from_bytes(data[8:12], "big")
    data[second + 30] ^= 0xFF
    path.write_bytes(bytes(data))
    result = runner.invoke(app, ["dump-log", str(path)])
    assert result.exit_code == 1
    assert "baseOffset: 0 " in result.output
    assert "crcValid: false" in result.output
    assert f"Corrupt batch at byte position {second}" in result.output


def test_truncated_batch_exits_non_zero(tmp_path):
    path = make_log(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-5])
    result = runner.invoke(app, ["dump-log", "--deep", str(path)])
    assert result.exit_code == 1
    position = 0
    starts = []
    while position < len(data):
        starts.append(position)
        position += 12 + int.from_bytes(data[position + 8 : position + 12], "big")
    assert f"Corrupt batch at byte position {starts[-1]}: truncated batch" in result.output


def test_missing_file(tmp_path):
    result = runner.invoke(app, ["dump-log", str(tmp_path / "nope.log")])
    assert result.exit_code == 1


def test_a_directory_dumps_its_segments_in_offset_order(tmp_path):
    log = Log.open(tmp_path, LogConfig(segment_bytes=200), clock=ManualClock())
    for i in range(6):
        log.append_as_leader(build_batch([SimpleRecord(b"k", b"v" * 60, timestamp=i)]), 1)
    log.close()
    segments = sorted(tmp_path.glob("*.log"))
    assert len(segments) > 2
    result = runner.invoke(app, ["dump-log", str(tmp_path)])
    assert result.exit_code == 0, result.output
    dumped = [line.split()[1] for line in result.output.splitlines() if line.startswith("Dumping")]
    assert dumped == [str(p) for p in segments]
    bases = [int(line.split()[1]) for line in result.output.splitlines() if line.startswith("baseOffset")]
    assert bases == list(range(6))
