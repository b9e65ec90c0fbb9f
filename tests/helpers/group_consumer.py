"""A group consumer as its own process, for tests: confluent-kafka, kafka-python or aiokafka.

    python -m tests.helpers.group_consumer --client confluent --bootstrap 127.0.0.1:9092 \\
        --topic events --group readers [--instance-id a] [--assignor cooperative-sticky] \\
        [--group-protocol consumer]

``--group-protocol consumer`` (confluent only) joins with KIP-848's protocol: the broker then sets the
session and heartbeat interval, and ``--assignor`` names its server-side assignor (uniform, range).

It subscribes to the topic in the group, and for every poll that returns records prints them, then
commits the next offsets of what it printed (synchronously) and prints the commit. Rebalances are
printed as they happen. Every line on stdout is one JSON object:

    {"event": "assigned", "added": [0, 3], "partitions": [0, 1, 3]}
    {"event": "revoked", "removed": [1], "partitions": [0, 3]}
    {"event": "records", "records": [[partition, offset, value], ...]}
    {"event": "committed", "offsets": {"0": 12}}        # next offset to read, by partition
    {"event": "commit_failed", "error": "..."}
    {"event": "closed"}

SIGTERM closes the consumer as an application would (a dynamic member leaves the group); SIGKILL is
the crash tests want. Values are printed as text (tests produce ASCII values).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from typing import Any

QUIET = {"log_level": 0}


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


class Membership:
    """The partitions this member holds, as rebalance callbacks change them."""

    def __init__(self) -> None:
        self.partitions: set[int] = set()

    def assigned(self, partitions: list[int]) -> None:
        self.partitions |= set(partitions)
        emit("assigned", added=sorted(partitions), partitions=sorted(self.partitions))

    def revoked(self, partitions: list[int]) -> None:
        self.partitions -= set(partitions)
        emit("revoked", removed=sorted(partitions), partitions=sorted(self.partitions))


def run_confluent(args: argparse.Namespace, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    config = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": heartbeat_ms(args), "partition.assignment.strategy": args.assignor
        or "range", "topic.metadata.refresh.interval.ms": 1000, **QUIET,
    }
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    if args.group_protocol == "consumer":
        # KIP-848: the broker sets the session and heartbeat interval and assigns (server assignor).
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            del config[key]
        config["group.protocol"] = "consumer"
        if args.assignor:
            config["group.remote.assignor"] = args.assignor
    consumer = Consumer(config)
    membership = Membership()
    consumer.subscribe([args.topic], on_assign=lambda c, ps: membership.assigned([p.partition for p in ps]),
                       on_revoke=lambda c, ps: membership.revoked([p.partition for p in ps]),
                       on_lost=lambda c, ps: membership.revoked([p.partition for p in ps]))
    try:
        while not stop.is_set():
            messages = consumer.consume(num_messages=500, timeout=0.2)
            records = []
            for msg in messages:
                if msg.error() is None:
                    records.append([msg.partition(), msg.offset(), msg.value().decode()])
            if not records:
                continue
            emit("records", records=records)
            offsets = next_offsets(records)
            try:
                consumer.commit(offsets=[TopicPartition(args.topic, p, o) for p, o in offsets.items()],
                                asynchronous=False)
            except KafkaException as exc:
                emit("commit_failed", error=str(exc))
            else:
                emit("committed", offsets={str(p): o for p, o in offsets.items()})
    finally:
        consumer.close()


def run_kafka_python(args: argparse.Namespace, stop: threading.Event) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import KafkaError

    membership = Membership()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            membership.revoked([tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned):
            membership.assigned([tp.partition for tp in assigned])

    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=args.session_timeout_ms,
                             heartbeat_interval_ms=heartbeat_ms(args),
                             group_instance_id=args.instance_id or None, metadata_max_age_ms=1000)
    consumer.subscribe([args.topic], listener=Listener())
    # Metadata before the first poll. kafka-python (3.0.x) joins the group before it has the topic's
    # metadata, so the first leader assigns nothing and rejoins when the metadata comes; a rejoin that
    # only a metadata change asked for is lost if its JoinGroup/SyncGroup round finishes while no
    # poll() waits on it (the leader's assignment makes need_rejoin() false, so no later poll
    # collects the result): the member never takes its assignment and never heartbeats again, and
    # the coordinator removes it at its session timeout. topics() waits for a metadata response,
    # which gives the group's leader the topic's partitions before it first assigns.
    consumer.topics()
    try:
        while not stop.is_set():
            polled = consumer.poll(timeout_ms=200)
            records = [[tp.partition, r.offset, r.value.decode()] for tp, rs in polled.items() for r in rs]
            if not records:
                continue
            emit("records", records=records)
            offsets = next_offsets(records)
            try:
                consumer.commit({KTopicPartition(args.topic, p): OffsetAndMetadata(o, None, -1)
                                 for p, o in offsets.items()})
            except KafkaError as exc:
                emit("commit_failed", error=repr(exc))
            else:
                emit("committed", offsets={str(p): o for p, o in offsets.items()})
    finally:
        consumer.close()


def run_aiokafka(args: argparse.Namespace, stop: threading.Event) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.errors import KafkaError

    membership = Membership()

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            membership.revoked([tp.partition for tp in revoked])

        async def on_partitions_assigned(self, assigned):
            membership.assigned([tp.partition for tp in assigned])

    async def main() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group, enable_auto_commit=False,
                                    auto_offset_reset="earliest", session_timeout_ms=args.session_timeout_ms,
                                    heartbeat_interval_ms=heartbeat_ms(args),
                                    group_instance_id=args.instance_id or None, metadata_max_age_ms=1000)
        await consumer.start()
        consumer.subscribe([args.topic], listener=Listener())
        try:
            while not stop.is_set():
                polled = await consumer.getmany(timeout_ms=200)
                records = [[tp.partition, r.offset, r.value.decode()] for tp, rs in polled.items() for r in rs]
                if not records:
                    continue
                emit("records", records=records)
                offsets = next_offsets(records)
                try:
                    await consumer.commit({TopicPartition(args.topic, p): o for p, o in offsets.items()})
                except KafkaError as exc:
                    emit("commit_failed", error=repr(exc))
                else:
                    emit("committed", offsets={str(p): o for p, o in offsets.items()})
        finally:
            await consumer.stop()

    asyncio.run(main())


def heartbeat_ms(args: argparse.Namespace) -> int:
    """A fifth of the session, at most a second: rebalances are noticed at the next heartbeat."""
    return max(min(args.session_timeout_ms // 5, 1000), 100)


def next_offsets(records: list[list[Any]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for partition, offset, _ in records:
        out[partition] = max(out.get(partition, 0), offset + 1)
    return out


CLIENTS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=sorted(CLIENTS), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--assignor", default="")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic",
                        help="consumer: KIP-848's group protocol (confluent only)")
    args = parser.parse_args()
    # The client's own account of joins, syncs and errors goes to stderr, which a failing test shows.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    emit("started", client=args.client)
    CLIENTS[args.client](args, stop)
    emit("closed")


if __name__ == "__main__":
    main()
