"""The log cleaner against a dict model, with hypothesis: appends of keyed records and tombstones
(some from idempotent producers, some compressed), rolls, the high watermark moving, time passing,
cleaning passes and restarts (clean, or as a crash leaves the files), in any order.

After every step the log read back (every batch CRC-checked, offsets strictly increasing) holds
only records that were written, at their offsets, and for each key the model's last record — a
deleted key's tombstone or nothing at all. After each pass: nothing the pass could not touch
(above its range, younger than min.compaction.lag.ms) changed, every tombstone it kept carries a
delete horizon and none it kept is past one, and the producer state rebuilt from the log is the one
rebuilt before. A failing run prints the steps that replay it.
"""

from __future__ import annotations

import itertools
import os
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

from kraftpy.broker import producer_state as ps
from kraftpy.protocol.batch_header import read_header
from kraftpy.protocol.compression import Compression
from kraftpy.protocol.records import SimpleRecord, build_batch, iter_decoded
from kraftpy.storage import offset_map
from kraftpy.storage.cleaner import DELETE_HORIZON_BIT, Cleaner, CleanerConfig, log_to_clean
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig

from ._support import ManualClock

KEYS = [b"k%d" % i for i in range(8)]
CODECS = [Compression.NONE, Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]


@attrs.frozen
class Written:
    offset: int
    key: bytes
    value: bytes | None
    timestamp: int


def read_back(log: Log) -> tuple[list, list]:
    """(records as (offset, key, value, timestamp), batch headers) of the whole log, CRCs verified."""
    records, headers = [], []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 20, whole_batches=True)
        if not data:
            break
        for batch in iter_decoded(data):
            headers.append(batch.header)
            records.extend((r.offset, r.key, r.value, r.timestamp) for r in batch.records)
            offset = batch.next_offset
    return records, headers


def replayed_producers(log: Log) -> tuple:
    state = ps.ProducerStateManager()
    state.rebuild(None, (header for segment in log.segments for _, header in segment.batches_from(0)))
    return state.snapshot_entries()


_counter = itertools.count()


