"""Rolling restart: how long a SIGTERM roll of a 3 + 3 cluster takes under an idempotent producer.

Three `kraftpy controller` and three `kraftpy broker` processes (replication factor 3,
min.insync.replicas 2, a topic of 6 partitions); an idempotent acks=all confluent-kafka producer
sends throughout. Every broker, then every controller, is stopped with SIGTERM and started again,
one at a time, the next one only once this one is back (a broker Running, ready and in every ISR
again, a controller ready and the quorum caught up: tests/helpers/roll.py, the procedure of docs/operations.md "Rolling
restart"). Per node: seconds from SIGTERM to the process's exit (a broker's controlled shutdown
moves its leaderships away first) and from SIGTERM until it is back; in total: the whole roll, the
records acknowledged during it and the delivery failures (there should be none).
``python bench/roll.py`` prints the section; ``--rounds N`` rolls N times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import NewTopic  # noqa: E402

from tests.helpers.deployments import ProcessCluster, create_topics  # noqa: E402
from tests.helpers.roll import IdempotentProducer, roll  # noqa: E402

TOPIC = "rolled"
PARTITIONS = 6


def one_round(root: Path) -> dict:
    with ProcessCluster(root, metrics=True, log_level="info") as cluster:
        create_topics(cluster.bootstrap, [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])
        producer = IdempotentProducer(cluster.bootstrap, TOPIC, PARTITIONS)
        producer.start()
        try:
            producer.wait_acked(1000)
            before = producer.acked_count()
            done = roll(cluster)
            during = producer.acked_count() - before
        finally:
            producer.stop()
        return {"roll": done, "acked_during": during, "acked": producer.acked_count(), "sent": producer.sent,
                "failed": len(producer.failed), "fatal": len(producer.fatal)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    rounds = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="kraftpy-bench-roll-") as tmp:
            rounds.append(one_round(Path(tmp)))
    names = [n.name for n in rounds[0]["roll"].nodes]

    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} s"

    print("## roll")
    print()
    print("A rolling restart of three controllers and three brokers under an idempotent acks=all "
          "confluent-kafka producer (100 records in flight, a topic of 6 partitions, replication "
          "factor 3, min.insync.replicas 2): every broker, then every controller, stopped with "
          "SIGTERM and started again, one at a time; the next one is stopped only once this one is "
          "back (a broker Running and answering `/ready` 200 and no partition under-replicated any more, "
          "a controller answering `/ready` 200 and every voter caught up with the quorum's leader). The same procedure as "
          "docs/operations.md \"Rolling restart\" and tests/integration/test_rolling_restart.py.")
    print()
    print(f"| node (median of {args.rounds}) | SIGTERM to exit | SIGTERM until back |")
    print("|---|---:|---:|")
    for i, name in enumerate(names):
        print(f"| {name} | {median([r['roll'].nodes[i].stopping_s for r in rounds])} "
              f"| {median([r['roll'].nodes[i].back_s for r in rounds])} |")
    print()
    print("| whole roll | value |")
    print("|---|---:|")
    print(f"| duration (median of {args.rounds}) | {median([r['roll'].total_s for r in rounds])} |")
    print(f"| records acknowledged during the roll | {sum(r['acked_during'] for r in rounds):,} |")
    print(f"| records acknowledged in all (sent) | {sum(r['acked'] for r in rounds):,} "
          f"({sum(r['sent'] for r in rounds):,}) |")
    print(f"| delivery failures | {sum(r['failed'] for r in rounds)} |")
    print(f"| fatal producer errors | {sum(r['fatal'] for r in rounds)} |")
    print()
    command = " ".join(["python bench/roll.py", *argv])
    print(f"Run: `{command}` on {os.cpu_count()} cores (the six processes and the producer share them).")
    return 0 if all(r["failed"] == 0 and r["fatal"] == 0 for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
