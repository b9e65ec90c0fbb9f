"""The fetch session cache and the fetcher's session handler (KIP-227), without sockets."""

from __future__ import annotations

import random
import uuid

import attrs
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kraftpy.broker.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    FetchSessionHandler,
    PartitionFetchState,
    new_context,
    next_epoch,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import FetchResponse

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def req(partition: int, offset: int, topic_id=T1, topic: str = "") -> tuple:
    return (topic_id, partition), CachedPartition(topic, topic_id, partition, offset, 1 << 20)


def data_of(pairs) -> dict:
    return dict(pairs)


def answer(hw: int = 10, lso: int | None = None, start: int = 0, error: int = ErrorCode.NONE, records: int = 0):
    data = FetchResponse.PartitionData(partition_index=0, error_code=error, high_watermark=hw,
                                       last_stable_offset=hw if lso is None else lso, log_start_offset=start,
                                       records=b"")
    return data, records


def full(cache, now=0, *, session_id=0, epoch=INITIAL_EPOCH, follower=False, parts=(), version=13):
    return new_context(cache, now, version=version, session_id=session_id, epoch=epoch, is_follower=follower,
                       fetch_data=data_of(parts), forgotten=[])


def incremental(cache, session_id, epoch, now=0, *, parts=(), forgotten=(), version=13):
    return new_context(cache, now, version=version, session_id=session_id, epoch=epoch, is_follower=False,
                       fetch_data=data_of(parts), forgotten=list(forgotten))


def open_session(cache, n: int = 3, now=0, follower=False) -> int:
    context = full(cache, now, follower=follower, parts=[req(p, 0) for p in range(n)])
    error, session_id, carried = context.finish(cache, now, [answer() for _ in range(n)])
    assert error == ErrorCode.NONE and carried == list(range(n))
    return session_id


def test_epochs_run_from_one_and_wrap_past_int32_max_to_one():
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_full_fetch_makes_a_session_and_final_epoch_closes_it_without_making_another():
    cache = FetchSessionCache(10)
    session_id = open_session(cache)
    assert session_id != INVALID_SESSION_ID and cache.get(session_id).epoch == 1
    assert cache.total_partitions == 3
    context = full(cache, session_id=session_id, epoch=FINAL_EPOCH, parts=[req(0, 5)])
    error, answered_id, carried = context.finish(cache, 0, [answer()])
    assert (error, answered_id, carried) == (ErrorCode.NONE, INVALID_SESSION_ID, [0])
    assert len(cache) == 0 and cache.total_partitions == 0


def test_a_full_fetch_naming_a_session_replaces_it():
    cache = FetchSessionCache(10)
    first = open_session(cache)
    context = full(cache, session_id=first, parts=[req(0, 0)])
    _, second, _ = context.finish(cache, 0, [answer()])
    assert cache.get(first) is None and cache.get(second) is not None and second != first


def test_incremental_fetch_errors_unknown_session_wrong_epoch_and_topic_id_switch():
    cache = FetchSessionCache(10)
    session_id = open_session(cache)
    assert incremental(cache, session_id + 1, 1).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert incremental(cache, session_id, 2).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert incremental(cache, session_id, 1, version=12).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # None of these moved the session on: the right epoch still works.
    assert incremental(cache, session_id, 1).kind == "incremental"
    assert cache.get(session_id).epoch == 2


def test_incremental_fetch_reads_the_whole_session_and_answers_only_what_changed():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, n=4)  # every partition: hw 10, lso 10, start 0
    context = incremental(cache, session_id, 1, parts=[req(1, 7), req(9, 0)], forgotten=[(T1, 3)])
    keys = [key for key, _ in context.partitions]
    assert keys == [(T1, 0), (T1, 1), (T1, 2), (T1, 9)]
    assert [c.fetch_offset for _, c in context.partitions] == [0, 7, 0, 0]
    answers = [answer(), answer(records=100), answer(hw=11), answer()]
    error, answered_id, carried = context.finish(cache, 0, answers)
    # 0 unchanged: left out; 1 records; 2 a new high watermark; 9 new to the session (nothing known yet).
    assert (error, answered_id, carried) == (ErrorCode.NONE, session_id, [1, 2, 3])
    # What returned records is read last next time.
    assert list(cache.get(session_id).partitions) == [(T1, 0), (T1, 2), (T1, 9), (T1, 1)]
    # Nothing new at all: an empty answer.
    context = incremental(cache, session_id, 2)
    error, _, carried = context.finish(cache, 0, [answer(), answer(hw=11), answer(), answer()])
    assert (error, carried) == (ErrorCode.NONE, [])


