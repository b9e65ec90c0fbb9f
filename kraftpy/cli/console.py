"""`kraftpy console produce | consume`: kafka-console-producer.sh and kafka-console-consumer.sh.

Both run on librdkafka (confluent-kafka), as an application would.

``produce`` sends one record per line of stdin (or ``--file``). With ``--property parse.key=true``
a line is ``KEY<key.separator>VALUE``; with ``parse.headers=true`` it starts with headers,
``K:V,K:V<headers.delimiter>``. The separators and their defaults are Kafka's (`PRODUCE_PROPERTIES`).

``consume`` prints one line per record, built like Kafka's DefaultMessageFormatter: optional
``CreateTime:<ms>``, ``Partition:<p>``, ``Offset:<o>``, headers and key, then the value, joined by
``key.separator`` (`CONSUME_PROPERTIES`). Without ``--group`` it reads every partition (or the one
``--partition`` names) without joining a group and commits nothing; with ``--group`` it subscribes
and commits the offsets of what it printed. It ends after ``--max-messages`` records, after
``--timeout-ms`` without one, or on Ctrl-C, printing "Processed a total of N messages" on stderr.

The flags are the admin commands' where they share a meaning: ``--command-config FILE`` is the client
settings file (Kafka's ``--producer.config`` and ``--consumer.config`` name it too), the same file the
admin commands read, its Kafka keys translated for librdkafka (`kraftpy.cli.client_properties`), and ``--json``
makes produce end with one JSON document (the topic and the records delivered) and consume print one
JSON object per record (JSON Lines: topic, partition, offset, timestamp, headers, key, value; a key or
value that is not UTF-8 is given as ``key_base64`` or ``value_base64`` instead).

Exit codes: 0 done; 1 a record was not delivered, or the topic does not exist; 2 a bad flag or
property; 3 no broker answered.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from kraftpy.cli.admin_common import (
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    die,
    emit_json,
    parse_key_values,
)
from kraftpy.cli.client_properties import librdkafka_settings_or_exit

app = typer.Typer(help="Produce records from lines of text, and print records as lines.", no_args_is_help=True)

#: ``--property`` keys of produce, with Kafka's defaults (its LineMessageReader).
PRODUCE_PROPERTIES: dict[str, str] = {
    "parse.key": "false",
    "key.separator": "\t",
    "parse.headers": "false",
    "headers.delimiter": "\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "ignore.error": "false",
    "null.marker": "",
}
#: ``--property`` keys of consume, with Kafka's defaults (its DefaultMessageFormatter).
CONSUME_PROPERTIES: dict[str, str] = {
    "print.timestamp": "false",
    "print.key": "false",
    "print.value": "true",
    "print.partition": "false",
    "print.offset": "false",
    "print.headers": "false",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.literal": "null",
}
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("all", "-1", "0", "1")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
#: How long to wait for a first metadata answer before saying no broker answered.
CONNECT_TIMEOUT_S = 15.0
#: From this input size on, produce shows a progress bar (on a terminal only).
PROGRESS_FROM_BYTES = 1 << 20


class ConsoleError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def _confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        die("kraftpy console needs confluent-kafka: pip install confluent-kafka", EXIT_USAGE)
    return confluent_kafka


def _properties(items: list[str] | None, known: dict[str, str], flag: str) -> dict[str, str]:
    """Kafka's defaults overridden by ``--property k=v`` items; an unknown key is a usage error.
    Values keep their spaces (a separator may be one)."""
    out = dict(known)
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in known:
            die(f"{flag} {item}: expected one of {', '.join(known)} as key=value", EXIT_USAGE)
        out[key.strip()] = value
    return out


def _flag(props: dict[str, str], key: str) -> bool:
    value = props[key].strip().lower()
    if value not in ("true", "false"):
        die(f"--property {key}={props[key]}: expected true or false", EXIT_USAGE)
    return value == "true"


def _client_config(config_file: Path | None, items: list[str] | None, flag: str) -> dict[str, str]:
    """Client settings from a ``--command-config`` file (Kafka's client keys, translated for librdkafka),
    then ``k=v`` items (librdkafka's names, which win)."""
    out: dict[str, str] = {}
    if config_file is not None:
        out.update(librdkafka_settings_or_exit(config_file))
    out.update(parse_key_values(items, flag))
    return out


class _ClientErrors:
    """librdkafka's error callback: remembers the errors instead of logging them to stderr."""

    def __init__(self) -> None:
        self.first: Any = None
        self.all_brokers_down = False

    def __call__(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if self.first is None:
            self.first = err
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self.all_brokers_down = True


def _topic_metadata(client: Any, topic: str, bootstrap: str, errors: _ClientErrors) -> Any:
    """The topic's metadata; no broker answering is exit 3, a missing topic exit 1."""
    from confluent_kafka import KafkaException

    waited = 0.0
    while True:
        try:
            metadata = client.list_topics(topic, timeout=0.5)
            break
        except KafkaException as exc:
            waited += 0.5
            client.poll(0)  # serves the error callback (no record can be due yet)
            if errors.all_brokers_down or waited >= CONNECT_TIMEOUT_S:
                why = errors.first if errors.first is not None else exc.args[0]
                raise ConsoleError(f"no broker answered at {bootstrap}: {why.str()}", EXIT_UNREACHABLE) from None
    entry = metadata.topics.get(topic)
    if entry is None or entry.error is not None:
        code = entry.error.name() if entry is not None and entry.error is not None else "UNKNOWN_TOPIC_OR_PART"
        if code == "UNKNOWN_TOPIC_OR_PART":
            raise ConsoleError(f"topic {topic}: UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist")
        raise ConsoleError(f"topic {topic}: {code}: {entry.error.str() if entry and entry.error else ''}")
    return entry


# -- produce ---------------------------------------------------------------------------------------


class LineReader:
    """A line to (key, value, headers), as Kafka's LineMessageReader reads it."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = _flag(props, "parse.key")
        self.parse_headers = _flag(props, "parse.headers")
        self.ignore_error = _flag(props, "ignore.error")
        self.key_separator = props["key.separator"].encode()
        self.headers_delimiter = props["headers.delimiter"].encode()
        self.headers_separator = props["headers.separator"].encode()
        self.headers_key_separator = props["headers.key.separator"].encode()
        self.null_marker = props["null.marker"].encode() or None
        for key in ("key.separator", "headers.delimiter", "headers.separator", "headers.key.separator"):
            if not props[key]:
                die(f"--property {key}=: a separator cannot be empty", EXIT_USAGE)
        if self.parse_key and self.parse_headers and self.headers_delimiter == self.headers_separator:
            die("--property headers.delimiter and headers.separator must differ", EXIT_USAGE)

    def _null(self, value: bytes) -> bytes | None:
        return None if self.null_marker is not None and value == self.null_marker else value

    def parse(self, line: bytes, number: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, rest = line.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise ConsoleError(f"line {number}: no headers delimiter {self._show(self.headers_delimiter)} "
                                       f"found")
                head, rest = b"", line
            for item in head.split(self.headers_separator) if head else ():
                name, ksep, value = item.partition(self.headers_key_separator)
                if not ksep and not self.ignore_error:
                    raise ConsoleError(f"line {number}: header {item.decode(errors='replace')!r} has no "
                                       f"separator {self._show(self.headers_key_separator)}")
                headers.append((name.decode(errors="replace"), self._null(value) if ksep else None))
        key = None
        value: bytes | None = rest
        if self.parse_key:
            k, sep, v = rest.partition(self.key_separator)
            if sep:
                key, value = self._null(k), self._null(v)
            elif not self.ignore_error:
                raise ConsoleError(f"line {number}: no key separator {self._show(self.key_separator)} found")
            else:
                value = self._null(rest)
        else:
            value = self._null(rest)
        return key, value, headers

    @staticmethod
    def _show(sep: bytes) -> str:
        return repr(sep.decode(errors="replace"))


@contextmanager
def _byte_progress(total: int | None) -> Iterator[Any]:
    if total is None or total < PROGRESS_FROM_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("[bold]produce"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("produce", total=total)
        yield lambda done: progress.update(task, completed=done)


def _input_size(stream: IO[bytes]) -> int | None:
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return None
    import stat

    return st.st_size if stat.S_ISREG(st.st_mode) else None


def run_produce(bootstrap: str, topic: str, stream: IO[bytes], reader: LineReader, config: dict[str, str]) -> int:
    """Send every line; returns the records delivered. Raises ConsoleError on the first failure."""
    ck = _confluent()
    errors = _ClientErrors()
    try:
        producer = ck.Producer({"bootstrap.servers": bootstrap, "log_level": 0, "error_cb": errors, **config})
    except ck.KafkaException as exc:
        raise ConsoleError(f"producer configuration: {exc}", EXIT_USAGE) from None
    _topic_metadata(producer, topic, bootstrap, errors)
    failed: list[Any] = []
    delivered = 0

    def report(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failed.append(err)

    number = read = 0
    with _byte_progress(_input_size(stream)) as progress:
        try:
            for raw in stream:
                number += 1
                read += len(raw)
                line = raw[:-1] if raw.endswith(b"\n") else raw
                if line.endswith(b"\r"):
                    line = line[:-1]
                key, value, headers = reader.parse(line, number)
                while True:
                    try:
                        producer.produce(topic, value=value, key=key, headers=headers or None, on_delivery=report)
                        break
                    except BufferError:  # the local queue is full: serve delivery reports until there is room
                        producer.poll(0.05)
                    except ck.KafkaException as exc:  # refused before sending (a record over message.max.bytes)
                        err = exc.args[0]
                        raise ConsoleError(f"topic {topic}: {err.name()}: line {number}: {err.str()}") from None
                producer.poll(0)
                if failed:
                    break
                if progress is not None and number % 1000 == 0:
                    progress(read)
        finally:
            # What was read before a bad line (or Ctrl-C) is still sent, as Kafka's producer does on close.
            while producer.flush(0.5) > 0 and not failed:
                pass
    if failed:
        err = failed[0]
        raise ConsoleError(f"topic {topic}: {err.name()}: {err.str()} ({len(failed)} records not delivered)")
    return delivered


@app.command("produce")
def produce_command(
    topic: Annotated[str, typer.Option("--topic", help="The topic to produce to.", show_default=False)],
    bootstrap_server: Annotated[str, typer.Option(
        "--bootstrap-server", help="Brokers to connect to, host:port[,host:port...].", show_default=False)],
    file: Annotated[Path | None, typer.Option(
        "--file", help="Read lines from this file instead of stdin.", show_default=False)] = None,
    prop: Annotated[list[str] | None, typer.Option(
        "--property", help=f"How lines are read, key=value: {', '.join(PRODUCE_PROPERTIES)}; may be repeated.",
        show_default=False)] = None,
    producer_property: Annotated[list[str] | None, typer.Option(
        "--producer-property", help="A producer setting key=value (librdkafka's names); may be repeated.",
        show_default=False)] = None,
    producer_config: Annotated[Path | None, typer.Option(
        "--command-config", "--producer.config", help="A .properties file of client settings: Kafka's keys, as for "
        "the admin commands (security.protocol, sasl.jaas.config, ssl.truststore.location, ...), or librdkafka's.",
        show_default=False)] = None,
    compression_codec: Annotated[str, typer.Option(
        "--compression-codec", help=f"One of {', '.join(CODECS)}.")] = "none",
    acks: Annotated[str, typer.Option("--request-required-acks", help="all (-1), 1 or 0.")] = "-1",
    as_json: Annotated[bool, typer.Option(
        "--json", help="End with one JSON document: the topic and the records delivered.")] = False,
) -> None:
    """Send each line of stdin (or --file) as one record; exits 1 if a record was not delivered."""
    if compression_codec not in CODECS:
        die(f"--compression-codec={compression_codec}: not one of {', '.join(CODECS)}", EXIT_USAGE)
    if acks not in ACKS:
        die(f"--request-required-acks={acks}: not one of {', '.join(ACKS)}", EXIT_USAGE)
    reader = LineReader(_properties(prop, PRODUCE_PROPERTIES, "--property"))
    config = {"acks": acks, "compression.type": compression_codec,
              **_client_config(producer_config, producer_property, "--producer-property")}
    try:
        if file is not None:
            try:
                stream = file.open("rb")
            except OSError as exc:
                die(f"--file={file}: {exc.strerror or exc}", EXIT_USAGE)
            with stream:
                delivered = run_produce(bootstrap_server, topic, stream, reader, config)
        else:
            delivered = run_produce(bootstrap_server, topic, sys.stdin.buffer, reader, config)
    except ConsoleError as exc:
        die(str(exc), exc.code)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if as_json:
        emit_json({"topic": topic, "records_delivered": delivered})


# -- consume ---------------------------------------------------------------------------------------


class Formatter:
    """A record to its printed bytes, as Kafka's DefaultMessageFormatter writes it."""

    def __init__(self, props: dict[str, str]) -> None:
        self.fields = [name for name in ("timestamp", "partition", "offset", "headers", "key", "value")
                       if _flag(props, f"print.{name}")]
        self.key_separator = props["key.separator"].encode()
        self.line_separator = props["line.separator"].encode()
        self.headers_separator = props["headers.separator"].encode()
        self.headers_key_separator = props["headers.key.separator"].encode()
        self.null = props["null.literal"].encode()

    def format(self, msg: Any) -> bytes:
        from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

        parts: list[bytes] = []
        for name in self.fields:
            if name == "timestamp":
                kind, ts = msg.timestamp()
                label = {TIMESTAMP_CREATE_TIME: "CreateTime", TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}.get(kind)
                parts.append(f"{label}:{ts}".encode() if label else b"NO_TIMESTAMP")
            elif name == "partition":
                parts.append(b"Partition:%d" % msg.partition())
            elif name == "offset":
                parts.append(b"Offset:%d" % msg.offset())
            elif name == "headers":
                headers = msg.headers()
                parts.append(self.headers_separator.join(
                    k.encode() + self.headers_key_separator + (self.null if v is None else v)
                    for k, v in headers) if headers else b"NO_HEADERS")
            elif name == "key":
                key = msg.key()
                parts.append(self.null if key is None else key)
            else:
                value = msg.value()
                parts.append(self.null if value is None else value)
        return self.key_separator.join(parts) + self.line_separator


class JsonFormatter:
    """A record to one line of JSON (``--json``)."""

    @staticmethod
    def _bytes(doc: dict[str, Any], name: str, data: bytes | None) -> None:
        if data is None:
            doc[name] = None
            return
        try:
            doc[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            doc[f"{name}_base64"] = base64.b64encode(data).decode("ascii")

    def format(self, msg: Any) -> bytes:
        _kind, timestamp = msg.timestamp()
        doc: dict[str, Any] = {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
                               "timestamp": timestamp}
        headers: list[dict[str, Any]] = []
        for name, value in msg.headers() or ():
            header: dict[str, Any] = {"key": name}
            self._bytes(header, "value", value)
            headers.append(header)
        doc["headers"] = headers
        self._bytes(doc, "key", msg.key())
        self._bytes(doc, "value", msg.value())
        return json.dumps(doc, ensure_ascii=False).encode() + b"\n"


def _start_offset(text: str | None, from_beginning: bool) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    if text is None:
        return OFFSET_BEGINNING if from_beginning else OFFSET_END
    if text == "earliest":
        return OFFSET_BEGINNING
    if text == "latest":
        return OFFSET_END
    if text.isdigit():
        return int(text)
    die(f"--offset={text}: expected earliest, latest or a non-negative number", EXIT_USAGE)


class ConsumeRun:
    """How many records were printed, and whether a signal asked the loop to stop (set from a signal
    handler: the loop ends after the record it is writing, so the count is exact)."""

    def __init__(self) -> None:
        self.count = 0
        self.stop_requested = False

    def request_stop(self, _signum: int, _frame: Any) -> None:
        self.stop_requested = True


def run_consume(bootstrap: str, topic: str, group: str | None, partition: int | None, start: int,
                from_beginning: bool, max_messages: int | None, timeout_ms: int | None,
                formatter: Formatter | JsonFormatter,
                config: dict[str, str], out: IO[bytes], run: ConsumeRun) -> None:
    """Print records until one of the ends, counting them in ``run``."""
    ck = _confluent()
    errors = _ClientErrors()
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "log_level": 0, "error_cb": errors,
        "group.id": group or f"console-consumer-{uuid.uuid4().hex[:10]}",
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        # Kafka's consumer reads uncommitted records unless told otherwise (librdkafka: committed).
        "isolation.level": "read_uncommitted",
        "enable.auto.commit": group is not None,
        # Only what was printed is committed: each record's offset is stored after it is written.
        "enable.auto.offset.store": False,
        **config,
    }
    try:
        consumer = ck.Consumer(settings)
    except ck.KafkaException as exc:
        raise ConsoleError(f"consumer configuration: {exc}", EXIT_USAGE) from None
    try:
        metadata = _topic_metadata(consumer, topic, bootstrap, errors)
        if partition is not None:
            if partition not in metadata.partitions:
                raise ConsoleError(f"topic {topic}: UNKNOWN_TOPIC_OR_PARTITION: the topic has partitions "
                                   f"0-{len(metadata.partitions) - 1}, not {partition}")
            consumer.assign([ck.TopicPartition(topic, partition, start)])
        elif group is not None:
            consumer.subscribe([topic])
        else:
            consumer.assign([ck.TopicPartition(topic, p, start) for p in sorted(metadata.partitions)])
        idle_s = 0.0
        while (max_messages is None or run.count < max_messages) and not run.stop_requested:
            wanted = 500 if max_messages is None else min(500, max_messages - run.count)
            batch = consumer.consume(num_messages=wanted, timeout=0.1)
            if not batch:
                idle_s += 0.1
                if timeout_ms is not None and idle_s * 1000 >= timeout_ms:
                    break
                continue
            idle_s = 0.0
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        continue
                    if err.fatal() or err.code() in (ck.KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                     ck.KafkaError.TOPIC_AUTHORIZATION_FAILED):
                        raise ConsoleError(f"topic {topic}: {err.name()}: {err.str()}")
                    continue
                out.write(formatter.format(msg))
                run.count += 1
                if group is not None:
                    consumer.store_offsets(message=msg)
            out.flush()
    finally:
        try:
            consumer.close()  # commits the stored offsets when in a group
        except ck.KafkaException:
            pass


@app.command("consume")
def consume_command(
    topic: Annotated[str, typer.Option("--topic", help="The topic to read.", show_default=False)],
    bootstrap_server: Annotated[str, typer.Option(
        "--bootstrap-server", help="Brokers to connect to, host:port[,host:port...].", show_default=False)],
    group: Annotated[str | None, typer.Option(
        "--group", help="Join this consumer group and commit what was printed.", show_default=False)] = None,
    from_beginning: Annotated[bool, typer.Option(
        "--from-beginning", help="Start at the earliest offset (in a group: where none is committed).")] = False,
    partition: Annotated[int | None, typer.Option(
        "--partition", help="Read only this partition.", show_default=False)] = None,
    offset: Annotated[str | None, typer.Option(
        "--offset", help="With --partition: earliest, latest or an offset.", show_default="latest")] = None,
    max_messages: Annotated[int | None, typer.Option(
        "--max-messages", help="Stop after this many records.", show_default=False)] = None,
    timeout_ms: Annotated[int | None, typer.Option(
        "--timeout-ms", help="Stop when no record arrived for this long.", show_default=False)] = None,
    prop: Annotated[list[str] | None, typer.Option(
        "--property", help=f"How records are printed, key=value: {', '.join(CONSUME_PROPERTIES)}; may be repeated.",
        show_default=False)] = None,
    consumer_property: Annotated[list[str] | None, typer.Option(
        "--consumer-property", help="A consumer setting key=value (librdkafka's names); may be repeated.",
        show_default=False)] = None,
    consumer_config: Annotated[Path | None, typer.Option(
        "--command-config", "--consumer.config", help="A .properties file of client settings: Kafka's keys, as for "
        "the admin commands (security.protocol, sasl.jaas.config, ssl.truststore.location, ...), or librdkafka's.",
        show_default=False)] = None,
    isolation_level: Annotated[str, typer.Option(
        "--isolation-level", help="read_uncommitted, or read_committed to skip aborted transactions.")
    ] = "read_uncommitted",
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print each record as one line of JSON (topic, partition, offset, timestamp, headers, "
        "key, value) instead of --property's format.")] = False,
) -> None:
    """Print records, one line each, until --max-messages, --timeout-ms or Ctrl-C."""
    if offset is not None and partition is None:
        die("--offset needs --partition", EXIT_USAGE)
    if offset is not None and from_beginning:
        die("--offset and --from-beginning cannot be used together", EXIT_USAGE)
    if partition is not None and partition < 0:
        die(f"--partition={partition}: needs at least 0", EXIT_USAGE)
    if max_messages is not None and max_messages < 1:
        die(f"--max-messages={max_messages}: needs at least 1", EXIT_USAGE)
    if timeout_ms is not None and timeout_ms < 1:
        die(f"--timeout-ms={timeout_ms}: needs at least 1", EXIT_USAGE)
    if isolation_level not in ISOLATION_LEVELS:
        die(f"--isolation-level={isolation_level}: not one of {', '.join(ISOLATION_LEVELS)}", EXIT_USAGE)
    _confluent()
    text_formatter = Formatter(_properties(prop, CONSUME_PROPERTIES, "--property"))
    formatter = JsonFormatter() if as_json else text_formatter
    config = {"isolation.level": isolation_level,
              **_client_config(consumer_config, consumer_property, "--consumer-property")}
    start = _start_offset(offset, from_beginning)
    run = ConsumeRun()
    # Ctrl-C (and SIGTERM) end the loop after the record being printed; the group's offsets are
    # committed on the way out.
    previous = {signum: signal.signal(signum, run.request_stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_consume(bootstrap_server, topic, group, partition, start, from_beginning, max_messages, timeout_ms,
                    formatter, config, sys.stdout.buffer, run)
    except ConsoleError as exc:
        _processed(run.count)
        die(str(exc), exc.code)
    except BrokenPipeError:
        _quiet_stdout()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    _processed(run.count)


def _processed(count: int) -> None:
    typer.echo(f"Processed a total of {count} messages", err=True)


def _quiet_stdout() -> None:
    # The reader went away (``| head``): send what is left of stdout nowhere, so exiting flushes no error.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
