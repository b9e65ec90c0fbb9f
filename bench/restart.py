"""Restart to serving: how long a broker takes from process start until a produce and a fetch succeed.

Two setups, each stopped and started again a few times, after a clean stop and after kill -9:

* `kraftpy dev`: the controller and the broker in one process. After a clean stop (SIGINT: a
  controlled shutdown fences the broker before it exits) the new incarnation registers at once;
  after kill -9 the restarted controller knows that the broker registered with its own node id
  ran in the process that died, so it does not wait for that incarnation's session either.
* a small real cluster: one `kraftpy controller` process and one `kraftpy broker` process; only
  the broker is stopped. After a clean stop it registers at once; after kill -9 the controller
  refuses the new incarnation (DUPLICATE_BROKER_REGISTRATION) until the old one's session runs
  out (``broker.session.timeout.ms``, set to a short value here) and fences it, then accepts it.

Serving means: from the moment the process is started, a client that tries every 10 ms (a new
connection each time the port refuses) gets an acks=all Produce of one record acknowledged and
then fetches that record back (the Kafka protocol, spoken by kraftpy's own client code). Each figure
is the best and the median of the rounds. A reference line gives the time Python takes to start
the `kraftpy` command and import the server's modules, which every start pays.
``python bench/restart.py --rounds 3`` runs fewer rounds.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kraftpy.broker.client import ConnectionClosed, KafkaConnection  # noqa: E402
from kraftpy.ids import random_uuid_str  # noqa: E402
from tests.helpers.processes import free_ports, write_properties  # noqa: E402
from tests.helpers.protocol import batch, fetch, metadata, produce, values_of  # noqa: E402

TOPIC = "restart"
POLL_S = 0.01
#: broker.session.timeout.ms of the real cluster (Kafka's default is 9000).
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_MS = 500


async def _serve_once(port: int, value: bytes) -> bool:
    """One attempt: produce ``value`` with acks=all and fetch it back; False on any refusal."""
    try:
        async with await KafkaConnection.connect("127.0.0.1", port) as conn:
            produced = await produce(conn, TOPIC, 0, batch(value), acks=-1)
            if produced.error_code != 0:
                return False
            data = await fetch(conn, TOPIC, 0, produced.base_offset)
            return data.error_code == 0 and value in values_of(data.records)
    except (ConnectionClosed, OSError, trio.BrokenResourceError):
        return False


def wait_serving(port: int, deadline_s: float = 120.0) -> None:
    """Block until a produce and a fetch succeed on ``port``."""
    value = random_uuid_str().encode()

    async def main() -> None:
        with trio.fail_after(deadline_s):
            while not await _serve_once(port, value):
                await trio.sleep(POLL_S)

    trio.run(main)


def create_topic(port: int) -> None:
    async def main() -> None:
        with trio.fail_after(60):
            while True:
                try:
                    async with await KafkaConnection.connect("127.0.0.1", port) as conn:
                        response = await metadata(conn, [TOPIC])
                        topic = response.topics[0]
                        if topic.error_code == 0 and topic.partitions and topic.partitions[0].leader_id >= 0:
                            return
                except (ConnectionClosed, OSError):
                    pass
                await trio.sleep(POLL_S)

    trio.run(main)


class Node:
    """One kraftpy process: started, stopped cleanly (SIGINT) or killed."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> float:
        """Start the process; returns the time it was started (perf_counter)."""
        started = time.perf_counter()
        with self.log.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "kraftpy", *self.args, "--log-format", "json"],
                                            stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT)
        return started

    def stop(self, *, kill: bool) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGINT)
        code = self.process.wait(60)
        if not kill and code != 0:
            raise RuntimeError(f"{self.args[0]} exited {code} after SIGINT; see {self.log}")


def measure(node: Node, port: int, rounds: int, *, kill: bool) -> list[float]:
    times = []
    for _ in range(rounds):
        node.stop(kill=kill)
        started = node.start()
        wait_serving(port)
        times.append(time.perf_counter() - started)
    return times


def dev_rounds(root: Path, rounds: int) -> dict[str, list[float]]:
    port, controller_port = free_ports(2)
    node = Node(["dev", "--dir", str(root / "dev"), "--port", str(port), "--controller-port", str(controller_port)],
                root / "dev.log")
    node.start()
    try:
        create_topic(port)
        wait_serving(port)
        return {"clean": measure(node, port, rounds, kill=False), "kill": measure(node, port, rounds, kill=True)}
    finally:
        node.stop(kill=True)


