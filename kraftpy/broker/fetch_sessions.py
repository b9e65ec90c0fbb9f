"""Incremental fetch sessions (KIP-227): the leader's session cache and the fetcher's session handler.

Theory of operation
-------------------
A fetcher that asks for many partitions sends them all on every fetch, and is answered with all of
them, though most have nothing new. A fetch session lets both sides remember the set instead:

* A *full* fetch (``session_epoch`` 0) names every partition. The broker answers all of them and, if
  the cache has room (or may make room, see below), keeps them as a new session whose id it returns
  (``session_id``; 0 when no session was made).
* An *incremental* fetch (``session_id`` of the session, ``session_epoch`` 1, 2, ...) names only the
  partitions whose fetch parameters changed (or that join the session) and lists in
  ``forgotten_topics_data`` those that leave it; the others are fetched with the parameters the
  session remembers. The answer carries only the partitions that have something to say: records, a
  changed high watermark, last stable offset or log start offset, an error, a diverging epoch. Each
  incremental fetch moves the session's epoch one on (``INT32_MAX`` wraps to 1).
* ``session_epoch`` -1 (``FINAL_EPOCH``) is a full fetch that closes the session it names and makes
  none. A full fetch naming a session closes that one too before it may make another.
* An incremental fetch naming no session the cache holds is answered FETCH_SESSION_ID_NOT_FOUND; one
  whose epoch is not the session's next is answered INVALID_FETCH_SESSION_EPOCH; a session made with
  topic ids (Fetch v13) used by an older version, or the reverse, FETCH_SESSION_TOPIC_ID_ERROR. The
  fetcher then starts again with a full fetch.

Partitions that returned records move to the end of the session, so that a fetch bounded by
``max_bytes`` serves the others first next time (Kafka's round-robin).

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. A new session takes
the place of an existing one when (Kafka's FetchSessionCache rules, in this order):

1. the least recently used session is *stale*: unused for longer than the minimum eviction age
   (`MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`, 120 s as in Kafka); or
2. the smallest *evictable* session is worth less than the new one, comparing (privileged, number
   of partitions, id). Sessions of followers (replica fetchers) are privileged. A session is
   evictable by anyone once older than the minimum eviction age; a non-privileged one is evictable by
   a privileged newcomer at any age. Evictability is decided when the session was last used.

Kafka shards its cache into eight locks for its threads; kraftpy serves fetches on one trio thread,
so one cache with the same rules. Nothing here awaits, opens a socket or reads a clock: times are
passed in as milliseconds.

The fetcher's side, `FetchSessionHandler` (Kafka's FetchSessionHandler), remembers what it last
sent for each partition and builds the next request: full when it has no session, otherwise only
the partitions added or altered plus the ones to forget. A session error, a response it cannot
reconcile, or a lost connection makes the next request full again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import attrs

from kraftpy.protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
#: The epoch of a full fetch that makes a session (or asks for one).
INITIAL_EPOCH = 0
#: The epoch of a full fetch that closes a session and makes none (also every fetch before v7).
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
#: How long a session must go unused before any newcomer may evict it, and how old it must be before a
#: newcomer with more partitions may (Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS; not a setting).
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000

#: A partition of a session: (topic, partition), the topic by id (uuid) from Fetch v13, by name before.
PartitionKey = tuple[Hashable, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: FINAL_EPOCH stays, INT32_MAX wraps to 1 (0 only ever starts a session)."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == INT32_MAX:
        return 1
    return epoch + 1


def is_full(epoch: int) -> bool:
    return epoch in (INITIAL_EPOCH, FINAL_EPOCH)


# -- the leader's side -----------------------------------------------------------------------------


@attrs.define(eq=False, slots=True)
class CachedPartition:
    """One partition of a session: the fetch parameters last sent for it, and what its last answer
    said (the broker's high watermark, last stable offset and log start offset, -1 before any)."""

    topic: str
    topic_id: Any
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    #: The fetcher's own log start offset (a follower's).
    log_start_offset: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    local_log_start_offset: int = -1

    @classmethod
    def from_request(cls, topic: str, topic_id: Any, fp: Any) -> CachedPartition:
        """From a request's FetchPartition."""
        return cls(topic, topic_id, fp.partition, fp.fetch_offset, fp.partition_max_bytes,
                   fp.current_leader_epoch, fp.last_fetched_epoch, fp.log_start_offset)

    def update_request_params(self, other: CachedPartition) -> None:
        self.fetch_offset = other.fetch_offset
        self.partition_max_bytes = other.partition_max_bytes
        self.current_leader_epoch = other.current_leader_epoch
        self.last_fetched_epoch = other.last_fetched_epoch
        self.log_start_offset = other.log_start_offset

    def maybe_update_response_data(self, data: Any, records_size: int, update: bool) -> bool:
        """Whether this partition's answer ``data`` (a FetchResponse PartitionData) must be sent in an
        incremental response; with ``update``, remember what it says. An error resets the remembered high
        watermark, so the partition is sent again once the error is gone."""
        must = records_size > 0
        if self.high_watermark != data.high_watermark:
            must = True
            if update:
                self.high_watermark = data.high_watermark
        if self.last_stable_offset != data.last_stable_offset:
            must = True
            if update:
                self.last_stable_offset = data.last_stable_offset
        if self.local_log_start_offset != data.log_start_offset:
            must = True
            if update:
                self.local_log_start_offset = data.log_start_offset
        if getattr(data, "preferred_read_replica", -1) >= 0:
            must = True
        if data.error_code != ErrorCode.NONE:
            must = True
            if update:
                self.high_watermark = -1
        diverging = getattr(data, "diverging_epoch", None)
        if diverging is not None and (diverging.epoch >= 0 or diverging.end_offset >= 0):
            must = True
        return must


@attrs.define(eq=False)
class FetchSession:
    id: int
    #: Made by a follower (a replica fetcher): only privileged newcomers evict it while it is young.
    privileged: bool
    #: Invariant: in the order the next fetch reads them (partitions that returned records go last).
    partitions: dict[PartitionKey, CachedPartition]
    #: Made by Fetch v13+ (partitions keyed by topic id) or an older version (by topic name).
    uses_topic_ids: bool
    creation_ms: float
    last_used_ms: float
    #: The epoch the next incremental fetch must carry.
    epoch: int
    #: The size when last touched (what eviction compares); -1 while not in a cache.
    cached_size: int = -1
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False
    #: The partitions that changed since a fetch last found them with nothing to say (marked by the
    #: partitions themselves, `mark`), or that still have something to say (see kraftpy.broker.apis.fetch,
    #: "Sessions in proportion to the change").
    dirty: set = attrs.field(factory=set)
    #: Called by `mark` (a parked fetch of the session sets it to wake itself up).
    wake: Callable[[], None] | None = None
    #: What a fetch that last looked at every partition saw (the fetch API's ``view``: the replicas here,
    #: the ACLs, the isolation level); None: never.
    version: Any = None
    #: When the session was last fetched (the partitions' clock, ms).
    last_fetch_ms: int = 0
    #: Gone from the cache: its partitions no longer count its fetches.
    closed: bool = False
    #: Each partition's place in `partitions` (increasing along it), so that a subset is read in order.
    order: dict = attrs.field(factory=dict)
    _next_place: int = 0

    def __attrs_post_init__(self) -> None:
        for key in self.partitions:
            self._place(key)

    def _place(self, key: PartitionKey) -> None:
        self.order[key] = self._next_place
        self._next_place += 1

    def evictable_key(self) -> tuple[bool, int, int]:
        return self.privileged, self.cached_size, self.id

    @property
    def reads_log_end(self) -> bool:
        """A follower's session reads up to the log end, and is told when only that moved (an append below
        the high watermark); a consumer's reads up to the high watermark and is not (`Partition.changed`)."""
        return self.privileged

    def mark(self, key: PartitionKey) -> None:
        """The partition ``key`` changed: the next fetch looks at it. A partition the session no longer
        holds (forgotten, or the session closed) may still call: nothing is kept of it."""
        if self.closed or key not in self.partitions:
            return
        self.dirty.add(key)
        if self.wake is not None:
            self.wake()

    def holds(self, key: PartitionKey) -> bool:
        """Whether this session, still cached, fetches ``key``."""
        return not self.closed and key in self.partitions

    def pick(self, named: Iterable[PartitionKey]) -> list[tuple[PartitionKey, CachedPartition]]:
        """The partitions a fetch naming ``named`` looks at: those and the changed ones, in session order."""
        partitions = self.partitions
        keys = [key for key in self.dirty.union(named) if key in partitions]
        keys.sort(key=self.order.__getitem__)
        return [(key, partitions[key]) for key in keys]

    def move_to_end(self, key: PartitionKey) -> None:
        cached = self.partitions.pop(key, None)
        if cached is not None:
            self.partitions[key] = cached
            self._place(key)

    def update(self, fetch_data: dict[PartitionKey, CachedPartition],
               forgotten: Iterable[PartitionKey]) -> tuple[list, list, list]:
        """Apply an incremental fetch: its partitions join the session or update their parameters,
        the forgotten ones leave. Returns the keys (added, updated, removed)."""
        added, updated, removed = [], [], []
        for key, requested in fetch_data.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = requested
                self._place(key)
                added.append(key)
            else:
                cached.update_request_params(requested)
                updated.append(key)
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                self.order.pop(key, None)
                self.dirty.discard(key)
                removed.append(key)
        return added, updated, removed


class FetchSessionCache:
    """The sessions of one broker, at most ``max_entries`` (see the module doc for eviction)."""

    def __init__(self, max_entries: int, eviction_ms: float = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS, *,
                 rng: random.Random | None = None, on_evict: Callable[[], None] | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        #: Sessions evicted to make room for new ones (closing a session is no eviction).
        self.evictions = 0
        #: Invariant: the sum of the sessions' cached_size.
        self.total_partitions = 0
        self._rng = rng or random.Random()
        self._on_evict = on_evict

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, INT32_MAX)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(self, now_ms: float, privileged: bool, partitions: dict[PartitionKey, CachedPartition],
                             uses_topic_ids: bool) -> int:
        """Keep ``partitions`` as a new session if there is room or room can be made; its id, else
        INVALID_SESSION_ID."""
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self.new_session_id(), privileged, partitions, uses_topic_ids, now_ms, now_ms,
                               next_epoch(INITIAL_EPOCH))
        self.sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: float) -> bool:
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self._evict(lru)
            return True
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        smallest = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < smallest.evictable_key():
            return False
        self._evict(smallest)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1
        if self._on_evict is not None:
            self._on_evict()

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.total_partitions -= session.cached_size
            session.cached_size = -1
            session.closed = True
        return session

    def touch(self, session: FetchSession, now_ms: float) -> None:
        """The session was used: it is the most recently used, and its size and evictability are taken now."""
        session.last_used_ms = now_ms
        if session.cached_size >= 0:
            self.total_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.total_partitions += session.cached_size
        old = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old


