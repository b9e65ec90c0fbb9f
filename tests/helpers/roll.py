"""A rolling restart of a `ProcessCluster`, the way docs/operations.md "Rolling restart" says to do it:
every broker, then every controller, one at a time, each stopped with SIGTERM (a broker's controlled
shutdown moves its leaderships away first; a controller that leads hands the quorum over) and started
again, and the next one only once this one is back:

- a broker is back when it logs "broker running" again, its ``GET /ready`` answers 200 (Running), and
  no broker reports an under-replicated partition (it is back in every ISR);
- a controller is back when its ``GET /ready`` answers 200 (it knows the leader and applied metadata
  committed since it started) and the quorum's leader reports every voter caught up (lag 0).

`IdempotentProducer` is the load a roll runs under (the test, and bench/roll.py). Waits are on the processes' log lines (`wait_until`), with a re-check when they are quiet. Needs
``ProcessCluster(..., metrics=True)`` (the readiness endpoints).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import attrs
import trio

from kraftpy.cli.quorum import fetch_status
from kraftpy.rpc.control import RpcError
from tests.helpers.deployments import ProcessCluster
from tests.helpers.scrape import ready, scrape, value


@attrs.define
class NodeRoll:
    """One node's restart: how long it was down (SIGTERM to exit) and until it was back."""

    name: str
    stopping_s: float
    back_s: float


@attrs.define
class Roll:
    nodes: list[NodeRoll] = attrs.Factory(list)
    total_s: float = 0.0


def wait_until(cluster: ProcessCluster, check: Callable[[], bool], what: str, timeout: float,
               recheck: float = 0.25) -> None:
    """Wait until ``check()`` holds: asked again on every log line of the processes (at most every
    50 ms), and at least every ``recheck`` seconds when they are quiet (an HTTP answer logs nothing)."""
    deadline = time.monotonic() + timeout
    last = 0.0
    with cluster.cond:
        while True:
            if time.monotonic() - last >= 0.05:
                last = time.monotonic()
                if check():
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}")
            cluster.cond.wait(min(left, recheck))


def quorum_caught_up(cluster: ProcessCluster) -> bool:
    """The quorum's leader reports every voter with lag 0 that has fetched within the fetch timeout."""
    live = [cluster.voters[i] for i, p in cluster.controllers.items() if p.running]
    try:
        status = trio.run(fetch_status, live, 2.0)
    except (RpcError, OSError):
        return False
    voters = status["voters"]
    return len(voters) == len(cluster.voters) and all(
        v["lag"] == 0 and v["last_fetch_ms_ago"] is not None and v["last_fetch_ms_ago"] < 2000
        or v["id"] == status["leader_id"] for v in voters)


def under_replicated(cluster: ProcessCluster) -> float:
    """kraftpy_under_replicated_partitions summed over the running brokers."""
    return sum(value(scrape(cluster.broker_metrics_ports[b]), "kraftpy_under_replicated_partitions") or 0
               for b, proc in cluster.brokers.items() if proc.running)


def restart_broker(cluster: ProcessCluster, broker_id: int, timeout: float = 60.0) -> NodeRoll:
    proc = cluster.brokers[broker_id]
    began = time.monotonic()
    proc.terminate()
    proc.wait(timeout)
    stopped = time.monotonic()
    mark = proc.start()
    proc.wait_for("broker running", since=mark, timeout=timeout)
    port = cluster.broker_metrics_ports[broker_id]
    wait_until(cluster, lambda: ready(port)[0] == 200, f"broker {broker_id} ready", timeout)
    wait_until(cluster, lambda: under_replicated(cluster) == 0, "no under-replicated partition", timeout)
    return NodeRoll(proc.name, stopped - began, time.monotonic() - began)


def restart_controller(cluster: ProcessCluster, node_id: int, timeout: float = 60.0) -> NodeRoll:
    proc = cluster.controllers[node_id]
    began = time.monotonic()
    proc.terminate()
    proc.wait(timeout)
    stopped = time.monotonic()
    proc.start()
    port = cluster.metrics_ports[node_id]
    wait_until(cluster, lambda: ready(port)[0] == 200, f"controller {node_id} ready", timeout)
    wait_until(cluster, lambda: quorum_caught_up(cluster), "every voter caught up", timeout)
    return NodeRoll(proc.name, stopped - began, time.monotonic() - began)


def roll(cluster: ProcessCluster, *, on_node: Callable[[NodeRoll], None] | None = None,
         timeout: float = 60.0) -> Roll:
    """Restart every broker, then every controller, one at a time (see the module doc)."""
    assert cluster.broker_metrics_ports and cluster.metrics_ports, "roll needs ProcessCluster(metrics=True)"
    result = Roll()
    began = time.monotonic()
    steps = [(restart_broker, b) for b in sorted(cluster.brokers)]
    steps += [(restart_controller, c) for c in sorted(cluster.controllers)]
    for restart, node_id in steps:
        done = restart(cluster, node_id, timeout)
        result.nodes.append(done)
        if on_node is not None:
            on_node(done)
    result.total_s = time.monotonic() - began
    return result


class IdempotentProducer:
    """acks=all, enable.idempotence, in a thread, a bounded number in flight; value = send sequence,
    round-robin over the partitions. Records every delivery report."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, in_flight: int = 100) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.in_flight = in_flight
        self.cond = threading.Condition()
        self.acked: dict[int, list[tuple[int, int]]] = defaultdict(list)  # partition -> [(seq, offset)]
        self.failed: list[tuple[int, Any]] = []
        self.fatal: list[Any] = []
        self.sent = 0
        self._stop = threading.Event()
        self._crash: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="roll-producer", daemon=True)

    def _report(self, err: Any, msg: Any) -> None:
        with self.cond:
            if err is None:
                self.acked[msg.partition()].append((int(msg.value()), msg.offset()))
            else:
                self.failed.append((int(msg.value()), err))
            self.cond.notify_all()

    def _error(self, err: Any) -> None:
        if err.fatal():
            self.fatal.append(err)

    def _run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                                 "linger.ms": 5, "message.timeout.ms": 120_000, "error_cb": self._error, "log_level": 0})
            while not self._stop.is_set():
                if len(producer) < self.in_flight:
                    seq = self.sent
                    producer.produce(self.topic, value=b"%d" % seq, partition=seq % self.partitions,
                                     on_delivery=self._report)
                    self.sent += 1
                    producer.poll(0)
                else:
                    producer.poll(1.0)
            assert producer.flush(120) == 0, "records still undelivered"
        except BaseException as exc:  # surfaced by stop()
            self._crash = exc

    def acked_count(self) -> int:
        with self.cond:
            return sum(len(v) for v in self.acked.values())

    def wait_acked(self, count: int, timeout: float = 60.0) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: sum(len(v) for v in self.acked.values()) >= count or self.failed,
                                    timeout)
        assert ok and not self.failed, f"acked {self.acked_count()} of {count}; failed {self.failed[:3]}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)
        assert not self._thread.is_alive(), "the producer did not finish"
        if self._crash is not None:
            raise self._crash
