"""`kraftpy perf produce | consume`: load generators in the spirit of Kafka's perf-test tools.

Both drive librdkafka (confluent-kafka), so they measure the cluster as an ordinary client sees it:

* ``produce`` sends ``--num-records`` records of ``--record-size`` bytes, optionally throttled to
  ``--throughput`` records/s, and takes each record's latency from its delivery report (librdkafka's
  own clock, from ``produce()`` to the report being served);
* ``consume`` reads ``--messages`` records and reports records/s, MB/s and the end-to-end latency
  of each record: the time it reached this tool minus its CreateTime timestamp, which is the produce
  to consume latency when a producer runs at the same time (and the record's age otherwise).

The consumer assigns partitions (no group) and sets librdkafka's fetch.queue.backoff.ms to 10 ms
(1 s by default, which stalls a consumer faster than 100,000 records/s); ``--consumer-props`` wins.
MB is 10^6 bytes. `run_produce` and `run_consume` are the engine, importable by benchmarks; the
typer commands only parse options, show a progress bar on a terminal and print the results.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
import uuid
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

app = typer.Typer(help="Measure produce and consume throughput and latency.", no_args_is_help=True)

MB = 1_000_000
ACKS = ("all", "-1", "0", "1")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: How many records a consume call asks for at most: small enough that a batch fills at once, so the
#: receive time stamped on the batch is within a fraction of a millisecond of each record's.
CONSUME_CHUNK = 500
#: How long one consume call waits at most; the idle ``timeout`` is counted over several calls.
CONSUME_POLL_S = 0.05
PROGRESS_EVERY = 2000

ProgressCallback = Callable[[int], None]


class PerfError(Exception):
    """A problem that stops a run before it measures anything: bad settings (exit 2), an unknown topic or
    a record the client refuses (exit 1), no broker answering (exit 3) — the admin commands' exit codes."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# -- statistics ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyStats:
    """Latencies in milliseconds; every field is 0.0 when there were no samples."""

    count: int = 0
    avg_ms: float = 0.0
    min_ms: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    p999_ms: float = 0.0
    max_ms: float = 0.0


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of an ascending sequence (what Kafka's perf tool reports)."""
    if not ordered:
        return 0.0
    rank = math.ceil(fraction * len(ordered))
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def latency_stats(samples: Sequence[float]) -> LatencyStats:
    if not samples:
        return LatencyStats()
    ordered = sorted(samples)
    return LatencyStats(
        count=len(ordered),
        avg_ms=math.fsum(ordered) / len(ordered),
        min_ms=ordered[0],
        p50_ms=percentile(ordered, 0.50),
        p99_ms=percentile(ordered, 0.99),
        p999_ms=percentile(ordered, 0.999),
        max_ms=ordered[-1],
    )


class Throttler:
    """Holds a sender to ``target`` records/s on average since ``start`` (a negative target: no limit).

    ``wait(sent)`` sleeps until ``sent`` records are due, so bursts are smoothed to the rate rather
    than allowed to catch up all at once after a stall longer than ``max_debt_s``.
    """

    def __init__(self, target: float, *, clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep, max_debt_s: float = 1.0) -> None:
        self.target = target
        self.clock = clock
        self.sleep = sleep
        self.max_debt_s = max_debt_s
        self.start = clock()

    @property
    def enabled(self) -> bool:
        return self.target > 0

    def wait(self, sent: int) -> None:
        if self.target <= 0:
            return
        due = self.start + sent / self.target
        now = self.clock()
        if due > now:
            self.sleep(due - now)
        elif now - due > self.max_debt_s:
            # Far behind (a stall): forget the debt instead of bursting to repay it.
            self.start = now - sent / self.target


def parse_props(items: Sequence[str] | None, option: str) -> dict[str, str]:
    """``["k=v", ...]`` → ``{"k": "v"}``; a malformed item raises PerfError naming the option."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PerfError(f"{option}={item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def parse_partitions(text: str | None) -> list[int] | None:
    if text is None or not text.strip():
        return None
    try:
        parts = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise PerfError(f"--partitions={text!r}: expected comma-separated partition numbers") from None
    if not parts or parts[0] < 0:
        raise PerfError(f"--partitions={text!r}: expected partition numbers of at least 0")
    return parts


class _ClientErrors:
    """librdkafka's error callback: keeps the first error instead of its log lines on stderr."""

    def __init__(self) -> None:
        self.first: str | None = None

    def __call__(self, err: Any) -> None:
        if self.first is None:
            self.first = str(err)


def _quiet(config: dict[str, Any], errors: _ClientErrors) -> dict[str, Any]:
    return {"log_level": 0, "error_cb": errors, **config}


def _check_reachable(client: Any, bootstrap: str, errors: _ClientErrors, timeout_s: float) -> None:
    """Fail at once, with the reason, when no broker answers a metadata request."""
    from confluent_kafka import KafkaException

    try:
        client.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise PerfError(f"no broker answered at {bootstrap} within {timeout_s:g}s: "
                        f"{errors.first or exc}", exit_code=3) from None


# -- produce ---------------------------------------------------------------------------------------


@dataclass
class ProduceSettings:
    bootstrap_servers: str
    topic: str
    num_records: int
    record_size: int = 100
    throughput: float = -1
    acks: str = "all"
    compression: str = "none"
    batch_size: int | None = None
    linger_ms: float | None = None
    props: dict[str, str] = field(default_factory=dict)
    #: How long to wait for outstanding delivery reports once every record is handed over.
    flush_timeout_s: float = 300.0
    #: How long the first metadata request may take before the run fails.
    connect_timeout_s: float = 10.0

    def validate(self) -> None:
        if self.num_records < 1:
            raise PerfError(f"--num-records={self.num_records}: needs at least 1")
        if self.record_size < 0:
            raise PerfError(f"--record-size={self.record_size}: cannot be negative")
        if self.acks not in ACKS:
            raise PerfError(f"--acks={self.acks}: not one of {', '.join(ACKS)}")
        if self.compression not in CODECS:
            raise PerfError(f"--compression={self.compression}: not one of {', '.join(CODECS)}")
        if self.batch_size is not None and self.batch_size < 1:
            raise PerfError(f"--batch-size={self.batch_size}: needs at least 1")
        if self.linger_ms is not None and self.linger_ms < 0:
            raise PerfError(f"--linger-ms={self.linger_ms}: cannot be negative")

    def client_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "acks": self.acks,
            "compression.type": self.compression,
        }
        if self.batch_size is not None:
            config["batch.size"] = self.batch_size
        if self.linger_ms is not None:
            config["linger.ms"] = self.linger_ms
        config.update(self.props)
        return config


