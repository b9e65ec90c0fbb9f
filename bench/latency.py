"""Produce and end-to-end latency on a 3 + 3 cluster, acks=all, replication factor 3, at half of peak.

Three `kraftpy controller` and three `kraftpy broker` processes on this machine; a topic of 6 partitions
with replication factor 3 and min.insync.replicas 2; 100-byte records. The brokers run with
log.preallocate=true, as docs/operations.md advises for latency on ext4 (each new segment's disk blocks
reserved when it is created: appends never wait while the file system allocates blocks); the half-rate
runs are then made again on a cluster with the defaults, for comparison. The clients are bench/cperf.c
(librdkafka 2.x, as the confluent-kafka wheel bundles it), each in a process of its own, so that neither
waits on the other or on the benchmark's interpreter. First the peak: one producer (acks=all,
librdkafka's defaults: linger.ms=5, its sticky partitioner) sends as fast as it can while one consumer
reads every partition as it is written, long enough for the cluster to reach its steady state (the page
cache's write-back running, the consumer following the head); the peak is the records delivered per
second over the second half of that run (the first seconds of a fresh cluster go faster, and a short
burst, also shown, overstates what it sustains: at half of a burst's rate the cluster is past its
capacity and the latency measured is a queue's). Then the same producer sends at half the peak, paced,
while the consumer reads every partition as it is written (three runs, each on a topic of its own; the
median run by end-to-end p99 is shown): produce latency is from the record handed to librdkafka until
its delivery report (what Kafka's producer-perf-test reports), end-to-end latency from the same moment
until the consumer has the record (the producer writes the time into the value; one clock for the whole
machine). The first seconds (the warm-up: connections, metadata, the consumer catching up) are sent but
not measured. librdkafka's own statistics split the produce latency: the time a record waits in the
producer's queue for its batch to be sent (linger.ms), and the produce request's round trip to the
leader (the broker's append, the followers' fetches, the answer); the brokers' own
kraftpy_request_phase_seconds, read before and after each half-rate run, split a produce's time at its
leader into Kafka's RequestMetrics phases (remote: waiting for the followers). Last, the highest rate
whose end-to-end p99 stays within the goal, found by bisection in shorter runs, with linger.ms=5 and with linger.ms=1
(the setting the OpenMessaging Benchmark uses for Kafka's latency runs). And what one produce request
costs the cluster when each finds the brokers idle: 300 records/s, one a request (linger.ms=0), the
brokers' CPU a produce request and the fetches they answered for each. Each phase has a topic of its
own, deleted when the phase ends, so that none starts while the followers still catch up with the one
before, or while the disk still writes its data. Every process shares the two cores with every other:
the cluster's six and the two clients. The goal is an end-to-end p99 of 10 ms or less.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broker import cpu_seconds  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402
from peers import build_cperf, cperf_fields  # noqa: E402

from kraftpy.rpc.kafka_server import PHASES  # noqa: E402
from tests.helpers.deployments import ProcessCluster, create_topics  # noqa: E402
from tests.helpers.scrape import scrape  # noqa: E402

PARTITIONS = 6
TOPIC_CONFIG = {"min.insync.replicas": "2"}
GOAL_P99_MS = 10.0
#: Records/s of the phase that prices one produce request (one record a request, linger.ms=0).
HOP_RATE = 300


class Run:
    """One paced run: a consumer of every partition, then a producer at ``rate`` records/s."""

    def __init__(self, produced: dict[str, str], followed: dict[str, str], stats: Path, timelines: Path) -> None:
        self.produced = produced
        self.followed = followed
        self.split = self._split(stats)
        #: cperf.timeline of the producer (deliveries) and of the consumer (receipts): per 100 ms,
        #: (records, largest latency in ms).
        self.delivered = self._timeline(timelines.with_suffix(".paced"))
        self.received = self._timeline(timelines.with_suffix(".follow"))
        #: The brokers' request phase histograms before and after the run (`phase_buckets`), when scraped.
        self.phases: tuple[Buckets, Buckets] | None = None
        #: Over the run, warm-up included: the share of the machine's cores busy (every process), and
        #: the cores the brokers used together (when their pids were given).
        self.machine_busy: float | None = None
        self.broker_cores: float | None = None

    @staticmethod
    def _timeline(path: Path) -> list[tuple[int, float]]:
        rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
        return [(int(count), float(largest)) for _, count, largest in rows]

    def steady_rate(self) -> float:
        """Records delivered per second over the second half of the producer's run (its last
        window, cut short by the end, left out)."""
        windows = self.delivered[len(self.delivered) // 2:-1]
        return sum(count for count, _ in windows) / (len(windows) / 10) if windows else 0.0

    def worst_each_second(self) -> list[float]:
        """The largest end-to-end latency of each whole second of the measured part (ms)."""
        seconds = [self.received[i:i + 10] for i in range(0, len(self.received) - 9, 10)]
        return [max(largest for _, largest in second) for second in seconds]

    def produce_ms(self, q: str) -> float:
        return float(self.produced[q])

    def e2e_ms(self, q: str) -> float:
        return float(self.followed[q])

    @staticmethod
    def _split(stats: Path) -> dict[str, tuple[float, float]]:
        """The medians, over the statistics windows after the warm-up and the leaders, of librdkafka's
        p50 and p99 of a record's time in the producer's queue and of a produce request's round trip."""
        if not stats.exists():
            return {}  # a run shorter than the statistics interval
        windows = [json.loads(line) for line in stats.read_text().splitlines() if line.strip()]
        parts: dict[str, list[tuple[float, float]]] = {"int_latency": [], "rtt": []}
        for window in windows[3:]:  # the first windows fall in the warm-up
            for broker in window["brokers"].values():
                if broker["nodeid"] < 0:
                    continue
                for name, found in parts.items():
                    histogram = broker[name]
                    if histogram["cnt"]:
                        found.append((histogram["p50"] / 1000, histogram["p99"] / 1000))
        return {name: (statistics.median(p50 for p50, _ in found), statistics.median(p99 for _, p99 in found))
                for name, found in parts.items() if found}


