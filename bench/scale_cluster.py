"""Partition scale on a 3 + 3 cluster: creation, metadata propagation, failover, restarts, memory.

Three `kraftpy controller` and three `kraftpy broker` processes on this machine (the cluster of
tests/helpers/deployments.py, with Kafka's broker.session.timeout.ms=9000 and
broker.heartbeat.interval.ms=2000; controller.quorum.election.timeout.ms=1000,
controller.quorum.fetch.timeout.ms=2000), a new cluster for each size. For each size the benchmark:

1. creates topics of 100 partitions, at most 10,000 partitions a CreateTopics call (Kafka's bound on
   one controller operation), replication factor 3 up to ``--rf3-max`` partitions and 1 beyond, and
   times it until every broker's Metadata names a leader for every partition;
2. reads metadata propagation from the brokers' ``kraftpy_metadata_apply_latency_seconds`` histograms:
   from the quorum leader's append of a commit (the batch's timestamp, one clock on this machine)
   until the broker's handlers use the image that holds it, commit included; once over the creation,
   then over 50 single changes (a topic of one partition created, one at a time, each waited for);
3. times a Metadata request for every topic (kraftpy's own client, the answer decoded);
4. reads the resident memory and open files of each process, then the three brokers' CPU over 10 s
   with no client (following and leading every partition at rest), then sends 20 records one at a time
   with acks=all, each to a partition of another topic, and times each from produce() to its delivery
   report (with replication factor 3, two rounds of the followers' fetches);
5. stops one broker with SIGTERM (a controlled shutdown: its leaderships move first) and starts it
   again, then kills another with SIGKILL and starts it again, each time until it is running
   (registered, its logs open, unfenced) — after a kill the controller waits out the dead
   incarnation's session before it takes the new one; the steps after the first restart start once
   every broker names a leader for every partition again;
6. kills the active controller with SIGKILL and times until another one is active, then stops that
   one with SIGTERM (it resigns) and times the same;
7. reads the newest metadata snapshot a controller wrote (`metadata.log.max.record.bytes.between.snapshots`
   is set to about 40 bytes a partition, so that one is written at every size) and times loading it
   into an image with the nodes' code, in a fresh process.

Percentiles of a histogram are its buckets' upper bounds (as Prometheus' histogram_quantile reads
them). ``python bench/scale_cluster.py --sizes 1000,10000`` runs the smaller sizes only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kraftpy.broker.client import ConnectionClosed, KafkaConnection  # noqa: E402
from tests.helpers.deployments import ProcessCluster  # noqa: E402
from tests.helpers.protocol import metadata  # noqa: E402

APPLY_METRIC = "kraftpy_metadata_apply_latency_seconds"
GOALS = {"failover_s": 2.0, "restart_s": 15.0, "propagation_p99_s": 0.2}
#: Metadata quorum epochs a run makes: the first election and the two failovers it causes. More is the
#: quorum electing a controller nobody stopped (an active controller silent past
#: controller.quorum.fetch.timeout.ms, its followers electing another).
EXPECTED_EPOCHS = 3
PER_CALL = 10_000
#: The idle window over which the brokers' CPU is read, and the acks=all sends timed one at a time.
IDLE_S = 10.0
ACKS_ALL_SENDS = 20
#: Kafka's defaults (the test cluster's are shorter): a broker busy opening 10,000 logs may miss a
#: 3-second session, and a restart after SIGKILL waits out the dead incarnation's.
KAFKA_SESSION = {"broker.session.timeout.ms": 9000, "broker.heartbeat.interval.ms": 2000}


def histogram(port: int, metric: str) -> dict[float, float]:
    """Cumulative bucket counts of ``metric`` at a node's metrics endpoint, by upper bound (seconds)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120).read().decode()
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(metric + "_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            out[bound] = out.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def merged(readings: list[dict[float, float]]) -> dict[float, float]:
    out: dict[float, float] = {}
    for reading in readings:
        for bound, count in reading.items():
            out[bound] = out.get(bound, 0.0) + count
    return out


def quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    rank = q * counts[-1]
    return next((b for b, c in zip(bounds, counts, strict=True) if c >= rank and c > 0), float("inf"))


def samples(before: dict[float, float], after: dict[float, float]) -> int:
    return int(after.get(float("inf"), 0.0) - before.get(float("inf"), 0.0))


def broker_histograms(cluster: ProcessCluster) -> dict[float, float]:
    return merged([histogram(port, APPLY_METRIC) for port in cluster.broker_metrics_ports.values()])


def all_led(port: int, topics: list[str], partitions: int) -> bool:
    async def main() -> bool:
        with trio.fail_after(120):
            async with await KafkaConnection.connect("127.0.0.1", port, max_frame_bytes=1 << 30) as conn:
                response = await metadata(conn, None, auto_create=False)
        led = {t.name: sum(1 for p in t.partitions if p.leader_id >= 0) for t in response.topics if t.error_code == 0}
        return all(led.get(name) == partitions for name in topics)

    try:
        return trio.run(main)
    except (ConnectionClosed, OSError, trio.TooSlowError):  # a broker still starting answers nothing yet
        return False


def metadata_time(port: int, rounds: int = 5) -> tuple[float, int]:
    """Median seconds of a Metadata request for every topic, and the partitions it named."""
    async def main() -> tuple[float, int]:
        times, named = [], 0
        async with await KafkaConnection.connect("127.0.0.1", port, max_frame_bytes=1 << 30) as conn:
            for _ in range(rounds):
                started = time.perf_counter()
                response = await metadata(conn, None, auto_create=False)
                times.append(time.perf_counter() - started)
                named = sum(len(t.partitions) for t in response.topics)
        return statistics.median(times), named

    return trio.run(main)


def create(cluster: ProcessCluster, topics: list[str], partitions: int, rf: int) -> float:
    started = time.perf_counter()
    per_call = max(1, PER_CALL // partitions)
    for first in range(0, len(topics), per_call):
        create_call(cluster, topics[first:first + per_call], partitions, rf)
    ports = list(cluster.broker_ports.values())
    total = len(topics) * partitions
    for port in ports:
        while not all_led(port, topics, partitions):
            time.sleep(max(0.2, total / 50_000))
    return time.perf_counter() - started


def settle(cluster: ProcessCluster, topics: list[str]) -> None:
    """Until every broker's Metadata names a leader for every partition of ``topics``."""
    for port in cluster.broker_ports.values():
        while not all_led(port, topics, 100):
            time.sleep(0.5)


def create_call(cluster: ProcessCluster, names: list[str], partitions: int, rf: int, attempts: int = 5) -> None:
    """One CreateTopics call, asked again (a new client) for the topics whose answer was lost with its
    connection; a topic that already exists was made by an earlier attempt (librdkafka also sends a
    request again by itself after a lost connection)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    pending = list(names)
    seen = []
    for _ in range(attempts):
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        futures = admin.create_topics([NewTopic(t, partitions, rf) for t in pending],
                                      operation_timeout=600, request_timeout=600)
        lost = []
        for name, future in futures.items():
            try:
                future.result(timeout=900)
            except KafkaException as exc:
                code = exc.args[0].code()
                if code == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                if code not in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._DESTROY_BROKER):
                    raise
                lost.append(name)
                seen.append(str(exc.args[0]))
        if not lost:
            return
        pending = lost
    raise SystemExit(f"could not create {len(pending)} topics: {seen[-1]}")


def single_changes(cluster: ProcessCluster, count: int, rf: int) -> None:
    """``count`` topics of one partition, created one at a time, each waited for."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    for i in range(count):
        futures = admin.create_topics([NewTopic(f"probe-{i:03d}", 1, rf)], operation_timeout=60)
        for future in futures.values():
            future.result(timeout=120)
        time.sleep(0.05)  # a change at a time: the next one meets a quiet cluster


def rss_and_files(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def restart_broker(cluster: ProcessCluster, broker_id: int, how: signal.Signals) -> tuple[float, float]:
    """Stop a broker with ``how`` and start it again: (seconds to exit, seconds from start to running)."""
    proc = cluster.brokers[broker_id]
    started = time.perf_counter()
    if how is signal.SIGKILL:
        proc.kill()
    else:
        proc.signal(how)
    proc.wait(600)
    stopped = time.perf_counter() - started
    started = time.perf_counter()
    mark = proc.start()
    proc.wait_for("broker running", timeout=300, since=mark)
    return stopped, time.perf_counter() - started


def failover(cluster: ProcessCluster, how: signal.Signals) -> tuple[int, float]:
    """Stop the active controller with ``how``: (its id, seconds until another one is active)."""
    old = cluster.active_controller()
    marks = cluster.marks()
    started = time.perf_counter()
    if how is signal.SIGKILL:
        cluster.controllers[old].kill()
    else:
        cluster.controllers[old].signal(how)
    cluster.wait_for_active_controller(marks, exclude=old, timeout=120)
    elapsed = time.perf_counter() - started
    cluster.controllers[old].wait(120)
    return old, elapsed


def newest_snapshot(cluster: ProcessCluster) -> Path | None:
    found = [p for i in cluster.controllers for p in (cluster.root / f"controller-{i}").rglob("*.checkpoint")]
    return max(found, key=lambda p: (p.stat().st_size, p.name), default=None)


_SNAPSHOT_LOAD = """
import sys, time
from kraftpy.metadata.image import MetadataProvenance
from kraftpy.metadata.loader import decode_snapshot_file
data = open(sys.argv[1], "rb").read()
started = time.perf_counter()
decode_snapshot_file(data, MetadataProvenance(0, 0))
print(time.perf_counter() - started)
"""


def snapshot_load(path: Path) -> float:
    """Seconds to load the snapshot into an image, in a fresh process as a starting node does (not in
    this one, whose heap of collected log lines the garbage collector would walk again and again)."""
    run = subprocess.run([sys.executable, "-c", _SNAPSHOT_LOAD, str(path)], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=600)
    return float(run.stdout.strip())


def run_size(root: Path, total: int, rf: int) -> dict:
    topics = [f"scale-{i:04d}" for i in range(total // 100)]
    settings = {"metadata.log.max.record.bytes.between.snapshots": max(65_536, total * 40),
                "num.partitions": 1, **KAFKA_SESSION}
    out: dict = {"total": total, "rf": rf}
    with ProcessCluster(root, settings, metrics=True, log_level="info") as cluster:
        try:
            measure(cluster, out, topics, total, rf)
        except (Exception, SystemExit) as exc:  # what was measured until then is kept, and why it stopped
            out["error"] = str(exc).split(":\n", 1)[0][:300]  # its first line, not the process's log tail
            logs = os.environ.get("KRAFTPY_BENCH_LOGS")
            if logs:
                cluster.dump_logs(Path(logs))
        out["epochs"] = max((line.get("epoch", 0) for proc in cluster.controllers.values() for line in proc.lines
                             if line.get("event") == "leader changed"), default=0)
    return out


def measure(cluster: ProcessCluster, out: dict, topics: list[str], total: int, rf: int) -> None:
    h0 = broker_histograms(cluster)
    out["create_s"] = create(cluster, topics, 100, rf)
    h1 = broker_histograms(cluster)
    single_changes(cluster, 50, min(rf, 3))
    h2 = broker_histograms(cluster)
    out["create_propagation"] = (samples(h0, h1), quantile(h0, h1, 0.5), quantile(h0, h1, 0.99))
    out["single_propagation"] = (samples(h1, h2), quantile(h1, h2, 0.5), quantile(h1, h2, 0.99))
    out["metadata_s"], out["metadata_partitions"] = metadata_time(cluster.broker_ports[4])
    out["brokers"] = [rss_and_files(p.pid) for p in cluster.brokers.values()]
    out["controllers"] = [rss_and_files(p.pid) for p in cluster.controllers.values()]
    out["idle_cores"] = idle_cores(cluster, IDLE_S)
    out["acks_all_ms"] = acks_all_latencies(cluster, topics, ACKS_ALL_SENDS)
    out["shutdown_s"], out["restart_clean_s"] = restart_broker(cluster, 4, signal.SIGTERM)
    # A broker is running once its metadata shows it unfenced; the elections written with its
    # unfencing may still be on their way. Each step starts from a cluster where they all arrived.
    settle(cluster, topics)
    _, out["restart_kill_s"] = restart_broker(cluster, 5, signal.SIGKILL)
    settle(cluster, topics)
    killed, out["failover_kill_s"] = failover(cluster, signal.SIGKILL)
    cluster.controllers[killed].start()
    stopped, out["failover_term_s"] = failover(cluster, signal.SIGTERM)
    cluster.controllers[stopped].start()
    snapshot = newest_snapshot(cluster)
    out["snapshot"] = None if snapshot is None else (snapshot.stat().st_size, snapshot_load(snapshot))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cores(cluster: ProcessCluster, seconds: float) -> float:
    """The three brokers' CPU over ``seconds`` with no client: what following and leading every
    partition costs at rest (the followers' long polls and whatever else runs on its own)."""
    pids = [proc.pid for proc in cluster.brokers.values()]
    before = sum(cpu_seconds(pid) for pid in pids)
    time.sleep(seconds)
    return (sum(cpu_seconds(pid) for pid in pids) - before) / seconds


def acks_all_latencies(cluster: ProcessCluster, topics: list[str], sends: int) -> list[float]:
    """One record at a time, each to a partition of another topic, acks=all and linger.ms=0: the ms from
    produce() to the delivery report. With replication factor 3 each waits for both followers to fetch
    the record and say so in their next fetch (two rounds of the followers' fetch sessions)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0})
    out = []
    try:
        step = max(len(topics) // sends, 1)
        for i in range(sends + 1):  # the first one warms up (metadata, connections) and is not counted
            topic = topics[(i * step) % len(topics)]
            reports: list = []
            started = time.perf_counter()
            producer.produce(topic, b"x" * 100, partition=i % 100,
                             on_delivery=lambda err, _msg, into=reports: into.append(err))
            if producer.flush(30) != 0 or reports != [None]:
                raise SystemExit(f"acks=all send to {topic} failed: {reports}")
            if i:
                out.append((time.perf_counter() - started) * 1000)
    finally:
        producer.flush(5)
    return out


def fmt_bound(seconds: float) -> str:
    return "> 30 s" if seconds == float("inf") else f"≤ {seconds * 1000:g} ms"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--rf3-max", type=int, default=10_000,
                        help="largest size created at replication factor 3; larger ones at 1")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    for total in sizes:
        rf = 3 if total <= args.rf3_max else 1
        print(f"scale_cluster: {total:,} partitions, replication factor {rf} ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="kraftpy-scale-cluster-", ignore_cleanup_errors=True) as tmp:
            results.append(run_size(Path(tmp), total, rf))
        print(f"scale_cluster: {json.dumps(results[-1])}", file=sys.stderr, flush=True)
    print("## scale_cluster\n")
    print(__doc__.split("\n\n", 1)[1].split("\n\nPercentiles")[0].replace("\n   ", " ").strip() + "\n")
    cols = [f"{r['total']:,} (RF={r['rf']})" for r in results]
    print("| partitions | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(results))

    def row(name: str, cell) -> None:
        def shown(r: dict) -> str:
            try:
                return cell(r)
            except KeyError:
                return "—"
        print(f"| {name} | " + " | ".join(shown(r) for r in results) + " |")

    row("CreateTopics until every broker names every leader", lambda r: f"{r['create_s']:.1f} s")
    row("propagation during creation: commits, p50 / p99",
        lambda r: f"{r['create_propagation'][0]:,}, {fmt_bound(r['create_propagation'][1])} / "
                  f"{fmt_bound(r['create_propagation'][2])}")
    row("propagation of single changes: commits, p50 / p99",
        lambda r: f"{r['single_propagation'][0]:,}, {fmt_bound(r['single_propagation'][1])} / "
                  f"{fmt_bound(r['single_propagation'][2])}")
    row("Metadata for every topic (median of 5)", lambda r: f"{r['metadata_s'] * 1000:,.0f} ms")
    row(f"the three brokers' CPU at rest ({IDLE_S:g} s, no client), cores", lambda r: f"{r['idle_cores']:.2f}")
    row(f"a record sent alone with acks=all ({ACKS_ALL_SENDS}, each to another topic): median / largest",
        lambda r: f"{statistics.median(r['acks_all_ms']):.1f} / {max(r['acks_all_ms']):.1f} ms")
    row("controller failover after SIGKILL of the active one", lambda r: f"{r['failover_kill_s']:.2f} s")
    row("controller failover after SIGTERM of the active one (it resigns)",
        lambda r: f"{r['failover_term_s']:.2f} s")
    row("controlled shutdown of a broker (SIGTERM until exit)", lambda r: f"{r['shutdown_s']:.1f} s")
    row("broker start until running, after a clean stop", lambda r: f"{r['restart_clean_s']:.1f} s")
    row("broker start until running, after SIGKILL", lambda r: f"{r['restart_kill_s']:.1f} s")
    row("metadata snapshot: size / load into an image",
        lambda r: "none" if r["snapshot"] is None else
        f"{r['snapshot'][0] / 2**20:,.1f} MiB / {r['snapshot'][1] * 1000:,.0f} ms")

    def per_replica(r: dict) -> str:
        replicas = r["total"] * r["rf"]
        rss = sum(b[0] for b in r["brokers"])
        files = sum(b[1] for b in r["brokers"])
        return f"{rss / 2**20:,.0f} MiB ({rss / replicas / 1024:,.1f} KiB), {files:,} ({files / replicas:.2f})"

    row("brokers' resident memory (per replica), open files (per replica)", per_replica)
    row("controllers' resident memory, each (largest)",
        lambda r: f"{max(c[0] for c in r['controllers']) / 2**20:,.0f} MiB")
    row(f"metadata quorum epochs over the run ({EXPECTED_EPOCHS}: the first election and the two failovers)",
        lambda r: f"{r['epochs']}")
    print()
    for r in results:
        if "error" in r:
            print(f"At {r['total']:,} partitions the run stopped: {r['error']}\n")
    for r in results:
        checks = [
            (f"controller failover ≤ {GOALS['failover_s']:g} s", r.get("failover_kill_s"), GOALS["failover_s"]),
            (f"broker restart after a clean stop ≤ {GOALS['restart_s']:g} s", r.get("restart_clean_s"),
             GOALS["restart_s"]),
            (f"propagation p99 ≤ {GOALS['propagation_p99_s'] * 1000:g} ms",
             r["single_propagation"][2] if "single_propagation" in r else None, GOALS["propagation_p99_s"]),
        ]
        print(f"Goals at {r['total']:,} partitions: " + "; ".join(
            f"{name}: **{'not measured' if value is None else 'met' if value <= goal else 'not met'}**"
            for name, value, goal in checks) + ".\n")
    print(f"Goal (no election the benchmark does not cause: {EXPECTED_EPOCHS} metadata quorum epochs at every size): "
          f"**{'met' if all(r['epochs'] <= EXPECTED_EPOCHS for r in results) else 'not met'}**.\n")
    print(f"Run: `python bench/scale_cluster.py {' '.join(argv)}`".rstrip() + f" on {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}; the six processes and "
          "the benchmark share the cores.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
