"""Benchmark the cost of one metadata change against the size of the cluster; print a markdown section.

For each size (1k, 10k and 100k partitions by default) a ``QuorumController`` is built in this process
with six brokers and topics of 100 partitions at replication factor 3, created through
``handle_create_topics`` and replayed as the controller does. Then a seventh broker registers and a
probe topic puts it in a fixed number of partitions (it leads half of them, follows in the others),
so that the work fencing it or shutting it down calls for is the same at every size. Measured, each
many times on the same image (nothing is kept between repetitions):

* replay and apply one PartitionChangeRecord (a leader change; an ISR shrink) onto the image;
* ``local_changes`` of that delta for one broker (what a broker does with each commit);
* fencing the probe broker: ``cluster_control.fence_brokers`` (FenceBrokerRecord replayed, then the
  partition changes that take it out of ISRs and leaderships);
* a controlled shutdown of the probe broker: ``controlled_shutdown_changes`` on an image where it is
  shutting down;
* creating one topic of 3 partitions: ``handle_create_topics`` and replaying its records;
* on the probe broker, a real ``ReplicaManager`` holding the probe topic's logs: ``apply_delta`` of a
  delta that moves one of its partitions' leadership to it or back (the broker's side of a change);
* for reference, one full scan of ``image.topics.partitions()``: what each of these cost before the
  images were applied by delta and the controller kept its indexes.

The goal is flat, not linear: the last column divides the median at the largest size by the median at
the smallest. ``python bench/metadata.py --sizes 1000,10000,100000 --reps 2000`` are the defaults.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kraftpy.broker.replica_manager import ReplicaManager  # noqa: E402
from kraftpy.broker.settings import BrokerSettings  # noqa: E402
from kraftpy.ids import Uuid  # noqa: E402
from kraftpy.logs import configure_logging  # noqa: E402
from kraftpy.metadata import cluster_control, replication_control  # noqa: E402
from kraftpy.metadata.controller import QuorumController  # noqa: E402
from kraftpy.metadata.controller_config import LATEST_METADATA_VERSION, ControllerConfig  # noqa: E402
from kraftpy.metadata.delta import MetadataDelta, replay_records  # noqa: E402
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage  # noqa: E402
from kraftpy.metadata.messages import (  # noqa: E402
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreateTopicsRequest,
)
from kraftpy.metadata.records import (  # noqa: E402
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    InControlledShutdownChange,
    PartitionChangeRecord,
)

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
BROKERS = 6
PROBE_BROKER = 7
PARTITIONS_PER_TOPIC = 100
RF = 3
#: Partitions of the probe topic: the probe broker leads half of them and follows in the others.
PROBE_PARTITIONS = 20


class Bench:
    """A controller whose log is a list: every result is replayed at once, as the active controller does."""

    def __init__(self) -> None:
        self.config = ControllerConfig(cluster_id=CLUSTER_ID)
        self.controller = QuorumController(self.config, rng=random.Random(1))
        self.offset = 0
        self.commit(self.controller.activate(0.0))

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def commit(self, result) -> object:
        if result.records:
            self.offset += len(result.records)
            self.controller.replay(result.records, last_offset=self.offset - 1, epoch=1)
        return result.response

    def add_broker(self, broker_id: int) -> None:
        request = BrokerRegistrationRequest(
            broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=Uuid(bytes([broker_id]) * 16),
            listeners=(BrokerEndpoint("PLAINTEXT", f"broker{broker_id}", 9092, 0),),
            features=(BrokerFeature("metadata.version", 1, LATEST_METADATA_VERSION),), rack=None,
        )
        epoch = self.commit(self.controller.handle_broker_registration(request, 0.0, self.offset)).broker_epoch
        self.commit(self.controller.handle_broker_heartbeat(
            BrokerHeartbeatRequest(broker_id, epoch, self.offset - 1, False, False), 0.0))

    def create(self, topics: list[CreatableTopic]) -> None:
        response = self.commit(self.controller.handle_create_topics(CreateTopicsRequest(tuple(topics))))
        assert all(r.error_code == 0 for r in response.topics), response


def build(partitions: int) -> tuple[Bench, float]:
    """A cluster of ``partitions`` partitions plus the probe topic; returns it and the creation time (s)."""
    bench = Bench()
    for broker_id in range(1, BROKERS + 1):
        bench.add_broker(broker_id)
    start = time.perf_counter()
    for i in range(partitions // PARTITIONS_PER_TOPIC):
        bench.create([CreatableTopic(f"topic-{i:05d}", PARTITIONS_PER_TOPIC, RF)])
    created = time.perf_counter() - start
    bench.add_broker(PROBE_BROKER)
    assignments = []
    for pid in range(PROBE_PARTITIONS):
        a, b = 1 + pid % BROKERS, 1 + (pid + 1) % BROKERS
        replicas = (PROBE_BROKER, a, b) if pid % 2 == 0 else (a, PROBE_BROKER, b)
        assignments.append(CreatableReplicaAssignment(pid, replicas))
    bench.create([CreatableTopic("probe", -1, -1, tuple(assignments))])
    return bench, created


def timed(operation: Callable[[], object], reps: int) -> list[float]:
    """Microseconds of each of ``reps`` calls (after a few unmeasured ones)."""
    for _ in range(min(reps, 20)):
        operation()
    clock = time.perf_counter_ns
    samples = []
    for _ in range(reps):
        start = clock()
        operation()
        samples.append((clock() - start) / 1000)
    return samples


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def broker_apply(bench: Bench, reps: int) -> list[float]:
    """µs of `ReplicaManager.apply_delta` for a delta that moves one of the probe broker's partitions'
    leadership to it or back (alternately), on a broker holding the probe topic's logs."""
    image = bench.image
    probe = image.topics.get_by_name("probe")
    pid = 1  # the probe broker follows partition 1
    other = probe.partitions[pid].leader
    to_probe = MetadataDelta(image)
    to_probe.replay(PartitionChangeRecord(pid, probe.id, leader=PROBE_BROKER))
    image_a = to_probe.apply()
    back = MetadataDelta(image_a)
    back.replay(PartitionChangeRecord(pid, probe.id, leader=other))
    image_b = back.apply()

    async def run() -> list[float]:
        with tempfile.TemporaryDirectory() as tmp:
            settings = BrokerSettings(node_id=PROBE_BROKER, cluster_id=CLUSTER_ID, log_dirs=(Path(tmp),))
            replicas = ReplicaManager(settings, None, lambda: 0)  # type: ignore[arg-type]
            await replicas.load()
            await replicas.set_running(True)
            await replicas.apply_delta(image, MetadataDelta.between(EMPTY_IMAGE, image))
            samples = []
            clock = time.perf_counter_ns
            for i in range(reps + 20):
                target, delta = (image_a, to_probe) if i % 2 == 0 else (image_b, back)
                start = clock()
                await replicas.apply_delta(target, delta)
                if i >= 20:
                    samples.append((clock() - start) / 1000)
            assert replicas.get("probe", pid).leader_id in (PROBE_BROKER, other)
            await replicas.close()
            return samples

    return trio.run(run)


