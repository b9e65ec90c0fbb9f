"""Prometheus metrics: the names kraftpy exports, and a small trio HTTP endpoint that serves them.

With ``metrics.port`` set, a process serves at that port on ``metrics.host`` (127.0.0.1 unless set;
0.0.0.0 for every IPv4 interface, ``::`` for every interface of both families):

* ``GET /metrics``: every metric in Prometheus text format;
* ``GET /ready``: 200 ``ready`` when the node is ready, 503 with the reason otherwise (what a
  readiness probe or a rolling restart waits for; see kraftpy.node.metrics);
* ``GET /healthz``: 200 while the process answers (liveness).

Metrics live in one registry per process (`REGISTRY`); a process running both roles (`kraftpy dev`)
reports both sets under the same names, told apart by their labels. This module holds the metrics
counted as things happen (one increment per request or per partition of a request, never per
record); what is read off existing state at scrape time is in kraftpy.node.metrics. The mapping to
Kafka's JMX names is in docs/operations.md.

A scrape is `exposition()`: prometheus_client's text of `REGISTRY`, then the text of each section
added with `add_text_section`. A section writes its families' lines itself: the per-partition series
of a broker with 100,000 partitions are 400,000 samples, which through prometheus_client's sample
objects and formatting took about 3.5 s of Python a scrape, and written directly take a tenth of it.
"""

from __future__ import annotations

import contextvars
import errno
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import trio
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from kraftpy.logs import get_logger

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter("kraftpy_requests", "Kafka-protocol requests received, by API key.", ["api_key"],
                   registry=REGISTRY)
BYTES_IN = Counter("kraftpy_request_bytes", "Bytes of Kafka-protocol requests received.", registry=REGISTRY)
CONNECTIONS = Gauge("kraftpy_connections", "Open Kafka-protocol connections.", registry=REGISTRY)
RAFT_EPOCH = Gauge("kraftpy_raft_epoch", "The metadata quorum epoch this node knows.", ["node_id"],
                   registry=REGISTRY)
RAFT_HIGH_WATERMARK = Gauge("kraftpy_raft_high_watermark", "Committed offset of the metadata log.", ["node_id"],
                            registry=REGISTRY)
ACTIVE_CONTROLLER = Gauge("kraftpy_active_controller", "1 on the active controller, else 0.", ["node_id"],
                          registry=REGISTRY)
BROKER_RUNNING = Gauge("kraftpy_broker_running", "1 while the broker is unfenced (Running), else 0.",
                       ["node_id"], registry=REGISTRY)
METADATA_OFFSET = Gauge("kraftpy_metadata_offset", "Last metadata log offset this node has applied.",
                        ["node_id"], registry=REGISTRY)

UNCLEAN_LEADER_ELECTIONS = Counter(
    "kraftpy_unclean_leader_elections", "Partition leaders the active controller elected from outside the ISR "
    "(unclean.leader.election.enable): the records only the old ISR held are lost.", registry=REGISTRY)

EVENT_LOOP_LAG = Histogram(
    "kraftpy_event_loop_lag_seconds", "How late a task scheduled to wake at a given time ran: work that holds "
    "the trio thread (a blocking call, a long loop) shows here as lag for everything else.",
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY)

METADATA_APPLY_LATENCY = Histogram(
    "kraftpy_metadata_apply_latency_seconds", "Time from the quorum leader's append of a metadata commit's "
    "first batch (its timestamp) until this node published the image holding it: on a broker, once its "
    "replicas and handlers use it; on a controller, once replayed. Metadata propagation, commit included.",
    ["node_id"],
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
    registry=REGISTRY)


