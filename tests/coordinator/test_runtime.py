"""The coordinator runtime: timers, the ordered write queue, shard lifecycle, and where a group lives."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from kraftpy.coordinator.group_coordinator import java_string_hash, partition_for
from kraftpy.coordinator.runtime import (
    CoordinatorRuntime,
    CoordinatorWriteError,
    NotLeaderError,
    ShardStatus,
    Timers,
)
from kraftpy.protocol.errors import ErrorCode
from tests.helpers.offsets_log import OffsetsLog, storage_error

# -- partition_for ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("", 0),
    ("hello", 99162322),
    ("polygenelubricants", -(2**31)),  # the one whose hash is Integer.MIN_VALUE
    ("\U0001F600", 31 * 0xD83D + 0xDE00),  # a surrogate pair: two UTF-16 units, as Java counts
    ("é", 0xE9),
])
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_partition_for_is_kafkas():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    # "console-consumer-1": hashCode -2064406227 in Java; abs then modulo.
    assert java_string_hash("console-consumer-1") == _java_hash_reference("console-consumer-1")
    assert partition_for("console-consumer-1", 50) == abs(_java_hash_reference("console-consumer-1")) % 50


def _java_hash_reference(s: str) -> int:
    """Java's definition written the slow way: s[0]*31^(n-1) + ... + s[n-1], wrapped to int32."""
    units = [int.from_bytes(s.encode("utf-16-be")[i:i + 2], "big") for i in range(0, len(s.encode("utf-16-be")), 2)]
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


# -- Timers ----------------------------------------------------------------------------------------


async def test_timers_fire_in_deadline_order_and_rescheduling_replaces(autojump_clock, nursery):
    timers = Timers()
    fired = []
    nursery.start_soon(timers.run)
    timers.schedule("a", 5, lambda: fired.append(("a", trio.current_time())))
    timers.schedule("b", 2, lambda: fired.append(("b", trio.current_time())))
    timers.schedule("c", 3, lambda: fired.append(("c", trio.current_time())))
    timers.schedule("b", 4, lambda: fired.append(("b2", trio.current_time())))  # replaces b
    assert timers.cancel("c")
    await trio.sleep(10)
    assert fired == [("b2", 4), ("a", 5)]
    assert len(timers) == 0


async def test_a_timer_that_raises_does_not_stop_the_others(autojump_clock, nursery):
    timers = Timers()
    fired = []
    nursery.start_soon(timers.run)

    def boom() -> None:
        raise RuntimeError("bug")

    timers.schedule("x", 1, boom)
    timers.schedule("y", 2, lambda: fired.append("y"))
    await trio.sleep(3)
    assert fired == ["y"] and timers.failures == 1


async def test_many_reschedules_keep_the_heap_small(autojump_clock, nursery):
    timers = Timers()
    nursery.start_soon(timers.run)
    for i in range(10_000):
        timers.schedule(("hb", i % 10), 30, lambda: None)
    assert len(timers) == 10 and len(timers._heap) <= 2 * 10 + 65


# -- shards ----------------------------------------------------------------------------------------


class Recorder:
    """A ShardStateMachine that records what it is told."""

    def __init__(self, shard) -> None:
        self.shard = shard
        self.replayed = []
        self.loaded = False
        self.unloaded = False

    def replay(self, offset, key, value):
        self.replayed.append((offset, key, value))

    def on_loaded(self):
        self.loaded = True

    def on_unloaded(self):
        self.unloaded = True


async def started_runtime(nursery) -> CoordinatorRuntime:
    runtime = CoordinatorRuntime(Recorder)
    await nursery.start(runtime.run)
    return runtime


async def test_writes_are_appended_in_order_coalesced_and_answered_with_their_offsets(autojump_clock, nursery):
    runtime = await started_runtime(nursery)
    log = OffsetsLog(0, auto_commit=False)
    runtime.on_elected(log.writer())
    shard = runtime.shards[0]
    await shard.loaded.wait()
    results = []
    for i in range(5):
        shard.write([(b"k%d" % i, b"v"), (b"x", None)], lambda offset, error, i=i: results.append((i, offset, error)))
    await trio.testing.wait_all_tasks_blocked()
    assert log.batches == [10]  # everything queued went as one batch
    assert results == []  # not committed yet
    log.commit()
    await trio.testing.wait_all_tasks_blocked()
    assert results == [(i, 2 * i, None) for i in range(5)]
    assert [r[1] for r in log.records] == [b"k0", b"x", b"k1", b"x", b"k2", b"x", b"k3", b"x", b"k4", b"x"]


async def test_writes_queued_behind_a_batch_go_in_the_next_one(autojump_clock, nursery):
    runtime = await started_runtime(nursery)
    log = OffsetsLog(0, auto_commit=False)
    runtime.on_elected(log.writer())
    shard = runtime.shards[0]
    await shard.loaded.wait()
    done = []
    shard.write([(b"a", b"1")], lambda o, e: done.append(o))
    await trio.testing.wait_all_tasks_blocked()
    shard.write([(b"b", b"2")], lambda o, e: done.append(o))
    shard.write([(b"c", b"3")], lambda o, e: done.append(o))
    await trio.testing.wait_all_tasks_blocked()
    assert log.batches == [1]
    log.commit()
    await trio.testing.wait_all_tasks_blocked()
    log.commit()
    await trio.testing.wait_all_tasks_blocked()
    assert log.batches == [1, 2] and done == [0, 1, 2]


