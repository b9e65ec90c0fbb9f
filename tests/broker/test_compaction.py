"""Compacted topics on live brokers: the cleaner runs while producers append, real consumers read the
cleaned log (while passes still run, with what Kafka promises such a reader, and once the cleaner
is at rest, the final state exactly), its progress survives a restart, and keyless records are
refused so that librdkafka fails exactly those."""

from __future__ import annotations

import itertools

import trio
from confluent_kafka import Consumer, Producer, TopicPartition

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import SimpleRecord, build_batch, iter_decoded
from kraftpy.storage.cleaner import CLEANER_OFFSET_CHECKPOINT_FILE, log_to_clean, read_cleaner_checkpoint
from tests.helpers.batches import now_ms
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import fetch, produce

QUIET = {"log_level": 0}
KEYS = [b"key-%02d" % i for i in range(16)]
TABLE = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01",
         "delete.retention.ms": "0"}
CLEANER = dict(log_cleaner_backoff_ms=20)


async def read_whole(conn: KafkaConnection, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record up to the high watermark, by Fetch; CRCs checked."""
    out, offset = [], 0
    while True:
        data = await fetch(conn, topic, 0, offset)
        assert data.error_code == ErrorCode.NONE
        if offset >= data.high_watermark or not data.records:
            return out
        for batch in iter_decoded(bytes(data.records)):
            out.extend((r.offset, r.key, r.value) for r in batch.records if r.offset >= offset)
            offset = batch.next_offset


def last_per_key(records) -> dict[bytes, bytes | None]:
    out = {}
    for _, key, value in records:
        out[key] = value
    return out


def at_rest(cleaner, part) -> bool:
    """No pass runs on the replica and none is due (the cleaner's own test): until something is
    appended, its log stays as it is."""
    if part.tp in cleaner.in_progress:
        return False
    checkpointed = cleaner.checkpoints.get(part.log.directory.parent, {}).get((part.tp.topic, part.tp.partition))
    to_clean = log_to_clean(part.log, checkpointed, cleaner.clock(), earliest_horizon=cleaner.horizons.get(part.tp))
    return to_clean.total_bytes == 0 or not to_clean.due(part.log.config.min_cleanable_ratio)


def check_read_while_cleaned(read, before, live: dict[bytes, bytes]) -> None:
    """What Kafka promises a consumer that reads a compacted log while it is cleaned: offsets in
    order, each once; only records the log held when the read began (``before``, read earlier: a
    cleaning only removes); and the last value of every key whose last record is not a tombstone.
    A deleted key may end on an older value: the cleaning that dropped the value kept the tombstone,
    and with delete.retention.ms=0 the next one may drop the tombstone before the reader reaches it."""
    offsets = [offset for offset, _, _ in read]
    assert offsets == sorted(set(offsets))
    assert set(read) <= set(before), sorted(set(read) - set(before))
    last = last_per_key(read)
    wrong = sorted(key for key, value in live.items() if last.get(key) != value)
    assert not wrong, [(key, live[key], [(o, v) for o, k, v in read if k == key],
                        [(o, v) for o, k, v in before if k == key]) for key in wrong]


def read_confluent(bootstrap: str, topic: str, last_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False, **QUIET})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while not out or out[-1][0] < last_offset:
            msg = consumer.poll(30)
            assert msg is not None, f"no message after offset {out[-1][0] if out else None}"
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def read_kafka_python(bootstrap: str, topic: str, last_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=30_000)
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    out = []
    try:
        while not out or out[-1][0] < last_offset:
            polled = consumer.poll(timeout_ms=30_000)
            assert polled, f"no records after offset {out[-1][0] if out else None}"
            for records in polled.values():
                out.extend((r.offset, r.key, r.value) for r in records)
    finally:
        consumer.close()
    return out


async def test_a_compacted_topic_is_cleaned_while_producers_append(tmp_path):
    async with open_cluster(tmp_path, brokers=2, **CLEANER) as cluster:
        await cluster.create_topic("table", replication_factor=2, configs=TABLE)
        leader = cluster.leader("table")
        follower = 3 - leader
        cleaners = {b: cluster.brokers[b].replicas.log_cleaner for b in (1, 2)}
        produced: dict[bytes, bytes | None] = {}
        counter = itertools.count()
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader]) as conn:

            async def produce_round(idempotent_sequence: int | None) -> None:
                n = next(counter)
                chosen = [KEYS[(n * 5 + i) % len(KEYS)] for i in range(5)]
                values = [None if (n + i) % 11 == 10 else b"value %d-%d" % (n, i) for i in range(5)]
                fields = {}
                if idempotent_sequence is not None:
                    fields = dict(producer_id=4000, producer_epoch=0, base_sequence=idempotent_sequence)
                data = build_batch([SimpleRecord(k, v, timestamp=now_ms()) for k, v in zip(chosen, values, strict=True)],
                                   **fields)
                result = await produce(conn, "table", 0, data)
                assert result.error_code == ErrorCode.NONE, result
                produced.update(zip(chosen, values, strict=True))

            # Produce until both replicas have finished passes while appends were going on.
            sequence = 0
            with trio.fail_after(60):
                while min(c.passes for c in cleaners.values()) < 3:
                    idempotent = next(counter) % 2 == 0
                    await produce_round(sequence if idempotent else None)
                    sequence += 5 if idempotent else 0
            appended_during = cluster.partition(leader, "table").log_end_offset
            passes = {b: c.passes for b, c in cleaners.items()}
            for _ in range(20):
                await produce_round(None)
            await cluster.wait_for(lambda: cluster.partition(follower, "table").log_end_offset
                                   == cluster.partition(leader, "table").log_end_offset)
            with trio.fail_after(30):  # one more pass of each over everything appended
                for broker_id, cleaner in cleaners.items():
                    while cleaner.passes <= passes[broker_id]:
                        await cleaner.cleaned.wait()
            end = cluster.partition(leader, "table").log_end_offset
            live = {key: value for key, value in produced.items() if value is not None}

            # Passes may still be running (the last rounds are dirty, kept tombstones are due): a
            # consumer reading now gets what Kafka promises a reader of a log being cleaned.
            before = await read_whole(conn, "table")
            read = await trio.to_thread.run_sync(read_confluent, cluster.bootstrap, "table", end - 1)
            check_read_while_cleaned(read, before, live)

            # Then nothing more to clean: every read sees the same final log.
            with trio.fail_after(30):
                for broker_id, cleaner in cleaners.items():
                    part = cluster.partition(broker_id, "table")
                    while not at_rest(cleaner, part):
                        await cleaner.cleaned.wait()
            assert all(at_rest(cleaner, cluster.partition(b, "table")) for b, cleaner in cleaners.items())
            records = await read_whole(conn, "table")
        assert appended_during < end
        offsets = [offset for offset, _, _ in records]
        assert offsets == sorted(set(offsets)) and offsets[-1] == end - 1
        assert len(records) < end, "nothing was compacted away"
        assert {k: v for k, v in last_per_key(records).items() if v is not None} == live
        for deleted in (key for key, value in produced.items() if value is None):
            assert last_per_key(records).get(deleted) is None
        # The follower cleaned its own copy: the same last record of every key.
        follower_log = cluster.partition(follower, "table").log
        follower_records = []
        for segment in follower_log.segments:
            data = segment.read(segment.base_offset, segment.size, min_one_batch=True)
            if data is not None and data.length:
                for batch in iter_decoded(data.read_bytes()):
                    follower_records.extend((r.offset, r.key, r.value) for r in batch.records)
        assert last_per_key(follower_records) == last_per_key(records)
        assert len(follower_records) < end

        for reader in (read_confluent, read_kafka_python):
            read = await trio.to_thread.run_sync(reader, cluster.bootstrap, "table", end - 1)
            assert {k: v for k, v in last_per_key(read).items() if v is not None} == live, reader.__name__
            assert [offset for offset, _, _ in read] == sorted({offset for offset, _, _ in read})


async def test_the_cleaner_offset_checkpoint_carries_progress_across_a_restart(tmp_path):
    async with open_cluster(tmp_path, brokers=1, **CLEANER) as cluster:
        await cluster.create_topic("table", configs=TABLE)
        cleaner = cluster.brokers[1].replicas.log_cleaner
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            with trio.fail_after(30):
                round_ = 0
                while cleaner.passes == 0:
                    data = build_batch([SimpleRecord(KEYS[i % 4], b"v%d" % round_, timestamp=now_ms())
                                        for i in range(8)])
                    assert (await produce(conn, "table", 0, data)).error_code == ErrorCode.NONE
                    round_ += 1
        log_dir = cluster.partition(1, "table").log.directory.parent
        in_memory = cleaner.checkpoints[log_dir][("table", 0)]
        assert in_memory > 0
        await cluster.stop_broker(1)
        on_disk = read_cleaner_checkpoint(log_dir)
        assert on_disk[("table", 0)] >= in_memory
        assert (log_dir / CLEANER_OFFSET_CHECKPOINT_FILE).read_text().startswith("0\n1\ntable 0 ")
        restarted = await cluster.restart_broker(1)
        await cluster.wait_for(lambda: cluster.partition(1, "table") is not None)
        assert restarted.replicas.log_cleaner.checkpoints[log_dir] == on_disk


def produce_with_reports(bootstrap: str, topic: str, messages: list[dict]) -> dict[bytes, object]:
    """Produce ``messages`` in one batch; value -> the delivery error (None when delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, **QUIET})
    reports: dict[bytes, object] = {}

    def report(err, msg) -> None:
        reports[msg.value()] = err

    for message in messages:
        producer.produce(topic, on_delivery=report, **message)
    assert producer.flush(30) == 0
    return reports


async def test_librdkafka_fails_exactly_the_records_without_a_key(tmp_path):
    from confluent_kafka import KafkaError

    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("table", configs={"cleanup.policy": "compact"})
        messages = [{"key": b"a", "value": b"1"}, {"value": b"2"}, {"key": b"c", "value": b"3"},
                    {"value": b"4"}, {"key": b"e", "value": b"5"}]
        reports = await trio.to_thread.run_sync(produce_with_reports, cluster.bootstrap, "table", messages)
        # KIP-467: the broker names records 1 and 3; librdkafka fails those with the broker's error and
        # the rest of the batch (refused whole, as in Kafka) with its own "a different record" error.
        assert {value: err.code() for value, err in reports.items()} == {
            b"2": KafkaError.INVALID_RECORD, b"4": KafkaError.INVALID_RECORD,
            b"1": KafkaError._INVALID_DIFFERENT_RECORD, b"3": KafkaError._INVALID_DIFFERENT_RECORD,
            b"5": KafkaError._INVALID_DIFFERENT_RECORD,
        }
        assert cluster.partition(1, "table").log_end_offset == 0
        keyed = [m for m in messages if "key" in m]
        again = await trio.to_thread.run_sync(produce_with_reports, cluster.bootstrap, "table", keyed)
        assert again == {b"1": None, b"3": None, b"5": None}
        assert cluster.partition(1, "table").log_end_offset == 3


# -- a partition without sockets: what runs beside a pass, and what stops one ---------------------


def compacted_leader(tmp_path):
    from kraftpy.broker.partition import Partition
    from kraftpy.broker.partition import TopicPartition as PartitionKey
    from kraftpy.broker.producer_state import ProducerStateManager
    from kraftpy.ids import Uuid
    from kraftpy.metadata.image import PartitionRegistration
    from kraftpy.storage.log import Log
    from kraftpy.storage.log_config import LogConfig

    clock = lambda: 1_700_000_000_000  # noqa: E731
    log = Log.open(tmp_path / "table-0", LogConfig(segment_bytes=600, compact=True, delete=False), clock=clock)
    part = Partition(PartitionKey("table", 0), Uuid(bytes(15) + b"\x01"), log, 1, clock, ProducerStateManager())
    part.make_leader(PartitionRegistration(replicas=(1,), isr=(1,), leader=1, leader_epoch=1, partition_epoch=1))
    return part


async def append_keyed(part, count: int, tag: bytes = b"") -> None:
    from kraftpy.protocol.batch_header import read_header

    for i in range(count):
        data = build_batch([SimpleRecord(KEYS[i % 4], b"v%d" % i + tag, timestamp=1_700_000_000_000)])
        result = await part.append_as_leader(data, read_header(data), acks=1, now=1_700_000_000_000)
        assert result.error == ErrorCode.NONE


def held_pass(part, release, entered, *, until_aborted: bool = False):
    """A pass that waits in its worker thread until ``release`` is set before it copies — or, with
    ``until_aborted``, until it is aborted."""
    from kraftpy.storage.cleaner import Cleaner, CleanerConfig, CleaningAborted, log_to_clean

    cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=1 << 16))

    def copy(abort):
        to_clean = log_to_clean(part.log, None, part.clock())
        entered.set()
        if until_aborted:
            abort.wait()
            raise CleaningAborted("aborted while held")
        release.wait()
        return cleaner.clean(part.log, to_clean, part.clock(), {}, abort)

    def swap(result):
        return result.swap_in(part.log)

    return copy, swap