@attrs.define(eq=False)
class FetchContext:
    """How one fetch request is served: which partitions it reads (`partitions`, in order), and, once
    each was answered, which the response carries and under what session id (`finish`).

    ``kind`` is "error" (``error`` says which; nothing is read), "sessionless" (epoch -1 or a
    session closed empty), "full" (may make a session) or "incremental"."""

    kind: str
    partitions: list[tuple[PartitionKey, CachedPartition]] = attrs.field(factory=list)
    error: ErrorCode = ErrorCode.NONE
    session: FetchSession | None = None
    #: The session's epoch once this fetch moved it on; another fetch of the session meanwhile changes it.
    expected_epoch: int = 0
    privileged: bool = False
    uses_topic_ids: bool = False

    def finish(self, cache: FetchSessionCache, now_ms: float,
               answers: list[tuple[Any, int]]) -> tuple[ErrorCode, int, list[int]]:
        """Given each partition's answer (PartitionData, bytes of records) in `partitions` order: the
        response's error, its session id, and the indexes of the partitions it carries. An incremental
        fetch's answer may be None: nothing changed (never carried)."""
        everything = list(range(len(answers)))
        if self.kind == "sessionless":
            return ErrorCode.NONE, INVALID_SESSION_ID, everything
        if self.kind == "full":
            kept: dict[PartitionKey, CachedPartition] = {}
            for (key, cached), (data, _) in zip(self.partitions, answers, strict=True):
                cached.high_watermark = data.high_watermark
                cached.last_stable_offset = data.last_stable_offset
                cached.local_log_start_offset = data.log_start_offset
                kept[key] = cached
            session_id = cache.maybe_create_session(now_ms, self.privileged, kept, self.uses_topic_ids)
            return ErrorCode.NONE, session_id, everything
        session = self.session
        assert session is not None
        if session.epoch != self.expected_epoch:
            # Another fetch of this session came in while this one waited: the fetcher lost track.
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, []
        carried = []
        moved = []
        for i, ((key, cached), (data, records_size)) in enumerate(zip(self.partitions, answers, strict=True)):
            if data is None:  # the reader found it unchanged without building its answer
                continue
            if cached.maybe_update_response_data(data, records_size, update=True):
                carried.append(i)
                if records_size > 0:
                    moved.append(key)
        for key in moved:  # round-robin: what returned records is read last next time
            session.move_to_end(key)
        return ErrorCode.NONE, session.id, carried