def test_log_start_and_last_stable_offset_changes_and_errors_are_answered():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, n=3)
    context = incremental(cache, session_id, 1)
    answers = [answer(start=4), answer(lso=8), answer(error=ErrorCode.NOT_LEADER_OR_FOLLOWER, hw=-1)]
    assert context.finish(cache, 0, answers)[2] == [0, 1, 2]
    # The error's partition is answered again once it is gone, though its high watermark is what it was.
    context = incremental(cache, session_id, 2)
    assert context.finish(cache, 0, [answer(start=4), answer(lso=8), answer(hw=-1)])[2] == []
    context = incremental(cache, session_id, 3)
    assert context.finish(cache, 0, [answer(start=4), answer(lso=8), answer(hw=10)])[2] == [2]


def test_a_fetch_of_the_same_session_meanwhile_makes_the_older_answer_invalid():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, n=1)
    waiting = incremental(cache, session_id, 1)
    incremental(cache, session_id, 2).finish(cache, 0, [answer()])
    assert waiting.finish(cache, 0, [answer(records=5)]) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id, [])


def test_forgetting_every_partition_closes_the_session():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, n=2)
    context = incremental(cache, session_id, 1, forgotten=[(T1, 0), (T1, 1)])
    assert context.kind == "sessionless" and cache.get(session_id) is None
    assert context.finish(cache, 0, []) == (ErrorCode.NONE, INVALID_SESSION_ID, [])


def test_topic_name_sessions_key_partitions_by_name():
    cache = FetchSessionCache(10)
    context = full(cache, version=12, parts=[req(0, 0, topic_id="orders", topic="orders")])
    _, session_id, _ = context.finish(cache, 0, [answer()])
    context = incremental(cache, session_id, 1, version=12, parts=[req(0, 3, topic_id="orders", topic="orders")])
    assert [(k, c.fetch_offset) for k, c in context.partitions] == [(("orders", 0), 3)]


def test_no_slots_no_sessions():
    cache = FetchSessionCache(0)
    assert open_session(cache) == INVALID_SESSION_ID and len(cache) == 0


class TestEviction:
    """Kafka's rules: a stale session goes first; else the smallest evictable one if worth less."""

    EVICT_MS = 120_000

    def test_young_sessions_are_not_evicted_by_consumers(self):
        cache = FetchSessionCache(2, self.EVICT_MS)
        a, b = open_session(cache, 3, now=0), open_session(cache, 3, now=1)
        assert open_session(cache, 100, now=1000) == INVALID_SESSION_ID
        assert set(cache.sessions) == {a, b} and cache.evictions == 0

    def test_a_follower_evicts_a_consumers_session_at_any_age_but_not_a_young_followers(self):
        cache = FetchSessionCache(2, self.EVICT_MS)
        follower = open_session(cache, 1, now=0, follower=True)
        consumer = open_session(cache, 50, now=1)
        newcomer = open_session(cache, 1, now=2, follower=True)
        assert newcomer != INVALID_SESSION_ID and set(cache.sessions) == {follower, newcomer}
        assert cache.evictions == 1
        assert open_session(cache, 1000, now=3, follower=True) == INVALID_SESSION_ID
        assert consumer not in cache.sessions

    def test_the_least_recently_used_session_goes_once_stale(self):
        cache = FetchSessionCache(2, self.EVICT_MS)
        a = open_session(cache, 10, now=0, follower=True)
        b = open_session(cache, 10, now=1, follower=True)
        incremental(cache, a, 1, now=100_000)  # a used again; b not since 1
        c = open_session(cache, 1, now=120_002)
        assert set(cache.sessions) == {a, c} and b not in cache.sessions

    def test_an_old_smaller_session_makes_room_for_a_bigger_one(self):
        cache = FetchSessionCache(2, self.EVICT_MS)
        small = open_session(cache, 2, now=0)
        big = open_session(cache, 20, now=0)
        # Both used at 130 s (so neither is stale), and older than the eviction age by then.
        incremental(cache, small, 1, now=130_000)
        incremental(cache, big, 1, now=130_000)
        assert open_session(cache, 2, now=130_001) == INVALID_SESSION_ID  # not more than the smallest
        bigger = open_session(cache, 3, now=130_002)
        assert set(cache.sessions) == {big, bigger} and cache.evictions == 1
        assert cache.total_partitions == 23

    def test_evictability_is_decided_when_last_used(self):
        cache = FetchSessionCache(1, self.EVICT_MS)
        a = open_session(cache, 2, now=0)
        incremental(cache, a, 1, now=100_000)  # used at 100 s: younger than 120 s then
        assert open_session(cache, 50, now=150_000) == INVALID_SESSION_ID
        incremental(cache, a, 2, now=150_000)  # used at 150 s: evictable from now on
        assert open_session(cache, 50, now=150_001) != INVALID_SESSION_ID


