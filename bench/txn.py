"""Benchmark transactions against one `kraftpy dev` process; print a markdown section.

Measured in one run against one `kraftpy dev` (controller and broker in one process, a
`__transaction_state` of 50 partitions with one replica, the default flush policy: no fsync per
write), its clients in this process:

* **commits**: 1 and 8 confluent-kafka (librdkafka) transactional producers, each with its own
  transactional.id, each running transactions one after another for a fixed time: begin, R records
  of 100 bytes spread over two partitions of a data topic, commit. R is 10 and 1,000. A transaction
  counts once ``commit_transaction()`` returned; its commit latency is that call (it flushes the
  records not yet acknowledged, sends EndTxn and is answered once PREPARE_COMMIT is in
  `__transaction_state`; the markers follow). Producers run in threads; librdkafka does its I/O in
  its own threads.
* **read_committed / read_uncommitted**: the topic the commit phases wrote (their transactions, and so
  their commit markers: one in every 5 to 500 offsets of a partition) read from the beginning to the
  end by one confluent-kafka consumer under each isolation level, alternately, twice each; the best
  of each. The ratio is read_committed's records/s over read_uncommitted's (goal: at least 0.9x).

``python bench/txn.py --seconds 3`` runs a shorter benchmark.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.processes import DevProcess  # noqa: E402

TOPIC = "bench-txn"
PARTITIONS = 8
PRODUCERS = (1, 8)
RECORDS = (10, 1000)
VALUE = b"v" * 100
QUIET = {"log_level": 0}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(len(ordered) * q + 0.5) - 1))]


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = admin.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
        if t is not None and t.error is None and len(t.partitions) == PARTITIONS \
                and all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise SystemExit(f"topic {TOPIC} has no leader for every partition")


# -- commits ---------------------------------------------------------------------------------------


def commit_phase(bootstrap: str, producers: int, records: int, seconds: float) -> dict:
    """``producers`` threads, each its own transactional producer, committing transactions of
    ``records`` records for ``seconds`` (after init_transactions, which is not counted)."""
    from confluent_kafka import KafkaException, Producer

    latencies: list[list[float]] = [[] for _ in range(producers)]
    errors: list[str] = []
    ready = threading.Barrier(producers + 1)
    start = threading.Event()
    bounds: dict[str, float] = {}

    def run(i: int) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{producers}-{records}-{i}",
                             "linger.ms": 5, **QUIET})
        try:
            producer.init_transactions(60)
        except KafkaException as exc:
            errors.append(f"init_transactions: {exc}")
            ready.abort()
            return
        ready.wait()
        start.wait()
        first, second = i % PARTITIONS, (i + 1) % PARTITIONS
        try:
            while time.perf_counter() < bounds["deadline"]:
                producer.begin_transaction()
                for n in range(records):
                    while True:
                        try:
                            producer.produce(TOPIC, VALUE, partition=first if n % 2 == 0 else second)
                            break
                        except BufferError:  # the local queue is full: let librdkafka send
                            producer.poll(0.01)
                t0 = time.perf_counter()
                producer.commit_transaction(60)
                latencies[i].append(time.perf_counter() - t0)
        except KafkaException as exc:
            errors.append(f"producer {i}: {exc}")

    threads = [threading.Thread(target=run, args=(i,), name=f"txn-producer-{i}") for i in range(producers)]
    for thread in threads:
        thread.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pass
    began = time.perf_counter()
    bounds["deadline"] = began + seconds
    start.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise SystemExit(f"{producers} producers x {records} records: {errors[0]}")
    every = [x for per in latencies for x in per]
    return {"producers": producers, "records": records, "txns": len(every), "txn_per_s": len(every) / elapsed,
            "records_per_s": len(every) * records / elapsed, "p50_ms": quantile(every, 0.5) * 1000,
            "p99_ms": quantile(every, 0.99) * 1000}


# -- consuming under each isolation level ----------------------------------------------------------


def consume_all(bootstrap: str, isolation: str, expected: int) -> dict:
    """Read every partition from the beginning until ``expected`` records arrived; records/s."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": isolation, **QUIET})
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = 0
        began = time.perf_counter()
        deadline = time.monotonic() + 300
        while got < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"{isolation}: read {got} of {expected} records")
            for msg in consumer.consume(10_000, timeout=0.5):
                if msg.error() is None:
                    got += 1
        elapsed = time.perf_counter() - began
    finally:
        consumer.close()
    if got != expected:
        raise SystemExit(f"{isolation}: read {got} records, {expected} were committed")
    return {"isolation": isolation, "records": got, "seconds": elapsed, "per_s": got / elapsed}


# -- the run ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per commit phase")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kraftpy-bench-txn-"))
    dev = DevProcess(work / "dev")
    phases: list[dict] = []
    reads: dict[str, list[dict]] = {"read_uncommitted": [], "read_committed": []}
    try:
        with dev:
            create_topic(dev.bootstrap)
            for producers in PRODUCERS:
                for records in RECORDS:
                    phases.append(commit_phase(dev.bootstrap, producers, records, args.seconds))
            total = sum(p["txns"] * p["records"] for p in phases)
            for _ in range(2):
                for isolation in reads:
                    reads[isolation].append(consume_all(dev.bootstrap, isolation, total))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    best = {isolation: max(runs, key=lambda r: r["per_s"]) for isolation, runs in reads.items()}
    ratio = best["read_committed"]["per_s"] / best["read_uncommitted"]["per_s"]
    print("## txn\n")
    print("Transactions against one `kraftpy dev` process (controller and broker in one process, "
          "`__transaction_state` with 50 partitions and one replica, no fsync per write), its clients in the "
          "benchmark's process on the same cores.\n")
    print(f"### Committed transactions\n\nEach producer is a confluent-kafka transactional producer with its own "
          f"`transactional.id` (`linger.ms` 5), running transactions one after another for {args.seconds:g} s: "
          f"begin, the records (100 bytes each, alternately to two of the topic's {PARTITIONS} partitions), "
          "`commit_transaction()`. The commit latency is that call: it flushes the records not yet "
          "acknowledged, sends EndTxn and returns once the coordinator has written PREPARE_COMMIT; the "
          "markers follow.\n")
    print("| producers | records / transaction | transactions/s | records/s | commit p50 | commit p99 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for p in phases:
        print(f"| {p['producers']} | {p['records']:,} | {p['txn_per_s']:,.1f} | {p['records_per_s']:,.0f} | "
              f"{p['p50_ms']:.1f} ms | {p['p99_ms']:.1f} ms |")
    print()
    print(f"### read_committed against read_uncommitted\n\nThe {total:,} records those transactions wrote (with "
          "a commit marker after every 5 to 500 records of a partition), read from the beginning by one "
          "confluent-kafka consumer (assigned, no group) under each isolation level, alternately, twice each; "
          "the best of each.\n")
    print("| isolation.level | records | seconds | records/s |")
    print("|---|---:|---:|---:|")
    for isolation in ("read_uncommitted", "read_committed"):
        r = best[isolation]
        print(f"| {isolation} | {r['records']:,} | {r['seconds']:.2f} | {r['per_s']:,.0f} |")
    print()
    print(f"read_committed / read_uncommitted: **{ratio:.2f}x** (goal: at least 0.9x).\n")
    print(f"Run: `python bench/txn.py --seconds {args.seconds:g}` on {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}.")


if __name__ == "__main__":
    main()
