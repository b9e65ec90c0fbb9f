"""Replication under failures, with real processes: three controllers, three brokers, RF=3,
min.insync.replicas=2, and an idempotent acks=all producer running throughout.

Faults: kill -9 and restart of a partition leader and of the active controller, SIGSTOP/SIGCONT of a
follower, SIGTERM (controlled shutdown) of a leader; then unclean leader election off and on. After
each run every acked record is read back exactly once, at the offset it was acked at, in send order.
Waits are on log lines of the processes and on the producer's delivery reports, never on a clock.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.request
from collections import defaultdict
from typing import Any

import pytest

from tests.helpers.deployments import ProcessCluster, create_topics

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.slow
QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("failover")
    with ProcessCluster(root, {"log.retention.check.interval.ms": 300}, metrics=True) as deployed:
        yield deployed


class Workload:
    """An idempotent acks=all producer in a thread, sending ``seq`` values round-robin over the
    partitions with a bounded number in flight; it records every delivery report."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, in_flight: int = 40) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.in_flight = in_flight
        self.cond = threading.Condition()
        self.acked: dict[int, list[tuple[int, int]]] = defaultdict(list)  # partition -> [(seq, offset)]
        self.failed: list[tuple[int, KafkaError]] = []
        self.client_errors: list[KafkaError] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)
        self._crash: BaseException | None = None

    def __enter__(self) -> Workload:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        seq = int(msg.value())
        with self.cond:
            if err is None:
                self.acked[msg.partition()].append((seq, msg.offset()))
            else:
                self.failed.append((seq, err))
            self.cond.notify_all()

    def _error(self, err: KafkaError) -> None:
        with self.cond:
            self.client_errors.append(err)

    def _run(self) -> None:
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                                 "linger.ms": 2, "message.timeout.ms": 180_000, "error_cb": self._error, **QUIET})
            while not self._stop.is_set():
                if len(producer) < self.in_flight:
                    seq = self.sent
                    producer.produce(self.topic, value=b"%d" % seq, key=b"k%d" % seq,
                                     partition=seq % self.partitions, on_delivery=self._report)
                    self.sent += 1
                    producer.poll(0)
                else:
                    producer.poll(1.0)  # returns as soon as a delivery report is served
            assert producer.flush(180) == 0, "records still undelivered"
        except BaseException as exc:  # surfaced by stop()
            self._crash = exc
        finally:
            with self.cond:
                self.cond.notify_all()

    def acks(self, partition: int) -> int:
        with self.cond:
            return len(self.acked[partition])

    def wait_progress(self, more: int = 30, partitions: list[int] | None = None, timeout: float = 90.0) -> None:
        """Wait until every partition (or those named) has ``more`` acks than now."""
        partitions = list(range(self.partitions)) if partitions is None else partitions
        with self.cond:
            target = {p: len(self.acked[p]) + more for p in partitions}
            deadline = time.monotonic() + timeout
            while not all(len(self.acked[p]) >= n for p, n in target.items()):
                left = deadline - time.monotonic()
                assert self._thread.is_alive(), f"producer stopped: {self._crash!r}"
                assert left > 0, f"no progress: acks {dict((p, len(self.acked[p])) for p in partitions)} " \
                                 f"wanted {target}; failed {self.failed[:3]}"
                self.cond.wait(left)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(200)
        assert not self._thread.is_alive(), "the producer did not finish"
        if self._crash is not None:
            raise self._crash

    def check(self, cluster: ProcessCluster) -> None:
        """Everything sent was acked; every acked record is in the log exactly once, at its acked offset;
        within a partition, offsets follow send order; nothing was produced twice."""
        assert self.failed == [], f"{len(self.failed)} records failed: {self.failed[:5]}"
        assert sum(len(v) for v in self.acked.values()) == self.sent
        fatal = [e for e in self.client_errors if e.fatal()]
        assert fatal == [], fatal
        for partition in range(self.partitions):
            acked = sorted(self.acked[partition])
            offsets = [offset for _, offset in acked]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), "acks out of send order"
            log = read_partition(cluster.bootstrap, self.topic, partition)
            values = [v for _, v in log]
            assert len(set(values)) == len(values), "a record is in the log twice"
            at = dict(log)
            assert {offset: seq for seq, offset in acked} == {o: at.get(o) for _, o in acked}
            assert set(values) == {seq for seq, _ in acked}


