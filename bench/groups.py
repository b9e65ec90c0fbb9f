"""Benchmark the group coordinator of one `kraftpy dev` process; print a markdown section.

Measured in one run against one `kraftpy dev` (controller and broker in one process, a
`__consumer_offsets` of 50 partitions with one replica, the default flush policy: no fsync per
write), its clients in this process:

* **commits**: 1, 10 and 100 concurrent committers, each with its own connection and its own group,
  each sending OffsetCommit v8 (one partition, the next offset each time) one after another for a
  fixed time. They are *simple* commits (generation -1, no member id: what an assign() consumer
  sends); a member's commit costs the same append plus a generation check. A commit is answered once
  its record is in `__consumer_offsets` and committed (acks=all). Beside it, in the same run, the same
  committers each sending a Produce of one 100-byte record with acks=all to a data topic: the price
  of the append alone.
* **rebalance**: a group of 9 confluent-kafka consumers (librdkafka, `heartbeat.interval.ms` 500)
  subscribed to a 20-partition topic; a 10th subscribes, and the time is taken from its `subscribe()`
  until all 10 hold a share of the partitions that covers the topic (every member's assignment as
  its rebalance callbacks left it); then it closes, and the time until the 9 cover the topic again.
  Repeated, for the eager `range` assignor and for `cooperative-sticky` (incremental rebalances, two
  rounds when partitions move). The existing members learn of a rebalance from a heartbeat, so up to
  one heartbeat interval of each figure is that wait.

``python bench/groups.py --seconds 3 --rounds 3`` runs a shorter benchmark.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kraftpy.broker.client import KafkaConnection  # noqa: E402
from kraftpy.protocol.api_keys import ApiKey  # noqa: E402
from kraftpy.protocol.messages import FindCoordinatorRequest, OffsetCommitRequest  # noqa: E402
from tests.helpers.processes import DevProcess  # noqa: E402
from tests.helpers.protocol import batch, produce  # noqa: E402

TOPIC = "bench-groups"
PARTITIONS = 20
COMMITTERS = (1, 10, 100)
MEMBERS = 10
HEARTBEAT_MS = 500
COORDINATOR_NOT_AVAILABLE = 15
COORDINATOR_LOAD_IN_PROGRESS = 14
NOT_COORDINATOR = 16


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(len(ordered) * q + 0.5) - 1))]


# -- commits ---------------------------------------------------------------------------------------


def commit_request(group: str, partition: int, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset,
                                                             committed_leader_epoch=-1,
                                                             committed_metadata="")])])


async def wait_for_coordinator(conn: KafkaConnection, groups: list[str], timeout: float = 60.0) -> None:
    """FindCoordinator (v4, batched) until every group has one here (the first creates
    __consumer_offsets), then a commit of each until the coordinator has loaded its partition."""
    with trio.fail_after(timeout):
        pending = list(groups)
        while pending:
            for start in range(0, len(pending), 50):
                chunk = pending[start:start + 50]
                response = await conn.request(ApiKey.FIND_COORDINATOR, 4,
                                              FindCoordinatorRequest(key_type=0, coordinator_keys=chunk))
                ready = {c.key for c in response.coordinators if c.error_code == 0}
                pending = [g for g in pending if g not in ready]
            if pending:
                await trio.sleep(0.2)  # the offsets topic is being created
        for group in groups:
            while True:
                response = await conn.request(ApiKey.OFFSET_COMMIT, 8, commit_request(group, 0, 0))
                code = response.topics[0].partitions[0].error_code
                if code == 0:
                    break
                if code not in (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR):
                    raise SystemExit(f"OffsetCommit for {group}: error code {code}")
                await trio.sleep(0.1)


async def run_phase(port: int, n: int, seconds: float, kind: str) -> dict:
    """n concurrent clients, each with its own connection, one request after another for `seconds`:
    `commit` (each its own group) or `produce` (acks=all, one 100-byte record)."""
    groups = [f"bench-commit-{n}-{i}" for i in range(n)]
    conns = [await KafkaConnection.connect("127.0.0.1", port, client_id=f"bench-{kind}-{i}") for i in range(n)]
    latencies: list[float] = []
    errors = 0
    value = b"v" * 100
    try:
        if kind == "commit":
            await wait_for_coordinator(conns[0], groups)
        start = trio.Event()
        deadline = 0.0

        async def client(i: int) -> None:
            nonlocal errors
            conn = conns[i]
            offset = 1
            await start.wait()
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                if kind == "commit":
                    response = await conn.request(ApiKey.OFFSET_COMMIT, 8,
                                                  commit_request(groups[i], i % PARTITIONS, offset))
                    code = response.topics[0].partitions[0].error_code
                else:
                    code = (await produce(conn, TOPIC, i % PARTITIONS, batch(value), acks=-1)).error_code
                latencies.append(time.perf_counter() - t0)
                errors += code != 0
                offset += 1

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(client, i)
            began = time.perf_counter()
            deadline = began + seconds
            start.set()
        elapsed = time.perf_counter() - began
    finally:
        for conn in conns:
            await conn.aclose()
    return {"n": n, "ops": len(latencies), "per_s": len(latencies) / elapsed, "errors": errors,
            "p50_ms": quantile(latencies, 0.5) * 1000, "p99_ms": quantile(latencies, 0.99) * 1000}


# -- rebalances ------------------------------------------------------------------------------------


class Group:
    """Consumers of one group, each polled by its own thread; their assignments as their rebalance
    callbacks leave them, and the moment the assignments last became a cover of the topic."""

    def __init__(self, bootstrap: str, group: str, assignor: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.assignor = assignor
        self.lock = threading.Condition()
        self.held: dict[int, set[int]] = {}
        self.threads: dict[int, tuple[threading.Thread, threading.Event]] = {}
        self.covered_at: float | None = None
        self.errors: list[str] = []

    def _covers(self) -> bool:
        owners = [p for parts in self.held.values() for p in parts]
        return len(owners) == PARTITIONS == len(set(owners)) and all(self.held.values())

    def _changed(self) -> None:
        self.covered_at = time.perf_counter() if self._covers() else None
        self.lock.notify_all()

    def add(self, i: int) -> float:
        """Starts member i; returns the time just before its subscribe()."""
        ready = threading.Event()
        stop = threading.Event()
        began: list[float] = []
        thread = threading.Thread(target=self._run, args=(i, stop, ready, began), daemon=True)
        self.threads[i] = (thread, stop)
        thread.start()
        ready.wait()
        return began[0]

    def remove(self, i: int) -> float:
        """Closes member i (it leaves the group); returns the time just before its close()."""
        thread, stop = self.threads.pop(i)
        began = time.perf_counter()
        stop.set()
        thread.join()
        return began

    def _run(self, i: int, stop: threading.Event, ready: threading.Event, began: list[float]) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": f"bench-member-{i}",
            "enable.auto.commit": False, "auto.offset.reset": "latest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": HEARTBEAT_MS, "partition.assignment.strategy": self.assignor,
        })
        cooperative = self.assignor == "cooperative-sticky"

        def on_assign(_c, partitions) -> None:
            with self.lock:
                mine = {tp.partition for tp in partitions}
                self.held[i] = (self.held.get(i, set()) | mine) if cooperative else mine
                self._changed()

        def on_revoke(_c, partitions) -> None:
            with self.lock:
                self.held[i] = self.held.get(i, set()) - {tp.partition for tp in partitions}
                self._changed()

        with self.lock:
            self.held[i] = set()
            self._changed()
        began.append(time.perf_counter())
        consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        ready.set()
        try:
            while not stop.is_set():
                consumer.poll(0.02)
        except Exception as e:
            self.errors.append(repr(e))
        finally:
            consumer.close()
            with self.lock:
                self.held.pop(i, None)
                self._changed()

    def wait_covered(self, members: int, timeout: float = 60.0) -> float:
        with self.lock:
            if not self.lock.wait_for(lambda: self.covered_at is not None and len(self.held) == members, timeout):
                raise SystemExit(f"the group {self.group} did not cover the topic with {members} members "
                                 f"within {timeout:.0f}s: {self.held}")
            return self.covered_at

    def close(self) -> None:
        for i in list(self.threads):
            self.remove(i)


def rebalance_rounds(bootstrap: str, assignor: str, rounds: int) -> dict:
    group = Group(bootstrap, f"bench-rebalance-{assignor}", assignor)
    joins: list[float] = []
    leaves: list[float] = []
    try:
        for i in range(MEMBERS - 1):
            group.add(i)
        group.wait_covered(MEMBERS - 1)
        for _ in range(rounds):
            began = group.add(MEMBERS - 1)
            joins.append(group.wait_covered(MEMBERS) - began)
            # the assignment only counts as changed once it covers the topic anew
            began = group.remove(MEMBERS - 1)
            leaves.append(group.wait_covered(MEMBERS - 1) - began)
    finally:
        group.close()
    if group.errors:
        raise SystemExit(f"rebalance {assignor}: {group.errors[0]}")
    return {"assignor": assignor, "join": joins, "leave": leaves}


# -- the run ---------------------------------------------------------------------------------------


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = admin.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
        if t is not None and t.error is None and len(t.partitions) == PARTITIONS \
                and all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise SystemExit(f"topic {TOPIC} has no leader for every partition")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per commit phase")
    parser.add_argument("--rounds", type=int, default=5, help="join and leave rounds per assignor")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kraftpy-bench-groups-"))
    dev = DevProcess(work / "dev")
    commits: list[dict] = []
    produces: list[dict] = []
    try:
        with dev:
            create_topic(dev.bootstrap)
            for n in COMMITTERS:
                commits.append(trio.run(run_phase, dev.port, n, args.seconds, "commit"))
                produces.append(trio.run(run_phase, dev.port, n, args.seconds, "produce"))
            rebalances = [rebalance_rounds(dev.bootstrap, assignor, args.rounds)
                          for assignor in ("range", "cooperative-sticky")]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("## groups\n")
    print("The group coordinator of one `kraftpy dev` process (controller and broker in one process, "
          "`__consumer_offsets` with 50 partitions and one replica, no fsync per write), its clients in the "
          "benchmark's process on the same cores.\n")
    print(f"### Offset commits\n\nEach committer has its own connection and its own group and sends "
          f"OffsetCommit v8 for one partition, one after another, for {args.seconds:.0f} s: simple commits "
          "(generation -1, no member id, as an assign() consumer sends them); each is answered once its "
          "record is committed in `__consumer_offsets`. The produce columns are the same clients sending a "
          "Produce of one 100-byte record with acks=all to a data topic in the same run: the append alone.\n")
    print("| committers | commits/s | commit p50 | commit p99 | errors | produces/s (acks=all, 1 record) | "
          "produce p50 | produce p99 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, p in zip(commits, produces, strict=True):
        print(f"| {c['n']} | {c['per_s']:,.0f} | {c['p50_ms']:.2f} ms | {c['p99_ms']:.2f} ms | {c['errors']} | "
              f"{p['per_s']:,.0f} | {p['p50_ms']:.2f} ms | {p['p99_ms']:.2f} ms |")
    print()
    print(f"### Rebalance of a {MEMBERS}-member group\n\n{MEMBERS - 1} confluent-kafka consumers "
          f"(`heartbeat.interval.ms` {HEARTBEAT_MS}, `session.timeout.ms` 6000) subscribed to a "
          f"{PARTITIONS}-partition topic; a {MEMBERS}th subscribes (join: from its `subscribe()` until all "
          f"{MEMBERS} hold a share of the partitions that covers the topic), then closes (leave: from its "
          f"`close()` until the {MEMBERS - 1} cover the topic again); {args.rounds} rounds per assignor. The "
          "members learn of a rebalance from their next heartbeat: up to one heartbeat interval of each "
          "figure is that wait.\n")
    print("| assignor | join median | join max | leave median | leave max |")
    print("|---|---:|---:|---:|---:|")
    for r in rebalances:
        print(f"| {r['assignor']} | {statistics.median(r['join']) * 1000:,.0f} ms | {max(r['join']) * 1000:,.0f} ms | "
              f"{statistics.median(r['leave']) * 1000:,.0f} ms | {max(r['leave']) * 1000:,.0f} ms |")
    print()
    print(f"Run: `python bench/groups.py --seconds {args.seconds:g} --rounds {args.rounds}` on {os.cpu_count()} "
          f"cores, {platform.system()} {platform.release()}, Python {platform.python_version()}.")


if __name__ == "__main__":
    main()
