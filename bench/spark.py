"""Benchmark a Spark batch read through the ``kraftpy`` data source; print a markdown section.

It starts its own ``kraftpy dev`` on free ports in a temporary directory, produces the records
(default 1M, 100-byte values, 8-byte keys, over 4 partitions) with confluent-kafka, then reads
them all:

* with Spark (local[N], N = the machine's cores), ``spark.read.format("kraftpy")`` into the
  ``noop`` sink, which makes every row (all seven columns) without writing anything; one task
  per partition; a small read first warms up the JVM and the Python workers;
* with one confluent-kafka consumer assigned to every partition, which touches each record's
  key, value, offset and timestamp (what the Spark read turns into columns).

Each figure is the best of ``--rounds``; both read the same records from the same broker.
``python bench/spark.py --records 200000`` makes it shorter.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TOPIC = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dev(directory: Path) -> tuple[subprocess.Popen, str]:
    port, controller_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "kraftpy", "dev", "--dir", str(directory), "--port", str(port),
         "--controller-port", str(controller_port), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("kraftpy dev is running"):
            return process, f"127.0.0.1:{port}"
    raise RuntimeError(f"kraftpy dev exited ({process.wait()}) before it served")


def stop_dev(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def produce(bootstrap: str, topic: str, records: int, partitions: int, value_size: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(value_size)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%08d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) != 0:
        raise RuntimeError("records not delivered")
    return time.perf_counter() - start


def consumer_read(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "log_level": 0})
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    while seen < records:
        for m in consumer.consume(num_messages=10_000, timeout=5.0):
            if m.error() is None:
                m.key(), m.value(), m.offset(), m.timestamp()
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def spark_session(cores: int):
    from pyspark.sql import SparkSession

    import kraftpy.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("kraftpy-bench")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kraftpy.spark.register(spark)
    return spark


def spark_read(spark, bootstrap: str, topic: str, ending: str | None = None) -> float:
    reader = (spark.read.format("kraftpy").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic))
    if ending is not None:
        reader = reader.option("endingOffsets", ending)
    start = time.perf_counter()
    reader.load().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def java_version() -> str:
    java = shutil.which("java")
    if java is None:
        return "none"
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr.splitlines()
    return out[0].replace('"', "") if out else "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import confluent_kafka
    import pyarrow
    import pyspark

    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="kraftpy-bench-spark-") as tmp:
        dev, bootstrap = start_dev(Path(tmp) / "dev")
        try:
            produce_s = produce(bootstrap, TOPIC, args.records, args.partitions, args.value_size)
            consumer = [consumer_read(bootstrap, TOPIC, args.records, args.partitions) for _ in range(args.rounds)]
            spark = spark_session(cores)
            try:
                warm = "{" + ", ".join(f'"{p}": 1000' for p in range(args.partitions)) + "}"
                spark_read(spark, bootstrap, TOPIC, ending=f'{{"{TOPIC}": {warm}}}')
                spark_s = [spark_read(spark, bootstrap, TOPIC) for _ in range(args.rounds)]
            finally:
                spark.stop()
        finally:
            stop_dev(dev)

    n = args.records
    spark_best, consumer_best = min(spark_s), min(consumer)
    mb = n * (args.value_size + 8) / 1e6
    print("## spark")
    print()
    print(f"A batch read of {n:,} records ({args.value_size}-byte values, 8-byte keys, {mb:.0f} MB of payload) "
          f"in {args.partitions} partitions of one topic on `kraftpy dev`, produced first "
          f"({n / produce_s:,.0f} records/s with one acks=all confluent-kafka producer).")
    print()
    print(f"| reader | rows/s | MB/s of payload | seconds (best of {args.rounds}) | all rounds (s) |")
    print("|---|---:|---:|---:|---|")
    for name, best, rounds in (
        (f"Spark `format(\"kraftpy\")` → noop sink, local[{cores}], {args.partitions} tasks", spark_best, spark_s),
        ("one confluent-kafka consumer, all partitions", consumer_best, consumer),
    ):
        print(f"| {name} | {n / best:,.0f} | {mb / best:,.1f} | {best:.2f} | "
              f"{', '.join(f'{s:.2f}' for s in rounds)} |")
    print()
    print(f"Spark reads at {consumer_best / spark_best:.2f}× the single consumer's rate. The Spark figure "
          "includes planning (ListOffsets), a consumer per task and the Arrow batches handed to the JVM; "
          "the JVM and Python workers were warmed up by a smaller read first.")
    print()
    print(f"Run with {cores} cores, Python {platform.python_version()}, pyspark {pyspark.__version__}, "
          f"pyarrow {pyarrow.__version__}, confluent-kafka {confluent_kafka.__version__} (librdkafka "
          f"{confluent_kafka.libversion()[0]}), {java_version()}; broker and clients on the same machine. "
          "`python bench/spark.py --records N --partitions P --value-size B --rounds R` changes the sizes.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