def watermarks(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    """The partition's watermarks, asked again when the request was lost with its connection: librdkafka
    drops a broker's connection when a metadata answer leaves that broker out (one that was just
    stopped), failing what was in flight on it with _DESTROY_BROKER; and a first metadata answer from a
    broker just restarted may not show the partition yet (_UNKNOWN_PARTITION); a request that went to a
    leader killed a moment before, as the metadata it had still said, may get no answer (_TIMED_OUT); and
    a broker that has not yet applied a new leadership answers for the old one (NOT_LEADER_FOR_PARTITION,
    LEADER_NOT_AVAILABLE): librdkafka hands those back rather than asking again."""
    transient = (KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._UNKNOWN_PARTITION,
                 KafkaError._TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    for attempt in range(5):
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        except KafkaException as exc:
            if attempt == 4 or exc.args[0].code() not in transient:
                raise
    raise AssertionError("unreachable")


def read_partition(bootstrap: str, topic: str, partition: int) -> list[tuple[int, int]]:
    """(offset, seq) of every record from the start to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                         "enable.partition.eof": True, **QUIET})
    try:
        low, high = watermarks(consumer, topic, partition)
        consumer.assign([TopicPartition(topic, partition, low)])
        out: list[tuple[int, int]] = []
        while not out or out[-1][0] < high - 1:
            msg = consumer.poll(30)
            assert msg is not None, f"{topic}-{partition}: nothing after {out[-1:] or low} (high {high})"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if high == low:
                    break
                continue
            out.append((msg.offset(), int(msg.value())))
        return out
    finally:
        consumer.close()


def admin(cluster: ProcessCluster, bootstrap: str | None = None) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap or cluster.bootstrap, **QUIET})


def create_topic(cluster: ProcessCluster, topic: NewTopic) -> None:
    create_topics(cluster.bootstrap, [topic], deployment=cluster)


def partitions_of(cluster: ProcessCluster, topic: str, bootstrap: str | None = None) -> dict[int, Any]:
    client = admin(cluster, bootstrap)
    return client.list_topics(topic, timeout=30).topics[topic].partitions


def wait_isr(cluster: ProcessCluster, topic: str, partitions: list[int], members: set[int], since: dict[int, int],
             timeout: float = 90.0) -> None:
    """Wait until a broker logs, after the marks ``since``, an ISR of exactly ``members`` for each partition."""
    def full() -> bool:
        return all(any(proc.find("ISR changed", since=since[b], partition=f"{topic}-{p}",
                                 where=lambda line: set(line["isr"]) == members)
                       for b, proc in cluster.brokers.items())
                   for p in partitions)

    cluster.wait_until(full, f"ISR {sorted(members)} on {topic} {partitions}", timeout)


def broker_marks(cluster: ProcessCluster) -> dict[int, int]:
    return {b: proc.mark() for b, proc in cluster.brokers.items()}


def test_kill_leader_kill_controller_pause_follower_loses_no_acked_record(cluster):
    create_topic(cluster, NewTopic("failover", num_partitions=3, replication_factor=3))
    everyone = set(cluster.brokers)
    with Workload(cluster.bootstrap, "failover", 3) as workload:
        workload.wait_progress(50)

        # The leader of partition 0 is killed -9: another ISR member takes over; then it comes back.
        leader = partitions_of(cluster, "failover")[0].leader
        marks = broker_marks(cluster)
        cluster.brokers[leader].kill()
        workload.wait_progress(50)
        cluster.restart_broker(leader)
        wait_isr(cluster, "failover", [0, 1, 2], everyone, marks)
        workload.wait_progress(30)

        # The active controller is killed -9: another is elected; then it comes back.
        active = cluster.active_controller()
        marks = cluster.marks()
        cluster.controllers[active].kill()
        cluster.wait_for_active_controller(marks, exclude=active)
        workload.wait_progress(30)
        mark = cluster.controllers[active].start()
        cluster.controllers[active].wait_for("controller started", since=mark)
        workload.wait_progress(30)

        # A follower of partition 0 is paused: it loses its session and leaves the ISRs, the
        # partitions it led move; it resumes, is unfenced again and rejoins.
        parts = partitions_of(cluster, "failover")
        follower = next(r for r in parts[0].replicas if r != parts[0].leader)
        marks, controller_marks = broker_marks(cluster), cluster.marks()
        paused = cluster.brokers[follower]
        paused.signal(signal.SIGSTOP)
        try:
            cluster.wait_until(lambda: any(
                p.find("fenced brokers whose sessions expired", since=controller_marks[i],
                       where=lambda line: follower in line["brokers"])
                for i, p in cluster.controllers.items()), f"broker {follower} fenced")
            workload.wait_progress(50)
        finally:
            paused.signal(signal.SIGCONT)
        wait_isr(cluster, "failover", [0, 1, 2], everyone, marks)
        workload.wait_progress(50)
    workload.check(cluster)
    assert workload.sent > 400


def test_controlled_shutdown_moves_leaderships_first(cluster):
    create_topic(cluster, NewTopic("shutdown", num_partitions=3, replication_factor=3))
    with Workload(cluster.bootstrap, "shutdown", 3) as workload:
        workload.wait_progress(50)
        parts = partitions_of(cluster, "shutdown")
        leader = parts[0].leader
        led = [p for p, part in parts.items() if part.leader == leader]
        proc = cluster.brokers[leader]
        marks = broker_marks(cluster)
        proc.terminate()
        assert proc.wait() == 0
        lines = proc.lines[marks[leader]:]
        events = [line.get("event") for line in lines]
        assert "controlled shutdown requested" in events and "controlled shutdown complete" in events
        assert "controlled shutdown timed out; stopping anyway" not in events
        stopped = next(line["timestamp"] for line in lines if line.get("event") == "broker stopped")
        # Each of its leaderships went to another ISR member before the broker stopped (the processes
        # share one clock: timestamps compare).
        for p in led:
            took_over = [line["timestamp"] for b, other in cluster.brokers.items() if b != leader
                         for line in other.lines[marks[b]:]
                         if line.get("event") == "became leader" and line.get("partition") == f"shutdown-{p}"]
            assert took_over and min(took_over) < stopped, f"shutdown-{p} was not led elsewhere before the stop"
        workload.wait_progress(50)
        assert all(part.leader != leader for part in partitions_of(cluster, "shutdown").values())
        marks = broker_marks(cluster)
        cluster.restart_broker(leader)
        wait_isr(cluster, "shutdown", [0, 1, 2], set(cluster.brokers), marks)
        workload.wait_progress(30)
    workload.check(cluster)
    # The producer saw only retriable trouble (connections closing), never a fatal error.
    assert all(not e.fatal() for e in workload.client_errors)


def test_retention_runs_on_every_broker(cluster):
    """Every replica's log start moves past what retention removed: by its own retention, or on a follower
    by the leader's log start in a fetch answer, whichever comes first (a follower that learns the
    leader's first has nothing left for its own retention to remove)."""
    create_topic(cluster, NewTopic("retained", num_partitions=1, replication_factor=3,
                                   config={"segment.bytes": "2048", "retention.bytes": "4096"}))
    marks = broker_marks(cluster)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.num.messages": 5,
                         **QUIET})  # small batches: many segments
    for i in range(200):
        producer.produce("retained", value=b"%d" % i + b"." * 100, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    starts = {b: proc.wait_for(("retention deleted segments", "log start follows the leader's"), since=marks[b],
                               partition="retained-0")["log_start_offset"] for b, proc in cluster.brokers.items()}
    assert all(start > 0 for start in starts.values()), starts
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "r", **QUIET})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("retained", 0), timeout=30)
    finally:
        consumer.close()
    assert 0 < low < high == 200