#: (request, phase) -> [(bucket bound, observations up to it)], summed over brokers (see `phase_buckets`).
Buckets = dict[tuple[str, str], list[tuple[float, float]]]


def phase_buckets(ports: list[int]) -> Buckets:
    """The brokers' kraftpy_request_phase_seconds histograms, their buckets summed over the brokers."""
    out: dict[tuple[str, str], dict[float, float]] = {}
    for port in ports:
        for (name, labels), count in scrape(port).items():
            if name != "kraftpy_request_phase_seconds_bucket":
                continue
            found = dict(labels)
            buckets = out.setdefault((found["request"], found["phase"]), {})
            bound = float(found["le"])
            buckets[bound] = buckets.get(bound, 0.0) + count
    return {key: sorted(buckets.items()) for key, buckets in out.items()}


def phase_quantile(before: Buckets, after: Buckets, key: tuple[str, str], q: float) -> float | None:
    """The ``q`` quantile (ms) of what the histogram ``key`` observed between the two scrapes, interpolated
    within its bucket as Prometheus's histogram_quantile does; None when it observed nothing."""
    was = dict(before.get(key, []))
    grown = [(bound, count - was.get(bound, 0.0)) for bound, count in after.get(key, [])]
    if not grown or grown[-1][1] <= 0:
        return None
    rank = q * grown[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in grown:
        if count >= rank:
            if bound == float("inf"):
                return lower * 1000
            return (lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)) * 1000
        lower, below = bound, count
    return None