def state(partition: int, offset: int, epoch: int = 0, topic_id=T1) -> tuple:
    return (topic_id, partition), PartitionFetchState("t", topic_id, partition, offset, epoch, -1, 0, 1 << 20)


class TestHandler:
    def test_first_request_is_full_then_only_changes_are_sent(self):
        handler = FetchSessionHandler()
        built = handler.build(dict([state(0, 0), state(1, 0), state(2, 0)]))
        assert built.full and (built.session_id, built.epoch) == (0, 0) and len(built.to_send) == 3
        assert handler.handle_response(ErrorCode.NONE, 77, [(T1, 0), (T1, 1), (T1, 2)])
        built = handler.build(dict([state(0, 0), state(1, 5), state(3, 0)]))
        assert (built.session_id, built.epoch) == (77, 1)
        assert list(built.to_send) == [(T1, 1), (T1, 3)]
        assert [key for key, _ in built.to_forget] == [(T1, 2)]
        assert handler.handle_response(ErrorCode.NONE, 77, [(T1, 1)])
        assert handler.build(dict([state(0, 0), state(1, 5), state(3, 0)])).epoch == 2

    def test_full_response_without_a_session_keeps_fetching_in_full(self):
        handler = FetchSessionHandler()
        handler.build(dict([state(0, 0)]))
        assert handler.handle_response(ErrorCode.NONE, INVALID_SESSION_ID, [(T1, 0)])
        built = handler.build(dict([state(0, 4)]))
        assert built.full and list(built.to_send) == [(T1, 0)]

    def test_session_errors_start_again_with_a_full_fetch(self):
        handler = FetchSessionHandler()
        handler.build(dict([state(0, 0)]))
        handler.handle_response(ErrorCode.NONE, 5, [(T1, 0)])
        handler.build(dict([state(0, 1)]))
        assert not handler.handle_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
        built = handler.build(dict([state(0, 1)]))
        assert built.full and built.session_id == 5  # closes session 5, asks for a new one
        assert not handler.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
        assert handler.build(dict([state(0, 1)])).session_id == INVALID_SESSION_ID

    def test_a_response_with_partitions_outside_the_session_is_not_used(self):
        handler = FetchSessionHandler()
        handler.build(dict([state(0, 0)]))
        assert not handler.handle_response(ErrorCode.NONE, 5, [(T1, 0), (T2, 0)])
        handler.build(dict([state(0, 0)]))
        handler.handle_response(ErrorCode.NONE, 5, [(T1, 0)])
        handler.build(dict([state(0, 0)]))
        assert not handler.handle_response(ErrorCode.NONE, 5, [(T2, 0)])
        assert handler.build(dict([state(0, 0)])).full

    def test_a_lost_response_closes_the_session_with_the_next_request(self):
        handler = FetchSessionHandler()
        handler.build(dict([state(0, 0)]))
        handler.handle_response(ErrorCode.NONE, 9, [(T1, 0)])
        handler.build(dict([state(0, 0)]))
        handler.handle_error()
        built = handler.build(dict([state(0, 0)]))
        assert built.full and built.session_id == 9 and built.epoch == INITIAL_EPOCH