@dataclass
class ProduceResult:
    records: int
    errors: int
    bytes: int
    elapsed_s: float
    records_per_sec: float
    mb_per_sec: float
    latency: LatencyStats
    first_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "produce", **asdict(self)}

    def summary(self) -> str:
        lat = self.latency
        lines = [
            f"{self.records} records sent, {self.records_per_sec:.1f} records/sec "
            f"({self.mb_per_sec:.2f} MB/sec) in {self.elapsed_s:.3f} s",
            f"latency ms: avg {lat.avg_ms:.2f}, p50 {lat.p50_ms:.2f}, p99 {lat.p99_ms:.2f}, "
            f"p99.9 {lat.p999_ms:.2f}, max {lat.max_ms:.2f}",
        ]
        if self.errors:
            lines.append(f"{self.errors} records failed; first error: {self.first_error}")
        return "\n".join(lines)


def make_payload(size: int, seed: int = 0) -> bytes:
    """Random upper-case letters, like Kafka's producer perf test: compressible, but not trivially."""
    rng = random.Random(seed)
    return bytes(rng.choices(range(65, 91), k=size))


class _Deliveries:
    """The delivery-report callback: counts, bytes, and one latency sample per acknowledged record."""

    def __init__(self) -> None:
        self.ok = 0
        self.errors = 0
        self.bytes = 0
        self.first_error: str | None = None
        self.latencies_ms = array("d")

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors += 1
            if self.first_error is None:
                self.first_error = str(err)
            return
        self.ok += 1
        self.bytes += len(msg)
        latency = msg.latency()
        if latency is not None and latency >= 0:
            self.latencies_ms.append(latency * 1000.0)

    @property
    def done(self) -> int:
        return self.ok + self.errors


