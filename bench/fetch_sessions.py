"""Benchmark fetch sessions (KIP-227): a follower replicating 1,000 partitions, and a consumer reading
them, with incremental fetch sessions and with full fetches, in the same run; print a markdown section.

Each mode runs its own cluster of real processes (three `kraftpy controller`, three `kraftpy broker`,
logging at info level, metrics endpoints on). The brokers of the "full fetches" cluster have
``max.incremental.fetch.session.cache.slots=0``, so the leader makes no session and every fetch of
its follower names all 1,000 partitions; the "sessions" cluster has the default (1000). One topic of
1,000 partitions, every one with replicas [4, 5]: broker 4 leads them all and broker 5 follows
them all (broker 6 holds none), so broker 4 receives only broker 5's fetches plus the producer's
requests.

For each mode, once every partition's ISR holds both brokers:

1. an idle window of WINDOW_S seconds: the follower long-polls (``replica.fetch.wait.max.ms`` 500),
   no records are produced; the leader's received bytes are then all fetch requests;
2. a load window of WINDOW_S seconds: a confluent-kafka producer (acks=1, linger.ms=5) sends RATE
   records/s of SIZE bytes to partitions picked at random (the same seeded sequence in both modes),
   so a few partitions have news at each fetch;
3. a consumer window of WINDOW_S seconds: the same load, read as it comes by a kafka-python consumer
   (a client that fetches through sessions, as Java's does) assigned all 1,000 partitions on the
   leader, which has read everything before the window starts; what the window costs the leader
   beyond the load window is what the consumer's fetches cost it.

Per window: the bytes of the fetch requests broker 4 received (its ``kraftpy_request_bytes``, less
the producer's requests as librdkafka counts them, ``txbytes``), its fetch requests
(``kraftpy_requests`` of api key 1), and the CPU seconds (user + system, from /proc) of the leader
(broker 4) and the follower (broker 5).
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka import KafkaConsumer, TopicPartition  # noqa: E402

from tests.helpers.deployments import ProcessCluster, create_topics  # noqa: E402
from tests.helpers.scrape import scrape, value  # noqa: E402

PARTITIONS = 1000
WINDOW_S = 10.0
RATE = 500
SIZE = 100
LEADER, FOLLOWER = 4, 5
TOPIC = "bench-sessions"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_in_sync(bootstrap: str, timeout: float = 120.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        if topic is not None and len(topic.partitions) == PARTITIONS and all(
                sorted(p.isrs) == [LEADER, FOLLOWER] for p in topic.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the follower did not join every ISR")
        time.sleep(0.5)


class Window:
    def __init__(self, cluster: ProcessCluster) -> None:
        self.cluster = cluster
        #: Bytes of the producer's requests in the window (not fetches).
        self.producer_bytes = 0.0
        self.port = cluster.broker_metrics_ports[LEADER]

    def __enter__(self) -> Window:
        self.start = self._sample()
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = self._sample()

    def _sample(self) -> dict[str, float]:
        samples = scrape(self.port)
        return {
            "time": time.monotonic(),
            "bytes": value(samples, "kraftpy_request_bytes_total") or 0.0,
            "fetches": value(samples, "kraftpy_requests_total", api_key="1") or 0.0,
            "consumer_fetches": value(samples, "kraftpy_request_duration_seconds_count", request="FetchConsumer") or 0.0,
            "leader_cpu": cpu_seconds(self.cluster.brokers[LEADER].pid),
            "follower_cpu": cpu_seconds(self.cluster.brokers[FOLLOWER].pid),
        }

    def result(self) -> dict[str, float]:
        elapsed = self.end["time"] - self.start["time"]
        delta = {k: self.end[k] - self.start[k] for k in self.start}
        delta["bytes"] -= self.producer_bytes
        return {
            "fetches_s": delta["fetches"] / elapsed,
            "bytes_s": delta["bytes"] / elapsed,
            "bytes_per_fetch": delta["bytes"] / max(delta["fetches"], 1),
            "leader_cpu": 100 * delta["leader_cpu"] / elapsed,
            "follower_cpu": 100 * delta["follower_cpu"] / elapsed,
            "leader_ms_per_fetch": 1000 * delta["leader_cpu"] / max(delta["fetches"], 1),
            "follower_ms_per_fetch": 1000 * delta["follower_cpu"] / max(delta["fetches"], 1),
            "consumer_fetches_s": delta["consumer_fetches"] / elapsed,
            "leader_cpu_s": delta["leader_cpu"],
            "consumer_fetches": delta["consumer_fetches"],
        }


def produce_for(bootstrap: str, seconds: float) -> float:
    """Produce for ``seconds``; returns the bytes of the producer's requests (librdkafka's txbytes)."""
    stats: list[dict] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "log_level": 0,
                         "statistics.interval.ms": 100, "stats_cb": lambda text: stats.append(json.loads(text))})
    rng = random.Random(7)
    payload = os.urandom(SIZE)
    sent = 0
    start = time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * RATE)
        while sent < due:
            producer.produce(TOPIC, payload, partition=rng.randrange(PARTITIONS))
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    if producer.flush(60) != 0:
        raise RuntimeError("records not delivered")
    seen = len(stats)
    while len(stats) < seen + 2:  # a report taken after the last request
        producer.poll(0.05)
    return float(sum(b["txbytes"] for b in stats[-1]["brokers"].values()))


def run_mode(slots: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="kraftpy-bench-") as tmp, \
            ProcessCluster(Path(tmp), {"max.incremental.fetch.session.cache.slots": slots}, metrics=True,
                           log_level="info") as cluster:
        leader_bootstrap = f"127.0.0.1:{cluster.broker_ports[LEADER]}"
        create_topics(cluster.bootstrap, [NewTopic(TOPIC, num_partitions=PARTITIONS, replica_assignment=[[LEADER, FOLLOWER]] * PARTITIONS)],
                      timeout=60.0, deployment=cluster)
        wait_in_sync(cluster.bootstrap)
        time.sleep(2.0)  # let the follower settle into its steady long-poll
        with Window(cluster) as idle:
            time.sleep(WINDOW_S)
        with Window(cluster) as load:
            produced = produce_for(leader_bootstrap, WINDOW_S)
        load.producer_bytes = produced
        consumer = KafkaConsumer(bootstrap_servers=leader_bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest", fetch_max_wait_ms=500)
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            consumer.poll(timeout_ms=200, max_records=100_000)
        stop = threading.Event()
        read = [0]

        def consume() -> None:
            while not stop.is_set():
                read[0] += sum(len(r) for r in consumer.poll(timeout_ms=200, max_records=100_000).values())

        reader = threading.Thread(target=consume)
        reader.start()
        try:
            with Window(cluster) as consuming:
                produced = produce_for(leader_bootstrap, WINDOW_S)
            consuming.producer_bytes = produced
        finally:
            stop.set()
            reader.join()
            consumer.close()
        return {"idle": idle.result(), "load": load.result(), "consumer": consuming.result()}


def main() -> None:
    results = {"sessions": run_mode(1000), "full fetches": run_mode(0)}
    lines = [
        "## Fetch sessions (KIP-227): a follower and a consumer of 1,000 partitions",
        "",
        "`bench/fetch_sessions.py`. " + " ".join((__doc__ or "").split("\n\n")[1].split()),
        "",
        f"Windows of {WINDOW_S:g} s; load: {RATE} records/s of {SIZE} bytes to random partitions (acks=1). "
        "CPU is a share of one core (the leader's includes serving the producer, the same in both "
        "modes); CPU ms per fetch divides all of a process's CPU time in the window by the fetches, so it "
        "also carries the fixed costs (heartbeats, metadata, the producer).",
        "",
        "| mode | window | fetches/s | fetch request bytes/s | bytes per fetch request | leader CPU | "
        "leader CPU ms per fetch | follower CPU | follower CPU ms per fetch |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, windows in results.items():
        for window, r in windows.items():
            lines.append(f"| {mode} | {window} | {r['fetches_s']:.1f} | {r['bytes_s']:,.0f} | "
                         f"{r['bytes_per_fetch']:,.0f} | {r['leader_cpu']:.1f}% | {r['leader_ms_per_fetch']:.1f} | "
                         f"{r['follower_cpu']:.1f}% | {r['follower_ms_per_fetch']:.1f} |")
    lines.append("")
    for mode, windows in results.items():
        load, consuming = windows["load"], windows["consumer"]
        extra_ms = 1000 * (consuming["leader_cpu_s"] - load["leader_cpu_s"])
        lines.append(f"- {mode}, the consumer: {consuming['consumer_fetches_s']:.1f} fetches/s; the leader's CPU "
                     f"{consuming['leader_cpu']:.1f}% with it against {load['leader_cpu']:.1f}% in the load window, "
                     f"a difference of {extra_ms / max(consuming['consumer_fetches'], 1):.2f} ms a consumer fetch.")
    for window in ("idle", "load"):
        s, f = results["sessions"][window], results["full fetches"][window]
        lines.append(f"- {window}: with sessions the follower sent {100 * s['bytes_s'] / max(f['bytes_s'], 1):.1f}% "
                     f"of the fetch request bytes of full fetches, at {s['fetches_s'] / max(f['fetches_s'], 0.01):.2f}x "
                     f"their fetch rate; leader CPU {s['leader_cpu']:.1f}% vs {f['leader_cpu']:.1f}%, follower CPU "
                     f"{s['follower_cpu']:.1f}% vs {f['follower_cpu']:.1f}%.")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
