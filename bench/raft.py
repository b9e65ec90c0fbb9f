"""Benchmark the metadata quorum: commits/s, commit latency and fail-over time; print a markdown section.

Three `kraftpy controller` processes on loopback ports (default settings: election timeout 1000 ms,
fetch timeout 2000 ms), each with its metadata log on the local disk, fsynced as Raft requires.

* Commits: one broker registers through `ControllerClient`, then N concurrent workers send
  ``AllocateProducerIdsRequest`` for a fixed time; each answer means the active controller appended
  one ProducerIdsRecord batch and saw it committed by a majority. Reported per concurrency level:
  committed requests/s and the p50/p99 of the request's round trip (= commit latency as a client sees
  it), checked against the high watermark's advance.
* Fail-over: the leader is killed with SIGKILL; the time until one of the two others answers
  QuorumStatus as leader of a higher epoch is measured (polled every 10 ms); then the killed
  controller is started again and waited for until it has caught up, and the next round begins.

``python bench/raft.py --seconds 3 --failovers 10 --levels 1,4,16,64`` are the defaults.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kraftpy.cli.perf import percentile  # noqa: E402
from kraftpy.cli.quorum import fetch_status  # noqa: E402
from kraftpy.config.keys import BY_NAME  # noqa: E402
from kraftpy.ids import Uuid  # noqa: E402
from kraftpy.metadata.controller_config import DEFAULT_SUPPORTED_FEATURES  # noqa: E402
from kraftpy.metadata.errors import Errors  # noqa: E402
from kraftpy.metadata.messages import AllocateProducerIdsRequest, BrokerRegistrationRequest  # noqa: E402
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature  # noqa: E402
from kraftpy.metadata.rpc import ControllerClient  # noqa: E402
from kraftpy.rpc.control import RpcError  # noqa: E402
from tests.helpers.processes import KraftProcess, controller_configs, format_all  # noqa: E402

BROKER_ID = 100
GOAL_FAILOVER_S = 1.5
POLL_S = 0.01


class Controller(KraftProcess):
    """A controller process logging at info level (debug logging would cost the quorum CPU time)."""

    async def start(self, nursery: trio.Nursery) -> None:
        self.lines.clear()
        self.process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "kraftpy", self.role, "-c", str(self.config), "--log-format", "json",
             "--log-level", "info"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        nursery.start_soon(self._pump, self.process)


async def status_of(voters: dict[int, tuple[str, int]], ids: list[int], timeout: float = 0.5) -> dict | None:
    try:
        return await fetch_status([voters[i] for i in ids], timeout)
    except (RpcError, OSError):
        return None


async def commits(client: ControllerClient, broker_epoch: int, concurrency: int, seconds: float) -> dict:
    latencies: list[float] = []
    failures = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal failures
        request = AllocateProducerIdsRequest(BROKER_ID, broker_epoch)
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            response = await client.call(request, timeout=10)
            if response.error_code != Errors.NONE:
                failures += 1
                continue
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {"concurrency": concurrency, "count": len(ordered), "rate": len(ordered) / elapsed,
            "p50": percentile(ordered, 0.5), "p99": percentile(ordered, 0.99), "failures": failures}


async def failover(procs: list[Controller], voters: dict[int, tuple[str, int]],
                   nursery: trio.Nursery) -> dict:
    before = await status_of(voters, list(voters), timeout=2.0)
    assert before is not None, "no leader before the kill"
    leader = before["leader_id"]
    others = [i for i in voters if i != leader]
    procs[leader - 1].kill()
    killed = time.perf_counter()
    await procs[leader - 1].wait()
    with trio.fail_after(60):
        while True:
            status = await status_of(voters, others, timeout=0.25)
            if (status is not None and status["leader_id"] != leader
                    and status["leader_epoch"] > before["leader_epoch"]):
                break
            await trio.sleep(POLL_S)
    elapsed = time.perf_counter() - killed
    # Bring the killed controller back and wait until it has caught up with the new leader.
    await procs[leader - 1].start(nursery)
    await procs[leader - 1].wait_for("controller started", timeout=60)
    with trio.fail_after(60):
        while True:
            now = await status_of(voters, others, timeout=1.0)
            if now is not None and any(
                    v["id"] == leader and v["lag"] == 0 and v["last_fetch_ms_ago"] is not None
                    for v in now["voters"]):
                break
            await trio.sleep(0.05)
    return {"old_leader": leader, "new_leader": status["leader_id"], "epoch": status["leader_epoch"],
            "seconds": elapsed}


async def run(args: argparse.Namespace) -> tuple[list[dict], list[dict], dict]:
    root = Path(tempfile.mkdtemp(prefix="kraftpy-bench-raft-"))
    configs, voters = controller_configs(root)
    cluster_id = format_all(configs)
    procs = [Controller(f"controller-{i}", "controller", c) for i, c in enumerate(configs, start=1)]
    levels = [int(x) for x in args.levels.split(",")]
    async with trio.open_nursery() as nursery:
        for proc in procs:
            await proc.start(nursery)
        for proc in procs:
            await proc.wait_for("controller started", timeout=60)
        client = ControllerClient(nursery, voters, request_timeout=5.0)
        features = tuple(BrokerFeature(n, lo, hi) for n, (lo, hi) in DEFAULT_SUPPORTED_FEATURES.items())
        registered = await client.call(BrokerRegistrationRequest(
            BROKER_ID, cluster_id, Uuid(os.urandom(16)),
            listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092),), features=features))
        assert registered.error_code == Errors.NONE, registered
        await commits(client, registered.broker_epoch, 4, 1.0)  # warm up: connections, code paths
        results = []
        for level in levels:
            hw_before = (await status_of(voters, list(voters), timeout=2.0))["high_watermark"]
            result = await commits(client, registered.broker_epoch, level, args.seconds)
            hw_after = (await status_of(voters, list(voters), timeout=2.0))["high_watermark"]
            result["hw_advance"] = hw_after - hw_before
            results.append(result)
        failovers = [await failover(procs, voters, nursery) for _ in range(args.failovers)]
        info = {name: BY_NAME[f"controller.quorum.{name}"].default
                for name in ("election.timeout.ms", "fetch.timeout.ms", "append.linger.ms")}
        for proc in procs:
            proc.signal(15)
        for proc in procs:
            await proc.wait(60)
        nursery.cancel_scope.cancel()
    return results, failovers, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per concurrency level")
    parser.add_argument("--levels", default="1,4,16,64", help="concurrency levels")
    parser.add_argument("--failovers", type=int, default=10, help="leader kills")
    args = parser.parse_args()
    results, failovers, info = trio.run(run, args)

    print("## raft\n")
    print("Three `kraftpy controller` processes (separate processes, loopback, default settings: "
          f"controller.quorum.election.timeout.ms={info['election.timeout.ms']}, "
          f"controller.quorum.fetch.timeout.ms={info['fetch.timeout.ms']}, "
          f"controller.quorum.append.linger.ms={info['append.linger.ms']}), every metadata log append "
          "fsynced before it counts.\n")
    print("### Commits\n")
    print("One broker registers, then N concurrent callers send `AllocateProducerIdsRequest` through "
          "`ControllerClient` for a fixed time; each answer is one ProducerIdsRecord batch appended by the "
          "active controller and committed by a majority. Latency is the caller's round trip. The high "
          "watermark's advance over the run is shown as a check (it counts records, one per request). The active "
          f"controller gathers proposals for controller.quorum.append.linger.ms ({info['append.linger.ms']} ms) "
          "before it appends them as one batch: that sets the floor of the one-caller latency, and lets "
          "concurrent callers share a batch and its fsyncs.\n")
    print("| concurrent callers | commits/s | p50 latency ms | p99 latency ms | commits | HW advance "
          "| errors |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['concurrency']} | {r['rate']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['count']:,} "
              f"| {r['hw_advance']:,} | {r['failures']} |")
    print()
    times = [f["seconds"] for f in failovers]
    median = statistics.median(times)
    print("### Fail-over\n")
    print(f"{len(failovers)} rounds: SIGKILL of the leader, then the time until one of the other two answers "
          "QuorumStatus as leader of a higher epoch (polled every 10 ms); the killed controller is restarted "
          "and caught up before the next round.\n")
    print("| round | killed | new leader | epoch | seconds |")
    print("|---:|---:|---:|---:|---:|")
    for i, f in enumerate(failovers, start=1):
        print(f"| {i} | {f['old_leader']} | {f['new_leader']} | {f['epoch']} | {f['seconds']:.2f} |")
    print()
    print(f"Median {median:.2f} s, min {min(times):.2f} s, max {max(times):.2f} s, "
          f"p90 {percentile(sorted(times), 0.9):.2f} s. Goal (median ≤ {GOAL_FAILOVER_S} s): "
          + ("**met**." if median <= GOAL_FAILOVER_S else "**not met**.") + "\n")
    print(f"Run: `python bench/raft.py --seconds {args.seconds:g} --levels {args.levels} --failovers "
          f"{args.failovers}` on {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python "
          f"{platform.python_version()}; the callers run in the benchmark's process on the same cores.")


if __name__ == "__main__":
    main()
