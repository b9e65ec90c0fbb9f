"""deploy/local/cluster.sh end to end, and the operations procedures of docs/operations.md on that cluster.

One cluster for the module, started by the script on ephemeral ports (KRAFTPY_BASE_PORT) in a temporary
directory (KRAFTPY_DATA_DIR), with the test's own kraftpy (KRAFTPY). The tests run in file order:
the cluster serves; a controller's disk is replaced (docs/operations.md, "Replacing a controller's
disk"); a controller is restored from a backup ("Backups"); the script stops every node.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.helpers.deployments import create_topics

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "local" / "cluster.sh"
KRAFTPY = str(Path(sys.executable).parent / "kraftpy")
CONTROLLERS = ("controller-1", "controller-2", "controller-3")
BROKERS = ("broker-1", "broker-2", "broker-3")


def base_port() -> int:
    """A port P with P, P+1..P+3, P+100 and P+200 free (the script's layout)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + 200 > 65535:
            continue
        socks = []
        try:
            for port in (base, base + 1, base + 2, base + 3, base + 100, base + 200):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no free port layout found")


class LocalCluster:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.base = base_port()
        self.env = {**os.environ, "KRAFTPY": KRAFTPY, "KRAFTPY_DATA_DIR": str(data_dir),
                    "KRAFTPY_BASE_PORT": str(self.base)}
        self.bootstrap = ",".join(f"127.0.0.1:{self.base + d}" for d in (0, 100, 200))
        self.controllers = ",".join(f"127.0.0.1:{self.base + d}" for d in (1, 2, 3))

    def script(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), command], env=self.env, capture_output=True, text=True,
                              timeout=300, cwd=self.data_dir)

    def kraftpy(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([KRAFTPY, *args], capture_output=True, text=True, timeout=120)

    def overrides(self, name: str) -> list[str]:
        """What the script passes a node: its directory and its ports."""
        n = int(name.rsplit("-", 1)[1])
        port = self.base + n
        voters = ",".join(f"{i}@127.0.0.1:{self.base + i}" for i in (1, 2, 3))
        return ["--override", f"log.dirs={self.data_dir / name}", "--override", f"controller.quorum.voters={voters}",
                "--override", f"listeners=CONTROLLER://127.0.0.1:{port}"]

    def pid(self, name: str) -> int:
        return int((self.data_dir / "run" / f"{name}.pid").read_text())

    def quorum(self) -> dict:
        done = self.kraftpy("quorum", "status", "--bootstrap-controller", self.controllers, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def wait_for_follower_caught_up(self, node_id: int, started: float, timeout: float = 60) -> dict:
        """Polls `kraftpy quorum status` (what the procedure tells an operator to watch) until ``node_id``
        is a follower with lag 0 that caught up since it was started at ``started`` (time.monotonic();
        until it fetches, the leader still shows what it knew of it before it stopped)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.quorum()
            voter = {v["id"]: v for v in status["voters"]}[node_id]
            caught_up = voter["last_caught_up_ms_ago"]
            if (status["leader_id"] != node_id and voter["lag"] == 0 and caught_up is not None
                    and caught_up < (time.monotonic() - started) * 1000):
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(f"controller {node_id} not caught up: {status}")
            time.sleep(0.2)  # polling an outside tool, as an operator would; the deadline only bounds it


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (an exited one not yet reaped is a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_process(pid: int) -> None:
    """What `systemctl stop` does: SIGTERM, then wait until the process is gone (its pidfd becomes
    readable when it exits)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        os.kill(pid, 15)
        ready, _, _ = select.select([fd], [], [], 60)
        if not ready:
            raise TimeoutError(f"pid {pid} did not stop within 60 s of SIGTERM")
    finally:
        os.close(fd)


def round_trip(bootstrap: str, topic: str, n: int) -> None:
    """Produce ``n`` records with acks=all to a replicated topic and read them all back."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(n):
        producer.produce(topic, key=b"k%d" % (i % 5), value=b"%s-%d" % (topic.encode(), i))
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    metadata = consumer.list_topics(topic, timeout=30)
    consumer.assign([TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions])
    values = set()
    deadline = time.monotonic() + 60
    while len(values) < n and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            values.add(message.value())
    consumer.close()
    assert values == {b"%s-%d" % (topic.encode(), i) for i in range(n)}


#: Clusters started on new ports when a port of the layout was taken between `base_port`'s look and the
#: script's start (a connection another test opened took it as its local port).
START_ATTEMPTS = 3


def port_taken(cluster: LocalCluster) -> bool:
    """Whether a node of ``cluster`` could not start because its port was in use."""
    return any("Address already in use" in log.read_text(errors="replace")
               for log in (cluster.data_dir / "logs").glob("*.log"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    for attempt in range(START_ATTEMPTS):
        cluster = LocalCluster(tmp_path_factory.mktemp("local-cluster"))
        formatted = cluster.script("format")
        assert formatted.returncode == 0, formatted.stderr
        started = cluster.script("start")
        if started.returncode == 0:
            break
        cluster.script("stop")
        if attempt == START_ATTEMPTS - 1 or not port_taken(cluster):
            raise AssertionError(started.stdout + started.stderr)
    try:
        assert f"bootstrap.servers={cluster.bootstrap}" in started.stdout
        yield cluster
    finally:
        cluster.script("stop")


def test_script_formats_and_starts_a_serving_cluster(cluster: LocalCluster) -> None:
    status = cluster.script("status")
    assert status.returncode == 0, status.stderr
    for name in (*CONTROLLERS, *BROKERS):
        assert f"{name} running (pid {cluster.pid(name)})" in status.stdout
    assert "CurrentVoters:          [1, 2, 3]" in status.stdout
    quorum = cluster.quorum()
    assert sorted(o["id"] for o in quorum["observers"]) == [4, 5, 6]
    # One cluster id on every node.
    ids = {line.split("=", 1)[1] for name in (*CONTROLLERS, *BROKERS)
           for line in (cluster.data_dir / name / "meta.properties").read_text().splitlines()
           if line.startswith("cluster.id=")}
    assert ids == {quorum["cluster_id"]}
    create_topics(cluster.bootstrap, [NewTopic("before", 3, 3)])
    round_trip(cluster.bootstrap, "before", 300)


def test_replacing_a_failed_controllers_disk(cluster: LocalCluster) -> None:
    status = cluster.quorum()
    # A follower's disk fails: stop it, wipe its directory.
    victim = next(v["id"] for v in status["voters"] if v["id"] != status["leader_id"])
    name = f"controller-{victim}"
    stop_process(cluster.pid(name))
    shutil.rmtree(cluster.data_dir / name)
    # The cluster goes on serving with two controllers of three.
    create_topics(cluster.bootstrap, [NewTopic("during", 3, 3)])
    # Format the new disk with the cluster's id (from quorum status or any node's meta.properties).
    config = str(ROOT / "deploy" / "local" / f"{name}.properties")
    formatted = cluster.kraftpy("storage", "format", "--config", config, "--cluster-id", status["cluster_id"],
                                *cluster.overrides(name))
    assert formatted.returncode == 0, formatted.stderr
    # Start it again (the script starts only the nodes that are not running), and watch it catch up.
    since = time.monotonic()
    started = cluster.script("start")
    assert started.returncode == 0, started.stderr
    after = cluster.wait_for_follower_caught_up(victim, since)
    assert after["cluster_id"] == status["cluster_id"]
    assert {v["id"]: v for v in after["voters"]}[victim]["log_end_offset"] == after["high_watermark"]
    round_trip(cluster.bootstrap, "during", 100)
    # It holds the whole metadata: the topic created while it was away is in its own log.
    shown = cluster.kraftpy("metadata", "show", "--log", str(cluster.data_dir / name))
    assert shown.returncode == 0, shown.stderr
    assert "  during (id " in shown.stdout and "  before (id " in shown.stdout


def test_backup_and_restore_of_a_controller(cluster: LocalCluster, tmp_path: Path) -> None:
    status = cluster.quorum()
    victim = next(v["id"] for v in status["voters"] if v["id"] != status["leader_id"])
    name = f"controller-{victim}"
    # Back up: meta.properties and the metadata log directory (snapshots and segments), as they are.
    backup = tmp_path / "backup" / name
    shutil.copytree(cluster.data_dir / name, backup, ignore=shutil.ignore_patterns("quorum-state"))
    shown = cluster.kraftpy("metadata", "show", "--log", str(backup))
    assert shown.returncode == 0, shown.stderr
    assert "  before (id " in shown.stdout
    # Later: a topic the backup does not have, then the controller's disk is lost.
    create_topics(cluster.bootstrap, [NewTopic("after-backup", 3, 3)])
    stop_process(cluster.pid(name))
    shutil.rmtree(cluster.data_dir / name)
    # Restore the backup in its place and start it: it fetches what it missed from the leader.
    shutil.copytree(backup, cluster.data_dir / name)
    info = cluster.kraftpy("storage", "info", "--config",
                           str(ROOT / "deploy" / "local" / f"{name}.properties"), *cluster.overrides(name))
    assert info.returncode == 0 and status["cluster_id"] in info.stdout, info.stdout + info.stderr
    create_topics(cluster.bootstrap, [NewTopic("while-restoring", 1, 3)])
    since = time.monotonic()
    started = cluster.script("start")
    assert started.returncode == 0, started.stderr
    cluster.wait_for_follower_caught_up(victim, since)
    shown = cluster.kraftpy("metadata", "show", "--log", str(cluster.data_dir / name))
    assert "  after-backup (id " in shown.stdout and "  while-restoring (id " in shown.stdout
    round_trip(cluster.bootstrap, "after-backup", 100)


def test_script_stops_every_node(cluster: LocalCluster) -> None:
    pids = {name: cluster.pid(name) for name in (*CONTROLLERS, *BROKERS)}
    stopped = cluster.script("stop")
    assert stopped.returncode == 0, stopped.stderr
    # Brokers first (their controlled shutdowns need the controllers), then the controllers.
    order = [line.split()[0] for line in stopped.stdout.splitlines() if line.endswith(" stopped")]
    assert order == [*BROKERS, *CONTROLLERS]
    for name, pid in pids.items():
        assert not running(pid), name
        assert not (cluster.data_dir / "run" / f"{name}.pid").exists()
    # Each broker stopped on SIGTERM through its controlled shutdown.
    for name in BROKERS:
        log = (cluster.data_dir / "logs" / f"{name}.log").read_text()
        assert '"controlled shutdown complete"' in log and '"broker stopped"' in log, name


def test_script_start_fails_naming_a_controller_that_could_not_start(tmp_path: Path) -> None:
    """A controller whose port is taken exits at once; the brokers still start with the other two, and
    `start` says which node exited instead of reporting the cluster running."""
    cluster = LocalCluster(tmp_path)
    assert cluster.script("format").returncode == 0
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", cluster.base + 1))  # controller-1's port
        holder.listen()
        started = cluster.script("start")
        pids = [cluster.pid(name) for name in (*CONTROLLERS, *BROKERS)]
        try:
            assert started.returncode == 1, started.stdout + started.stderr
            assert f"cluster.sh: controller-1 exited; see {tmp_path / 'logs' / 'controller-1.log'}" in started.stderr
            assert "cluster running" not in started.stdout
            assert "Address already in use" in (tmp_path / "logs" / "controller-1.log").read_text()
            assert port_taken(cluster)
        finally:
            cluster.script("stop")
    assert not any(running(pid) for pid in pids)  # `stop` stopped the nodes that did start
