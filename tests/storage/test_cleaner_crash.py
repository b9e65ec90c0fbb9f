"""A crash at every step of the cleaner's segment swap leaves a log that reopens as the old segments
or the new ones, never a mix.

One pass over the log below makes several swaps (one of them replacing several segments). For each
step of the swap protocol, the pass is stopped right after it — by an exception (the files as a
crash leaves them, the descriptors abandoned) and by SIGKILL in a real child process — and the log
is reopened as after an unclean stop. It must read back, every batch CRC-checked, exactly as the
log did before the pass with its first k swaps done, where k counts the swaps that reached their
commit point (``<base>.log.swap``) before the crash; and no temporary file may remain.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kraftpy.protocol.records import SimpleRecord, build_batch, iter_decoded
from kraftpy.storage.checkpoint import LogOffsets
from kraftpy.storage.cleaner import Cleaner, CleanerConfig, log_to_clean
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=400, compact=True, delete=False)
COMMIT = "cleaned log renamed .swap"


class Crash(Exception):
    pass


def build(directory: Path) -> LogOffsets:
    """A closed log whose one pass makes several swaps, one of several segments."""
    log = Log.open(directory, CONFIG, clock=lambda: NOW)
    for round_ in range(3):
        for i in range(6):
            log.append_as_leader(build_batch([SimpleRecord(b"k%d" % (i % 3), b"r%d-%d" % (round_, i), timestamp=NOW)]),
                                 0)
        log.roll()
        log.append_as_leader(build_batch([SimpleRecord(b"keep-%d" % round_, b"x" * 200, timestamp=NOW)]), 0)
        log.roll()
    log.append_as_leader(build_batch([SimpleRecord(b"tail", b"t", timestamp=NOW)]), 0)
    log.update_high_watermark(log.log_end_offset)
    offsets = log.offsets
    log.close()
    return offsets


def state_of(log: Log) -> tuple[list, list]:
    """What a reader can see: the records from the start, and the segments (a reader starting at any
    offset lands in one of them)."""
    return read_back(log), [(segment.base_offset, segment.size) for segment in log.segments]


def read_back(log: Log) -> list[tuple[int, bytes, bytes]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 20, whole_batches=True)
        if not data:
            break
        for batch in iter_decoded(data):
            out.extend((r.offset, r.key, r.value) for r in batch.records)
            offset = batch.next_offset
    return out


def clean_once(directory: Path, offsets: LogOffsets, crash_point) -> None:
    log = Log.open(directory, CONFIG, clock=lambda: NOW, offsets=offsets, clean_shutdown=True)
    cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=1 << 16))
    result = cleaner.clean(log, log_to_clean(log, None, NOW), NOW, {})
    try:
        result.swap_in(log, crash_point)
    except Crash:
        log.abandon()
        return
    log.close()


def reopened(directory: Path, offsets: LogOffsets) -> list:
    log = Log.open(directory, CONFIG, clock=lambda: NOW, offsets=offsets, clean_shutdown=False)
    try:
        assert not [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap", ".deleted"))]
        return state_of(log)
    finally:
        log.close()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """The original log, every step of its pass in order, and the states after 0, 1, ... swaps."""
    root = tmp_path_factory.mktemp("scenario")
    original = root / "original"
    offsets = build(original)
    reference = root / "reference"
    shutil.copytree(original, reference)
    log = Log.open(reference, CONFIG, clock=lambda: NOW, offsets=offsets, clean_shutdown=True)
    states = [state_of(log)]
    steps: list[str] = []

    def record(step: str) -> None:
        steps.append(step)
        if step == "swapped":
            states.append(state_of(log))

    result = Cleaner(CleanerConfig(dedupe_buffer_size=1 << 16)).clean(log, log_to_clean(log, None, NOW), NOW, {})
    result.swap_in(log, record)
    log.close()
    assert len(states) >= 3, "the scenario must make at least two swaps"
    assert any(len(swap.replaces) > 1 for swap in result.swaps)
    return original, offsets, steps, states


def crash_after(stop_at: int):
    """A crash point that raises Crash on its call number ``stop_at`` (0 first)."""
    calls = [0]

    def crash_point(name: str) -> None:
        if calls[0] == stop_at:
            raise Crash(name)
        calls[0] += 1

    return crash_point


def expected_state(steps: list[str], crashed_after: int, states: list) -> list:
    committed = steps[: crashed_after + 1].count(COMMIT)
    return states[committed]


def test_an_injected_crash_after_any_step_reopens_as_old_or_new(scenario, tmp_path):
    original, offsets, steps, states = scenario
    for index, step in enumerate(steps):
        directory = tmp_path / f"crash-{index}"
        shutil.copytree(original, directory)
        clean_once(directory, offsets, crash_after(index))
        assert reopened(directory, offsets) == expected_state(steps, index, states), f"crash after {step!r}"


CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, sys.argv[3])
    from tests.storage.test_cleaner_crash import clean_once
    from kraftpy.storage.checkpoint import LogOffsets
    stop_at = int(sys.argv[2])
    calls = [0]
    def crash_point(name):
        if calls[0] == stop_at:
            os.kill(os.getpid(), signal.SIGKILL)
        calls[0] += 1
    start, recovery, hw = (int(x) for x in sys.argv[4].split(","))
    clean_once(__import__("pathlib").Path(sys.argv[1]), LogOffsets(start, recovery, hw), crash_point)
""")


def test_sigkill_after_any_step_reopens_as_old_or_new(scenario, tmp_path):
    original, offsets, steps, states = scenario
    packed = f"{offsets.log_start_offset},{offsets.recovery_point},{offsets.high_watermark}"
    for index, step in enumerate(steps):
        directory = tmp_path / f"kill-{index}"
        shutil.copytree(original, directory)
        proc = subprocess.run([sys.executable, "-c", CHILD, str(directory), str(index), str(ROOT), packed],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert reopened(directory, offsets) == expected_state(steps, index, states), f"killed after {step!r}"