async def test_appends_and_rolls_go_on_while_a_pass_copies(tmp_path):
    import threading

    from kraftpy.storage.cleaner import CleaningPass

    part = compacted_leader(tmp_path)
    await append_keyed(part, 40)
    release, entered = threading.Event(), threading.Event()
    copy, swap = held_pass(part, release, entered)
    swapped = []
    async with trio.open_nursery() as nursery:
        async def cleaning():
            swapped.append(await part.run_cleaning(copy, swap, CleaningPass.discard))

        nursery.start_soon(cleaning)
        with trio.fail_after(10):
            await trio.to_thread.run_sync(entered.wait)
            segments = len(part.log.segments)
            await append_keyed(part, 40, b"-during")  # enough to roll: rolls are exclusive work too
            assert len(part.log.segments) > segments
            assert part.cleaning
            # A second pass does not start beside the first.
            assert await part.run_cleaning(copy, swap, CleaningPass.discard) is None
        release.set()
    assert swapped[0] >= 1
    assert not part.cleaning
    values = {}
    data = []
    offset = 0
    while offset < part.log.log_end_offset:
        chunk = part.log.read_bytes(offset, 1 << 20, whole_batches=True)
        for batch in iter_decoded(chunk):
            data.extend(batch.records)
            offset = batch.next_offset
    for record in data:
        values[record.key] = record.value
    assert values == {KEYS[i % 4]: b"v%d-during" % i for i in range(36, 40)}


