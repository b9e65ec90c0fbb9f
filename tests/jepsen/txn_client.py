"""The transaction workload's clients, each as its own process: a transactional producer, or the
consume-transform-produce process.

    python -m tests.jepsen.txn_client producer --bootstrap H:P --name p3 --txn-id jepsen-txn-0 \\
        --topics jepsen-a,jepsen-b --partitions 3 --seed 7
    python -m tests.jepsen.txn_client transform --bootstrap H:P --name t2 --txn-id jepsen-transform \\
        --source jepsen-a --sink jepsen-c --group jepsen-transform-7

Like `tests.jepsen.member`, each writes what it does to stdout, one JSON object a line, in the
history's terms (`type`, `f`, `writes`, `reads`, `offsets`, `key`, `txn_id`, `error`) plus `proc`
(its own numbering of its sequential processes: one is retired after an operation of unknown
outcome, after an abort of the transform, and at every change of the transform's assignment) and
`at` (a reading of the system's monotonic clock).

- A producer's `txn` writes 1 to 4 records (values `NAME-SEQ`, unique) to random partitions of the
  topics, then commits, or, one time in `--abort-every`, aborts on purpose. It ends `ok` when
  commit_transaction returned, `fail` when commit was never asked for (a deliberate abort, or an
  error before the commit: the transaction can no longer commit), `info` when commit was asked and
  failed (it may have committed: an abortable error after EndTxn may still end in a commit).
  The writes carry the offsets the delivery reports named.
- The transform polls a batch of read_committed records of the source topic in its consumer group,
  then in one transaction writes `c:VALUE` for each to the same partition of the sink topic and
  sends the offsets after the batch with send_offsets_to_transaction; the `txn` op's `reads` are the
  batch, `key` is the source topic, `offsets` the sent `[partition, offset]` pairs. After an abort
  (deliberate, or an error) it seeks back to the group's committed offsets.
- SIGTERM stops either cleanly after the transaction in flight; SIGKILL is a crash (the coordinator
  aborts its open transaction on timeout, or when the next process with the same transactional.id
  calls init_transactions).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.jepsen.security import read_client_properties
from tests.jepsen.txn_checker import derived_value


def error_name(e: BaseException) -> str:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return e.args[0].name()
    return str(e) or type(e).__name__


def is_retriable(e: BaseException) -> bool:
    return isinstance(e, KafkaException) and bool(e.args) and isinstance(e.args[0], KafkaError) \
        and e.args[0].retriable()


def decode_value(raw: bytes | None) -> Any:
    if raw is None:
        return None
    text = raw.decode(errors="replace")
    return int(text) if text.isdigit() else text


class Client:
    def __init__(self, args: argparse.Namespace, logger: logging.Logger, out: Any = sys.stdout) -> None:
        self.args = args
        self.logger = logger
        self.out = out
        self.proc = 0
        self.stopping = False
        self.producer: Producer | None = None

    def emit(self, type_: str, f: str, **fields: Any) -> None:
        fields = {k: v for k, v in fields.items() if v is not None}
        self.out.write(json.dumps({"at": time.monotonic_ns(), "type": type_, "f": f, "proc": self.proc,
                                   **fields}, separators=(",", ":")) + "\n")
        self.out.flush()

    def retire(self) -> None:
        self.proc += 1

    def producer_config(self) -> dict[str, Any]:
        a = self.args
        return {
            **read_client_properties(a.client_config),
            "bootstrap.servers": a.bootstrap,
            "client.id": f"jepsen-{a.name}",
            "transactional.id": a.txn_id,
            "transaction.timeout.ms": a.transaction_timeout_ms,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": min(int(a.op_timeout * 1000), a.transaction_timeout_ms),  # librdkafka's rule
            "request.timeout.ms": max(1000, int(a.op_timeout * 500)),
            "topic.metadata.refresh.interval.ms": 2000,
            "reconnect.backoff.max.ms": 1000,
            "logger": self.logger,
            **self.debug_config(),
        }

    @staticmethod
    def debug_config() -> dict[str, Any]:
        """librdkafka's debug contexts from JEPSEN_TXN_CLIENT_DEBUG (e.g. ``eos,protocol,msg``), to see
        each request and answer in logs/txn-clients.log."""
        contexts = os.environ.get("JEPSEN_TXN_CLIENT_DEBUG", "")
        return {"debug": contexts} if contexts else {}

    def fresh_producer(self) -> Producer:
        """A new producer under the transactional id; init_transactions fences the one before (and
        aborts its open transaction). Asked again until it works or the client is stopped."""
        if self.producer is not None:
            with contextlib.suppress(KafkaException):  # a fenced or failed producer raises its fatal error
                self.producer.flush(0)
        while not self.stopping:
            producer = Producer(self.producer_config())
            try:
                producer.init_transactions(self.args.op_timeout)
                self.producer = producer
                return producer
            except KafkaException as e:
                self.logger.info(f"init_transactions: {error_name(e)}; asking again")
                time.sleep(0.5)  # a coordinator being elected or loading: ask again soon
        raise SystemExit(0)

    def run_txn(self, producer: Producer, sends: list[tuple[str, int, Any]], *, deliberate_abort: bool,
                before_commit: Any = None, **fields: Any) -> tuple[str, bool]:
        """One transaction: begin, send, (send offsets), commit or abort; records its completion
        and returns its type, and whether the producer may begin the next one as it is."""
        reports: dict[Any, tuple[str, int, int | None, str | None]] = {}

        def on_delivery(err: Any, msg: Any) -> None:
            value = decode_value(msg.value())
            reports[value] = (msg.topic(), msg.partition(), None if err else msg.offset(),
                              err.name() if err else None)

        def writes() -> list[list[Any]]:
            out = []
            for topic, partition, value in sends:
                r = reports.get(value)
                out.append([topic, partition, r[2] if r else None, value])
            return out

        commit_asked = False
        try:
            producer.begin_transaction()
            for topic, partition, value in sends:
                producer.produce(topic, value=str(value).encode(), key=f"k{partition}".encode(),
                                 partition=partition, on_delivery=on_delivery)
            if before_commit is not None:
                before_commit(producer)
            if deliberate_abort:
                producer.flush(self.args.op_timeout)
                producer.abort_transaction(self.args.op_timeout)
                self.emit("fail", "txn", writes=writes(), error="deliberate abort", **fields)
                return "fail", True
            if producer.flush(self.args.op_timeout) > 0:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "flush before commit timed out"))
            failed = sorted({r[3] for r in reports.values() if r[3]})
            if failed:
                raise KafkaException(KafkaError(KafkaError._BAD_MSG, f"delivery failed: {','.join(failed)}"))
            commit_asked = True
            deadline = time.monotonic() + self.args.op_timeout * 2
            while True:
                try:
                    producer.commit_transaction(self.args.op_timeout)
                    break
                except KafkaException as e:
                    if not is_retriable(e) or time.monotonic() > deadline:
                        raise
            self.emit("ok", "txn", writes=writes(), **fields)
            return "ok", True
        except (KafkaException, BufferError) as e:
            name = error_name(e)
            if commit_asked:
                self.emit("info", "txn", writes=writes(), error=f"commit: {name}", **fields)
                self.retire()
                return "info", False
            self.emit("fail", "txn", writes=writes(), error=name, **fields)
            return "fail", False

    def abort_or_replace(self, producer: Producer) -> Producer:
        """After a failed transaction: abort it when the producer can, else a new producer.

        An abort can fail fatally where the coordinator did nothing wrong: librdkafka sends
        EndTxn(abort) once it has sent an AddPartitionsToTxn, even when every one failed (the
        coordinator unavailable during a kill), and the coordinator, which never recorded the
        transaction, answers INVALID_TXN_STATE as Kafka's does (Java's producer sends no EndTxn
        then). A fatal producer is replaced, as every client must: the new one's
        init_transactions fences the old epoch and aborts whatever it left open."""
        try:
            producer.abort_transaction(self.args.op_timeout)
            return producer
        except KafkaException as e:
            fatal = bool(e.args) and isinstance(e.args[0], KafkaError) and e.args[0].fatal()
            self.logger.info(f"abort_transaction: {error_name(e)}{' (fatal)' if fatal else ''}; a new producer")
            return self.fresh_producer()

    # the producer

    def run_producer(self) -> int:
        a = self.args
        rnd = random.Random(f"{a.seed}-{a.name}")
        topics = a.topics.split(",")
        producer = self.fresh_producer()
        seq = 0
        while not self.stopping:
            sends = []
            for _ in range(rnd.randint(1, 4)):
                sends.append((rnd.choice(topics), rnd.randrange(a.partitions), f"{a.name}-{seq}"))
                seq += 1
            abort = a.abort_every > 0 and rnd.randrange(a.abort_every) == 0
            fields = {"txn_id": a.txn_id}
            self.emit("invoke", "txn", writes=[[t, p, None, v] for t, p, v in sends], **fields)
            outcome, clean = self.run_txn(producer, sends, deliberate_abort=abort, **fields)
            if not clean:
                producer = self.abort_or_replace(producer) if outcome == "fail" else self.fresh_producer()
        return 0

    # the transform

    def consumer_config(self) -> dict[str, Any]:
        a = self.args
        return {
            **read_client_properties(a.client_config),
            "bootstrap.servers": a.bootstrap,
            "client.id": f"jepsen-{a.name}",
            "group.id": a.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "fetch.wait.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 2000,
            "reconnect.backoff.max.ms": 1000,
            "logger": self.logger,
        }

    def run_transform(self) -> int:
        a = self.args
        rnd = random.Random(f"{a.seed}-{a.name}")
        consumer = Consumer(self.consumer_config())

        def on_assign(_c: Consumer, parts: list[TopicPartition]) -> None:
            self.retire()
            self.emit("info", "assign", partitions=sorted(tp.partition for tp in parts))

        def on_revoke(_c: Consumer, parts: list[TopicPartition]) -> None:
            self.retire()
            self.emit("info", "revoke", partitions=sorted(tp.partition for tp in parts))

        consumer.subscribe([a.source], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        producer = self.fresh_producer()
        try:
            while not self.stopping:
                batch = []
                deadline = time.monotonic() + a.batch_ms / 1000
                while len(batch) < a.batch and time.monotonic() < deadline and not self.stopping:
                    for m in consumer.consume(num_messages=a.batch - len(batch), timeout=0.1):
                        if m.error() is None:
                            batch.append(m)
                if not batch:
                    continue
                reads = [[m.topic(), m.partition(), m.offset(), decode_value(m.value())] for m in batch]
                after: dict[int, int] = {}
                for m in batch:
                    after[m.partition()] = max(after.get(m.partition(), 0), m.offset() + 1)
                offsets = sorted(after.items())
                sends = [(a.sink, p, derived_value(v)) for _, p, _, v in reads]
                abort = a.abort_every > 0 and rnd.randrange(a.abort_every) == 0
                fields = {"txn_id": a.txn_id, "key": a.source, "offsets": offsets}
                self.emit("invoke", "txn", writes=[[t, p, None, v] for t, p, v in sends], **fields)

                def send_offsets(prod: Producer, offsets: list[tuple[int, int]] = offsets) -> None:
                    prod.send_offsets_to_transaction([TopicPartition(a.source, p, o) for p, o in offsets],
                                                     consumer.consumer_group_metadata(), a.op_timeout)

                outcome, clean = self.run_txn(producer, sends, deliberate_abort=abort, before_commit=send_offsets,
                                              reads=reads, **fields)
                if not clean:
                    producer = self.abort_or_replace(producer) if outcome == "fail" else self.fresh_producer()
                if outcome != "ok":
                    self.rewind(consumer)
        finally:
            consumer.close()
        return 0

    def rewind(self, consumer: Consumer) -> None:
        """Back to the group's committed offsets (what the aborted transaction read is read again)."""
        self.retire()
        assignment = consumer.assignment()
        if not assignment:
            return
        # Asked until the group answers for every partition. Only a partition the group holds no offset for
        # starts from the beginning (auto.offset.reset): a failed or timed-out answer is no such word (the
        # group answers UNSTABLE_OFFSET_COMMIT while an unfinished transaction holds offsets of it, until that
        # ends), and reading from the beginning then read again what committed transactions had consumed.
        while True:
            try:
                committed = consumer.committed(assignment, timeout=self.args.op_timeout)
            except KafkaException as e:
                failed = error_name(e)
            else:
                errors = [tp for tp in committed if tp.error is not None]
                if not errors:
                    break
                failed = ", ".join(f"partition {tp.partition}: {tp.error.name()}" for tp in errors)
            if self.stopping:
                return
            self.logger.info(f"committed: {failed}; asked again")
            time.sleep(0.1)  # the client's back-off between two asks
        for tp in committed:
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else -2))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tests.jepsen.txn_client", description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=("producer", "transform"))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--name", required=True, help="the client's name in the history")
    ap.add_argument("--txn-id", required=True, help="transactional.id")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--topics", default="", help="producer: the topics it writes, comma-separated")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--source", default="", help="transform: the topic it reads")
    ap.add_argument("--sink", default="", help="transform: the topic it writes")
    ap.add_argument("--group", default="", help="transform: its consumer group")
    ap.add_argument("--abort-every", type=int, default=5, help="about one transaction in N aborted on purpose")
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--batch-ms", type=int, default=300)
    ap.add_argument("--transaction-timeout-ms", type=int, default=10000)
    ap.add_argument("--op-timeout", type=float, default=10.0)
    ap.add_argument("--client-config", default=None,
                    help="a .properties file of more librdkafka settings (a secured cluster's SASL_SSL login)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logger = logging.getLogger("tests.jepsen.txn_client")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {args.name} %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if Client.debug_config() else logging.INFO)
    logger.propagate = False
    client = Client(args, logger)

    def stop(_signum: int, _frame: Any) -> None:
        client.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return client.run_producer() if args.role == "producer" else client.run_transform()


if __name__ == "__main__":
    sys.exit(main())
