"""kraftpy in a test suite: how long the pytest fixtures take, and the example suite's wall time.

* Fixture request to the first acknowledged produce: what a test that asks for ``kraftpy_cluster`` and
  ``kraftpy_topic`` and produces one record waits for: `kraftpy.testing.Cluster.start` (what the session
  fixture runs), a topic of its own (what ``kraftpy_topic()`` runs), a confluent-kafka producer's first
  record acknowledged (acks=all). For one controller with one broker and with three; best and median of
  the rounds, with the start broken down as the supervisor reports it.
* A topic of a test's own: ``kraftpy_topic()`` on a running cluster, until every broker knows its leader.
* The example suite: ``python -m pytest examples/testing`` (its own cluster of one broker, five tests).

Python's bytecode is compiled beforehand, as a pip install leaves it. ``python bench/testing.py
--quick`` is the run the tests make (that it works, not what it measures).
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def compiled_bytecode() -> None:
    """Let this process and its children read and write bytecode (in a directory of their own, removed
    at the end)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    prefix = tempfile.mkdtemp(prefix="kraftpy-bench-pyc-")
    atexit.register(shutil.rmtree, prefix, True)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    subprocess.run([sys.executable, "-c", "import kraftpy.testing._start, kraftpy.testing._supervisor, kraftpy.testing._node"],
                   check=True)


def first_produce(brokers: int, topics: int = 0) -> dict[str, float]:
    """One cluster: the time to its first acknowledged produce, then the median cost of ``topics`` more."""
    from confluent_kafka import Producer

    from kraftpy.testing import cluster

    began = time.monotonic()
    c = cluster(brokers=brokers).start()
    try:
        started = time.monotonic()
        c.create_topic("first")
        topic = time.monotonic()
        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
        producer.produce("first", b"hello")
        assert producer.flush(30) == 0
        done = time.monotonic()
        timings = c.start_timings
        costs = []
        for i in range(topics):
            before = time.monotonic()
            c.create_topic(f"test_something-{i}")
            costs.append(time.monotonic() - before)
    finally:
        c.close()
    return {"total": done - began, "start": started - began, "python": timings["total"] - timings["whole"],
            "nodes": timings["whole"], "topic": topic - started, "produce": done - topic,
            "topics": statistics.median(costs) if costs else 0.0}


def import_reference() -> float:
    """A Python process started and a node's modules imported, as the zygote does it (the collector
    paused); its exit is not counted (the clock is the machine's monotonic one, in both processes)."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "import gc, time; gc.disable(); import kraftpy.testing._node; "
                           "print(time.monotonic())"], check=True, capture_output=True, text=True)
    return float(done.stdout) - began


def example_suite() -> tuple[float, str]:
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(ROOT / "examples" / "testing")], cwd=ROOT / "examples" / "testing",
                          capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"the example suite failed:\n{done.stdout[-3000:]}")
    summary = re.search(r"(\d+ passed)", done.stdout)
    return wall, summary.group(1) if summary else "?"


#: The goals of the first acknowledged produce, by number of brokers, and of a topic's cost (seconds).
FIRST_PRODUCE_GOALS = {1: 0.5, 3: 1.5}
TOPIC_GOAL = 0.020


def verdicts(runs: dict[int, list[dict[str, float]]], topics: dict[int, float]) -> list[str]:
    out = []
    for n, rounds in runs.items():
        goal = FIRST_PRODUCE_GOALS.get(n)
        if goal is not None:
            value = statistics.median(r["total"] for r in rounds)
            out.append(f"first produce with {n} broker{'s' if n > 1 else ''} {ms(value)} "
                       f"({'within' if value <= goal else 'over'} {ms(goal)})")
    for n, value in topics.items():
        out.append(f"a topic with {n} broker{'s' if n > 1 else ''} {ms(value)} "
                   f"({'within' if value <= TOPIC_GOAL else 'over'} {ms(TOPIC_GOAL)})")
    return out


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--sizes", default="1,3", help="numbers of brokers")
    ap.add_argument("--no-example", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="one round, one broker, three topics, no example, no compiling: that the benchmark runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.topics, args.sizes, args.no_example = 1, 3, "1", True
    sizes = [int(s) for s in args.sizes.split(",")]
    if not args.quick:
        compiled_bytecode()
    if args.rounds > 1:
        first_produce(1)  # a warm-up: the operating system's caches, not Python's
    runs = {n: [first_produce(n, args.topics if i == args.rounds - 1 else 0) for i in range(args.rounds)]
            for n in sizes}
    topics = {n: runs[n][-1]["topics"] for n in sizes}
    reference = min(import_reference() for _ in range(min(args.rounds, 3))) if not args.quick else 0.0

    def cell(n: int, key: str) -> str:
        values = [r[key] for r in runs[n]]
        return f"{ms(min(values))} / {ms(statistics.median(values))}"

    def median(n: int, key: str) -> str:
        return ms(statistics.median(r[key] for r in runs[n]))

    head = " | ".join(f"1 controller + {n} broker{'s' if n > 1 else ''}" for n in sizes)
    rows = [
        f"| | {head} |",
        "|---|" + "---:|" * len(sizes),
        f"| fixture request to the first acknowledged produce (best / median of {args.rounds}) | "
        + " | ".join(cell(n, "total") for n in sizes) + " |",
        "| — of it, `kraftpy_cluster`: the cluster's start (median) | "
        + " | ".join(median(n, "start") for n in sizes) + " |",
        "| — — Python starting the supervisor, which forks the zygote and imports its own modules | "
        + " | ".join(median(n, "python") for n in sizes) + " |",
        "| — — the zygote's import of the nodes' modules done, the nodes forked, serving, and every broker "
        "listing every other | "
        + " | ".join(median(n, "nodes") for n in sizes) + " |",
        "| — of it, `kraftpy_topic()`: a topic of the test's own | "
        + " | ".join(median(n, "topic") for n in sizes) + " |",
        "| — of it, a confluent-kafka producer's first record acknowledged (acks=all) | "
        + " | ".join(median(n, "produce") for n in sizes) + " |",
        f"| `kraftpy_topic()` on a running cluster (median of {args.topics}) | "
        + " | ".join(ms(topics[n]) for n in sizes) + " |",
    ]
    lines = [
        "## testing",
        "",
        "kraftpy in a test suite (`kraftpy.testing`, docs/testing.md). From the moment a test asks for the "
        "`kraftpy_cluster` fixture until a record it produces is acknowledged: the cluster's start (a "
        "supervisor process imports kraftpy once and forks every node from a zygote), a topic of the "
        "test's own (`kraftpy_topic()`: created, and led on every broker), and a confluent-kafka producer's "
        "first record (acks=all). Then what each further test pays for a topic of its own. Python's "
        "bytecode compiled, as a pip install leaves it. Goals: the first produce within 0.5 s of the "
        "request with one broker and 1.5 s with three; a topic within 20 ms.",
        "",
        *rows,
        "",
        f"For reference, Python starting and importing a node's modules takes {ms(reference)} here, as the "
        "zygote does it: the floor of any start, paid once per cluster since every node is forked with them.",
        "",
        "Against the goals (medians): " + "; ".join(verdicts(runs, topics)) + ".",
        "",
    ]
    if not args.no_example:
        wall, passed = example_suite()
        lines += [f"The example suite (`python -m pytest examples/testing`: {passed}, one cluster of one broker, "
                  f"a consumer group, a transactional producer, a broker restart) takes {wall:.1f} s of wall time.",
                  ""]
    lines.append(f"Run: `python bench/testing.py` on {os.cpu_count()} cores.")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
