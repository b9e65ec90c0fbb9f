"""Benchmark one `kraftpy dev` broker against Redis Streams on the same machine; print a markdown section.

Both sides store 100-byte records and are measured in the same run:

* kraftpy: `kraftpy dev` (controller and broker in one process, data on the local disk, the default
  flush policy: no fsync per write) driven by the engine of `kraftpy perf` in this process
  (librdkafka through confluent-kafka, one producer with acks=1 and librdkafka's default batching;
  then one consumer reading the records back from the beginning);
* Redis Streams: `redis-server` on a free loopback port with ``appendonly yes`` and
  ``appendfsync everysec`` (fsync once a second, the closest durability to the broker's), driven by
  `redis-benchmark` with pipelining 100 (its default 50 connections): ``XADD`` of one 100-byte field
  for produce, and ``XRANGE key - + COUNT 100`` for consume (each call returns 100 entries, so
  records/s = calls/s x 100; it reads the head of the stream over and over, Redis' best case).

Then a second, profiled pass runs the same produce and consume against a fresh broker with a sampling
profiler attached (py-spy when it can be installed from PyPI into the project's environment, else
cProfile inside the broker process), and prints where the broker spends its CPU time, by own and
cumulative samples. Every process is on the same two cores: the client's CPU use is shown beside
the servers'.

When redis-server or redis-benchmark is missing and this runs as root, it installs the Debian
packages redis-server and redis-tools with apt-get (and says so in the section).
``python bench/broker.py --records 200000`` runs a shorter benchmark.
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kraftpy.cli.perf import ConsumeSettings, ProduceSettings, run_consume, run_produce  # noqa: E402
from tests.helpers.processes import DevProcess, free_ports  # noqa: E402

RECORD_SIZE = 100
PIPELINE = 100
REDIS_CLIENTS = 50
XRANGE_COUNT = 100
TOP = 15
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Meter:
    """Wall time, a server's CPU time and this process's (the client's) CPU time over a phase;
    ``children``: the CPU time of the child processes that ended (and were waited for) during it."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def __enter__(self) -> Meter:
        self.wall = time.perf_counter()
        self.server = cpu_seconds(self.server_pid)
        self.client = time.process_time()
        self.children = _children_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.server = cpu_seconds(self.server_pid) - self.server
        self.client = time.process_time() - self.client
        self.children = _children_cpu() - self.children


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- kraftpy ---------------------------------------------------------------------------------------


def kraftpy_pass(dev: DevProcess, records: int, profiler: Profiler | None) -> dict:
    out: dict = {}
    with dev:
        topic = "bench-broker"
        produce = ProduceSettings(dev.bootstrap, topic, num_records=records, record_size=RECORD_SIZE,
                                  acks="1")
        pid = dev.process.pid
        # A few records first, so that topic creation is not part of the measured run.
        warm = run_produce(ProduceSettings(dev.bootstrap, "bench-warmup", num_records=1000,
                                           record_size=RECORD_SIZE, acks="1"))
        assert warm.errors == 0, warm.first_error
        with Meter(pid) as produced_meter:
            if profiler:
                profiler.start(pid, "produce")
            produced = run_produce(produce)
            if profiler:
                out["produce_profile"] = profiler.stop()
        if produced.errors or produced.records != records:
            raise SystemExit(f"kraftpy produce: {produced.records} of {records} records, "
                             f"{produced.first_error}")
        with Meter(pid) as consumed_meter:
            if profiler:
                profiler.start(pid, "consume")
            consumed = run_consume(ConsumeSettings(dev.bootstrap, topic, messages=records,
                                                   from_beginning=True))
            if profiler:
                out["consume_profile"] = profiler.stop()
        if consumed.records != records:
            raise SystemExit(f"kraftpy consume: {consumed.records} of {records} records")
        kcat = shutil.which("kcat")
        if kcat and profiler is None:
            # The same produce with a C client (kcat -P: one record per line, acks=1).
            lines = Path(dev.directory) / "records.txt"
            with open(lines, "wb") as f:
                line = b"x" * RECORD_SIZE + b"\n"
                for _ in range(records // 10_000):
                    f.write(line * 10_000)
            with Meter(pid) as kcat_produce_meter, open(lines, "rb") as stdin:
                subprocess.run([kcat, "-P", "-q", "-b", dev.bootstrap, "-t", topic + "-kcat",
                                "-X", "acks=1", "-X", "linger.ms=5"],
                               stdin=stdin, check=True, timeout=600)
            out["kcat_produce"] = (records // 10_000 * 10_000) / kcat_produce_meter.wall
            out["kcat_produce_meter"] = kcat_produce_meter
            # The same read with a C client (librdkafka, as redis-benchmark is C): the broker's side
            # of consuming, without the Python client's per-record cost.
            with Meter(pid) as kcat_meter:
                subprocess.run([kcat, "-C", "-q", "-b", dev.bootstrap, "-t", topic, "-o", "beginning",
                                "-c", str(records), "-e"],
                               stdout=subprocess.DEVNULL, check=True, timeout=600)
            out["kcat_consume"] = records / kcat_meter.wall
            out["kcat_meter"] = kcat_meter
    out.update(produce=produced, consume=consumed, produce_meter=produced_meter, consume_meter=consumed_meter)
    return out


# -- profilers -------------------------------------------------------------------------------------


class Profile:
    """Samples by function: own (the function was running) and cumulative (it was on the stack)."""

    def __init__(self, kind: str, unit: str, total: float, wall: float, own: dict, cumulative: dict) -> None:
        self.kind, self.unit, self.total, self.wall = kind, unit, total, wall
        self.own, self.cumulative = own, cumulative


class Profiler:
    def start(self, pid: int, phase: str) -> None:
        raise NotImplementedError

    def stop(self) -> Profile:
        raise NotImplementedError


class PySpy(Profiler):
    """``py-spy record --gil --format raw --nolineno`` attached to the broker for one phase.

    ``--gil`` keeps only samples of a thread holding the GIL: time spent waiting (epoll, a worker thread's
    lock) is left out, so the samples are the broker's Python CPU time."""

    name = "py-spy"
    rate = 1000

    def __init__(self, executable: str, directory: Path) -> None:
        self.executable = executable
        self.directory = directory

    def start(self, pid: int, phase: str) -> None:
        self.output = self.directory / f"{phase}.pyspy.txt"
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [self.executable, "record", "--pid", str(pid), "--rate", str(self.rate), "--format", "raw",
             "--nolineno", "--gil", "--output", str(self.output)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # py-spy says so on stdout once it samples: wait for that line rather than a fixed delay.
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if b"Sampling process" in line:
                return
        raise SystemExit(f"py-spy did not start: {self.proc.communicate()[1].decode(errors='replace')}")

    def stop(self) -> Profile:
        wall = time.perf_counter() - self.started
        self.proc.send_signal(signal.SIGINT)
        self.proc.communicate(timeout=120)
        own: collections.Counter = collections.Counter()
        cumulative: collections.Counter = collections.Counter()
        total = 0
        for line in self.output.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [tidy(frame) for frame in stack.split(";")]
            total += n
            own[frames[-1]] += n
            for frame in set(frames):
                cumulative[frame] += n
        return Profile("py-spy", "samples", total, wall, dict(own), dict(cumulative))


#: Frames every sample of a thread passes through (start-up, the CLI, trio's entry, thread bootstrap):
#: left out of the cumulative list, where they would only fill the top rows.
ENTRY_FRAMES = ("(<frozen runpy>)", "(typer/", "(kraftpy/__main__.py)", "(kraftpy/cli/main.py)",
                "(kraftpy/cli/dev.py)", "run (trio/_core/_run.py)", "(threading.py)", "(kraftpy)",
                "(trio/_core/_thread_cache.py)")


def is_entry_frame(frame: str) -> bool:
    return any(marker in frame for marker in ENTRY_FRAMES) and not frame.startswith("unrolled_run")


def tidy(frame: str) -> str:
    """``func (path/to/file.py)`` → ``func (file.py)`` with the package folders kept short."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("site-packages/", "lib/python3"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where})" if where else name


CPROFILE_WRAPPER = """
import cProfile, os, signal, sys
profiler = cProfile.Profile()
def toggle(signum, frame):
    if signum == signal.SIGUSR1:
        profiler.enable()
    else:
        profiler.disable()
        profiler.dump_stats(sys.argv[1] + ".tmp")
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
        profiler.clear()
signal.signal(signal.SIGUSR1, toggle)
signal.signal(signal.SIGUSR2, toggle)
sys.argv = ["kraftpy", *sys.argv[2:]]
from kraftpy.cli.main import main
main()
"""


class CProfile(Profiler):
    """cProfile inside the broker process, switched on and off by signals for one phase."""

    name = "cProfile"

    def __init__(self, directory: Path) -> None:
        self.output = directory / "cprofile.out"

    def start(self, pid: int, phase: str) -> None:
        self.pid = pid
        self.output.unlink(missing_ok=True)
        self.started = time.perf_counter()
        os.kill(pid, signal.SIGUSR1)

    def stop(self) -> Profile:
        import pstats

        wall = time.perf_counter() - self.started
        os.kill(self.pid, signal.SIGUSR2)
        while not self.output.exists():  # the broker writes it, then renames it into place
            time.sleep(0.05)
        stats = pstats.Stats(str(self.output)).stats  # type: ignore[attr-defined]
        own, cumulative = {}, {}
        for (filename, _, name), (_, _, tottime, cumtime, _) in stats.items():
            key = tidy(f"{name} ({filename})")
            own[key] = own.get(key, 0.0) + tottime
            cumulative[key] = max(cumulative.get(key, 0.0), cumtime)
        return Profile("cProfile", "s", sum(own.values()), wall, own, cumulative)


class CProfiledDev(DevProcess):
    """`kraftpy dev` started through `CPROFILE_WRAPPER`, so that `CProfile` can switch cProfile on."""

    def __init__(self, directory: Path, script: Path, output: Path) -> None:
        super().__init__(directory)
        self.script, self.output = script, output

    def start(self, timeout: float = 60.0) -> DevProcess:
        self.process = subprocess.Popen(
            [sys.executable, str(self.script), str(self.output), "dev", "--dir", str(self.directory),
             "--port", str(self.port), "--controller-port", str(self.controller_port),
             "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
        threading.Thread(target=self._pump, args=(self.process,), daemon=True).start()
        self.wait_for("broker running", timeout)
        return self


def make_profiler(directory: Path, notes: list[str]) -> tuple[Profiler, DevProcess]:
    """py-spy if it is there or installs from PyPI and can attach; else cProfile in the broker."""
    root = directory / "kraftpy-profiled"
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"],
                             capture_output=True, text=True)
        spy = shutil.which("py-spy", path=str(Path(sys.executable).parent))
        if pip.returncode == 0 and spy:
            notes.append("py-spy was installed from PyPI into the project's environment for this run.")
    if spy is not None:
        check = subprocess.run([spy, "dump", "--pid", str(os.getpid())], capture_output=True, text=True)
        if check.returncode == 0:
            return PySpy(spy, directory), DevProcess(root)
        notes.append(f"py-spy cannot attach here ({check.stderr.strip()[:120]}); cProfile was used instead.")
    script = directory / "cprofile_wrapper.py"
    script.write_text(CPROFILE_WRAPPER)
    profiler = CProfile(directory)
    return profiler, CProfiledDev(root, script, profiler.output)


# -- Redis -----------------------------------------------------------------------------------------


def ensure_redis(notes: list[str]) -> None:
    if shutil.which("redis-server") and shutil.which("redis-benchmark") and shutil.which("redis-cli"):
        return
    if os.geteuid() != 0:
        raise SystemExit("redis-server, redis-cli and redis-benchmark are needed: "
                         "apt-get install redis-server redis-tools")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server", "redis-tools"], check=True,
                   capture_output=True, env=env)
    notes.append("redis-server and redis-tools were installed with apt-get for this run.")


def redis_version() -> str:
    text = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    return next((part.split("=", 1)[1] for part in text.split() if part.startswith("v=")), text.strip())


def redis_benchmark(port: int, requests: int, command: list[str]) -> float:
    """Requests/s that redis-benchmark reports for one custom command."""
    proc = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(requests), "-c", str(REDIS_CLIENTS),
         "-P", str(PIPELINE), "--csv", *command],
        capture_output=True, text=True, check=True)
    rows = [row for row in csv.reader(io.StringIO(proc.stdout)) if row and row[0] != "test"]
    return float(rows[-1][1])


def redis_cli(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
                          capture_output=True, text=True).stdout.strip()


def redis_pass(root: Path, records: int) -> dict:
    (port,) = free_ports(1)
    root.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root),
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "yes", "--daemonize", "no",
         "--logfile", str(root / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while redis_cli(port, "PING") != "PONG":
            if server.poll() is not None:
                raise SystemExit(f"redis-server exited: {(root / 'redis.log').read_text()[-1000:]}")
            time.sleep(0.05)
        value = "v" * RECORD_SIZE
        with Meter(server.pid) as produce_meter:
            produce_rps = redis_benchmark(port, records, ["XADD", "bench", "*", "f", value])
        length = int(redis_cli(port, "XLEN", "bench"))
        if length != records:
            raise SystemExit(f"redis: XLEN is {length}, expected {records}")
        calls = max(records // 10, 10_000)  # 10x as many records as written: a run long enough to time
        with Meter(server.pid) as consume_meter:
            calls_rps = redis_benchmark(port, calls,
                                        ["XRANGE", "bench", "-", "+", "COUNT", str(XRANGE_COUNT)])
        aof = sum(f.stat().st_size for f in root.rglob("*.aof") if f.is_file())
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    return {"produce": produce_rps, "consume": calls_rps * XRANGE_COUNT, "produce_meter": produce_meter,
            "consume_meter": consume_meter, "aof_bytes": aof, "xrange_calls": calls}


# -- output ----------------------------------------------------------------------------------------


def print_profile(title: str, profile: Profile) -> None:
    if profile.kind == "py-spy":
        busy = profile.total / (PySpy.rate * profile.wall) if profile.wall else 0.0
        print(f"**{title}** — {profile.total:.0f} samples of the broker process holding the GIL, at "
              f"{PySpy.rate} Hz over {profile.wall:.1f} s (it ran Python {busy:.0%} of the time). The entry "
              "frames every sample passes through (start-up, CLI, `trio.run`) are left out of the cumulative "
              "list.\n")
    else:
        print(f"**{title}** — {profile.total:.2f} s of profiled Python time over {profile.wall:.1f} s "
              "(cProfile slows the broker down: the shares matter, not the seconds).\n")

    def share(value: float) -> str:
        return f"{value / profile.total:.1%}" if profile.total else "-"

    top_own = sorted(profile.own.items(), key=lambda kv: -kv[1])[:TOP]
    top_cum = [kv for kv in sorted(profile.cumulative.items(), key=lambda kv: -kv[1])
               if not is_entry_frame(kv[0])][:TOP]
    print("| # | own time | share | function | | cumulative | share | function |")
    print("|---:|---:|---:|---|---|---:|---:|---|")
    def cells(entry: tuple[str, float] | None) -> str:
        if entry is None:
            return " | | "
        value = f"{entry[1]:.0f}" if profile.kind == "py-spy" else f"{entry[1]:.3f}"
        return f"{value} | {share(entry[1])} | `{entry[0]}`"

    for i in range(max(len(top_own), len(top_cum))):
        left = cells(top_own[i] if i < len(top_own) else None)
        right = cells(top_cum[i] if i < len(top_cum) else None)
        print(f"| {i + 1} | {left} | | {right} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per phase")
    args = parser.parse_args()
    records = args.records
    notes: list[str] = []
    ensure_redis(notes)
    work = Path(tempfile.mkdtemp(prefix="kraftpy-bench-broker-"))
    try:
        redis = redis_pass(work / "redis", records)
        kraft = kraftpy_pass(DevProcess(work / "kraftpy"), records, None)
        profiler, profiled_dev = make_profiler(work, notes)
        profiled = kraftpy_pass(profiled_dev, records, profiler)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    produced, consumed = kraft["produce"], kraft["consume"]
    rows = [
        ("produce", produced.records_per_sec, redis["produce"], kraft["produce_meter"],
         redis["produce_meter"]),
        ("consume", consumed.records_per_sec, redis["consume"], kraft["consume_meter"],
         redis["consume_meter"]),
    ]
    if "kcat_produce" in kraft:
        rows.insert(1, ("produce with kcat (C client)", kraft["kcat_produce"], redis["produce"],
                        kraft["kcat_produce_meter"], redis["produce_meter"]))
    if "kcat_consume" in kraft:
        rows.append(("consume with kcat (C client)", kraft["kcat_consume"], redis["consume"], kraft["kcat_meter"],
                     redis["consume_meter"]))
    print("## broker\n")
    print("One `kraftpy dev` process (controller and broker) against Redis Streams "
          f"{redis_version()} on the same machine in the same run, {records:,} records of {RECORD_SIZE} bytes each way. kraftpy is driven "
          "by the `kraftpy perf` engine (librdkafka through confluent-kafka, one producer with acks=1 and "
          "librdkafka's default batching, linger.ms=5; one consumer reading the partition from the "
          "beginning). Redis runs with `appendonly yes`, `appendfsync everysec` and is driven by "
          f"`redis-benchmark -P {PIPELINE} -c {REDIS_CLIENTS}`: `XADD bench * f <100 bytes>` for produce, "
          f"`XRANGE bench - + COUNT {XRANGE_COUNT}` for consume (records/s = calls/s x {XRANGE_COUNT}; it "
          "re-reads the head of the stream, Redis' best case). kraftpy does not fsync per write (its "
          "default flush policy). Server CPU is the server process's user+system time over the phase's "
          "wall time (1.00 = one core); client CPU is the load generator's (for the kcat row it is the "
          "benchmark process's, which only waits: kcat's own CPU is not counted). The kcat rows write and "
          "read the same number of records with kcat, librdkafka's C command-line client (acks=1, linger.ms=5), "
          "the fair peer of redis-benchmark.\n")
    print("| phase | kraftpy records/s | Redis records/s | kraftpy / Redis | kraftpy server CPU | "
          "Redis server CPU | kraftpy client CPU | records per server CPU-second, kraftpy / Redis |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, k_rps, r_rps, km, rm in rows:
        k_eff = k_rps * km.wall / km.server if km.server else 0.0
        r_eff = r_rps * rm.wall / rm.server if rm.server else 0.0
        print(f"| {name} | {k_rps:,.0f} | {r_rps:,.0f} | {k_rps / r_rps:.2f}x | {km.server / km.wall:.2f} | "
              f"{rm.server / rm.wall:.2f} | {km.client / km.wall:.2f} | "
              f"{k_eff:,.0f} / {r_eff:,.0f} = {k_eff / r_eff:.2f}x |")
    print()
    lat = produced.latency
    e2e = consumed.e2e_latency
    print(f"kraftpy produce: {produced.mb_per_sec:.1f} MB/s, delivery latency ms avg {lat.avg_ms:.1f}, "
          f"p50 {lat.p50_ms:.1f}, p99 {lat.p99_ms:.1f}, p99.9 {lat.p999_ms:.1f}. kraftpy consume: "
          f"{consumed.mb_per_sec:.1f} MB/s, first record after {consumed.first_record_ms:.0f} ms (the "
          f"end-to-end latency, p50 {e2e.p50_ms:.0f} ms, is the records' age here: they were written "
          "before the consumer started).\n")
    met = [name for name, k_rps, r_rps, *_ in rows if k_rps >= r_rps]
    missed = [name for name, k_rps, r_rps, *_ in rows if k_rps < r_rps]
    if any(name.endswith("(C client)") for name in met) and missed:
        print("Where the Python client falls short, it is the bottleneck (its CPU column is a whole core "
              "while the broker uses a fraction of one); the C client rows show what the broker serves.\n")
    if not missed:
        verdict = "**met** for both."
    else:
        verdict = f"**not met** for {' and '.join(missed)}" + (f"; met for {' and '.join(met)}." if met else ".")
    print(f"Goal (at least Redis Streams' records/s for produce and for consume): {verdict}\n")
    print(f"### Where the broker's time goes ({profiler.name})\n")
    p_prod, p_cons = profiled["produce"], profiled["consume"]
    print(f"A second pass against a fresh `kraftpy dev` with the profiler attached ran at "
          f"{p_prod.records_per_sec:,.0f} records/s for produce and {p_cons.records_per_sec:,.0f} for "
          "consume.\n")
    print_profile("produce", profiled["produce_profile"])
    print_profile("consume", profiled["consume_profile"])
    for note in notes:
        print(note)
    if notes:
        print()
    print(f"Run: `python bench/broker.py --records {records}` on {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}; the load generators "
          "share the cores with the servers.")


if __name__ == "__main__":
    main()
