"""The log against a plain list of batches, with random appends, reads, truncation, roll,
retention, restarts and crashes that tear or corrupt the unflushed tail.

After a crash the recovered log must be a prefix of the model that holds every batch written
before the damage point. A failing run prints the steps that replay it.
"""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kraftpy.protocol.batch_header import ATTRIBUTES_OFFSET, HEADER_SIZE, read_header
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig

from ._support import ManualClock, batch, read_all


@attrs.frozen
class Entry:
    base: int
    last: int
    epoch: int
    payload: bytes  # the CRC-covered bytes, unchanged by stamping

    def as_tuple(self) -> tuple[int, int, int, bytes]:
        return self.base, self.last, self.epoch, self.payload


def headers_of(path: Path) -> list[tuple[int, int, int]]:
    """(start, end, base offset) of each whole batch in a segment file."""
    data = path.read_bytes()
    out, position = [], 0
    while len(data) - position >= HEADER_SIZE:
        header = read_header(data, position)
        if position + header.size > len(data):
            break
        out.append((position, position + header.size, header.base_offset))
        position += header.size
    return out


def make_machine(root: Path):
    counter = [0]

    class LogModel(RuleBasedStateMachine):
        @initialize(
            segment_bytes=st.integers(200, 1500),
            index_interval=st.integers(0, 300),
            retention_bytes=st.sampled_from([-1, 400, 1000]),
        )
        def open(self, segment_bytes, index_interval, retention_bytes):
            counter[0] += 1
            self.directory = root / f"log-{counter[0]}"
            self.clock = ManualClock()
            self.config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval,
                                    retention_ms=60_000, retention_bytes=retention_bytes, segment_ms=30_000)
            self.log = Log.open(self.directory, self.config, clock=self.clock)
            #: What the log's owner last recorded (a log directory's checkpoints): any past state.
            self.recorded = None
            self.entries: list[Entry] = []
            self.epoch = 0
            self.tag = 0

        def teardown(self):
            if hasattr(self, "log"):
                self.log.close()

        def reopen(self, clean=False):
            self.log = Log.open(self.directory, self.config, clock=self.clock, offsets=self.recorded,
                                clean_shutdown=clean)

        def new_batches(self, sizes, base_offset=0):
            out = []
            for count, value_size in sizes:
                self.tag += 1
                out.append(batch(count, value_size=value_size, timestamp=self.clock.now, tag=self.tag,
                                 base_offset=base_offset, epoch=self.epoch))
                base_offset += count
            return out

        def visible(self) -> list[tuple[int, int, int, bytes]]:
            start = self.log.log_start_offset
            return [e.as_tuple() for e in self.entries if e.last >= start]

        # -- rules -------------------------------------------------------------------------------

        @rule(sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 120)), min_size=1, max_size=3),
              bump=st.booleans())
        def append_as_leader(self, sizes, bump):
            self.epoch += bump
            batches = self.new_batches(sizes)
            offset = self.log.log_end_offset
            info = self.log.append_as_leader(b"".join(batches), self.epoch)
            assert info.first_offset == offset
            for data in batches:
                header = read_header(data)
                self.entries.append(Entry(offset, offset + header.last_offset_delta, self.epoch,
                                          data[ATTRIBUTES_OFFSET:]))
                offset += header.last_offset_delta + 1
            assert info.last_offset == offset - 1 == self.log.log_end_offset - 1

        @rule(gap=st.integers(0, 3), sizes=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 80)),
                                                    min_size=1, max_size=2))
        def append_as_follower(self, gap, sizes):
            base = self.log.log_end_offset + gap
            batches = self.new_batches(sizes, base)
            self.log.append_as_follower(b"".join(batches))
            for data in batches:
                header = read_header(data)
                self.entries.append(Entry(header.base_offset, header.last_offset, self.epoch,
                                          data[ATTRIBUTES_OFFSET:]))

        @rule(data=st.data(), max_bytes=st.integers(1, 1500), whole=st.booleans())
        def read(self, data, max_bytes, whole):
            offset = data.draw(st.integers(self.log.log_start_offset, self.log.log_end_offset))
            region = self.log.read(offset, max_bytes, whole_batches=whole)
            expected = [e for e in self.entries if e.last >= offset]
            raw = region.read_bytes()
            if not expected:
                assert raw == b""
                return
            first = expected[0]
            assert region.first_offset == first.base
            got, position = [], 0
            while len(raw) - position >= HEADER_SIZE:
                header = read_header(raw, position)
                if position + header.size > len(raw):
                    break
                got.append((header.base_offset, header.last_offset, header.partition_leader_epoch,
                            raw[position + ATTRIBUTES_OFFSET : position + header.size]))
                position += header.size
            assert got and got == [e.as_tuple() for e in expected[: len(got)]]
            assert region.length <= max(max_bytes, len(first.payload) + ATTRIBUTES_OFFSET)
            if whole:
                assert position == len(raw)

        @rule(data=st.data())
        def truncate_to(self, data):
            offset = data.draw(st.integers(self.log.log_start_offset, self.log.log_end_offset))
            self.log.truncate_to(offset)
            self.entries = [e for e in self.entries if e.last < offset]
            model_next = self.entries[-1].last + 1 if self.entries else 0
            assert model_next <= self.log.log_end_offset <= offset

        @rule()
        def roll(self):
            self.log.roll()

        @rule(ms=st.integers(0, 40_000))
        def advance_clock(self, ms):
            self.clock.advance(ms)

        @rule(data=st.data())
        def retention(self, data):
            hw = data.draw(st.integers(self.log.high_watermark, self.log.log_end_offset))
            self.log.update_high_watermark(hw)
            before = self.log.log_start_offset
            self.log.delete_old_segments()
            assert self.log.log_start_offset >= before
            for segment in self.log.segments[:-1]:
                assert self.clock.now - segment.largest_timestamp <= 60_000 or segment.next_offset > hw

        @precondition(lambda self: self.log.high_watermark > self.log.log_start_offset)
        @rule(data=st.data())
        def delete_records(self, data):
            offset = data.draw(st.integers(self.log.log_start_offset, self.log.high_watermark))
            assert self.log.delete_records_before(offset) == offset
            self.recorded = self.log.offsets  # the broker checkpoints before answering DeleteRecords

        @rule()
        def checkpoint(self):
            self.recorded = self.log.offsets

        @rule()
        def delete_detached_segments(self):
            self.log.delete_detached_segments()
            assert not list(self.directory.glob("*.deleted"))

        @rule(extra=st.integers(0, 5))
        def truncate_fully(self, extra):
            offset = self.log.log_end_offset + extra
            self.log.truncate_fully_and_start_at(offset)
            self.entries = []
            assert self.log.log_start_offset == self.log.log_end_offset == offset

        @rule(data=st.data())
        def flush(self, data):
            up_to = data.draw(st.none() | st.integers(0, self.log.log_end_offset))
            self.log.flush(up_to)
            assert self.log.recovery_point >= (self.log.log_end_offset if up_to is None else up_to)
            self.recorded = self.log.offsets

        @rule()
        def close_and_reopen(self):
            def state():
                # An epoch entry at the log end (a start moved up to the end re-anchors one there)
                # is dropped on open, as Kafka's loader does: it holds no batch.
                log = self.log
                entries = tuple(e for e in log.leader_epoch_cache.entries if e.start_offset < log.log_end_offset)
                return log.log_start_offset, log.log_end_offset, log.high_watermark, entries

            before = state()
            self.log.close()
            self.recorded = self.log.offsets
            self.reopen(clean=True)
            assert before == state()
            assert self.log.recovery_point == self.log.log_end_offset

        @rule(data=st.data(), damage=st.sampled_from(["none", "torn", "flip"]))
        def crash(self, data, damage):
            recovery_point = self.log.recovery_point
            self.log.abandon()
            bases = sorted(int(p.name[:20]) for p in self.directory.glob("*.log"))
            checked = [b for b in bases if b <= recovery_point][-1:] + [b for b in bases if b > recovery_point]
            candidates = [b for b in checked if (self.directory / f"{b:020d}.log").stat().st_size > 0]
            cut = None
            if damage != "none" and candidates:
                path = self.directory / f"{data.draw(st.sampled_from(candidates)):020d}.log"
                batches = headers_of(path)
                raw = bytearray(path.read_bytes())
                if damage == "torn":
                    position = data.draw(st.integers(0, len(raw) - 1))
                    del raw[position:]
                    cut = next(base for start, end, base in batches if end > position)
                else:
                    start, end, cut = data.draw(st.sampled_from(batches))
                    # base offset (0-7) and leader epoch (12-15) are outside the CRC: not damaged here
                    within = data.draw(st.sampled_from([*range(8, 12), *range(16, end - start)]))
                    raw[start + within] ^= data.draw(st.integers(1, 255))
                path.write_bytes(bytes(raw))
            self.reopen()
            if cut is not None:
                self.entries = [e for e in self.entries if e.base < cut]
                model_next = self.entries[-1].last + 1 if self.entries else 0
                assert model_next <= self.log.log_end_offset <= max(cut, self.log.log_start_offset)
            assert self.log.recovery_point == self.log.log_end_offset

        # -- invariants --------------------------------------------------------------------------

        @invariant()
        def matches_the_model(self):
            log = self.log
            assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
            assert log.recovery_point <= log.log_end_offset
            visible = self.visible() if log.log_start_offset <= log.log_end_offset else []
            if self.entries and log.log_start_offset > self.entries[-1].last:
                visible = []
            assert read_all(log) == visible
            entries = log.leader_epoch_cache.entries
            assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in pairwise(entries))
            # as in Kafka, moving the log start re-anchors the covering epoch there, even at the end
            assert all(e.start_offset < log.log_end_offset or e.start_offset == log.log_start_offset
                       for e in entries)
            for base, _, epoch, _ in visible:
                if base >= log.log_start_offset:
                    assert log.leader_epoch_cache.epoch_for_offset(base) == epoch
            segments = log.segments
            assert all(a.next_offset <= b.base_offset for a, b in pairwise(segments))

    return LogModel


def test_log_behaves_like_a_list_of_batches(tmp_path):
    run_state_machine_as_test(
        make_machine(tmp_path),
        settings=settings(max_examples=40 if not os.environ.get("KRAFTPY_SOAK") else 1000,
                          stateful_step_count=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]),
    )