def run_produce(settings: ProduceSettings, on_progress: ProgressCallback | None = None) -> ProduceResult:
    """Send the records and wait for every delivery report; blocking (run it in a thread from trio)."""
    from confluent_kafka import KafkaException, Producer

    settings.validate()
    client_errors = _ClientErrors()
    try:
        producer = Producer(_quiet(settings.client_config(), client_errors))
    except KafkaException as exc:
        raise PerfError(f"producer configuration: {exc}") from None
    _check_reachable(producer, settings.bootstrap_servers, client_errors, settings.connect_timeout_s)
    payload = make_payload(settings.record_size)
    reports = _Deliveries()
    topic = settings.topic
    produce = producer.produce
    poll = producer.poll
    throttler = Throttler(settings.throughput)
    throttled = throttler.enabled
    start = time.perf_counter()
    throttler.start = start
    for sent in range(settings.num_records):
        while True:
            try:
                produce(topic, payload, on_delivery=reports)
                break
            except BufferError:  # the local queue is full: serve delivery reports until there is room
                poll(0.005)
            except KafkaException as exc:  # refused before sending (a record over message.max.bytes)
                producer.flush(settings.flush_timeout_s)
                err = exc.args[0]
                raise PerfError(f"topic {topic}: {err.name()}: {err.str()}", exit_code=1) from None
        poll(0)
        if throttled:
            throttler.wait(sent + 1)
        if on_progress is not None and sent % PROGRESS_EVERY == 0:
            on_progress(reports.done)
    deadline = time.monotonic() + settings.flush_timeout_s
    while producer.flush(0.2) > 0:
        if on_progress is not None:
            on_progress(reports.done)
        if time.monotonic() > deadline:
            break
    elapsed = time.perf_counter() - start
    if on_progress is not None:
        on_progress(reports.done)
    undelivered = settings.num_records - reports.done
    if undelivered and reports.first_error is None:
        reports.first_error = (f"{undelivered} records without a delivery report "
                               f"after {settings.flush_timeout_s}s")
    return ProduceResult(
        records=reports.ok,
        errors=reports.errors + undelivered,
        bytes=reports.bytes,
        elapsed_s=elapsed,
        records_per_sec=reports.ok / elapsed if elapsed > 0 else 0.0,
        mb_per_sec=reports.bytes / MB / elapsed if elapsed > 0 else 0.0,
        latency=latency_stats(reports.latencies_ms),
        first_error=reports.first_error,
    )


# -- consume ---------------------------------------------------------------------------------------


@dataclass
class ConsumeSettings:
    bootstrap_servers: str
    topic: str
    messages: int
    from_beginning: bool = False
    partitions: list[int] | None = None
    #: Give up when no record arrived for this long.
    timeout_ms: int = 10_000
    props: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if self.messages < 1:
            raise PerfError(f"--messages={self.messages}: needs at least 1")
        if self.timeout_ms < 1:
            raise PerfError(f"--timeout={self.timeout_ms}: needs at least 1 ms")

    def client_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            # The partitions are assigned, not subscribed to: no group is joined and nothing committed.
            "group.id": f"kraftpy-perf-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if self.from_beginning else "latest",
        }
        if _librdkafka_version() >= (2, 4):
            # When its local queue is full (queued.min.messages), librdkafka waits this long before the
            # next fetch: 1 s by default, which caps a consumer that drains 100,000 records in less.
            config["fetch.queue.backoff.ms"] = 10
        config.update(self.props)
        return config


@dataclass
class ConsumeResult:
    records: int
    bytes: int
    #: From the start of consumption (after the assignment) to the last record.
    elapsed_s: float
    records_per_sec: float
    mb_per_sec: float
    #: Time until the first record arrived (offset lookup and the first fetch).
    first_record_ms: float
    #: End-to-end latency: receive time minus the record's CreateTime timestamp.
    e2e_latency: LatencyStats
    timed_out: bool = False
    errors: int = 0
    first_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "consume", **asdict(self)}

    def summary(self) -> str:
        lat = self.e2e_latency
        lines = [
            f"{self.records} records consumed, {self.records_per_sec:.1f} records/sec "
            f"({self.mb_per_sec:.2f} MB/sec) in {self.elapsed_s:.3f} s; first record after "
            f"{self.first_record_ms:.1f} ms",
            f"end-to-end latency ms: avg {lat.avg_ms:.2f}, p50 {lat.p50_ms:.2f}, p99 {lat.p99_ms:.2f}, "
            f"p99.9 {lat.p999_ms:.2f}, max {lat.max_ms:.2f}",
        ]
        if self.timed_out:
            lines.append("stopped early: no record arrived within the timeout")
        if self.errors:
            lines.append(f"{self.errors} consume errors; first error: {self.first_error}")
        return "\n".join(lines)


def _librdkafka_version() -> tuple[int, int]:
    from confluent_kafka import libversion

    number = libversion()[1]
    return (number >> 24) & 0xFF, (number >> 16) & 0xFF


