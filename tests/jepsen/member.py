"""One member of the group workload, as its own process: a confluent-kafka consumer that subscribe()s
to the test topic in the workload's group, consumes, and synchronously commits what it processed.

    python -m tests.jepsen.member --bootstrap H:P --topic jepsen --group G --member m3

It writes what it does to stdout, one JSON object a line, in the history's terms (`type`, `f`,
`records`, `offsets`, `partitions`, `member_id`, `error`) plus `proc` (its own numbering of its
sequential processes: a process whose operation ended `info` is retired) and `at` (a reading of the
system's monotonic clock, comparable across processes); the runner records them. Nothing else goes
to stdout; librdkafka's log goes to stderr.

- A `consume` operation gathers what `poll()` returns for up to `--batch-ms` or `--batch` records.
  Before an assignment changes (inside the rebalance callbacks), the operation in flight is completed
  first, so every record of an operation was delivered while the assignment that operation ends in
  was held.
- After each `consume`, the member commits (synchronously) the offsets after the last record it
  processed of each partition whose processed offset it has not had acknowledged yet (so a refused
  commit is tried again after the next batch); on a revocation it commits what it
  processed of the partitions it gives up, before they go. A lost assignment (the member was
  expelled) is recorded as a `revoke` with `error` `lost` and commits nothing.
- SIGTERM stops it cleanly: it commits, closes the consumer (leaving the group), and exits 0. SIGKILL
  is a crash: the group only learns of it when the session times out.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.jepsen.security import read_client_properties

#: commit errors after which the coordinator certainly did not store the offsets
DEFINITE_COMMIT_FAILURES = {
    "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS", "FENCED_INSTANCE_ID",
    "_ASSIGNMENT_LOST", "_STATE", "_NO_OFFSET", "_INVALID_ARG", "OFFSET_METADATA_TOO_LARGE",
    "INVALID_COMMIT_OFFSET_SIZE", "GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED",
    "UNKNOWN_TOPIC_OR_PART", "INVALID_GROUP_ID",
}


#: librdkafka's debug contexts a member logs by default: "cgrp" (the group's joins, assignments and the
#: committed offsets fetched for them), "topic" (each OffsetFetch answer, each offset reset) and "fetch"
#: (each fetch error), so that a checker's finding can be traced to what the brokers answered
#: (`evidence`); about 30 KB a second for a member.
DEBUG_CONTEXTS = "cgrp,topic,fetch"

#: The lines of librdkafka's debug log that say where a member's position came from.
EVIDENCE = ("OffsetFetchResponse:", "offset reset", "truncation", "Failed to fetch committed", "Start consuming",
            "Fetch failed")


def evidence(log_text: str, members: Iterable[str] | None = None, limit: int = 200) -> list[str]:
    """The lines of a members.log (each line starts with its time and the member's name) that say where a
    member's positions came from, of ``members`` (None: every member), the last ``limit`` of them."""
    wanted = None if members is None else set(members)
    lines = [line for line in log_text.splitlines() if any(e in line for e in EVIDENCE)
             and (wanted is None or _member_of(line) in wanted)]
    return lines[-limit:]


def _member_of(line: str) -> str | None:
    """The member's name in a members.log line: the field after the date and the time."""
    fields = line.split(maxsplit=3)
    return fields[2] if len(fields) > 2 else None


def classify_commit_error(name: str) -> str:
    """`fail` when the commit certainly was not stored, `info` when it may have been."""
    return "fail" if name in DEFINITE_COMMIT_FAILURES else "info"


def decode_value(raw: bytes | None) -> Any:
    if raw is None:
        return None
    text = raw.decode(errors="replace")
    return int(text) if text.isdigit() else text


class Member:
    def __init__(self, config: dict[str, Any], topic: str, *, batch: int, batch_ms: int,
                 out: Any = sys.stdout) -> None:
        self.config = config
        self.topic = topic
        self.batch = batch
        self.batch_ns = batch_ms * 1_000_000
        self.out = out
        self.proc = 0
        self.stopping = False
        self.held: set[int] = set()
        self.processed: dict[int, int] = {}  # partition -> offset after the last record processed
        self.committed: dict[int, int] = {}  # partition -> what this member last had acknowledged
        self.open_since: int | None = None  # the consume operation in flight
        self.records: list[tuple[int, int, Any]] = []
        self.errors: set[str] = set()
        self.consumer: Consumer | None = None

    # recording

    def emit(self, type_: str, f: str, **fields: Any) -> None:
        fields = {k: v for k, v in fields.items() if v is not None}
        self.out.write(json.dumps({"at": time.monotonic_ns(), "type": type_, "f": f, "proc": self.proc,
                                   **fields}, separators=(",", ":")) + "\n")
        self.out.flush()

    def retire(self) -> None:
        self.proc += 1

    def member_id(self) -> str | None:
        try:
            return self.consumer.memberid() if self.consumer is not None else None
        except (KafkaException, RuntimeError):
            return None

    # the consume operation

    def open_consume(self) -> None:
        if self.open_since is None:
            self.open_since = time.monotonic_ns()
            self.emit("invoke", "consume")

    def finish_consume(self) -> list[int]:
        """Completes the consume in flight; its records are now processed. Returns the partitions it
        read."""
        if self.open_since is None:
            return []
        records, self.records = self.records, []
        errors, self.errors = self.errors, set()
        self.open_since = None
        self.emit("ok", "consume", records=[list(r) for r in records],
                  error=",".join(sorted(errors)) or None)
        read = []
        for p, offset, _ in records:
            if p in self.held:
                self.processed[p] = offset + 1
                read.append(p)
        return sorted(set(read))

    # commits

    def commit(self, partitions: list[int]) -> None:
        offsets = [(p, self.processed[p]) for p in sorted(set(partitions))
                   if p in self.held and p in self.processed and self.processed[p] != self.committed.get(p)]
        if not offsets or self.consumer is None:
            return
        self.emit("invoke", "commit", offsets=offsets)
        try:
            result = self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets],
                                          asynchronous=False)
        except KafkaException as e:
            name = e.args[0].name() if e.args and isinstance(e.args[0], KafkaError) else str(e)
            outcome = classify_commit_error(name)
            self.emit(outcome, "commit", offsets=offsets, error=name)
            if outcome == "info":
                self.retire()
            return
        failed = {tp.partition: tp.error.name() for tp in result or () if tp.error is not None}
        acked = [(p, o) for p, o in offsets if p not in failed]
        if not acked:
            outcome = "fail" if all(classify_commit_error(n) == "fail" for n in failed.values()) else "info"
            self.emit(outcome, "commit", offsets=offsets, error=",".join(sorted(set(failed.values()))))
            if outcome == "info":
                self.retire()
            return
        self.emit("ok", "commit", offsets=acked,
                  error=",".join(f"{p}:{n}" for p, n in sorted(failed.items())) or None)
        self.committed.update(acked)

    # rebalance callbacks (run inside poll() and close())

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.finish_consume()
        added = sorted(tp.partition for tp in partitions)
        for p in added:
            self.held.add(p)
            self.processed.pop(p, None)
            self.committed.pop(p, None)
        self.emit("info", "assign", partitions=added, member_id=self.member_id())

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.finish_consume()
        gone = sorted(tp.partition for tp in partitions)
        self.commit(gone)
        self._drop(gone, None)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.finish_consume()
        self._drop(sorted(tp.partition for tp in partitions), "lost")

    def _drop(self, partitions: list[int], error: str | None) -> None:
        for p in partitions:
            self.held.discard(p)
            self.processed.pop(p, None)
            self.committed.pop(p, None)
        self.emit("info", "revoke", partitions=partitions, member_id=self.member_id(), error=error)

    # the loop

    def run(self, make_consumer: Any = Consumer) -> int:
        self.consumer = make_consumer(self.config)
        self.consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke,
                                on_lost=self.on_lost)
        try:
            while not self.stopping:
                self.open_consume()
                msg = self.consumer.poll(0.1)
                if msg is not None:
                    self.open_consume()  # a callback inside poll() completed the one in flight
                    if msg.error() is not None:
                        self.errors.add(msg.error().name())
                    else:
                        self.records.append((msg.partition(), msg.offset(), decode_value(msg.value())))
                if self.open_since is None:
                    continue  # a callback inside poll() completed the batch, and nothing came after
                if len(self.records) >= self.batch or time.monotonic_ns() - self.open_since >= self.batch_ns:
                    self.finish_consume()
                    self.commit(sorted(self.held))  # what was processed and not yet acknowledged
        except (KafkaException, RuntimeError) as e:
            self.open_consume()
            self.emit("info", "consume", error=f"poll: {e}")
            self.open_since = None
            return 3
        read = self.finish_consume()
        self.commit(sorted(set(read) | self.held))
        self.consumer.close()  # on_revoke runs here for what is still held
        if self.held:
            self._drop(sorted(self.held), "closed")
        return 0


