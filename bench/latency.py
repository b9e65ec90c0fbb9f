"""Produce and end-to-end latency on a 3 + 3 cluster, acks=all, replication factor 3, at half of peak.

Three `kraftpy controller` and three `kraftpy broker` processes on this machine; a topic of 6
partitions with replication factor 3 and min.insync.replicas 2. First the peak: one producer (the
engine of `kraftpy perf`, librdkafka through confluent-kafka, acks=all, linger.ms=5) sends as fast as
it can. Then the same producer sends at half that rate while one consumer reads the topic as it is
written: produce latency is from the record handed to the client until its delivery report (what
Kafka's producer-perf-test reports), end-to-end latency from the record's CreateTime (set by the
producer when the record is handed over) until the consumer has it. Every process shares the cores
with every other: the cluster's six and the two clients (threads of one Python process, the
benchmark's). The goal is an end-to-end p99 of 10 ms or less.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import NewTopic  # noqa: E402

from kraftpy.cli.perf import ConsumeSettings, ProduceSettings, run_consume, run_produce  # noqa: E402
from tests.helpers.deployments import ProcessCluster, create_topics  # noqa: E402

PARTITIONS = 6
GOAL_P99_MS = 10.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak-records", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the half-rate phase sends")
    parser.add_argument("--record-size", type=int, default=100)
    args = parser.parse_args(argv)
    config = {"min.insync.replicas": "2"}
    with tempfile.TemporaryDirectory(prefix="kraftpy-bench-latency-", ignore_cleanup_errors=True) as tmp, \
            ProcessCluster(Path(tmp), log_level="info") as cluster:
        create_topics(cluster.bootstrap, [NewTopic(t, num_partitions=PARTITIONS, replication_factor=3, config=config)
                                          for t in ("latency-peak", "latency")])
        peak = run_produce(ProduceSettings(cluster.bootstrap, "latency-peak", num_records=args.peak_records,
                                           record_size=args.record_size, acks="all"))
        if peak.errors:
            raise SystemExit(f"peak: {peak.errors} errors, {peak.first_error}")
        rate = peak.records_per_sec / 2
        count = int(rate * args.seconds)
        consumed: dict = {}
        reader = threading.Thread(target=lambda: consumed.update(result=run_consume(ConsumeSettings(
            cluster.bootstrap, "latency", messages=count, from_beginning=True, timeout_ms=60_000))))
        reader.start()
        half = run_produce(ProduceSettings(cluster.bootstrap, "latency", num_records=count,
                                           record_size=args.record_size, throughput=rate, acks="all"))
        reader.join(600)
        if half.errors:
            raise SystemExit(f"half rate: {half.errors} errors, {half.first_error}")
        e2e = consumed["result"].e2e_latency
    lat = half.latency
    print("## latency\n")
    print(__doc__.split("\n\n", 1)[1].replace("\n", " ").strip() + "\n")
    print("| acks=all, replication factor 3 | value |")
    print("|---|---:|")
    print(f"| peak: records/s ({args.record_size} B, one producer) | {peak.records_per_sec:,.0f} |")
    print(f"| half of peak: records/s sent (for {args.seconds:g} s) | {half.records_per_sec:,.0f} |")
    print(f"| produce latency p50 / p99 / p99.9 / max | {lat.p50_ms:.1f} / {lat.p99_ms:.1f} / {lat.p999_ms:.1f} / "
          f"{lat.max_ms:.1f} ms |")
    print(f"| end-to-end latency p50 / p99 / p99.9 / max | {e2e.p50_ms:.1f} / {e2e.p99_ms:.1f} / {e2e.p999_ms:.1f} / "
          f"{e2e.max_ms:.1f} ms |")
    print()
    verdict = "met" if e2e.p99_ms <= GOAL_P99_MS else "not met"
    print(f"Goal (end-to-end p99 ≤ {GOAL_P99_MS:g} ms on loopback): **{verdict}**.\n")
    print(f"Run: `python bench/latency.py {' '.join(argv)}`".rstrip() + f" on {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