def measure(partitions: int, reps: int) -> tuple[dict[str, tuple[float, float]], dict[str, object]]:
    bench, created = build(partitions)
    image, config = bench.image, bench.config
    # The objects of the images built so far are never freed during the measurement: keep the cyclic
    # collector from walking them again and again (a long-running node's old generation is as large).
    gc.collect()
    gc.freeze()
    topic = image.topics.get_by_name(f"topic-{partitions // PARTITIONS_PER_TOPIC // 2:05d}")
    part = topic.partitions[PARTITIONS_PER_TOPIC // 2]
    leader_change = PartitionChangeRecord(PARTITIONS_PER_TOPIC // 2, topic.id, leader=part.isr[1])
    isr_shrink = PartitionChangeRecord(PARTITIONS_PER_TOPIC // 2, topic.id, isr=part.isr[:2])
    follower = part.isr[1]

    def apply_one(record: PartitionChangeRecord) -> Callable[[], object]:
        def run() -> object:
            delta = MetadataDelta(image)
            delta.replay(record)
            return delta.apply()
        return run

    leader_delta = MetadataDelta(image)
    leader_delta.replay(leader_change)
    leader_delta.apply()
    shutting_down = replay_records(image, [BrokerRegistrationChangeRecord(
        PROBE_BROKER, image.cluster.brokers[PROBE_BROKER].epoch,
        in_controlled_shutdown=InControlledShutdownChange.IN_CONTROLLED_SHUTDOWN)])
    fence_records = cluster_control.fence_brokers(image, [PROBE_BROKER], config)
    shutdown_records = replication_control.controlled_shutdown_changes(shutting_down, PROBE_BROKER, config)
    topic_number = [0]

    def create_one() -> object:
        topic_number[0] += 1
        request = CreateTopicsRequest((CreatableTopic(f"new-{topic_number[0]}", 3, RF),))
        result = bench.controller.handle_create_topics(request)
        return replay_records(image, result.records)

    rows = {
        "apply": apply_one(leader_change),
        "apply_isr": apply_one(isr_shrink),
        "local": lambda: leader_delta.local_changes(follower),
        "fence": lambda: cluster_control.fence_brokers(image, [PROBE_BROKER], config),
        "shutdown": lambda: replication_control.controlled_shutdown_changes(shutting_down, PROBE_BROKER, config),
        "create": create_one,
        "scan": lambda: sum(1 for _ in image.topics.partitions()),
    }
    results = {}
    for name, operation in rows.items():
        results[name] = summary(timed(operation, max(5, reps // 200) if name == "scan" else reps))
    results["broker"] = summary(broker_apply(bench, reps))
    facts = {
        "created_s": created,
        "fence_records": len(fence_records) - 1,  # the FenceBrokerRecord itself aside
        "shutdown_records": len(shutdown_records),
        "local": leader_delta.local_changes(follower),
    }
    gc.unfreeze()
    return results, facts


LABELS = {
    "apply": "replay + apply one PartitionChangeRecord (leader change)",
    "apply_isr": "replay + apply one PartitionChangeRecord (ISR shrink)",
    "local": "`local_changes(broker)` of that delta",
    "fence": "fence one broker (`fence_brokers`, {fence_records} partition changes)",
    "shutdown": "controlled shutdown of one broker (`controlled_shutdown_changes`, {shutdown_records} changes)",
    "create": "CreateTopics of one 3-partition topic, decided and replayed",
    "broker": "broker: `ReplicaManager.apply_delta` of a change moving one of its partitions' leadership",
    "scan": "reference: one full scan of `image.topics.partitions()`",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="partition counts")
    parser.add_argument("--reps", type=int, default=2000, help="repetitions per measurement")
    args = parser.parse_args()
    configure_logging(level="warning")  # the probe broker's log lines are not part of the page
    sizes = [int(s) for s in args.sizes.split(",")]
    measured = {}
    facts = {}
    started = time.perf_counter()
    measure(sizes[0], max(1, args.reps // 4))  # warm-up, not reported: the first size is not measured cold
    for size in sizes:
        measured[size], facts[size] = measure(size, args.reps)
        print(f"metadata bench: {size} partitions done", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - started
    first, last = sizes[0], sizes[-1]
    shape = facts[first]
    local = shape["local"]

    def k(n: int) -> str:
        return f"{n // 1000}k" if n % 1000 == 0 else str(n)

    print("## metadata\n")
    print(f"The cost of one metadata change as the cluster grows. For each size a `QuorumController` is built "
          f"in the benchmark's process: {BROKERS} brokers, topics of {PARTITIONS_PER_TOPIC} partitions at "
          f"replication factor {RF} created through `handle_create_topics` and replayed, then a probe broker "
          f"that is in {PROBE_PARTITIONS} partitions at every size (it leads half of them), so that fencing it "
          "or shutting it down calls for the same work each time. Each operation runs many times on the same "
          "image (a delta is built, replayed and applied each time; the image is never changed) and the table "
          "gives the median and the 99th percentile in µs. Images are persistent maps that share what a delta "
          "did not touch, and the controller finds a broker's partitions, the leaderless ones and those off "
          "their preferred leader in the image's `TopicsIndex`, so none of these should grow with the cluster: "
          f"the last column is the median at {k(last)} divided by the median at {k(first)} (flat is about 1; "
          f"linear would be {last // first}). The full scan of every partition is shown for reference: before "
          "this, applying a change, fencing a broker or a controlled shutdown each walked every partition at "
          "least once. The cyclic garbage collector is kept off the already-built images (`gc.freeze`).\n")
    header = "| operation | " + " | ".join(f"{k(s)} median | {k(s)} p99" for s in sizes) + \
        f" | {k(last)} / {k(first)} |"
    print(header)
    print("|---|" + "---:|" * (2 * len(sizes) + 1))
    for name, label in LABELS.items():
        cells = []
        for size in sizes:
            median, p99 = measured[size][name]
            cells += [f"{median:,.1f}", f"{p99:,.1f}"]
        ratio = measured[last][name][0] / measured[first][name][0]
        print(f"| {label.format(**shape)} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    print()
    print(f"`local_changes` is asked of the delta that moves one partition's leadership to its second replica, "
          f"for that replica (it finds {len(local.leaders)} partition to lead). Creating the topics through the "
          "controller took " + ", ".join(f"{facts[s]['created_s']:.1f} s for {k(s)} partitions" for s in sizes)
          + ".\n")
    print(f"Run: `python bench/metadata.py --sizes {args.sizes} --reps {args.reps}` ({elapsed:.0f} s) on "
          f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, Python "
          f"{platform.python_version()}, one process.")


if __name__ == "__main__":
    main()
