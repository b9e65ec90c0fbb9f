"""Prometheus metrics: the names kraftpy exports, and a small trio HTTP endpoint that serves them.

With ``metrics.port`` set, a process serves ``GET /metrics`` (Prometheus text format) on 127.0.0.1
at that port. Metrics live in one registry per process (`REGISTRY`); a process running both roles
(`kraftpy dev`) reports both sets under the same names, told apart by their labels.
"""

from __future__ import annotations

import trio
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

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


async def serve_metrics(port: int, host: str = "127.0.0.1", *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Answer ``GET /metrics`` with the registry in Prometheus text format, until cancelled."""
    log = get_logger("metrics")
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    log.info("serving metrics", port=bound)

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
            if len(line) >= 2 and line[0] == b"GET" and line[1].split(b"?")[0] == b"/metrics":
                body, status = generate_latest(REGISTRY), b"200 OK"
                content_type = CONTENT_TYPE_LATEST.encode()
            else:
                body, status, content_type = b"not found\n", b"404 Not Found", b"text/plain"
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