def cluster_rounds(root: Path, rounds: int) -> dict[str, list[float]]:
    controller_port, port = free_ports(2)
    voters = f"1@127.0.0.1:{controller_port}"
    common = {"controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
              "num.partitions": 1, "default.replication.factor": 1, "offsets.topic.replication.factor": 1,
              "min.insync.replicas": 1, "broker.session.timeout.ms": SESSION_TIMEOUT_MS,
              "broker.heartbeat.interval.ms": HEARTBEAT_MS}
    controller_config = write_properties(root / "controller.properties", {
        "process.roles": "controller", "node.id": 1, "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
        "log.dirs": root / "controller", **common})
    broker_config = write_properties(root / "broker.properties", {
        "process.roles": "broker", "node.id": 2, "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": root / "broker", **common})
    cluster_id = random_uuid_str()
    for config in (controller_config, broker_config):
        subprocess.run([sys.executable, "-m", "kraftpy", "storage", "format", "-c", str(config), "-t", cluster_id],
                       check=True, capture_output=True, cwd=ROOT)
    controller = Node(["controller", "-c", str(controller_config)], root / "controller.log")
    broker = Node(["broker", "-c", str(broker_config)], root / "broker.log")
    controller.start()
    broker.start()
    try:
        create_topic(port)
        wait_serving(port)
        return {"clean": measure(broker, port, rounds, kill=False), "kill": measure(broker, port, rounds, kill=True)}
    finally:
        broker.stop(kill=True)
        controller.stop(kill=True)


def python_start() -> float:
    """Seconds to start the interpreter and import what a server process imports (best of 3)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import kraftpy.cli.main, kraftpy.node"], check=True, cwd=ROOT)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kraftpy-bench-restart-") as tmp:
        root = Path(tmp)
        (root / "cluster").mkdir()
        dev = dev_rounds(root, args.rounds)
        cluster = cluster_rounds(root / "cluster", args.rounds)
    reference = python_start()

    def cell(times: list[float]) -> str:
        return f"{min(times):.2f} s / {statistics.median(times):.2f} s"

    print("## restart")
    print()
    print("How long a broker takes from process start until a produce and a fetch succeed, after a clean "
          "stop (SIGINT: a controlled shutdown fences it before it exits, so its next incarnation "
          "registers at once) and after kill -9:")
    print()
    print("* `kraftpy dev` (controller and broker in one process): after kill -9 the restarted "
          "controller knows the broker registered with its own node id ran in the process that died, "
          "and gives that registration no session to wait out;")
    print("* the broker of a cluster of one `kraftpy controller` and one `kraftpy broker` process, only "
          "the broker restarted: after kill -9 the controller refuses the new incarnation "
          "(DUPLICATE_BROKER_REGISTRATION) until the old one's session runs out "
          f"(broker.session.timeout.ms={SESSION_TIMEOUT_MS} here, broker.heartbeat.interval.ms={HEARTBEAT_MS}) "
          "and accepts it as soon as it is fenced.")
    print()
    print("A client tries every 10 ms from the moment the process is started (a new connection while the "
          "port refuses): an acks=all Produce of one record, then a Fetch that reads it back. Best and "
          "median of the rounds. Every start also pays for Python itself: the reference line is the "
          "interpreter starting and importing a server's modules.")
    print()
    print(f"| process start until a produce and a fetch succeed (best / median of {args.rounds}) | value |")
    print("|---|---:|")
    print(f"| `kraftpy dev`, after a clean stop | {cell(dev['clean'])} |")
    print(f"| `kraftpy dev`, after kill -9 | {cell(dev['kill'])} |")
    print(f"| broker of a controller + broker cluster, after a clean stop | {cell(cluster['clean'])} |")
    print(f"| broker of a controller + broker cluster, after kill -9 "
          f"(broker.session.timeout.ms={SESSION_TIMEOUT_MS}) | {cell(cluster['kill'])} |")
    print(f"| reference: Python start and imports of a server process | {reference:.2f} s |")
    print()
    command = " ".join(["python bench/restart.py", *argv])
    print(f"Run: `{command}` on {os.cpu_count()} cores.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