def machine_ticks(path: str = "/proc/stat") -> tuple[int, int]:
    """The machine's CPU time so far, in clock ticks summed over its cores: (busy, all), from the first
    line of /proc/stat (user, nice, system, idle, iowait, irq, softirq; idle and iowait are not busy)."""
    with open(path) as stat:
        fields = [int(value) for value in stat.readline().split()[1:8]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def paced_run(binary: Path, bootstrap: str, topic: str, rate: float, seconds: float, warmup: float,
              record_size: int, linger_ms: int, work: Path, metrics_ports: list[int] | None = None,
              broker_pids: list[int] | None = None) -> Run:
    """``rate`` records/s for ``warmup`` + ``seconds``; ``rate`` 0: as fast as it goes, ``seconds`` then
    being the number of records."""
    count = int(rate * (warmup + seconds)) if rate else int(seconds)
    stats = work / f"{topic}.stats.json"
    timelines = work / f"{topic}.timeline"
    follow_args = ("follow", bootstrap, topic, str(PARTITIONS), str(count),
                   f"cperf.timeline={timelines.with_suffix('.follow')}")
    follower = subprocess.Popen([str(binary), *follow_args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    before = phase_buckets(metrics_ports) if metrics_ports else {}
    ticks, brokers_cpu, started = machine_ticks(), sum(map(cpu_seconds, broker_pids or [])), time.monotonic()
    try:
        paced_args = ("paced", bootstrap, topic, str(count), str(record_size), "all", f"{rate:.0f}",
                      f"linger.ms={linger_ms}", f"cperf.warmup={warmup}", f"cperf.stats={stats}",
                      f"cperf.timeline={timelines.with_suffix('.paced')}")
        produced = cperf_fields(subprocess.run([str(binary), *paced_args], capture_output=True, text=True,
                                               timeout=900), paced_args)
        stdout, stderr = follower.communicate(timeout=300)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    busy, total = (now - then for now, then in zip(machine_ticks(), ticks, strict=True))
    brokers_cpu, elapsed = sum(map(cpu_seconds, broker_pids or [])) - brokers_cpu, time.monotonic() - started
    followed = cperf_fields((follower.returncode, stdout, stderr), follow_args)
    run = Run(produced, followed, stats, timelines)
    run.machine_busy = busy / total if total else None
    run.broker_cores = brokers_cpu / elapsed if broker_pids else None
    if metrics_ports:
        run.phases = (before, phase_buckets(metrics_ports))
    return run


def request_counts(ports: list[int]) -> dict[str, float]:
    """The requests the brokers answered so far, by Kafka's request name (FetchFollower, FetchConsumer,
    Produce, ...), summed over the brokers: the counts of kraftpy_request_duration_seconds."""
    out: dict[str, float] = {}
    for port in ports:
        for (name, labels), count in scrape(port).items():
            if name == "kraftpy_request_duration_seconds_count":
                request = dict(labels)["request"]
                out[request] = out.get(request, 0.0) + count
    return out


def produce_request_cost(binary: Path, cluster: ProcessCluster, args: argparse.Namespace,
                         work: Path) -> tuple[Run, float, dict[str, float]]:
    """What one produce request costs the cluster when each finds the brokers idle: `HOP_RATE` records/s,
    one a request (linger.ms=0), the consumer following. The run, the three brokers' CPU seconds a produce
    request, and the requests of each kind the brokers answered a produce request (over the whole run,
    warm-up included; the idle brokers' own CPU, about a fortieth of a core each, is in it)."""
    topic = "latency-request-cost"
    create_topics(cluster.bootstrap, [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                                               config=TOPIC_CONFIG)])
    known_everywhere(cluster, topic)
    pids = [proc.process.pid for proc in cluster.brokers.values()]
    ports = list(cluster.broker_metrics_ports.values())
    cpu, counts = sum(map(cpu_seconds, pids)), request_counts(ports)
    run = paced_run(binary, cluster.bootstrap, topic, HOP_RATE, args.trial_seconds, args.warmup, args.record_size,
                    0, work)
    used, grown = sum(map(cpu_seconds, pids)) - cpu, request_counts(ports)
    retire(cluster.bootstrap, topic)
    produced = max(grown.get("Produce", 0.0) - counts.get("Produce", 0.0), 1.0)
    return run, used / produced, {name: (grown.get(name, 0.0) - counts.get(name, 0.0)) / produced
                                  for name in ("FetchFollower", "FetchConsumer")}


def known_everywhere(cluster: ProcessCluster, topic: str) -> None:
    """Wait until every broker's metadata has ``topic`` with a leader for each partition: CreateTopics is
    answered once the controller committed it, and a consumer started at once may ask a broker that has
    not applied it yet (its ListOffsets answered UNKNOWN_TOPIC_OR_PARTITION, a failed run)."""
    import trio

    from kraftpy.broker.client import KafkaConnection
    from kraftpy.protocol.api_keys import ApiKey
    from kraftpy.protocol.messages import MetadataRequest

    async def everywhere() -> bool:
        for port in cluster.broker_ports.values():
            async with await KafkaConnection.connect("127.0.0.1", port) as conn:
                answer = await conn.request(ApiKey.METADATA, 12, MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=topic)]))
            [found] = answer.topics
            if found.error_code or len(found.partitions) != PARTITIONS or any(
                    p.leader_id < 0 for p in found.partitions):
                return False
        return True

    for _ in range(600):
        if trio.run(everywhere):
            return
        time.sleep(0.05)
    raise SystemExit(f"topic {topic} not known to every broker 30 s after its creation")


