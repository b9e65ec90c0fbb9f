"""A broker with 10,000 partitions: creation, the event loop's lag, an idle produce, stop and restart.

One `kraftpy server` process in the combined role (controller and broker, as `kraftpy dev` runs),
data on the local disk, `metrics.port` set. The benchmark, from another process:

1. creates 100 topics of 100 partitions (replication factor 1) in CreateTopics calls of at most
   10,000 partitions each (confluent-kafka's AdminClient) and times it until every partition has a leader in the
   broker's Metadata;
2. measures single-record produces (acks=all) to partitions picked at random, one at a time,
   on the now idle broker;
3. runs a steady load — librdkafka producing 100-byte records across all 10,000 partitions at a
   fixed rate, acks=1 — for a while, and reads the broker's event-loop lag histogram
   (``kraftpy_event_loop_lag_seconds``: how late a task scheduled to wake ran) from its metrics
   endpoint before and after each phase, so each phase's lag is the difference;
4. stops the broker with SIGTERM (controlled shutdown, every log closed) and times it, then
   starts it again and times until the broker is running and answers Metadata for every partition.

Percentiles of the lag come from the histogram's buckets, the way Prometheus' histogram_quantile
reads them (upper bucket bounds: a p99 of "≤ 5 ms" means the 99th percentile sample fell in a
bucket that ends at 5 ms or below). ``python bench/scale.py --topics 10 --partitions 100`` runs a
smaller version.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kraftpy.ids import random_uuid_str  # noqa: E402
from tests.helpers.processes import free_ports  # noqa: E402

LAG_METRIC = "kraftpy_event_loop_lag_seconds"
GOAL_P99_S = 0.005


class Server:
    """`kraftpy server` in the combined role, logging JSON lines that we watch for events."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port, self.controller_port, self.metrics_port = free_ports(3)
        self.config = directory / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": directory / "data",
            "num.partitions": 1,
            "default.replication.factor": 1,
            "metrics.port": self.metrics_port,
            "broker.heartbeat.interval.ms": 500,
            "controller.quorum.election.timeout.ms": 300,
        }.items()))
        subprocess.run([sys.executable, "-m", "kraftpy", "storage", "format", "-c", str(self.config), "-t",
                        random_uuid_str()], check=True, capture_output=True)
        self.process: subprocess.Popen | None = None
        self.lines: list[dict] = []
        self._cond = threading.Condition()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> float:
        """Start the process; returns the seconds until it said the broker is running."""
        self.lines = []
        started = time.perf_counter()
        self.process = subprocess.Popen([sys.executable, "-m", "kraftpy", "server", "-c", str(self.config),
                                         "--log-format", "json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        threading.Thread(target=self._pump, args=(self.process,), daemon=True).start()
        self.wait_for("broker running", 600)
        return time.perf_counter() - started

    def _pump(self, process: subprocess.Popen) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                line = {"event": raw.decode(errors="replace").strip()}
            with self._cond:
                self.lines.append(line if isinstance(line, dict) else {"event": str(line)})
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, event: str, timeout: float) -> None:
        assert self.process is not None
        with self._cond:
            ok = self._cond.wait_for(lambda: any(line.get("event") == event for line in self.lines)
                                     or self.process.poll() is not None, timeout)
        if not ok or self.process.poll() is not None:
            tail = "\n".join(str(line.get("event")) for line in self.lines[-15:])
            raise SystemExit(f"kraftpy server: no {event!r}:\n{tail}")

    def stop(self) -> float:
        """SIGTERM; returns the seconds until the process exited."""
        assert self.process is not None
        started = time.perf_counter()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(600)
        if code != 0:
            raise SystemExit(f"kraftpy server exited with {code} on SIGTERM")
        return time.perf_counter() - started

    def open_files(self) -> int:
        assert self.process is not None
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def rss_bytes(self) -> int:
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))

    def cpu_seconds(self) -> float:
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def timed_scrape(self) -> tuple[float, int, float]:
        """One ``GET /metrics``: seconds until the whole answer was read, its bytes, and the CPU seconds
        the broker process spent meanwhile (the scrape, and whatever else it was doing)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        cpu, started = self.cpu_seconds(), time.perf_counter()
        size = len(urllib.request.urlopen(url, timeout=60).read())
        return time.perf_counter() - started, size, self.cpu_seconds() - cpu

    def lag_buckets(self) -> dict[float, float]:
        """Cumulative bucket counts of the event-loop lag histogram, by upper bound (seconds)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=30).read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith(LAG_METRIC + "_bucket{"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                out[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
        return out


def quantiles(before: dict[float, float], after: dict[float, float]) -> dict[str, float | int]:
    """Samples, p50, p99 (bucket upper bounds) and the largest bucket reached, between two readings."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    out: dict[str, float | int] = {"samples": int(total)}
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        rank = q * total
        out[name] = next((b for b, c in zip(bounds, counts, strict=True) if c >= rank), float("inf"))
    previous = 0.0
    out["max"] = 0.0
    for b, c in zip(bounds, counts, strict=True):
        if c > previous:
            out["max"] = b
        previous = c
    return out


def all_led(bootstrap: str, topics: list[str], partitions: int) -> bool:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60)
    except KafkaException:  # a broker still opening its logs answers nothing until it has
        return False
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or len(topic.partitions) != partitions:
            return False
        if any(p.leader < 0 for p in topic.partitions.values()):
            return False
    return True


def create(server: Server, topics: list[str], partitions: int) -> float:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    started = time.perf_counter()
    # At most 10,000 partitions a CreateTopics call (Kafka's bound on one controller operation).
    per_call = max(1, 10_000 // partitions)
    for first in range(0, len(topics), per_call):
        futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics[first:first + per_call]],
                                      operation_timeout=600, request_timeout=600)
        for future in futures.values():
            future.result(timeout=900)
    # A Metadata answer for every partition costs the broker about 10 µs a partition: asked every
    # 0.5 s at 10,000 partitions, every 2 s at 100,000, so that the asking does not slow the creating.
    while not all_led(server.bootstrap, topics, partitions):
        time.sleep(max(0.5, len(topics) * partitions / 50_000))
    return time.perf_counter() - started


def idle_produces(server: Server, topics: list[str], partitions: int, count: int) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 0})
    rng = random.Random(1)
    latencies = []
    errors = []
    for _ in range(count):
        topic, partition = rng.choice(topics), rng.randrange(partitions)
        done = threading.Event()

        def report(err, _msg, done=done):
            if err is not None:
                errors.append(str(err))
            done.set()

        started = time.perf_counter()
        producer.produce(topic, b"x" * 100, partition=partition, on_delivery=report)
        while not done.is_set():
            producer.poll(0.01)
        latencies.append(time.perf_counter() - started)
        time.sleep(0.05)  # idle in between: each produce meets a quiet broker
    if errors:
        raise SystemExit(f"idle produce failed: {errors[0]}")
    return latencies


def steady_load(server: Server, topics: list[str], partitions: int, seconds: float, rate: int) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "1", "linger.ms": 5})
    value = b"x" * 100
    sent = 0
    started = time.perf_counter()
    targets = [(t, p) for t in topics for p in range(partitions)]
    while (elapsed := time.perf_counter() - started) < seconds:
        due = int(elapsed * rate)
        while sent < due:
            topic, partition = targets[sent % len(targets)]
            try:
                producer.produce(topic, value, partition=partition)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0.005)
    producer.flush(60)
    return sent


def file_system_reference(directory: Path, count: int) -> float:
    """Seconds to create ``count`` directories of three empty files each on the same file system (what
    creating that many empty logs costs the disk at the least), measured in the same run."""
    root = directory / "reference"
    root.mkdir()
    started = time.perf_counter()
    for i in range(count):
        path = root / f"t-{i}"
        path.mkdir()
        for suffix in (".log", ".index", ".timeindex"):
            (path / f"00000000000000000000{suffix}").touch()
    elapsed = time.perf_counter() - started
    subprocess.run(["rm", "-rf", str(root)], check=True)
    return elapsed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--load-seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=2000, help="records per second in the steady phase")
    parser.add_argument("--idle-produces", type=int, default=20)
    args = parser.parse_args(argv)
    topics = [f"scale-{i:03d}" for i in range(args.topics)]
    total = args.topics * args.partitions
    rows = []
    with tempfile.TemporaryDirectory(prefix="kraftpy-scale-", ignore_cleanup_errors=True) as tmp:
        reference = file_system_reference(Path(tmp), total)
        server = Server(Path(tmp))
        first_start = server.start()
        lag0 = server.lag_buckets()
        create_s = create(server, topics, args.partitions)
        lag1 = server.lag_buckets()
        idle = sorted(idle_produces(server, topics, args.partitions, args.idle_produces))
        lag2 = server.lag_buckets()
        sent = steady_load(server, topics, args.partitions, args.load_seconds, args.rate)
        lag3 = server.lag_buckets()
        scrape_s, scrape_bytes, scrape_cpu = server.timed_scrape()
        files = server.open_files()
        rss = server.rss_bytes()
        stop_s = server.stop()
        restart_s = server.start()
        started = time.perf_counter()
        while not all_led(server.bootstrap, topics, args.partitions):
            time.sleep(max(0.2, total / 50_000))
        answered_s = restart_s + time.perf_counter() - started
        restarted_files = server.open_files()
        lag4 = server.lag_buckets()
        server.stop()
    for phase, before, after in (("creating the partitions", lag0, lag1), ("idle produces", lag1, lag2),
                                 (f"steady load, {args.rate} records/s", lag2, lag3),
                                 ("restart (since the process started)", {}, lag4)):
        q = quantiles(before, after)
        rows.append((phase, q))

    def ms(seconds: float) -> str:
        return "> 10 s" if seconds == float("inf") else f"≤ {seconds * 1000:g} ms"

    steady = rows[2][1]
    print("## scale")
    print()
    print(__doc__.split("\n\n")[1].replace("\n", " "))
    print()
    print(f"| {total:,} partitions | value |")
    print("|---|---:|")
    print(f"| CreateTopics of {args.topics} × {args.partitions} (10,000 partitions a call) until every partition "
          f"has a leader | {create_s:.1f} s |")
    print(f"| reference: {total:,} directories of three empty files on the same file system | {reference:.1f} s |")
    print(f"| idle produce (acks=all, one record) median / max | {idle[len(idle) // 2] * 1000:.1f} ms / "
          f"{idle[-1] * 1000:.1f} ms |")
    print(f"| steady load: records sent in {args.load_seconds:g} s | {sent:,} |")
    print(f"| a scrape of /metrics after the load: answered in / its size / the broker's CPU meanwhile | "
          f"{scrape_s:.2f} s / {scrape_bytes / 1e6:.1f} MB / {scrape_cpu:.2f} s |")
    print(f"| open files of the broker process after the load / after the restart | {files:,} / "
          f"{restarted_files:,} |")
    print(f"| resident memory of the process after the load (per partition) | {rss / 2**20:,.0f} MiB "
          f"({rss / total / 1024:,.1f} KiB) |")
    print(f"| SIGTERM until the process exited | {stop_s:.1f} s |")
    print(f"| restart until the broker runs / until Metadata names every leader | {restart_s:.1f} s / "
          f"{answered_s:.1f} s |")
    print(f"| first start (empty) until the broker runs | {first_start:.1f} s |")
    print()
    print("Event-loop lag (how late a task scheduled to wake ran), per phase:")
    print()
    print("| phase | samples | p50 | p99 | largest |")
    print("|---|---:|---:|---:|---:|")
    for phase, q in rows:
        print(f"| {phase} | {q['samples']:,} | {ms(q['p50'])} | {ms(q['p99'])} | {ms(q['max'])} |")
    print()
    verdict = "met" if steady["p99"] <= GOAL_P99_S else "not met"
    print(f"Goal (p99 ≤ {GOAL_P99_S * 1000:g} ms under steady load with {total:,} partitions): **{verdict}**.")
    print()
    print(f"Run: `python bench/scale.py {' '.join(argv)}`".rstrip() + f" on {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}; the load "
          "generator runs on the same cores.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
