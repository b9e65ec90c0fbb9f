"""Client quota enforcement: what a request costs, which quota it counts against, and how long its
connection is throttled — Kafka's ClientQuotaManager, in one place.

Theory of operation. After a handler answers, `ClientQuotas.after_request` records the request's cost
on the sensors its client's quotas resolve to, and when a sensor's rate is over its quota it

* sets ``throttle_time_ms`` on the response (the largest of the quota types the request broke), which
  is sent at once (KIP-219: the client learns its throttle time without waiting for it), and
* mutes the connection: ``Connection.throttle_ms`` tells the server loop to read nothing more from it
  for that long once the response is sent.

Costs, by quota type (Kafka's): **Produce** counts the request's bytes against producer_byte_rate,
**Fetch** the record bytes of a consumer's Fetch response against consumer_byte_rate (a follower's
fetches are replication, never client-quota'd): the fetch handler asks `ClientQuotas.throttle_fetch`
before it answers, and a fetch that would take its client over the quota is answered with no records
and its bytes are not counted (Kafka's ``getThrottledResponse``); a consumer's fetch reads at most one
window's worth of its quota (`max_fetch_bytes`, Kafka's ``getMaxValueInQuotaWindow``), so a client
within its quota is not refused forever. A fetch throttled for request time is emptied the same way.
**Request** the time the connection's task ran (parsing,
handling, encoding and sending; time parked waiting — a long-poll Fetch, an acks=all Produce — is not
counted), as a percentage of one second, against request_percentage (every API but ApiVersions and the
SASL handshake). That time is measured by a trio instrument (`TaskTime`) installed only while some
entity has a request_percentage quota. **ControllerMutation** counts the partitions a CreateTopics,
CreatePartitions or DeleteTopics creates or deletes against controller_mutation_rate (KIP-599): the
handler asks `ClientQuotas.mutations` for each topic before forwarding it, and from CreateTopics v6,
CreatePartitions v3 and DeleteTopics v5 on a topic asked for while the client is already over its quota
is answered THROTTLING_QUOTA_EXCEEDED (the one that takes it over is accepted, as in Kafka); older
versions are only throttled. Validate-only requests are not counted.

Resolution (`resolve_quota`) follows Kafka's precedence, most specific first::

    /users/u/clients/c  /users/u/clients/<default>  /users/u
    /users/<default>/clients/c  /users/<default>/clients/<default>  /users/<default>
    /clients/c  /clients/<default>

The first entity with the quota key set wins, and it also says who shares the sensor (Kafka's metric
tags): a part the entity names (by name or as the default) is keyed by the client's own user or client
id, a part it leaves out is shared. So ``/users/u`` holds all of u's clients to one rate together,
while ``/users/<default>/clients/<default>`` holds each (user, client id) pair to its own.

Rates are Kafka's sampled ``Rate``: `Rate` keeps ``quota.window.num`` samples of
``quota.window.size.seconds`` each; the rate is the sum of the live samples over the time they span.
Over a quota ``Q`` with rate ``R`` measured over window ``W``, the throttle time is ``(R - Q) / Q * W``
(Kafka's QuotaUtils.throttleTime), at most the whole window span. One difference from Kafka: the span
is at least one window, where Kafka's is at least ``num - 1`` windows. Kafka's floor lets a new client
send ten windows' worth of quota at once, and a client that keeps sending then repeats that burst each
time its first sample expires, so over any ten seconds it may be 10% above or 20% below its quota; with
a one-window floor the first burst is one window's worth and a busy client is paced evenly.

The user is the connection's principal without ``User:`` (``ANONYMOUS`` for a connection nobody
authenticated), the client id the request header's (an absent one is "").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

from kraftpy.metadata.image import ClientQuotasImage, QuotaEntity
from kraftpy.metadata.quota_control import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
)
from kraftpy.metrics import QUOTA_THROTTLE_TIME, QUOTA_THROTTLED_REQUESTS
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.types import part_length
from kraftpy.rpc.rates import Rate

PRODUCE = "Produce"
FETCH = "Fetch"
REQUEST = "Request"
MUTATION = "ControllerMutation"

#: Quota type → the quota key it enforces.
QUOTA_KEY = {PRODUCE: PRODUCER_BYTE_RATE, FETCH: CONSUMER_BYTE_RATE, REQUEST: REQUEST_PERCENTAGE,
             MUTATION: CONTROLLER_MUTATION_RATE}

#: The APIs that mutate partitions, and the first version of each answered THROTTLING_QUOTA_EXCEEDED.
STRICT_MUTATION_VERSIONS = {ApiKey.CREATE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3, ApiKey.DELETE_TOPICS: 5}

#: APIs never throttled for request time (Kafka exempts what a client needs to connect at all).
REQUEST_QUOTA_EXEMPT = frozenset({ApiKey.API_VERSIONS, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate

#: A sensor nobody recorded on for this long is dropped (Kafka's inactive-sensor expiry is one hour).
SENSOR_EXPIRY_S = 3600.0


class TaskTime(trio.abc.Instrument):
    """Seconds each watched task spent running (in its steps), for the request quota. Every task
    spawned while it is installed is watched from its first step: a request's task (the server
    handles each request in a task of its own) counts its whole handling."""

    def __init__(self) -> None:
        self._running: dict[Any, float] = {}
        self._spent: dict[Any, float] = {}

    def task_spawned(self, task: Any) -> None:
        self._spent[task] = 0.0

    def before_task_step(self, task: Any) -> None:
        if task in self._spent:
            self._running[task] = time.perf_counter()

    def after_task_step(self, task: Any) -> None:
        started = self._running.pop(task, None)
        if started is not None:
            self._spent[task] += time.perf_counter() - started

    def task_exited(self, task: Any) -> None:
        self._spent.pop(task, None)
        self._running.pop(task, None)

    def take(self, task: Any) -> float:
        """The time ``task`` ran since the last take (watching it from now on), the current step included;
        called from ``task`` itself."""
        now = time.perf_counter()
        spent = self._spent.get(task, 0.0)
        started = self._running.get(task)
        if started is not None:
            spent += now - started
        self._spent[task] = 0.0
        self._running[task] = now
        return spent


def user_of(principal: str) -> str:
    """The quota user of a principal: ``User:alice`` → ``alice``."""
    return principal[5:] if principal.startswith("User:") else principal


def _candidates(user: str, client_id: str) -> list[QuotaEntity]:
    """Entities in Kafka's precedence order for ``user`` and ``client_id`` (canonical, sorted by type)."""
    return [
        ((CLIENT_ID, client_id), (USER, user)),
        ((CLIENT_ID, None), (USER, user)),
        ((USER, user),),
        ((CLIENT_ID, client_id), (USER, None)),
        ((CLIENT_ID, None), (USER, None)),
        ((USER, None),),
        ((CLIENT_ID, client_id),),
        ((CLIENT_ID, None),),
    ]