def metric(cluster: ProcessCluster, name: str) -> float:
    total = 0.0
    for node_id, port in cluster.metrics_ports.items():
        if not cluster.controllers[node_id].running:
            continue
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    total += float(line.rsplit(" ", 1)[1])
    return total


def test_unclean_leader_election_off_keeps_the_partition_offline_on_elects_and_reports(cluster):
    """Replicas [a, b]: b dies, a alone acks more, a dies, b returns. With unclean election off the
    partition stays offline until a returns with everything; with it on, b leads at once and what
    only a held is lost — the controller says so (log and metric), and so does b."""
    a, b = 4, 5
    for topic, unclean in (("unclean-off", "false"), ("unclean-on", "true")):
        create_topic(cluster, NewTopic(topic, num_partitions=1, replica_assignment=[[a, b]], config={
            "min.insync.replicas": "1", "unclean.leader.election.enable": unclean}))
    before = metric(cluster, "kraftpy_unclean_leader_elections_total")

    def produce(first: int, count: int) -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             **QUIET})
        reports = []
        for topic in ("unclean-off", "unclean-on"):
            for i in range(first, first + count):
                producer.produce(topic, value=b"%d" % i, partition=0,
                                 on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        assert producer.flush(60) == 0
        assert [e for e, _ in reports] == [None] * len(reports)

    def fenced(broker: int, marks: dict[int, int]) -> None:
        cluster.wait_until(lambda: any(
            p.find("fenced brokers whose sessions expired", since=marks[i], where=lambda line: broker in line["brokers"])
            for i, p in cluster.controllers.items()), f"broker {broker} fenced")

    produce(0, 10)
    marks = cluster.marks()
    cluster.brokers[b].kill()
    fenced(b, marks)
    produce(10, 10)  # on a only: the ISR is [a]
    # A controlled shutdown (a leaves fenced: it has no successor to hand over to); its high
    # watermark, 20, is on its disk.
    assert cluster.brokers[a].stop() == 0

    marks, bmarks = cluster.marks(), broker_marks(cluster)
    cluster.restart_broker(b)
    warning = cluster.wait_until(lambda: next((line for i, p in cluster.controllers.items() if (
        line := p.find("unclean leader election: records may be lost", since=marks[i], topic="unclean-on"))), None),
        "the controller's unclean election warning")
    assert (warning["partition"], warning["old_isr"], warning["new_leader"]) == (0, [a], b)
    assert warning["level"] == "warning"
    lead = cluster.brokers[b].wait_for("leading after an unclean election", since=bmarks[b], partition="unclean-on-0")
    assert lead["lost_from_offset"] == 10
    assert metric(cluster, "kraftpy_unclean_leader_elections_total") == before + 1
    assert not any(p.find("unclean leader election: records may be lost", since=marks[i], topic="unclean-off")
                   for i, p in cluster.controllers.items())

    # The clean partition has no leader (from any broker's view: it never had one since a stopped).
    assert partitions_of(cluster, "unclean-off")[0].leader == -1, "offline without unclean election"
    assert [seq for _, seq in read_partition(cluster.bootstrap, "unclean-on", 0)] == list(range(10))

    # The old leader returns: the clean partition is whole again; in the unclean one a cuts what it
    # alone held (below its high watermark) and follows b's log.
    bmarks = broker_marks(cluster)
    cluster.restart_broker(a)
    wait_isr(cluster, "unclean-off", [0], {a, b}, bmarks)
    wait_isr(cluster, "unclean-on", [0], {a, b}, bmarks)
    cut = cluster.brokers[a].find("truncating below the high watermark", since=bmarks[a], partition="unclean-on-0")
    assert cut is not None and (cut["offset"], cut["high_watermark"], cut["log_end_offset"]) == (10, 20, 20)
    assert [seq for _, seq in read_partition(cluster.bootstrap, "unclean-off", 0)] == list(range(20))
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    producer.produce("unclean-on", value=b"100", partition=0)
    assert producer.flush(60) == 0
    assert read_partition(cluster.bootstrap, "unclean-on", 0) == [*((i, i) for i in range(10)), (10, 100)]
    # a holds b's log now: with b gone, a leads the same records.
    bmarks = broker_marks(cluster)
    cluster.brokers[b].kill()
    cluster.brokers[a].wait_for("became leader", since=bmarks[a], partition="unclean-on-0")
    assert read_partition(cluster.bootstrap, "unclean-on", 0) == [*((i, i) for i in range(10)), (10, 100)]
    cluster.restart_broker(b)
