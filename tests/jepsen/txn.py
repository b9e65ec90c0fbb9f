"""The transaction workload (Jepsen's Kafka workload shape): transactional producers, read_committed
and read_uncommitted consumers, and a consume-transform-produce process.

- Three topics: `TOPIC-a` and `TOPIC-b`, written by `--producers` transactional producers
  (`tests.jepsen.txn_client producer`, each in its own process under its own `transactional.id`,
  every transaction writing 1 to 4 records to random partitions of both, about one in
  `--abort-every` aborted on purpose), and `TOPIC-c`, written by one consume-transform-produce
  process (`tests.jepsen.txn_client transform`) that reads `TOPIC-a` in its consumer group and
  commits its derived records together with its offsets (send_offsets_to_transaction).
- Every ~`churn_interval` seconds (seeded) one client is stopped, cleanly (SIGTERM) or by SIGKILL
  (its open transaction is then aborted by the coordinator on timeout, or when the replacement,
  under the same transactional.id, calls init_transactions), and a new process takes its place.
- Consumer threads in the runner assign() every partition of the three topics and poll from the
  beginning: two read_committed, one read_uncommitted (for contrast: it sees aborted records). A
  poll is a `txn-poll` operation; a consumer that fails is replaced by a new one (a new process)
  resuming after what it read.
- After healing: the clients are stopped, the consumers too, and a read_committed final read of
  every partition of every topic runs once its last stable offset has reached its high watermark.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from tests.jepsen.group import MemberProcess
from tests.jepsen.history import EVENT_FS, INVOKE, TXN_FINAL_READ, TXN_POLL, Recorder
from tests.jepsen.txn_client import decode_value

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


def txn_topics(prefix: str) -> tuple[str, str, str]:
    """The producers' two topics and the transform's output."""
    return f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"


@attrs.define
class Slot:
    role: str  # producer | transform
    txn_id: str
    current: MemberProcess | None = None


class TxnWorkload:
    def __init__(self, *, bootstrap: str, recorder: Recorder, topic: str, partitions: int, seed: int,
                 producers: int, read_committed: int, churn_interval: float, abort_every: int,
                 transaction_timeout_ms: int, op_timeout: float, out: Path, next_process: Callable[[], int],
                 client_config: Callable[..., dict], log: Callable[[str], Any],
                 python: str = sys.executable, client_properties: Path | None = None) -> None:
        self.bootstrap = bootstrap
        self.client_properties = client_properties
        self.recorder = recorder
        self.topics = txn_topics(topic)
        self.partitions = partitions
        self.seed = seed
        self.churn_interval = churn_interval
        self.abort_every = abort_every
        self.transaction_timeout_ms = transaction_timeout_ms
        self.op_timeout = op_timeout
        self.out = out
        self.next_process = next_process
        self.client_config = client_config
        self.log = log
        self.python = python
        self.group = f"jepsen-transform-{seed}"
        self.slots = [Slot("producer", f"jepsen-txn-{seed}-{i}") for i in range(producers)]
        self.slots.append(Slot("transform", f"jepsen-transform-{seed}"))
        self.readers = [READ_COMMITTED] * read_committed + [READ_UNCOMMITTED]
        self.errors: list[str] = []
        self.all: list[MemberProcess] = []
        self.stopping = False
        self.replacements = {"term": 0, "kill": 0}
        self._names = 0
        self._lock = threading.Lock()
        self._stop_churn = threading.Event()
        self._stop_readers = threading.Event()
        self._threads: list[threading.Thread] = []
        (out / "logs").mkdir(parents=True, exist_ok=True)

    # the client processes

    def command(self, slot: Slot, name: str) -> list[str]:
        a, b, c = self.topics
        cmd = [self.python, "-m", "tests.jepsen.txn_client", slot.role, "--bootstrap", self.bootstrap,
               "--name", name, "--txn-id", slot.txn_id, "--seed", str(self.seed),
               "--partitions", str(self.partitions), "--abort-every", str(self.abort_every),
               "--transaction-timeout-ms", str(self.transaction_timeout_ms), "--op-timeout", str(self.op_timeout)]
        if self.client_properties is not None:
            cmd += ["--client-config", str(self.client_properties)]
        if slot.role == "producer":
            return [*cmd, "--topics", f"{a},{b}"]
        return [*cmd, "--source", a, "--sink", c, "--group", self.group]

    def spawn(self, index: int) -> MemberProcess:
        slot = self.slots[index]
        with self._lock:
            self._names += 1
            name = f"{'p' if slot.role == 'producer' else 't'}{self._names}"
        logfile = open(self.out / "logs" / "txn-clients.log", "ab")  # noqa: SIM115 - closed below
        try:
            popen = subprocess.Popen(self.command(slot, name), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=logfile, cwd=Path(__file__).resolve().parents[2], start_new_session=True)
        finally:
            logfile.close()
        client = MemberProcess(name=name, slot=index, popen=popen)
        client.reader = threading.Thread(target=self._pump, args=(client,), name=f"txn-{name}", daemon=True)
        with self._lock:
            slot.current = client
            self.all.append(client)
        client.reader.start()
        return client

    def _pump(self, client: MemberProcess) -> None:
        assert client.popen.stdout is not None
        for raw in client.popen.stdout:
            try:
                self._record(client, json.loads(raw))
            except Exception as e:
                self.errors.append(f"{client.name}: bad line {raw[:200]!r}: {e!r}")
        code = client.popen.wait()
        if client.ended_by is None and not self.stopping:
            self.errors.append(f"txn client {client.name} exited on its own (exit {code}); see logs/txn-clients.log")
            self.log(self.errors[-1])
            with self._lock:
                replace = self.slots[client.slot].current is client
            if replace:
                self.spawn(client.slot)

    def _record(self, client: MemberProcess, line: dict[str, Any]) -> None:
        type_, f, local, at = line.pop("type"), line.pop("f"), line.pop("proc"), line.pop("at")
        if local not in client.processes:
            client.processes[local] = self.next_process()
        process = client.processes[local]
        if f in EVENT_FS:
            self.recorder.event(f, process, at=at, member=client.name, **line)
        elif type_ == INVOKE:
            self.recorder.invoke(f, process, at=at, member=client.name, **line)
        else:
            self.recorder.complete(type_, f, process, at=at, member=client.name, **line)

    def end(self, client: MemberProcess, how: str, timeout: float = 30.0) -> None:
        client.ended_by = how
        p = client.popen
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.log(f"txn client {client.name} did not stop within {timeout:.0f}s of SIGTERM; killed")
                p.kill()
                p.wait()
        if client.reader is not None:
            client.reader.join(timeout=10)

    def _churn(self) -> None:
        rnd = random.Random(f"kraftpy-jepsen-txn-{self.seed}")
        while not self._stop_churn.wait(self.churn_interval * rnd.uniform(0.6, 1.4)):
            index = rnd.randrange(len(self.slots))
            how = rnd.choice(["term", "kill", "kill"])
            client = self.slots[index].current
            if client is None:
                continue
            self.end(client, how)
            self.replacements[how] += 1
            new = self.spawn(index)
            self.log(f"txn client {client.name} {'stopped' if how == 'term' else 'killed'}; {new.name} "
                     f"takes {self.slots[index].txn_id}")

    # the consumers

    def consumer_config(self, isolation: str, process: int) -> dict[str, Any]:
        return self.client_config(**{
            "group.id": f"jepsen-txn-reader-{self.seed}-{process}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 2000,
            "reconnect.backoff.max.ms": 1000,
        })

    def _consume(self, name: str, isolation: str) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        positions = {(t, p): OFFSET_BEGINNING for t in self.topics for p in range(self.partitions)}
        while not self._stop_readers.is_set():
            process = self.next_process()
            consumer = Consumer(self.consumer_config(isolation, process))
            consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
            try:
                while not self._stop_readers.is_set():
                    self.recorder.invoke(TXN_POLL, process, member=name, isolation=isolation)
                    try:
                        msgs = consumer.consume(num_messages=500, timeout=0.5)
                    except Exception as e:
                        self.recorder.info(TXN_POLL, process, member=name, isolation=isolation,
                                           error=f"consume: {e}")
                        break
                    reads = []
                    error = None
                    for m in msgs:
                        if m.error() is not None:
                            error = m.error().name()
                            continue
                        reads.append((m.topic(), m.partition(), m.offset(), decode_value(m.value())))
                        positions[(m.topic(), m.partition())] = m.offset() + 1
                    if error is not None and not reads:
                        self.recorder.info(TXN_POLL, process, member=name, isolation=isolation, error=error)
                        break
                    self.recorder.ok(TXN_POLL, process, member=name, isolation=isolation, reads=reads, error=error)
            finally:
                consumer.close()

    # the run

    def start(self) -> None:
        for index in range(len(self.slots)):
            self.spawn(index)
        workers: list[tuple[Callable[..., None], str, tuple]] = [(self._churn, "txn-churn", ())]
        for i, isolation in enumerate(self.readers):
            name = f"{'rc' if isolation == READ_COMMITTED else 'ru'}{i}"
            workers.append((self._consume, f"txn-reader-{name}", (name, isolation)))
        for target, name, args in workers:
            t = threading.Thread(target=self._guard, args=(target, *args), name=name, daemon=True)
            self._threads.append(t)
            t.start()

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:
            self.errors.append(f"{threading.current_thread().name}: {e!r}")
            self.log(f"txn worker failed: {e!r}")

    def stop_churn(self) -> None:
        self._stop_churn.set()
        for t in self._threads:
            if t.name == "txn-churn":
                t.join(timeout=60)

    def stop(self) -> None:
        """Stops the clients (SIGTERM: each finishes its transaction) and the consumers."""
        self.stop_churn()
        self.stopping = True
        threads = [threading.Thread(target=self.end, args=(s.current, "term")) for s in self.slots if s.current]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._stop_readers.set()
        for t in self._threads:
            t.join(timeout=self.op_timeout + 10)
            if t.is_alive():
                self.errors.append(f"{t.name} did not stop")

    def kill_all(self) -> None:
        self.stopping = True
        self._stop_readers.set()
        for c in self.all:
            if c.popen.poll() is None:
                c.ended_by = c.ended_by or "kill"
                c.popen.kill()
                c.popen.wait()

    def final_read(self, timeout: float) -> None:
        """Reads every partition of every topic from the beginning with read_committed, once no
        transaction is open there any more (its last stable offset is its high watermark), up to
        the high watermark."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        deadline = time.monotonic() + timeout
        for topic in self.topics:
            for p in range(self.partitions):
                process = self.next_process()
                self.recorder.invoke(TXN_FINAL_READ, process, key=topic, partition=p, isolation=READ_COMMITTED)
                rc = Consumer(self.consumer_config(READ_COMMITTED, process))
                ru = Consumer(self.consumer_config(READ_UNCOMMITTED, process))
                tp = TopicPartition(topic, p)
                reads: list[tuple[str, int, int, Any]] = []
                try:
                    stable = high = None
                    while time.monotonic() < deadline:
                        with contextlib.suppress(Exception):
                            high = ru.get_watermark_offsets(tp, timeout=3)[1]
                            stable = rc.get_watermark_offsets(tp, timeout=3)[1]
                            if stable == high:
                                break
                        time.sleep(0.5)  # an open transaction (its producer was killed) awaits its timeout
                    if high is None or stable != high:
                        self.recorder.info(TXN_FINAL_READ, process, key=topic, partition=p,
                                           error=f"last stable offset {stable} below high watermark {high}")
                        continue
                    rc.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
                    position = 0
                    while position < high and time.monotonic() < deadline:
                        for m in rc.consume(num_messages=500, timeout=0.5):
                            if m.error() is None:
                                reads.append((m.topic(), m.partition(), m.offset(), decode_value(m.value())))
                        with contextlib.suppress(Exception):
                            at = rc.position([TopicPartition(topic, p)])[0].offset
                            position = max(position, at)
                    error = None if position >= high else f"incomplete: position {position}, high watermark {high}"
                    self.recorder.ok(TXN_FINAL_READ, process, key=topic, partition=p, isolation=READ_COMMITTED,
                                     reads=reads, error=error)
                finally:
                    rc.close()
                    ru.close()