def retire(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` once its phase is over: the next phase starts on a cluster with no replication of
    it left to catch up (a phase run flat out leaves the followers behind for a while) and no write-back
    of its data left to the disk."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(timeout=60)
    for _ in range(600):
        if topic not in admin.list_topics(timeout=10).topics:
            break
        time.sleep(0.05)
    else:
        raise SystemExit(f"topic {topic} still listed after its deletion")
    # And the disk done with it: what the phase wrote and the kernel still writes back would take
    # the next phase's CPU (a phase flat out writes gigabytes).
    os.sync()


def highest_rate_within_goal(binary: Path, cluster: ProcessCluster, ceiling: float, linger_ms: int,
                             args: argparse.Namespace, work: Path, trials: int,
                             tried: list[tuple[float, float]]) -> tuple[float, Run | None]:
    """Bisection between 0 and ``ceiling`` records/s: the highest rate tried whose end-to-end p99 was
    within the goal, and that run (0 and None if none was); each rate tried and its p99 go to ``tried``."""
    low, high = 0.0, ceiling
    best: tuple[float, Run | None] = (0.0, None)
    for trial in range(trials):
        rate = (low + high) / 2
        topic = f"latency-bound-{linger_ms}-{trial}"
        create_topics(cluster.bootstrap, [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                                                   config=TOPIC_CONFIG)])
        known_everywhere(cluster, topic)
        run = paced_run(binary, cluster.bootstrap, topic, rate, args.trial_seconds, args.warmup, args.record_size,
                        linger_ms, work)
        retire(cluster.bootstrap, topic)
        tried.append((rate, run.e2e_ms("p99")))
        if run.e2e_ms("p99") <= GOAL_P99_MS:
            low, best = rate, (rate, run)
        else:
            high = rate
    return best


def half_rate_runs(binary: Path, cluster: ProcessCluster, prefix: str, rate: float, args: argparse.Namespace,
                   work: Path, metrics_ports: list[int] | None = None) -> list[Run]:
    """``args.runs`` paced runs at ``rate`` (linger.ms=5), each on a topic of its own, deleted after it."""
    runs = []
    for number in range(args.runs):
        topic = f"{prefix}-{number}"
        create_topics(cluster.bootstrap, [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                                                   config=TOPIC_CONFIG)])
        known_everywhere(cluster, topic)
        runs.append(paced_run(binary, cluster.bootstrap, topic, rate, args.seconds, args.warmup, args.record_size,
                              5, work, metrics_ports, [proc.process.pid for proc in cluster.brokers.values()]))
        retire(cluster.bootstrap, topic)
    return runs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst-records", type=int, default=4_000_000,
                        help="records of the burst: one producer alone, flat out, on a fresh cluster")
    parser.add_argument("--peak-records", type=int, default=16_000_000,
                        help="records of the flat-out run with the consumer whose second half is the peak")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the half-rate phase is measured")
    parser.add_argument("--runs", type=int, default=3, help="runs of the half-rate phase, each on a topic of its "
                        "own; the rows are the median run's")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds sent before measuring")
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--trials", type=int, default=5, help="bisection steps for each linger.ms")
    parser.add_argument("--trial-seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kraftpy-bench-latency-", ignore_cleanup_errors=True) as tmp, \
            ProcessCluster(Path(tmp), {"log.preallocate": "true"}, log_level="info", metrics=True) as cluster:
        work = Path(tmp)
        binary = build_cperf(work)
        create_topics(cluster.bootstrap, [NewTopic(t, num_partitions=PARTITIONS, replication_factor=3, config=TOPIC_CONFIG)
                                          for t in ("latency-burst", "latency-peak")])
        for topic in ("latency-burst", "latency-peak"):
            known_everywhere(cluster, topic)
        burst_args = ("paced", cluster.bootstrap, "latency-burst", str(args.burst_records), str(args.record_size),
                      "all", "0")
        burst_line = cperf_fields(subprocess.run([str(binary), *burst_args], capture_output=True, text=True,
                                                 timeout=900), burst_args)
        burst = int(burst_line["records"]) / float(burst_line["seconds"])
        retire(cluster.bootstrap, "latency-burst")
        flat_out = paced_run(binary, cluster.bootstrap, "latency-peak", 0, args.peak_records, 0, args.record_size, 5,
                             work)
        peak = flat_out.steady_rate()
        retire(cluster.bootstrap, "latency-peak")
        halves = half_rate_runs(binary, cluster, "latency", peak / 2, args, work,
                                list(cluster.broker_metrics_ports.values()))
        # The median run by end-to-end p99 (on two shared cores one run can land far from the next).
        half = sorted(halves, key=lambda run: run.e2e_ms("p99"))[len(halves) // 2]
        tried: dict[int, list[tuple[float, float]]] = {5: [], 1: []}
        bounds = {linger: highest_rate_within_goal(binary, cluster, peak / 2, linger, args, work, args.trials,
                                                   tried[linger])
                  for linger in (5, 1)}
        alone, request_cost, per_produce = produce_request_cost(binary, cluster, args, work)
    with tempfile.TemporaryDirectory(prefix="kraftpy-bench-latency-", ignore_cleanup_errors=True) as tmp, \
            ProcessCluster(Path(tmp), log_level="info") as defaults:
        work = Path(tmp)
        plain = half_rate_runs(build_cperf(work), defaults, "latency-defaults", peak / 2, args, work)
    split = half.split
    print("## latency\n")
    print(__doc__.split("\n\n", 1)[1].replace("\n", " ").strip() + "\n")
    print("| acks=all, replication factor 3, C clients | value |")
    print("|---|---:|")
    print(f"| burst: records/s ({args.burst_records:,} records of {args.record_size} B, one producer flat out, "
          f"alone) | {burst:,.0f} |")
    print(f"| peak: records/s delivered over the second half of {float(flat_out.produced['seconds']):.0f} s flat out "
          f"({args.peak_records:,} records), the consumer following | {peak:,.0f} |")
    print(f"| half of peak: records/s sent ({args.seconds:g} s measured after {args.warmup:g} s of warm-up; the "
          f"median of {len(halves)} runs by end-to-end p99) | {peak / 2:,.0f} |")

    def row(name: str, value) -> None:
        print(f"| {name} | {value} |")

    def four(get) -> str:
        return " / ".join(f"{get(q):.1f}" for q in ("p50", "p99", "p999", "max")) + " ms"

    row("produce latency p50 / p99 / p99.9 / max", four(half.produce_ms))
    row("end-to-end latency p50 / p99 / p99.9 / max", four(half.e2e_ms))
    row("end-to-end p99 of each run, in the order run",
        " / ".join(f"{run.e2e_ms('p99'):.1f}" for run in halves) + " ms")
    worst = half.worst_each_second()
    if worst:
        row(f"end-to-end, the largest of each second ({len(worst)} s): median / largest",
            f"{statistics.median(worst):.1f} / {max(worst):.1f} ms")
    if half.machine_busy is not None and half.broker_cores is not None:
        row(f"the machine over that run, warm-up included: its {os.cpu_count()} cores busy (every process, from "
            "/proc/stat); the cores the three brokers used together",
            f"{half.machine_busy:.0%}; {half.broker_cores:.2f}")
    if "int_latency" in split:
        row("of a record's produce latency: in the producer's queue (linger.ms=5), p50 / p99",
            "{:.1f} / {:.1f} ms".format(*split["int_latency"]))
    if "rtt" in split:
        row("of it: the produce request's round trip, p50 / p99", "{:.1f} / {:.1f} ms".format(*split["rtt"]))
    if half.phases is not None:
        before, after = half.phases

        def phases(request: str) -> str:
            def one(phase: str) -> str:
                p50, p99 = (phase_quantile(before, after, (request, phase), q) for q in (0.5, 0.99))
                return f"{phase.replace('_', ' ')} {p50:.2f} / {p99:.2f}" if p50 is not None else f"{phase} -"
            return "; ".join(one(phase) for phase in PHASES) + " ms"

        row("of a produce request's time at its leader, p50 / p99 of each phase (the brokers' "
            "kraftpy_request_phase_seconds over the run, warm-up included; remote: waiting for the followers' "
            "fetches)", phases("Produce"))
        row("of a follower's fetch at the leader, p50 / p99 of each phase (remote: its long poll, waiting for "
            "records)", phases("FetchFollower"))
    row("the same half-rate runs on a cluster with the defaults (log.preallocate=false): end-to-end p99 of "
        "each run, in the order run / largest", " / ".join(f"{run.e2e_ms('p99'):.1f}" for run in plain)
        + f" / {max(run.e2e_ms('max') for run in plain):.1f} ms")
    for linger, (rate, run) in bounds.items():
        within = (f"{rate:,.0f} (end-to-end p50 / p99 {run.e2e_ms('p50'):.1f} / {run.e2e_ms('p99'):.1f} ms)"
                  if run is not None else "none of the rates tried")
        row(f"highest rate with end-to-end p99 ≤ {GOAL_P99_MS:g} ms, linger.ms={linger} "
            f"({args.trials} steps between 0 and half of peak)", within)
        row(f"— the rates tried, linger.ms={linger}: records/s → end-to-end p99",
            ", ".join(f"{r:,.0f} → {p:.1f} ms" for r, p in tried[linger]))
    row(f"one record a produce request (linger.ms=0), {HOP_RATE} records/s: the three brokers' CPU a produce "
        "request; the followers' and the consumer's fetches answered a produce request",
        f"{request_cost * 1000:.1f} ms; {per_produce['FetchFollower']:.2f} and {per_produce['FetchConsumer']:.2f}")
    row("— its produce and end-to-end latency p50 / p99",
        f"{alone.produce_ms('p50'):.1f} / {alone.produce_ms('p99'):.1f} ms and "
        f"{alone.e2e_ms('p50'):.1f} / {alone.e2e_ms('p99'):.1f} ms")
    print()
    p99 = half.e2e_ms("p99")
    verdict = "met" if p99 <= GOAL_P99_MS else "not met"
    print(f"Goal (end-to-end p99 ≤ {GOAL_P99_MS:g} ms on loopback, at half of peak): **{verdict}** "
          f"({p99:.1f} ms).\n")
    print(f"Run: `python bench/latency.py {' '.join(argv)}`".rstrip() + f" on {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