class FetcherAndLeader(RuleBasedStateMachine):
    """A fetcher's handler against a leader's cache, over a lossy link, with evictions: whenever the
    fetcher believes it has a session, the leader's copy holds exactly the parameters it last sent, and
    every fetch reads exactly the partitions the fetcher wants."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = FetchSessionCache(1, rng=random.Random(0))
        self.handler = FetchSessionHandler()
        self.wanted: dict = {}
        self.now = 0

    @rule(partition=st.integers(0, 5), offset=st.integers(0, 3))
    def want(self, partition, offset):
        key, value = state(partition, offset)
        self.wanted[key] = value

    @rule(partition=st.integers(0, 5))
    def drop(self, partition):
        self.wanted.pop((T1, partition), None)

    @rule()
    def evict(self):
        self.cache.sessions.clear()
        self.cache.total_partitions = 0

    @precondition(lambda self: self.wanted)
    @rule(lose_response=st.booleans(), hw=st.integers(0, 2))
    def fetch(self, lose_response, hw):
        self.now += 1
        built = self.handler.build(dict(self.wanted))
        fetch_data = {key: CachedPartition("t", s.topic_id, s.partition, s.fetch_offset, s.partition_max_bytes,
                                           s.current_leader_epoch, s.last_fetched_epoch, s.log_start_offset)
                      for key, s in built.to_send.items()}
        context = new_context(self.cache, self.now, version=13, session_id=built.session_id, epoch=built.epoch,
                              is_follower=True, fetch_data=fetch_data, forgotten=[k for k, _ in built.to_forget])
        if context.kind == "error":
            assert not built.full
            assert not self.handler.handle_response(context.error, 0, [])
            return
        read = {key: cached.fetch_offset for key, cached in context.partitions}
        assert read == {key: s.fetch_offset for key, s in self.wanted.items()}
        error, session_id, carried = context.finish(self.cache, self.now, [answer(hw=hw) for _ in context.partitions])
        if lose_response:
            self.handler.handle_error()
            return
        keys = [context.partitions[i][0] for i in carried]
        assert self.handler.handle_response(error, session_id, keys)

    @invariant()
    def leader_holds_what_the_fetcher_sent(self):
        if self.handler.epoch <= 0:
            return
        session = self.cache.get(self.handler.session_id)
        if session is None:
            return  # evicted: the next incremental fetch is told FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != self.handler.epoch:
            return  # the response was lost: the fetcher's next fetch is a full one
        held = {key: attrs.astuple(c)[:8] for key, c in session.partitions.items()}
        sent = {key: ("t", s.topic_id, s.partition, s.fetch_offset, s.partition_max_bytes, s.current_leader_epoch,
                      s.last_fetched_epoch, s.log_start_offset) for key, s in self.handler.session_partitions.items()}
        assert held == sent


FetcherAndLeader.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestFetcherAndLeader = FetcherAndLeader.TestCase


def test_a_mark_is_kept_only_for_a_partition_the_open_session_holds():
    cache = FetchSessionCache(4)
    a, b = ("t", 0), ("t", 1)
    session = cache.get(cache.maybe_create_session(0, True, {a: CachedPartition("t", None, 0, 0, 100)}, False))
    woken = []
    session.wake = lambda: woken.append(1)
    session.mark(b)  # forgotten, or never held: a partition that still tells the session of its changes
    assert session.dirty == set() and woken == []
    session.mark(a)
    assert session.dirty == {a} and woken == [1]
    session.dirty.clear()
    cache.remove(session.id)
    session.mark(a)
    assert session.dirty == set() and woken == [1]