async def test_delete_records_aborts_a_pass_and_holds_the_cleaner_off(tmp_path):
    import os
    import threading

    from kraftpy.storage.cleaner import CleaningAborted, CleaningPass

    part = compacted_leader(tmp_path)
    await append_keyed(part, 40)
    release, entered = threading.Event(), threading.Event()
    copy, swap = held_pass(part, release, entered, until_aborted=True)
    outcome = []
    async with trio.open_nursery() as nursery:
        async def cleaning():
            try:
                outcome.append(await part.run_cleaning(copy, swap, CleaningPass.discard))
            except CleaningAborted:
                outcome.append("aborted")

        nursery.start_soon(cleaning)
        with trio.fail_after(10):
            await trio.to_thread.run_sync(entered.wait)
            second = part.log.segments[1].base_offset
            assert await part.delete_records_before(second) == second
    assert outcome == ["aborted"]
    assert part.log.log_start_offset == second
    assert not [n for n in os.listdir(part.log.directory) if n.endswith(".cleaned")]
    # Held off while paused, free again after.
    await part.pause_cleaning()
    release.set()
    copy, swap = held_pass(part, release, entered)
    assert await part.run_cleaning(copy, swap, CleaningPass.discard) is None
    part.resume_cleaning()
    assert await part.run_cleaning(copy, swap, CleaningPass.discard) >= 1