def member_config(args: argparse.Namespace, logger: logging.Logger) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": f"jepsen-{args.member}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": max(100, args.session_timeout_ms // 6),
        "partition.assignment.strategy": args.assignor,
        "fetch.wait.max.ms": 200,
        "topic.metadata.refresh.interval.ms": 2000,
        "reconnect.backoff.max.ms": 1000,
        "logger": logger,
    }
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    if args.debug:
        config["debug"] = args.debug
    config.update(read_client_properties(args.client_config))
    return config


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tests.jepsen.member", description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--member", required=True, help="the member's name in the history")
    ap.add_argument("--assignor", default="range", help="partition.assignment.strategy")
    ap.add_argument("--instance-id", default=None, help="group.instance.id (static membership)")
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=200, help="records per consume operation at most")
    ap.add_argument("--batch-ms", type=int, default=500, help="milliseconds per consume operation at most")
    ap.add_argument("--debug", default=DEBUG_CONTEXTS,
                    help="librdkafka's debug contexts, logged to stderr ('' for none): by default what shows where a "
                         "member's position in a partition came from (the committed offset it fetched, a reset)")
    ap.add_argument("--client-config", default=None,
                    help="a .properties file of more librdkafka settings (a secured cluster's SASL_SSL login)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logger = logging.getLogger("tests.jepsen.member")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {args.member} %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if args.debug else logging.INFO)
    logger.propagate = False
    member = Member(member_config(args, logger), args.topic, batch=args.batch, batch_ms=args.batch_ms)

    def stop(_signum: int, _frame: Any) -> None:
        member.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return member.run()


if __name__ == "__main__":
    sys.exit(main())