class LoopHistogram:
    """A histogram family observed several times by every request, as prometheus_client's `Histogram`
    exposes one (the same ``_bucket``, ``_count`` and ``_sum`` series, no ``_created``), at a fraction
    of its cost: an observation is a binary search and two additions, where prometheus_client takes a
    lock for the sum, walks the bounds one by one and takes another for the bucket (six observations a
    request were about 4% of a small request's time at the broker). Observations come from one thread
    (the event loop's); a scrape reads each child's counts in one copy (under the GIL), so its buckets
    and count always agree and its sum may miss an observation made meanwhile."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], *, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(sorted(float(b) for b in buckets if b != float("inf")))
        self._le = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        self._children: dict[tuple[str, ...], LoopHistogramChild] = {}
        registry.register(self)

    def labels(self, *values: str) -> LoopHistogramChild:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = LoopHistogramChild(self.bounds)
        return child

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in list(self._children.items()):
            counts = child.counts[:]
            total = child.sum
            running = 0
            buckets = []
            for le, count in zip(self._le, counts, strict=True):
                running += count
                buckets.append((le, running))
            family.add_metric(list(key), buckets, total)
        yield family


class LoopHistogramChild:
    """One labelled series of a `LoopHistogram`."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        #: Observations in each bucket (not cumulative); the last is beyond every bound (+Inf).
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        # The first bound at or above the amount, as Prometheus's le ("less than or equal").
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