async def test_a_damaged_batch_stops_the_cleaner_on_that_log_only(tmp_path):
    import os

    from kraftpy.broker.log_cleaner import LogCleaner
    from kraftpy.broker.settings import BrokerSettings
    from kraftpy.storage.cleaner import Cleaner

    part = compacted_leader(tmp_path)
    await append_keyed(part, 40)
    settings = BrokerSettings(node_id=1, cluster_id="c", log_dirs=(tmp_path,))
    cleaner = LogCleaner(settings, lambda: [part], part.clock)
    first = part.log.segments[0]
    with open(first.path, "r+b") as f:  # a byte of a record value: only the CRC can tell
        f.seek(first.size - 3)
        byte = f.read(1)
        f.seek(first.size - 3)
        f.write(bytes([byte[0] ^ 0xFF]))
    picked = await cleaner.grab_filthiest_log()
    assert picked is not None and picked[0] is part
    assert await cleaner.clean(Cleaner(cleaner.config), *picked) is None
    assert "CRC" in cleaner.uncleanable[part.tp]
    assert not [n for n in os.listdir(part.log.directory) if n.endswith(".cleaned")]
    cleaner.in_progress.clear()
    assert await cleaner.grab_filthiest_log() is None  # not tried again until a restart
    await append_keyed(part, 4)  # the partition goes on


async def test_two_cleaner_tasks_choosing_at_once_never_take_the_same_log(tmp_path, monkeypatch):
    from kraftpy.broker import log_cleaner
    from kraftpy.broker.log_cleaner import LogCleaner
    from kraftpy.broker.settings import BrokerSettings

    # A checkpoint after every replica looked at: the other task chooses while this one is half-way.
    monkeypatch.setattr(log_cleaner, "_CHUNK", 1)
    part = compacted_leader(tmp_path)
    await append_keyed(part, 40)
    settings = BrokerSettings(node_id=1, cluster_id="c", log_dirs=(tmp_path,))
    cleaner = LogCleaner(settings, lambda: [part, part, part], part.clock)
    picks = []

    async def choose():
        picks.append(await cleaner.grab_filthiest_log())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(choose)
        nursery.start_soon(choose)
    assert sorted(p is None for p in picks) == [False, True]  # one took it, the other found it taken
    assert cleaner.in_progress == {part.tp}