def resolve_quota(quotas: ClientQuotasImage, key: str, user: str,
                  client_id: str) -> tuple[float, tuple[str, str]] | None:
    """The quota ``key`` of ``user``/``client_id`` and the sensor it is counted on, as (bound,
    (user tag, client-id tag)); None when no entity sets it."""
    for entity in _candidates(user, client_id):
        value = quotas.entities.get(entity, {}).get(key)
        if value is not None:
            parts = dict(entity)
            return value, (user if USER in parts else "", client_id if CLIENT_ID in parts else "")
    return None


def throttle_time_ms(rate: float, bound: float, window_s: float) -> int:
    """Kafka's QuotaUtils.throttleTime: how long to hold a client at ``rate`` to bring it to ``bound``."""
    if bound <= 0:
        return int(window_s * 1000)
    return round((rate - bound) / bound * window_s * 1000)


def _records_bytes(response: Any) -> int:
    total = 0
    for topic in response.responses or ():
        for partition in topic.partitions or ():
            records = partition.records
            if records is None:
                continue
            if isinstance(records, (list, tuple)):
                total += sum(part_length(p) for p in records)
            else:
                total += part_length(records)
    return total


class ClientQuotas:
    """The broker's quota sensors, read against the client quotas of the current metadata image."""

    def __init__(self, image: Callable[[], Any], *, window_num: int = 11, window_size_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``image`` gives the current MetadataImage; ``window_num``/``window_size_s`` are
        quota.window.num and quota.window.size.seconds."""
        self._image = image
        self.window_num = window_num
        self.window_size_s = window_size_s
        self.clock = clock
        #: (quota type, user tag, client-id tag) → (Rate, last recorded at).
        self._sensors: dict[tuple[str, str, str], list[Any]] = {}
        self._next_expiry = clock() + SENSOR_EXPIRY_S
        #: Throttle time given so far, by quota type (tests and metrics).
        self.throttled_ms: dict[str, int] = {PRODUCE: 0, FETCH: 0, REQUEST: 0, MUTATION: 0}
        self._task_time: TaskTime | None = None
        self._quotas_seen: Any = None

    def _request_time(self, quotas: ClientQuotasImage) -> float | None:
        """The current task's running time since its last request, while some entity has a
        request_percentage quota (the instrument is installed then, and removed once none has)."""
        if quotas is not self._quotas_seen:
            self._quotas_seen = quotas
            wanted = any(REQUEST_PERCENTAGE in values for values in quotas.entities.values())
            if wanted and self._task_time is None:
                self._task_time = TaskTime()
                trio.lowlevel.add_instrument(self._task_time)
            elif not wanted and self._task_time is not None:
                trio.lowlevel.remove_instrument(self._task_time)
                self._task_time = None
        if self._task_time is None:
            return None
        return self._task_time.take(trio.lowlevel.current_task())

    @property
    def max_throttle_ms(self) -> int:
        return int(self.window_num * self.window_size_s * 1000)

    def record(self, quota_type: str, user: str, client_id: str, value: float, now: float | None = None) -> int:
        """Count ``value`` for the client; the throttle time in ms it now owes (0 within its quota)."""
        quotas = self._image().client_quotas
        if not quotas.entities:
            return 0
        resolved = resolve_quota(quotas, QUOTA_KEY[quota_type], user, client_id)
        if resolved is None:
            return 0
        bound, (user_tag, client_tag) = resolved
        now = self.clock() if now is None else now
        self._maybe_expire(now)
        sensor = self._sensors.get((quota_type, user_tag, client_tag))
        if sensor is None:
            sensor = self._sensors[(quota_type, user_tag, client_tag)] = [Rate(self.window_num, self.window_size_s), now]
        rate: Rate = sensor[0]
        sensor[1] = now
        rate.record(value, now)
        measured = rate.measure(now)
        if measured <= bound:
            return 0
        return max(0, min(throttle_time_ms(measured, bound, rate.window_size(now)), self.max_throttle_ms))

    def over_quota_ms(self, quota_type: str, user: str, client_id: str, now: float | None = None) -> int:
        """The throttle time the client owes now, recording nothing (0 within its quota or without one)."""
        quotas = self._image().client_quotas
        resolved = resolve_quota(quotas, QUOTA_KEY[quota_type], user, client_id) if quotas.entities else None
        if resolved is None:
            return 0
        bound, (user_tag, client_tag) = resolved
        sensor = self._sensors.get((quota_type, user_tag, client_tag))
        if sensor is None:
            return 0
        now = self.clock() if now is None else now
        measured = sensor[0].measure(now)
        if measured <= bound:
            return 0
        return max(0, min(throttle_time_ms(measured, bound, sensor[0].window_size(now)), self.max_throttle_ms))

    # -- consumer fetches -------------------------------------------------------------------------------

    def max_fetch_bytes(self, header: Any, conn: Any) -> int | None:
        """The most record bytes one consumer fetch may read: one window of its consumer_byte_rate (kraftpy
        measures a fresh client over one window, where Kafka's getMaxValueInQuotaWindow allows ``num - 1``);
        None without that quota."""
        quotas = self._image().client_quotas
        if not quotas.entities:
            return None
        resolved = resolve_quota(quotas, CONSUMER_BYTE_RATE, user_of(getattr(conn, "principal", "User:ANONYMOUS")),
                                 header.client_id or "")
        if resolved is None:
            return None
        return max(1, int(resolved[0] * self.window_size_s))

    def throttle_fetch(self, header: Any, conn: Any, fetched_bytes: int) -> int:
        """A consumer fetch about to answer ``fetched_bytes`` record bytes: count them; when that takes the
        client over its consumer_byte_rate, take them back out and return the throttle time in ms: the
        fetch is then answered with no records (Kafka's getThrottledResponse) and the connection muted by
        `after_request`. 0 when the fetch may go out as it is."""
        now = self.clock()
        user, client_id = user_of(getattr(conn, "principal", "User:ANONYMOUS")), header.client_id or ""
        throttle = self.record(FETCH, user, client_id, fetched_bytes, now)
        if throttle > 0:
            self.unrecord(FETCH, user, client_id, fetched_bytes, now)
        return throttle

    def unrecord(self, quota_type: str, user: str, client_id: str, value: float, now: float) -> None:
        """Take back a value `record` counted at ``now`` (the cost of a response that will not be sent)."""
        quotas = self._image().client_quotas
        resolved = resolve_quota(quotas, QUOTA_KEY[quota_type], user, client_id) if quotas.entities else None
        if resolved is None:
            return
        sensor = self._sensors.get((quota_type, *resolved[1]))
        if sensor is not None:
            sensor[0].unrecord(value, now)

    def mutations(self, header: Any, conn: Any) -> MutationQuota:
        """The controller-mutation quota of one CreateTopics, CreatePartitions or DeleteTopics request."""
        strict = header.request_api_version >= STRICT_MUTATION_VERSIONS.get(header.request_api_key, 1 << 15)
        return MutationQuota(self, user_of(getattr(conn, "principal", "User:ANONYMOUS")), header.client_id or "",
                             strict)

    def _maybe_expire(self, now: float) -> None:
        if now < self._next_expiry:
            return
        self._next_expiry = now + SENSOR_EXPIRY_S
        for key in [k for k, (_, last) in self._sensors.items() if now - last > SENSOR_EXPIRY_S]:
            del self._sensors[key]

    # -- the dispatcher's hook ------------------------------------------------------------------------

    def after_request(self, api_key: int, header: Any, request: Any, request_bytes: int, response: Any,
                      conn: Any) -> int:
        """Record what the request cost (see the module doc); when its client is over a quota, put the
        throttle time on the response (if it has the field) and mute ``conn`` for it. Returns the
        throttle time in ms."""
        quotas = self._image().client_quotas
        request_s = self._request_time(quotas)
        if not quotas.entities:
            return 0
        user = user_of(getattr(conn, "principal", "User:ANONYMOUS"))
        client_id = header.client_id or ""
        throttles: dict[str, int] = {}
        if api_key == ApiKey.PRODUCE:
            throttles[PRODUCE] = self.record(PRODUCE, user, client_id, request_bytes)
        elif api_key == ApiKey.FETCH and response is not None and getattr(request, "replica_id", -1) < 0:
            # Counted (or answered empty) by the handler through throttle_fetch.
            throttles[FETCH] = response.throttle_time_ms or 0
        elif api_key in STRICT_MUTATION_VERSIONS:
            throttles[MUTATION] = self.over_quota_ms(MUTATION, user, client_id)
        if request_s is not None and api_key not in REQUEST_QUOTA_EXEMPT:
            throttles[REQUEST] = self.record(REQUEST, user, client_id, request_s * 100.0)
        quota_type, throttle = max(throttles.items(), key=lambda item: item[1], default=(REQUEST, 0))
        if throttle <= 0:
            return 0
        if quota_type == REQUEST and api_key == ApiKey.FETCH and FETCH in throttles and response.responses:
            # A throttled fetch carries no records, whichever quota throttled it (Kafka): un-count them.
            self.unrecord(FETCH, user, client_id, _records_bytes(response), self.clock())
            response.responses = []
        self.throttled_ms[quota_type] += throttle
        QUOTA_THROTTLE_TIME.labels(quota_type).inc(throttle)
        QUOTA_THROTTLED_REQUESTS.labels(quota_type).inc()
        if response is not None and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle)
        conn.throttle_ms = max(getattr(conn, "throttle_ms", 0), throttle)
        return throttle


class MutationQuota:
    """One request's partition mutations against its client's controller_mutation_rate (KIP-599)."""

    def __init__(self, quotas: ClientQuotas, user: str, client_id: str, strict: bool) -> None:
        self._quotas = quotas
        self.user = user
        self.client_id = client_id
        #: Whether a topic over the quota is refused (THROTTLING_QUOTA_EXCEEDED) rather than only throttled.
        self.strict = strict

    def admit(self, partitions: int) -> bool:
        """Count ``partitions`` mutations of one topic; False (nothing counted) when the request is strict
        and the client is already over its quota."""
        if self.strict and self._quotas.over_quota_ms(MUTATION, self.user, self.client_id) > 0:
            return False
        self._quotas.record(MUTATION, self.user, self.client_id, max(partitions, 0))
        return True
