"""The replica fetcher's fetch session (KIP-227) without sockets: what it sends once the leader made a
session, and how it starts again after a session error. The leader is the connection double of
test_fetcher.py; back-offs run on trio's autojump clock."""

from __future__ import annotations

import trio

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import FetchResponse
from tests.broker.test_fetcher import BACKOFF_MS, Leader, answer, batches, follower  # noqa: F401 - the fixture

SESSION = 4242


def with_session(respond, session_id: int = SESSION, error_code: int = ErrorCode.NONE):
    def reply(request):
        response = respond(request)
        response.session_id = session_id
        response.error_code = error_code
        return response
    return reply


def empty(session_id: int = SESSION, error_code: int = ErrorCode.NONE):
    return lambda request: FetchResponse(throttle_time_ms=0, error_code=error_code, session_id=session_id)


async def test_after_a_full_fetch_only_changed_partitions_are_sent_and_a_session_error_starts_over(follower):  # noqa: F811
    _, _, part, fetcher = follower
    leader = Leader()
    epoch = part.leader_epoch

    # First fetch: full, asking for a session (epoch 0), naming the partition.
    leader.answer = with_session(answer(part, high_watermark=0, log_start_offset=0))
    await fetcher.fetch_once(leader)
    first = leader.requests[-1]
    assert (first.session_id, first.session_epoch) == (0, 0)
    assert [p.fetch_offset for t in first.topics for p in t.partitions] == [0]

    # Nothing changed on the follower: an incremental fetch naming no partition.
    leader.answer = with_session(answer(part, high_watermark=3, log_start_offset=0, records=batches(0, 3, epoch)))
    await fetcher.fetch_once(leader)
    second = leader.requests[-1]
    assert (second.session_id, second.session_epoch, second.topics) == (SESSION, 1, [])
    assert part.log_end_offset == 3

    # The log moved on: the partition is named again, at its new end.
    leader.answer = empty()
    await fetcher.fetch_once(leader)
    third = leader.requests[-1]
    assert (third.session_id, third.session_epoch) == (SESSION, 2)
    assert [p.fetch_offset for t in third.topics for p in t.partitions] == [3]
    # An empty incremental answer: nothing happened; the next fetch names nothing.
    await fetcher.fetch_once(leader)
    assert (leader.requests[-1].session_epoch, leader.requests[-1].topics) == (3, [])

    # The leader lost the session: at once (no back-off) a full fetch without a session id.
    leader.answer = empty(session_id=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    before = trio.current_time()
    await fetcher.fetch_once(leader)
    assert trio.current_time() - before < BACKOFF_MS / 1000
    leader.answer = with_session(answer(part, high_watermark=3, log_start_offset=0), session_id=SESSION + 1)
    await fetcher.fetch_once(leader)
    again = leader.requests[-1]
    assert (again.session_id, again.session_epoch) == (0, 0)
    assert [p.fetch_offset for t in again.topics for p in t.partitions] == [3]

    # Out of step: the next fetch is full again and closes that session.
    leader.answer = empty(session_id=0, error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    await fetcher.fetch_once(leader)
    assert (leader.requests[-1].session_id, leader.requests[-1].session_epoch) == (SESSION + 1, 1)
    leader.answer = with_session(answer(part, high_watermark=3, log_start_offset=0))
    await fetcher.fetch_once(leader)
    assert (leader.requests[-1].session_id, leader.requests[-1].session_epoch) == (SESSION + 1, 0)
    assert fetcher.manager.full_requests == 3


async def test_a_lost_connection_makes_the_next_fetch_full(follower):  # noqa: F811
    _, _, part, fetcher = follower
    leader = Leader()
    leader.answer = with_session(answer(part, high_watermark=0, log_start_offset=0))
    await fetcher.fetch_once(leader)

    class Broken(Leader):
        async def request(self, api_key, version, request):
            self.requests.append(request)
            raise trio.BrokenResourceError("gone")

    broken = Broken()
    try:
        await fetcher.fetch_once(broken)
    except trio.BrokenResourceError:
        pass
    assert broken.requests[-1].session_epoch == 1
    await fetcher.fetch_once(leader)
    assert (leader.requests[-1].session_id, leader.requests[-1].session_epoch) == (SESSION, 0)