def new_context(cache: FetchSessionCache, now_ms: float, *, version: int, session_id: int, epoch: int,
                is_follower: bool, fetch_data: dict[PartitionKey, CachedPartition],
                forgotten: Iterable[PartitionKey], lazy: bool = False) -> FetchContext:
    """The context of one fetch request (Kafka's FetchManager.newContext): closes the session a full
    fetch names, finds and updates the session of an incremental one, or says what is wrong. ``lazy``:
    an incremental context's `partitions` are left empty, for the caller to choose (a follower's fetch
    looks only at what changed)."""
    uses_topic_ids = version >= 13
    if is_full(epoch):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        kind = "sessionless" if epoch == FINAL_EPOCH else "full"
        return FetchContext(kind, list(fetch_data.items()), privileged=is_follower, uses_topic_ids=uses_topic_ids)
    session = cache.get(session_id)
    if session is None:
        return FetchContext("error", error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return FetchContext("error", error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != uses_topic_ids:
        return FetchContext("error", error=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
    session.update(fetch_data, forgotten)
    if not session.partitions:
        cache.remove(session.id)
        return FetchContext("sessionless", list(fetch_data.items()))
    cache.touch(session, now_ms)
    session.epoch = next_epoch(session.epoch)
    return FetchContext("incremental", [] if lazy else list(session.partitions.items()), session=session,
                        expected_epoch=session.epoch, uses_topic_ids=uses_topic_ids)


# -- the fetcher's side ----------------------------------------------------------------------------


@attrs.frozen
class PartitionFetchState:
    """What a fetcher asks of one partition; equal states need not be sent again in a session."""

    topic: str
    topic_id: Any
    partition: int
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@attrs.frozen
class FetchRequestData:
    session_id: int
    epoch: int
    #: The partitions the request names (all of them when full; added and altered when incremental).
    to_send: dict[PartitionKey, PartitionFetchState]
    #: The partitions that leave the session (incremental only).
    to_forget: list[tuple[PartitionKey, PartitionFetchState]]
    #: Every partition the session holds once this request is served (an incremental request's is the
    #: handler's own, as it stands until the next build).
    session_partitions: dict[PartitionKey, PartitionFetchState]

    @property
    def full(self) -> bool:
        return is_full(self.epoch)


#: Errors of the whole response that say the session is gone or out of step.
SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                            ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR})


class FetchSessionHandler:
    """A fetcher's session with one broker (Kafka's FetchSessionHandler): `build` the next request from
    the partitions wanted now, then `handle_response` or `handle_error`."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        #: The epoch of the next request (INITIAL_EPOCH: the next request is full).
        self.epoch = INITIAL_EPOCH
        #: What the session holds (what the broker remembers for each partition), in order.
        self.session_partitions: dict[PartitionKey, PartitionFetchState] = {}

    def build(self, wanted: dict[PartitionKey, PartitionFetchState],
              changed: Iterable[PartitionKey] | None = None) -> FetchRequestData:
        """The next request for the partitions ``wanted`` now. ``changed``: the only keys whose wanted
        state may differ from the last build's (a fetcher that keeps its wanted states from round to
        round): an incremental request then costs what changed, not the session's size."""
        if is_full(self.epoch):
            self.session_partitions = dict(wanted)
            return FetchRequestData(self.session_id, self.epoch, dict(wanted), [], dict(wanted))
        to_send: dict[PartitionKey, PartitionFetchState] = {}
        to_forget = []
        held = self.session_partitions
        if changed is None:
            for key, previous in list(held.items()):
                state = wanted.get(key)
                if state is None:
                    del held[key]
                    to_forget.append((key, previous))
                elif state != previous:
                    held[key] = state
                    to_send[key] = state
            for key, state in wanted.items():
                if key not in held:
                    held[key] = state
                    to_send[key] = state
        else:
            for key in changed:
                state = wanted.get(key)
                previous = held.get(key)
                if state is None:
                    if previous is not None:
                        del held[key]
                        to_forget.append((key, previous))
                elif state != previous:
                    held[key] = state
                    to_send[key] = state
        return FetchRequestData(self.session_id, self.epoch, to_send, to_forget, held)

    def handle_response(self, error_code: int, session_id: int, answered: Iterable[PartitionKey]) -> bool:
        """Take the broker's answer to the last `build`: False when the response is not to be used (a
        session error, or partitions the session does not hold); the next request is full then."""
        if error_code != ErrorCode.NONE:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            else:
                self.epoch = INITIAL_EPOCH  # close this session, ask for a new one
            return False
        answered = set(answered)
        if is_full(self.epoch):
            if answered != set(self.session_partitions):
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
                return False
            if session_id == INVALID_SESSION_ID:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            else:
                self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
            return True
        if not answered <= set(self.session_partitions):
            self.epoch = INITIAL_EPOCH
            return False
        if session_id == INVALID_SESSION_ID:  # the broker closed the session
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request or its response was lost: close this session with the next (full) request."""
        self.epoch = INITIAL_EPOCH