def _assignment(consumer: Any, settings: ConsumeSettings) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

    try:
        metadata = consumer.list_topics(settings.topic, timeout=max(settings.timeout_ms / 1000, 1.0))
    except KafkaException as exc:
        raise PerfError(f"metadata for {settings.topic}: {exc}") from None
    topic = metadata.topics.get(settings.topic)
    if topic is None or topic.error is not None or not topic.partitions:
        why = topic.error if topic is not None and topic.error is not None else "no such topic"
        raise PerfError(f"topic {settings.topic}: {why}", exit_code=1)
    known = sorted(topic.partitions)
    wanted = settings.partitions if settings.partitions is not None else known
    missing = [p for p in wanted if p not in topic.partitions]
    if missing:
        raise PerfError(f"topic {settings.topic} has partitions {known}, not {missing}", exit_code=1)
    offset = OFFSET_BEGINNING if settings.from_beginning else OFFSET_END
    return [TopicPartition(settings.topic, p, offset) for p in wanted]


def run_consume(settings: ConsumeSettings, on_progress: ProgressCallback | None = None) -> ConsumeResult:
    """Read until ``messages`` records arrived or none did for ``timeout_ms``; blocking."""
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException

    settings.validate()
    client_errors = _ClientErrors()
    try:
        consumer = Consumer(_quiet(settings.client_config(), client_errors))
    except KafkaException as exc:
        raise PerfError(f"consumer configuration: {exc}") from None
    try:
        _check_reachable(consumer, settings.bootstrap_servers, client_errors,
                         max(settings.timeout_ms / 1000, 1.0))
        consumer.assign(_assignment(consumer, settings))
        latencies = array("d")
        count = nbytes = errors = 0
        first_error: str | None = None
        timed_out = False
        timeout_s = settings.timeout_ms / 1000
        start = time.perf_counter()
        first = last = last_activity = start
        consume = consumer.consume
        while count < settings.messages:
            wanted = min(CONSUME_CHUNK, settings.messages - count)
            batch = consume(num_messages=wanted, timeout=CONSUME_POLL_S)
            now = time.perf_counter()
            if not batch:
                if now - last_activity >= timeout_s:
                    timed_out = True
                    break
                continue
            now_ms = time.time() * 1000.0
            last_activity = now
            before = count
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    errors += 1
                    first_error = first_error or str(err)
                    if err.fatal():
                        raise PerfError(f"consumer: {err}")
                    continue
                count += 1
                nbytes += len(msg)
                key = msg.key()
                if key is not None:
                    nbytes += len(key)
                ts_type, ts = msg.timestamp()
                if ts_type != TIMESTAMP_NOT_AVAILABLE:
                    latencies.append(now_ms - ts)
            if count > before:
                if before == 0:
                    first = now
                last = now
            if on_progress is not None:
                on_progress(count)
    finally:
        consumer.close()
    elapsed = last - start
    return ConsumeResult(
        records=count,
        bytes=nbytes,
        elapsed_s=elapsed,
        records_per_sec=count / elapsed if elapsed > 0 else 0.0,
        mb_per_sec=nbytes / MB / elapsed if elapsed > 0 else 0.0,
        first_record_ms=(first - start) * 1000.0 if count else 0.0,
        e2e_latency=latency_stats(latencies),
        timed_out=timed_out,
        errors=errors,
        first_error=first_error,
    )


# -- the commands ----------------------------------------------------------------------------------


@contextmanager
def progress_bar(total: int, label: str, enabled: bool) -> Iterator[ProgressCallback | None]:
    """A rich progress bar on a terminal (cleared when done); nothing when ``enabled`` is false."""
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TaskProgressColumn(), TextColumn("{task.fields[rate]}"), TimeElapsedColumn())
    with Progress(*columns, transient=True, refresh_per_second=8) as progress:
        task = progress.add_task(label, total=total, rate="")
        started = time.perf_counter()

        def update(done: int) -> None:
            elapsed = time.perf_counter() - started
            rate = f"{done / elapsed:,.0f} rec/s" if elapsed > 0 else ""
            progress.update(task, completed=done, rate=rate)

        yield update


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"kraftpy: {message}", err=True)
    raise typer.Exit(code)