async def test_a_failed_append_fails_its_writes_and_the_next_ones_go_on(autojump_clock, nursery):
    runtime = await started_runtime(nursery)
    log = OffsetsLog(0)
    runtime.on_elected(log.writer())
    shard = runtime.shards[0]
    await shard.loaded.wait()
    log.fail_next.append(storage_error())
    with pytest.raises(CoordinatorWriteError) as caught:
        await shard.write_and_wait([(b"a", b"1")])
    assert caught.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert await shard.write_and_wait([(b"b", b"2")]) == 0  # (the failed batch was never written)


async def test_resignation_fails_queued_and_inflight_writes(autojump_clock, nursery):
    runtime = await started_runtime(nursery)
    log = OffsetsLog(0, auto_commit=False)
    runtime.on_elected(log.writer())
    shard = runtime.shards[0]
    await shard.loaded.wait()
    results = []
    shard.write([(b"a", b"1")], lambda o, e: results.append(type(e)))
    await trio.testing.wait_all_tasks_blocked()
    shard.write([(b"b", b"2")], lambda o, e: results.append(type(e)))
    runtime.on_resigned(0, 0)
    await trio.testing.wait_all_tasks_blocked()
    assert results == [NotLeaderError, NotLeaderError]
    assert shard.status is ShardStatus.CLOSED and shard.machine.unloaded
    assert runtime.shard(0) is None and runtime.owned_partitions() == set()
    shard.write([(b"c", b"3")], lambda o, e: results.append(type(e)))  # a write after the end
    assert results[-1] is NotLeaderError


async def test_loading_replays_committed_records_only(autojump_clock, nursery):
    log = OffsetsLog(0, auto_commit=False)
    writer = log.writer()
    async with trio.open_nursery() as n:
        n.start_soon(writer.append, [(b"a", b"1"), (b"b", None)])
        await trio.testing.wait_all_tasks_blocked()
        log.commit()
        n.start_soon(writer.append, [(b"c", b"3")])  # not committed when loading starts
        await trio.testing.wait_all_tasks_blocked()
        runtime = await started_runtime(nursery)
        runtime.on_elected(log.writer())
        await runtime.shards[0].loaded.wait()
        assert runtime.shards[0].machine.replayed == [(0, b"a", b"1"), (1, b"b", None)]
        assert runtime.shards[0].machine.loaded
        log.commit()


async def test_a_load_that_fails_is_retried(autojump_clock, nursery):
    runtime = await started_runtime(nursery)
    log = OffsetsLog(0)
    await log.writer().append([(b"a", b"1")])
    failing = log.writer()
    calls = []
    real = failing.read_committed

    async def flaky():
        calls.append(trio.current_time())
        if len(calls) == 1:
            raise OSError("disk hiccup")
        async for record in real():
            yield record

    failing.read_committed = flaky
    runtime.on_elected(failing)
    await runtime.shards[0].loaded.wait()
    assert len(calls) == 2 and calls[1] - calls[0] == pytest.approx(1.0)
    assert runtime.shards[0].machine.replayed == [(0, b"a", b"1")]


async def test_a_load_interrupted_by_a_leadership_change_closes_the_shard(autojump_clock, nursery):
    runtime = await started_runtime(nursery)
    log = OffsetsLog(0)
    log.read_gate = trio.Event()
    runtime.on_elected(log.writer())
    await trio.testing.wait_all_tasks_blocked()
    assert runtime.shards[0].status is ShardStatus.LOADING
    log.new_epoch()
    log.read_gate.set()
    await trio.testing.wait_all_tasks_blocked()
    assert runtime.shards[0].status is ShardStatus.CLOSED and runtime.shard(0) is None


async def test_an_election_before_run_starts_is_loaded_once_it_runs(autojump_clock, nursery):
    runtime = CoordinatorRuntime(Recorder)
    log = OffsetsLog(0)
    runtime.on_elected(log.writer())
    assert runtime.owned_partitions() == {0}
    await nursery.start(runtime.run)
    await runtime.shards[0].loaded.wait()
    assert runtime.shards[0].active


async def test_a_request_waiting_for_a_coordinators_answer_counts_it_as_remote_time(autojump_clock):
    """A handler waiting on a `Waiter` (a coordinator's answer: a rebalance, a write's replication) spends
    remote time (Kafka's RemoteTimeMs), not local time; outside a request it counts nothing."""
    from kraftpy.coordinator.runtime import Waiter
    from kraftpy.metrics import RequestTimes, request_times

    async def answer_later(waiter: Waiter, after: float) -> None:
        await trio.sleep(after)
        waiter.set("answered")

    times = RequestTimes("JoinGroup")
    async with trio.open_nursery() as nursery:
        waiter: Waiter[str] = Waiter()
        nursery.start_soon(answer_later, waiter, 3.0)
        token = request_times.set(times)
        try:
            assert await waiter.wait() == "answered"
        finally:
            request_times.reset(token)
        other: Waiter[str] = Waiter()
        nursery.start_soon(answer_later, other, 2.0)
        assert await other.wait() == "answered"  # no request's times in this context: none grows
    assert times.remote == 3.0
