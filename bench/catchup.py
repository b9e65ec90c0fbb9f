"""A producer's latency while consumers catch up: what a broker's other clients see while it sends them
megabytes.

One server at a time, each started in a session of its own (as a service, or a terminal of its own,
is: on Linux with autogroup scheduling it then shares the cores with the clients as one group):
`kraftpy dev`, and Tansu (the peers section's Rust broker, in-memory storage). A topic of 6
partitions is filled with 100-byte records (bench/cperf.c, acks=1, flat out). Then a producer sends
2,000 records/s of 100 B to a topic of its own, one record a request (linger.ms=0, acks=1), for the
measured seconds after one of warm-up: first alone, then while six C consumers, one process a
partition, read the full topic from its beginning over and over (librdkafka's defaults: fetches of up
to 1 MiB a partition). The clients are the load generator: they run in the benchmark's session, one
group to the scheduler. The latency is from the record handed to librdkafka until its delivery report;
each server runs both phases three times on a fresh server, and a row is the median run by p99.
"""

from __future__ import annotations

import argparse
import os
import platform
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

from peers import Tansu, build_cperf, cperf_fields, create_topic, tansu_binary  # noqa: E402

from tests.helpers.processes import DevProcess  # noqa: E402

PARTITIONS = 6
RATE = 2000
QUANTILES = ("p50", "p99", "p999", "max")


def phases(binary: Path, bootstrap: str, records: int, seconds: float) -> dict[str, dict[str, float]]:
    """The producer's latency quantiles (ms) alone and while the consumers read."""
    create_topic(bootstrap, "catchup", PARTITIONS)
    args = ("paced", bootstrap, "catchup", str(records), "100", "1", "0")
    counts = [int(n) for n in cperf_fields(subprocess.run([str(binary), *args], capture_output=True, text=True,
                                                          timeout=900), args)["partitions"].split(",")]
    out = {}
    for phase, readers in (("alone", 0), ("catching up", PARTITIONS)):
        topic = f"latency-{readers}"
        create_topic(bootstrap, topic)
        loops = [subprocess.Popen(["bash", "-c", f"while {binary} consume {bootstrap} catchup {counts[p]} "
                                   f"cperf.partition={p} >/dev/null; do :; done"], process_group=0)
                 for p in range(readers)]
        try:
            time.sleep(0.5 if readers else 0)  # the readers connected and reading
            args = ("paced", bootstrap, topic, str(int(RATE * (seconds + 1))), "100", "1", str(RATE), "linger.ms=0",
                    "cperf.warmup=1")
            fields = cperf_fields(subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=900),
                                  args)
            if any(loop.poll() is not None for loop in loops):
                raise SystemExit("a reader stopped before the producer was done")
        finally:
            for loop in loops:
                os.killpg(loop.pid, signal.SIGKILL)
                loop.wait()
        out[phase] = {q: float(fields[q]) for q in QUANTILES}
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=12_000_000, help="records of 100 B the readers read")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of the producer measured")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kraftpy-bench-catchup-"))
    runs: dict[str, list[dict]] = {"kraftpy": [], "Tansu": []}
    try:
        binary = build_cperf(work)
        tansu = tansu_binary([])
        for round_ in range(args.rounds):
            with Tansu(tansu, session=True) as server:
                runs["Tansu"].append(phases(binary, server.bootstrap, args.records, args.seconds))
            with DevProcess(work / f"kraftpy-{round_}", session=True) as dev:
                runs["kraftpy"].append(phases(binary, dev.bootstrap, args.records, args.seconds))
            shutil.rmtree(work / f"kraftpy-{round_}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("## catchup\n")
    for paragraph in __doc__.split("\n\n")[1:]:
        print(paragraph.replace("\n", " ").strip() + "\n")
    print("| server | phase | produce latency p50 / p99 / p99.9 / max | p99 of each run |")
    print("|---|---|---:|---:|")
    for name, found in runs.items():
        for phase in ("alone", "catching up"):
            ordered = sorted((run[phase] for run in found), key=lambda q: q["p99"])
            median = ordered[len(ordered) // 2]
            print(f"| {name} | {phase} | " + " / ".join(f"{median[q]:.1f}" for q in QUANTILES) + " ms | "
                  + " / ".join(f"{run[phase]['p99']:.1f}" for run in found) + " ms |")
    print()
    print(f"Run: `{' '.join(['python bench/catchup.py', *argv])}` on 2 cores, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}; the servers, the producer and the six readers share the cores.")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