def _with_command_config(path: Path | None, props: dict[str, str]) -> dict[str, str]:
    """The client settings of a ``--command-config`` file, under the ``--*-props`` items (which win)."""
    if path is None:
        return props
    from kraftpy.cli.client_properties import librdkafka_settings_or_exit

    return {**librdkafka_settings_or_exit(path), **props}


BootstrapOption = Annotated[str, typer.Option(
    "--bootstrap-server", help="Brokers to connect to, host:port[,host:port...].")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the results as one JSON object.")]
CommandConfigOption = Annotated[Path | None, typer.Option(
    "--command-config", help="A .properties file of client settings, Kafka's keys as for the admin commands "
    "(security.protocol, sasl.jaas.config, ssl.truststore.location, ...) or librdkafka's; --producer-props and "
    "--consumer-props win over it.", show_default=False)]


@app.command("produce")
def produce_command(
    topic: Annotated[str, typer.Option("--topic", help="Topic to produce to.", show_default=False)],
    num_records: Annotated[int, typer.Option("--num-records", help="Records to send.", show_default=False)],
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    record_size: Annotated[int, typer.Option("--record-size", help="Bytes per record value.")] = 100,
    throughput: Annotated[float, typer.Option(
        "--throughput", help="Records/s to hold the producer to; -1 for no limit.")] = -1,
    acks: Annotated[str, typer.Option("--acks", help="all (-1), 1 or 0.")] = "all",
    compression: Annotated[str, typer.Option("--compression", help=f"One of {', '.join(CODECS)}.")] = "none",
    batch_size: Annotated[int | None, typer.Option(
        "--batch-size", help="batch.size in bytes.", show_default="librdkafka's default")] = None,
    linger_ms: Annotated[float | None, typer.Option(
        "--linger-ms", help="linger.ms.", show_default="librdkafka's default")] = None,
    producer_props: Annotated[list[str] | None, typer.Option(
        "--producer-props", help="A librdkafka producer property key=value; may be repeated.",
        show_default=False)] = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Send records as fast as allowed and report records/s, MB/s and delivery latency percentiles.

    Exits 1 when a record was not delivered.
    """
    try:
        settings = ProduceSettings(
            bootstrap_servers=bootstrap_server, topic=topic, num_records=num_records, record_size=record_size,
            throughput=throughput, acks=acks, compression=compression, batch_size=batch_size,
            linger_ms=linger_ms,
            props=_with_command_config(command_config, parse_props(producer_props, "--producer-props")))
        settings.validate()
        with progress_bar(num_records, f"produce {topic}", sys.stdout.isatty()) as update:
            result = run_produce(settings, update)
    except PerfError as exc:
        _fail(str(exc), exc.exit_code)
    typer.echo(json.dumps(result.to_dict(), sort_keys=True) if as_json else result.summary())
    if result.errors:
        raise typer.Exit(1)


@app.command("consume")
def consume_command(
    topic: Annotated[str, typer.Option("--topic", help="Topic to consume from.", show_default=False)],
    messages: Annotated[int, typer.Option("--messages", help="Records to consume.", show_default=False)],
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    from_beginning: Annotated[bool, typer.Option(
        "--from-beginning", help="Start at the earliest offset instead of the latest.")] = False,
    partitions: Annotated[str | None, typer.Option(
        "--partitions", help="Comma-separated partitions to read.", show_default="all of them")] = None,
    timeout: Annotated[int, typer.Option(
        "--timeout", help="Milliseconds without a new record before giving up.")] = 10_000,
    consumer_props: Annotated[list[str] | None, typer.Option(
        "--consumer-props", help="A librdkafka consumer property key=value; may be repeated.",
        show_default=False)] = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Read records and report records/s, MB/s and end-to-end latency from record timestamps.

    The partitions are assigned directly (no consumer group, no offset commits). Exits 1 when
    fewer than --messages records arrived before the timeout.
    """
    try:
        settings = ConsumeSettings(
            bootstrap_servers=bootstrap_server, topic=topic, messages=messages, from_beginning=from_beginning,
            partitions=parse_partitions(partitions), timeout_ms=timeout,
            props=_with_command_config(command_config, parse_props(consumer_props, "--consumer-props")))
        settings.validate()
        with progress_bar(messages, f"consume {topic}", sys.stdout.isatty()) as update:
            result = run_consume(settings, update)
    except PerfError as exc:
        _fail(str(exc), exc.exit_code)
    typer.echo(json.dumps(result.to_dict(), sort_keys=True) if as_json else result.summary())
    if result.timed_out or result.errors:
        raise typer.Exit(1)
