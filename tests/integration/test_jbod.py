"""JBOD on real processes: 3 controllers and brokers 4, 5, 6, each broker with two log directories.

* A replica moves to the other directory of its broker (``kraftpy log-dirs alter --wait`` with Kafka's
  reassignment file and its ``log_dirs``) while a producer writes to it: every acknowledged record is
  read back, and the replica ends in the target directory.
* A directory made to fail while the broker runs (a partition directory replaced by a file: the next
  segment roll there fails with ENOTDIR) goes offline: the broker logs it and keeps running, the
  controller moves that partition's leadership to another broker, and the broker still leads and serves
  a partition of its other directory.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import trio

from kraftpy.admin.client import AdminClient, parse_addresses
from tests.helpers.deployments import ProcessCluster, create_topics

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import NewTopic  # noqa: E402

from tests.helpers import forkserver  # noqa: E402

B = 4  # the broker whose directories the test works on


def kraftpy(cluster, *args: object) -> subprocess.CompletedProcess:
    return forkserver.run([*(str(a) for a in args), "--bootstrap-server",
                           cluster.bootstrap], capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


def where(cluster, topic: str) -> Path:
    """The log directory of broker B holding ``topic``-0 (not a future log)."""
    result = kraftpy(cluster, "log-dirs", "describe", "--broker-list", B, "--topic-list", topic, "--json")
    doc = json.loads(result.stdout)
    for log_dir in doc["brokers"][0]["logDirs"]:
        if any(p["partition"] == f"{topic}-0" and not p["isFuture"] for p in log_dir["partitions"]):
            return Path(log_dir["logDir"])
    raise AssertionError(f"{topic}-0 is in no directory of broker {B}: {result.stdout} {result.stderr}")


def leader_and_isr(cluster, topic: str) -> tuple[int, list[int]]:
    async def ask():
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            response = await admin.metadata([topic])
            part = response.topics[0].partitions[0]
            return part.leader_id, list(part.isr_nodes)

    return trio.run(ask)


def move(cluster, tmp_path: Path, topic: str, target: Path) -> subprocess.CompletedProcess:
    plan = tmp_path / f"move-{topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [B, 5, 6], "log_dirs": [str(target), "any", "any"]}]}))
    return kraftpy(cluster, "log-dirs", "alter", "--reassignment-json-file", plan, "--wait")


def consume_all(cluster, topic: str, count: int) -> list[bytes]:
    consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{topic}",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_a_move_under_produce_and_a_failed_dir_taken_offline(tmp_path):
    cluster = ProcessCluster(tmp_path, {"min.insync.replicas": 2})
    dirs = [tmp_path / f"broker-{B}" / "disk-a", tmp_path / f"broker-{B}" / "disk-b"]
    config = tmp_path / f"broker-{B}.properties"
    config.write_text("\n".join(
        f"log.dirs={','.join(map(str, dirs))}" if line.startswith("log.dirs=") else line
        for line in config.read_text().splitlines()) + "\n")
    with cluster:
        create_topics(cluster.bootstrap, [
            NewTopic("moving", num_partitions=1, replica_assignment=[[B, 5, 6]]),
            NewTopic("failing", num_partitions=1, replica_assignment=[[B, 5, 6]], config={"segment.bytes": "2048"}),
            NewTopic("healthy", num_partitions=1, replica_assignment=[[B, 5, 6]]),
        ], deployment=cluster)

        # -- a move under produce loses nothing ---------------------------------------------------
        source = where(cluster, "moving")
        (target,) = [d for d in dirs if d != source]
        acked: list[bytes] = []
        errors: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})

            def delivered(err, message):
                if err is None:
                    acked.append(message.value())
                else:
                    errors.append(str(err))

            i = 0
            while not stop.is_set() or i < 500:
                producer.produce("moving", b"m-%06d" % i + bytes(200), partition=0, on_delivery=delivered)
                producer.poll(0)
                i += 1
                if i % 200 == 0:
                    producer.flush(10)
            producer.flush(30)

        writer = threading.Thread(target=produce, name="producer")
        writer.start()
        try:
            cluster.eventually(lambda: len(acked) >= 300, "records before the move")
            result = move(cluster, tmp_path, "moving", target)
            assert result.returncode == 0, result.stderr
        finally:
            stop.set()
            writer.join(60)
        assert not errors, errors[:3]
        assert where(cluster, "moving") == target
        read = consume_all(cluster, "moving", len(acked))
        assert set(acked) <= set(read) and len(read) == len(set(read))
        assert cluster.brokers[B].find("replica moved to another log directory")

        # -- the two other topics in different directories of broker B --------------------------
        failing_dir = where(cluster, "failing")
        if where(cluster, "healthy") == failing_dir:
            (other,) = [d for d in dirs if d != failing_dir]
            assert move(cluster, tmp_path, "healthy", other).returncode == 0
        assert where(cluster, "healthy") != failing_dir
        cluster.eventually(lambda: leader_and_isr(cluster, "failing")[0] == B, "broker 4 leads failing-0")

        # -- a directory fails while the broker runs ----------------------------------------------
        partition_dir = failing_dir / "failing-0"
        partition_dir.rename(failing_dir / "failing-0.aside")
        partition_dir.write_bytes(b"not a directory")
        mark = cluster.brokers[B].mark()
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                "message.timeout.ms": 10000})
        for i in range(40):  # one batch each, past segment.bytes: the roll creates a file under a file
            producer.produce("failing", b"f-%04d" % i + bytes(200), partition=0)
            producer.flush(15)
            if cluster.brokers[B].find("log directory offline", since=mark):
                break
        line = cluster.brokers[B].wait_for("log directory offline", since=mark, timeout=60)
        assert line["log_dir"] == str(failing_dir) and "ENOTDIR" in line["error"]
        cluster.eventually(lambda: leader_and_isr(cluster, "failing")[0] in (5, 6),
                   "failing-0 led by another broker")
        assert B not in leader_and_isr(cluster, "failing")[1]
        assert cluster.brokers[B].running

        # The broker still serves the partition of its other directory.
        assert leader_and_isr(cluster, "healthy")[0] == B
        healthy = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(10):
            healthy.produce("healthy", b"h-%d" % i, partition=0)
        assert healthy.flush(30) == 0
        assert sorted(consume_all(cluster, "healthy", 10)) == sorted(b"h-%d" % i for i in range(10))