REQUEST_TIME = LoopHistogram(
    "kraftpy_request_duration_seconds", "Time from a Kafka-protocol request's last byte read to its answer's "
    "last byte written, by request (Kafka's RequestMetrics TotalTimeMs; the count is RequestsPerSec; Fetch is "
    "FetchConsumer or FetchFollower). kraftpy_request_phase_seconds says where it went.",
    ["request"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY)

REQUEST_PHASE_TIME = LoopHistogram(
    "kraftpy_request_phase_seconds", "Where a Kafka-protocol request's time went, by request and phase (Kafka's "
    "RequestMetrics): request_queue, from its last byte read until handled (behind the connection's earlier "
    "requests, or a quota's mute: RequestQueueTimeMs); local, handled on this broker (LocalTimeMs); remote, parked "
    "until the other replicas, the data or a coordinator answered (an acks=all Produce waiting for the followers, "
    "a Fetch's long poll, a group or transaction request waiting for its coordinator, WriteTxnMarkers for its "
    "markers' replication: RemoteTimeMs); response_queue, answered and "
    "waiting for the connection's earlier answers to go first (ResponseQueueTimeMs); response_send, written to "
    "the socket (ResponseSendTimeMs). Fetch is FetchConsumer or FetchFollower, as Kafka names them.",
    ["request", "phase"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5,
             1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY)

TOPIC_BYTES_IN = Counter("kraftpy_topic_bytes_in", "Record bytes produced to a topic's partitions this broker "
                         "leads (Kafka's BrokerTopicMetrics BytesInPerSec).", ["node_id", "topic"], registry=REGISTRY)
TOPIC_BYTES_OUT = Counter("kraftpy_topic_bytes_out", "Record bytes consumers fetched from a topic on this broker "
                          "(Kafka's BytesOutPerSec; replication fetches not counted).", ["node_id", "topic"],
                          registry=REGISTRY)
TOPIC_MESSAGES_IN = Counter("kraftpy_topic_messages_in", "Records appended to a topic's partitions this broker "
                            "leads (Kafka's MessagesInPerSec).", ["node_id", "topic"], registry=REGISTRY)
ISR_SHRINKS = Counter("kraftpy_isr_shrinks", "ISR shrinks of partitions this broker leads (Kafka's "
                      "IsrShrinksPerSec).", ["node_id"], registry=REGISTRY)
ISR_EXPANDS = Counter("kraftpy_isr_expands", "ISR expansions of partitions this broker leads (Kafka's "
                      "IsrExpandsPerSec).", ["node_id"], registry=REGISTRY)

QUOTA_THROTTLE_TIME = Counter(
    "kraftpy_quota_throttle_time_ms", "Milliseconds clients were throttled for going over a client quota, by "
    "quota type (Produce, Fetch, Request, ControllerMutation; Kafka's throttle-time of each quota manager).", ["quota_type"],
    registry=REGISTRY)
QUOTA_THROTTLED_REQUESTS = Counter(
    "kraftpy_quota_throttled_requests", "Responses sent with a throttle time, by quota type.", ["quota_type"],
    registry=REGISTRY)
CONNECTIONS_REFUSED = Counter(
    "kraftpy_connections_refused", "Connections closed at accept for going over a connection limit, by listener "
    "and limit (max.connections, max.connections.per.ip, max.connection.creation.rate).", ["listener", "limit"],
    registry=REGISTRY)
LISTENER_CONNECTIONS = Gauge(
    "kraftpy_listener_connections", "Open connections counted against max.connections, by listener.",
    ["listener"], registry=REGISTRY)


FETCH_SESSIONS = Gauge(
    "kraftpy_fetch_sessions", "Incremental fetch sessions (KIP-227) this broker's cache holds (Kafka's "
    "NumIncrementalFetchSessions).", ["node_id"], registry=REGISTRY)
FETCH_SESSION_PARTITIONS = Gauge(
    "kraftpy_fetch_session_partitions", "Partitions the incremental fetch sessions of this broker hold (Kafka's "
    "NumIncrementalFetchPartitionsCached).", ["node_id"], registry=REGISTRY)
FETCH_SESSION_EVICTIONS = Counter(
    "kraftpy_fetch_session_evictions", "Incremental fetch sessions evicted to make room for new ones "
    "(Kafka's IncrementalFetchSessionEvictionsPerSec).", ["node_id"], registry=REGISTRY)


# -- where a request's time goes (REQUEST_PHASE_TIME) ----------------------------------------------------


class RequestTimes:
    """Of the Kafka-protocol request being handled in this task (kraftpy.rpc.kafka_server sets one for each):
    how long its handler waited remotely, and the request's name, which its handler may change where the
    api key does not give it (Kafka's FetchConsumer and FetchFollower)."""

    __slots__ = ("name", "remote")

    def __init__(self, name: str) -> None:
        self.name = name
        self.remote = 0.0


request_times: contextvars.ContextVar[RequestTimes | None] = contextvars.ContextVar(
    "kraftpy_request_times", default=None)


def name_request(name: str) -> None:
    """Name the request handled in this task for its metrics (``FetchConsumer``, ``FetchFollower``)."""
    times = request_times.get()
    if times is not None:
        times.name = name


class waiting_remotely:  # noqa: N801 - used as a context manager, like trio's
    """``with waiting_remotely(): await ...``: the time inside counts as the request's remote time (Kafka's
    RemoteTimeMs), not its local time: parked for the followers, for data to fetch, or for a coordinator's
    answer. Outside a request's task it counts nothing."""

    __slots__ = ("_start", "_times")

    def __enter__(self) -> None:
        self._times = request_times.get()
        self._start = trio.current_time()

    def __exit__(self, *exc: object) -> None:
        if self._times is not None:
            self._times.remote += trio.current_time() - self._start


#: The per-topic counters' series by (node id, topic), looked up once: prometheus_client's ``labels()``
#: turns the values into strings and takes a lock on every call. Series are never removed (a deleted
#: topic's totals stay, as they would in prometheus_client), so a series kept here is always exported.
_TOPIC_IN: dict[tuple[int, str], tuple[Any, Any]] = {}
_TOPIC_OUT: dict[tuple[int, str], Any] = {}


def count_produced(node_id: int, topic: str, size: int, records: int) -> None:
    """One appended batch set of one partition (produce path)."""
    series = _TOPIC_IN.get((node_id, topic))
    if series is None:
        node = str(node_id)
        series = _TOPIC_IN[(node_id, topic)] = (TOPIC_BYTES_IN.labels(node, topic),
                                                TOPIC_MESSAGES_IN.labels(node, topic))
    series[0].inc(size)
    series[1].inc(records)


def count_fetched(node_id: int, topic: str, size: int) -> None:
    """Record bytes one consumer fetch returns of one partition."""
    series = _TOPIC_OUT.get((node_id, topic))
    if series is None:
        series = _TOPIC_OUT[(node_id, topic)] = TOPIC_BYTES_OUT.labels(str(node_id), topic)
    series.inc(size)


#: Functions that return exposition text of their own families (`add_text_section`).
_TEXT_SECTIONS: list[Callable[[], str]] = []


def add_text_section(section: Callable[[], str]) -> None:
    """Have every scrape end with ``section()``: whole families in the Prometheus text format (each
    with its ``# HELP`` and ``# TYPE`` lines), named apart from every family of `REGISTRY`. Called in
    the scrape's worker thread: it must only read, from snapshots."""
    _TEXT_SECTIONS.append(section)


def exposition() -> bytes:
    """The body of ``GET /metrics``: `REGISTRY` in the Prometheus text format, then the text sections."""
    return generate_latest(REGISTRY) + "".join(section() for section in _TEXT_SECTIONS).encode()


def help_line(name: str, kind: str, doc: str) -> str:
    """The ``# HELP`` and ``# TYPE`` lines of a family, escaped as the text format asks."""
    doc = doc.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


def label_value(value: str) -> str:
    """A label value escaped for the text format (backslash, double quote, newline)."""
    if "\\" in value or '"' in value or "\n" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


#: How often the event-loop lag is sampled.
LAG_SAMPLE_INTERVAL = 0.05


async def watch_event_loop_lag(interval: float = LAG_SAMPLE_INTERVAL, *, histogram: Histogram = EVENT_LOOP_LAG,
                               task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Sample the event loop's lag until cancelled: sleep until a deadline, then record how long after
    the deadline the task ran (`EVENT_LOOP_LAG`)."""
    task_status.started()
    deadline = trio.current_time()
    while True:
        deadline = max(deadline + interval, trio.current_time())
        await trio.sleep_until(deadline)
        histogram.observe(max(trio.current_time() - deadline, 0.0))


def _not_ready() -> tuple[bool, str]:
    return False, "starting"


async def _every_interface(port: int) -> list[trio.SocketListener]:
    """One IPv6 socket on ``[::]:port`` that takes IPv4 connections too (trio's own listeners are
    IPv6-only, which with port 0 would put the two families on different ports); on a machine without
    IPv6, ``0.0.0.0:port``."""
    try:
        sock = trio.socket.socket(trio.socket.AF_INET6, trio.socket.SOCK_STREAM)
    except OSError as exc:
        if exc.errno != errno.EAFNOSUPPORT:
            raise
        return await trio.open_tcp_listeners(port, host="0.0.0.0")
    try:
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
        sock.setsockopt(trio.socket.IPPROTO_IPV6, trio.socket.IPV6_V6ONLY, 0)
        await sock.bind(("::", port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return [trio.SocketListener(sock)]


async def serve_metrics(port: int, host: str = "127.0.0.1", *, ready: Callable[[], tuple[bool, str]] = _not_ready,
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Answer ``GET /metrics`` with the registry in Prometheus text format, ``GET /ready`` with
    ``ready()`` (200 when ready, 503 with the reason) and ``GET /healthz``, until cancelled.

    ``host`` "::" listens on every interface, IPv4 and IPv6 (one dual-stack socket); any other address
    only there."""
    log = get_logger("metrics")
    # The exposition is built in a worker thread, one scrape at a time: with the per-partition series of
    # 100,000 partitions it takes seconds of Python, which on the event loop would stall every request
    # (and the broker's heartbeats) for that long at each scrape. The collectors only read, taking
    # snapshots of the collections they walk.
    scraping = trio.CapacityLimiter(1)
    listeners = await _every_interface(port) if host == "::" else await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    log.info("serving metrics", host=host, port=bound)

    async def handle(stream: trio.SocketStream) -> None:
        try:
            request = b""
            with trio.move_on_after(5):
                while b"\r\n\r\n" not in request and len(request) < 8192:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    request += chunk
            line = request.split(b"\r\n", 1)[0].split()
            path = line[1].split(b"?")[0] if len(line) >= 2 and line[0] == b"GET" else None
            content_type = b"text/plain; charset=utf-8"
            if path == b"/metrics":
                body = await trio.to_thread.run_sync(exposition, limiter=scraping)
                status = b"200 OK"
                content_type = CONTENT_TYPE_LATEST.encode()
            elif path == b"/ready":
                is_ready, reason = ready()
                body = reason.encode() + b"\n"
                status = b"200 OK" if is_ready else b"503 Service Unavailable"
            elif path == b"/healthz":
                body, status = b"ok\n", b"200 OK"
            else:
                body, status = b"not found\n", b"404 Not Found"
            head = (b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type + b"\r\nContent-Length: "
                    + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
            await stream.send_all(head + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handle, listeners)
        task_status.started(bound)