def make_machine(root: Path):
    class CleanerModel(RuleBasedStateMachine):
        @initialize(segment_bytes=st.sampled_from([300, 700, 2000]),
                    delete_retention_ms=st.sampled_from([0, 1000, 60_000]),
                    min_compaction_lag_ms=st.sampled_from([0, 0, 5000]),
                    memory=st.sampled_from([4 * 24, 48 * 24, 1 << 16]),
                    accelerated=st.booleans())
        def start(self, segment_bytes, delete_retention_ms, min_compaction_lag_ms, memory, accelerated):
            self.directory = root / f"log-{next(_counter)}"
            self.clock = ManualClock()
            self.config = LogConfig(segment_bytes=segment_bytes, compact=True, delete=False,
                                    delete_retention_ms=delete_retention_ms,
                                    min_compaction_lag_ms=min_compaction_lag_ms)
            self.log = Log.open(self.directory, self.config, clock=self.clock)
            self.cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=memory),
                                   accelerated=accelerated and offset_map.ACCELERATED)
            self.written: list[Written] = []
            self.state = ps.ProducerStateManager()
            self.sequences: dict[int, int] = {}
            self.checkpoint: int | None = None
            self.horizon: int | None = None
            #: Every offset at or above this was never in a pass's copy.
            self.max_copied = 0

        # -- steps ----------------------------------------------------------------------------

        @rule(batches=st.lists(
            st.tuples(st.lists(st.tuples(st.integers(0, len(KEYS) - 1), st.integers(0, 4)), min_size=1, max_size=5),
                      st.sampled_from([None, None, 1, 2]), st.sampled_from(CODECS)),
            min_size=1, max_size=6))
        def append(self, batches):
            for entries, producer, codec in batches:
                self.append_one(entries, producer, codec)

        def append_one(self, entries, producer, codec):
            now = self.clock()
            records = [SimpleRecord(KEYS[k], None if v == 0 else b"v%d-%d" % (len(self.written), i), timestamp=now)
                       for i, (k, v) in enumerate(entries)]
            fields = {}
            if producer is not None:
                sequence = self.sequences.get(producer, 0)
                fields = dict(producer_id=producer, producer_epoch=0, base_sequence=sequence)
                self.sequences[producer] = sequence + len(records)
            data = build_batch(records, compression=codec, **fields)
            info = self.log.append_as_leader(data, 1)
            self.state.update(read_header(data), info.first_offset)
            for i, record in enumerate(records):
                self.written.append(Written(info.first_offset + i, record.key, record.value, now))

        @rule(all_of_it=st.booleans())
        def move_high_watermark(self, all_of_it):
            end = self.log.log_end_offset
            hw = self.log.high_watermark
            self.log.update_high_watermark(end if all_of_it else (hw + end + 1) // 2)

        @precondition(lambda self: not self.log.active_segment.is_empty)
        @rule()
        def roll(self):
            self.log.roll()

        @rule(ms=st.sampled_from([1, 500, 1000, 5000, 60_000]))
        def tick(self, ms):
            self.clock.advance(ms)

        @precondition(lambda self: len(self.log.segments) > 1)
        @rule()
        def clean(self):
            log, now = self.log, self.clock()
            to_clean = log_to_clean(log, self.checkpoint, now, earliest_horizon=self.horizon)
            before, headers_before = read_back(log)
            producers_before = replayed_producers(log)
            producers = {pid: entry.last_offset for pid, entry in self.state.producers.items()}
            result = self.cleaner.clean(log, to_clean, now, producers)
            result.swap_in(log)
            self.checkpoint, self.horizon = result.next_dirty_offset, result.earliest_horizon
            copied = result.copied_up_to
            self.max_copied = max(self.max_copied, copied)
            after, headers = read_back(log)

            assert [r for r in after if r[0] >= copied] == [r for r in before if r[0] >= copied]
            lag = self.config.min_compaction_lag_ms
            if lag:
                young = [r for r in before if r[3] > now - lag]
                assert set(young) <= set(after), "a record younger than min.compaction.lag.ms went"
            def tombstones_in(headers, records, horizon_passed):
                out = set()
                for header in headers:
                    if header.last_offset >= copied or not header.record_count:
                        continue
                    if horizon_passed and not (header.attributes & DELETE_HORIZON_BIT and header.base_timestamp <= now):
                        continue
                    out |= {r[0] for r in records if r[2] is None and header.base_offset <= r[0] <= header.last_offset}
                return out

            # Records past the map's end (a full map) are kept whatever they are, as in Kafka.
            expired = {o for o in tombstones_in(headers_before, before, horizon_passed=True)
                       if o < result.next_dirty_offset}
            assert not expired & {r[0] for r in after}, "a tombstone kept past its delete horizon"
            kept = {o for o in tombstones_in(headers, after, horizon_passed=False) if o < result.next_dirty_offset}
            for header in headers:
                if any(header.base_offset <= o <= header.last_offset for o in kept):
                    assert header.attributes & DELETE_HORIZON_BIT, "a kept tombstone without a delete horizon"
                    assert header.base_timestamp >= now
            assert replayed_producers(log) == producers_before
            log.delete_detached_segments()

        @rule(crash=st.booleans())
        def restart(self, crash):
            offsets = self.log.offsets
            if crash:
                self.log.abandon()
            else:
                self.log.close()
            self.log = Log.open(self.directory, self.config, clock=self.clock, offsets=offsets,
                                clean_shutdown=not crash)

        # -- what must hold ---------------------------------------------------------------------

        @invariant()
        def the_log_holds_the_models_last_record_of_each_key(self):
            if not hasattr(self, "log"):
                return
            records, _ = read_back(self.log)
            offsets = [r[0] for r in records]
            assert offsets == sorted(set(offsets)), "offsets not strictly increasing"
            assert self.log.log_end_offset == len(self.written)
            for offset, key, value, timestamp in records:
                w = self.written[offset]
                assert (w.key, w.value, w.timestamp) == (key, value, timestamp), f"record at {offset} changed"
            assert {w.offset for w in self.written if w.offset >= self.max_copied} <= set(offsets)
            last_written = {w.key: w for w in self.written}
            last_read: dict[bytes, tuple] = {}
            for record in records:
                last_read[record[1]] = record
            for key, w in last_written.items():
                got = last_read.get(key)
                if w.value is None:
                    assert got is None or got[0] == w.offset, f"deleted {key!r} came back as {got}"
                else:
                    assert got is not None and got[0] == w.offset, f"{key!r}: last record {got}, not offset {w.offset}"

        def teardown(self):
            if hasattr(self, "log") and not self.log.closed:
                self.log.close()

    return CleanerModel


def test_the_cleaner_against_a_dict_model(tmp_path):
    run_state_machine_as_test(
        make_machine(tmp_path),
        settings=settings(max_examples=100 if not os.environ.get("KRAFTPY_SOAK") else 1000,
                          stateful_step_count=50, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]),
    )
