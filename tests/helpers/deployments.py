"""Real kraftpy deployments for blocking (thread-based) tests and benchmarks.

`Proc` runs one kraftpy process with JSON logs on stderr; a reader thread collects the lines and
`Proc.wait_for` blocks on a condition variable until a matching line arrives (an event, not a clock).
`DevDeployment` is `kraftpy dev` (one process, controller and broker); `ProcessCluster` is three
`kraftpy controller` and three `kraftpy broker` processes. Both have a ``bootstrap`` for clients.

    with ProcessCluster(tmp_path) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        cluster.brokers[4].kill()
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from kraftpy.cli.quorum import fetch_status
from kraftpy.config import load_config
from kraftpy.config.properties import format_properties
from kraftpy.ids import random_uuid_str
from kraftpy.storage.formatter import format_dirs
from tests.helpers import forkserver
from tests.helpers.processes import free_ports

Line = dict[str, Any]


class Proc:
    """One kraftpy process. Lines from every start are kept in order; ``mark()`` names a point
    to wait from, so a wait after a restart does not match a line of the previous run."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None,
                 cond: threading.Condition | None = None, log_level: str = "debug") -> None:
        self.name = name
        self.log_level = log_level
        self.argv = argv
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.lines: list[Line] = []
        #: Notified on every new line; the processes of one deployment share it.
        self._cond = cond or threading.Condition()
        self._reader: threading.Thread | None = None
        self._terminating = False

    def start(self) -> int:
        """Start the process; returns the mark of its first line."""
        assert not self.running, f"{self.name} is already running"
        mark = self.mark()
        self._terminating = False
        self.process = forkserver.popen(
            [*self.argv, "--log-format", "json", "--log-level", self.log_level],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, **(self.env or {})}, start_new_session=True)
        self._reader = threading.Thread(target=self._read, args=(self.process,), name=f"{self.name}-log",
                                        daemon=True)
        self._reader.start()
        return mark

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            text = raw.decode(errors="replace").rstrip("\n")
            try:
                line = json.loads(text)
                if not isinstance(line, dict):
                    line = {"event": text}
            except json.JSONDecodeError:
                line = {"event": text}
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        process.wait()
        with self._cond:
            self._cond.notify_all()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def mark(self) -> int:
        with self._cond:
            return len(self.lines)

    def find(self, event: str, since: int = 0, where: Callable[[Line], bool] | None = None,
             **fields: Any) -> Line | None:
        with self._cond:
            for line in self.lines[since:]:
                if line.get("event") == event and all(line.get(k) == v for k, v in fields.items()) and (
                        where is None or where(line)):
                    return line
        return None

    def wait_for(self, event: str | tuple[str, ...], timeout: float = 60.0, since: int = 0,
                 where: Callable[[Line], bool] | None = None, **fields: Any) -> Line:
        """The first line from ``since`` on with ``event`` (or any of a tuple of events), ``fields`` and
        ``where``; waits for it."""
        events = event if isinstance(event, tuple) else (event,)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines[since:]:
                    if line.get("event") in events and all(line.get(k) == v for k, v in fields.items()) and (
                            where is None or where(line)):
                        return line
                since = len(self.lines)
                if self.process is None or self.process.poll() is not None:
                    if self._reader is None or not self._reader.is_alive():
                        raise AssertionError(f"{self.name} exited ({self.process and self.process.returncode}) "
                                             f"before {event!r}:\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.name}: no {event!r} {fields} within {timeout}s:\n{self.tail()}")
                self._cond.wait(left)

    def tail(self, n: int = 30) -> str:
        return "\n".join(json.dumps(line) for line in self.lines[-n:])

    def signal(self, signum: int) -> None:
        if self.running:
            assert self.process is not None
            self.process.send_signal(signum)

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        self.signal(signal.SIGKILL)
        self.wait()

    def wait(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        code = self.process.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        return code

    def terminate(self) -> None:
        """SIGTERM (a graceful stop; a second SIGTERM would cancel it), resuming a paused process first."""
        if self.running and not self._terminating:
            assert self.process is not None
            self._terminating = True
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 40.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        if self.process is None:
            return None
        self.terminate()
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.wait()


def format_storage(configs: list[Path]) -> str:
    """What `kraftpy storage format -c F -t ID` does, for every node with one new cluster id (in this
    process: starting six interpreters only to format would double a cluster's start time)."""
    cluster_id = random_uuid_str()
    for path in configs:
        config = load_config(path, ())
        format_dirs(config.all_dirs, cluster_id, config.node_id)
    return cluster_id


class Deployment:
    name = "deployment"
    replication_factor = 1

    def __init__(self) -> None:
        self.controllers: dict[int, Proc] = {}
        self.brokers: dict[int, Proc] = {}
        self.bootstrap = ""
        #: Where the processes' logs are written when the deployment stops (None: nowhere).
        self.log_dir: Path | None = None
        #: Shared by every process of the deployment: notified on each new log line of any of them.
        self.cond = threading.Condition()

    def wait_until(self, check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        """Wait, on the processes' log lines, until ``check()`` returns something truthy; return it."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = check()
                if found:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}")
                self.cond.wait(left)

    def eventually(self, check: Callable[[], Any], what: str, timeout: float = 60.0, recheck: float = 0.5) -> Any:
        """Like `wait_until` for a check that asks the nodes themselves (which needs their log lines, so
        it runs without the lock) or reads what changes without a log line: asked again after each new
        log line of any node, and at least every ``recheck`` seconds; returns what it found."""
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}")
            with self.cond:
                self.cond.wait(min(left, recheck))

    @property
    def procs(self) -> list[Proc]:
        seen: dict[int, Proc] = {}
        for proc in [*self.controllers.values(), *self.brokers.values()]:
            seen[id(proc)] = proc
        return list(seen.values())

    def stop(self) -> None:
        """Stop the brokers (side by side: controlled shutdowns), then the controllers."""
        brokers = [p for p in self.brokers.values() if p.process is not None]
        controllers = [p for p in self.controllers.values() if p.process is not None and p not in brokers]
        for group in (brokers, controllers):
            for proc in group:
                proc.terminate()
            for proc in group:
                proc.stop()

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self.log_dir is not None:
            self.dump_logs(self.log_dir)

    def dump_logs(self, directory: Path) -> None:
        """Every process's log lines, one JSON object a line, into ``directory/NAME.log``."""
        directory.mkdir(parents=True, exist_ok=True)
        for proc in self.procs:
            (directory / f"{proc.name}.log").write_text("".join(json.dumps(line) + "\n" for line in proc.lines))

    def start(self) -> None:
        raise NotImplementedError


class DevDeployment(Deployment):
    """`kraftpy dev`: controller and broker (node 1) in one process."""

    name = "dev"

    def __init__(self, directory: Path) -> None:
        super().__init__()
        port, controller_port = free_ports(2)
        self.directory = directory
        self.proc = Proc("dev", ["dev", "--dir", str(directory), "--port", str(port),
                                 "--controller-port", str(controller_port)], cond=self.cond)
        self.controllers = {1: self.proc}
        self.brokers = {1: self.proc}
        self.bootstrap = f"127.0.0.1:{port}"
        #: The controller listener (kraftpy's control plane, and the Kafka APIs a controller serves).
        self.controller_address = ("127.0.0.1", controller_port)
        self.log_dir = directory / "logs"

    def start(self) -> None:
        self.proc.start()
        self.proc.wait_for("broker running")

    def data_dir(self, broker_id: int) -> Path:
        return self.directory / "data"


class ProcessCluster(Deployment):
    """Three controllers (node ids 1-3) and three brokers (node ids 4-6), each its own process.

    ``settings`` go into every node's properties file; the controllers read the topic defaults
    (min.insync.replicas, unclean.leader.election.enable, ...) and broker.session.timeout.ms from it,
    the brokers their own keys. ``metrics=True`` gives each node a metrics.port (`metrics_ports` for
    the controllers, `broker_metrics_ports` for the brokers).
    """

    name = "cluster"
    replication_factor = 3
    BROKER_IDS = (4, 5, 6)
    #: How the test reaches the controller listener when it runs TLS or SASL (`kraftpy.security.tls.ClientTls`,
    #: `kraftpy.security.sasl.SaslLogin`): set by tests that secure it, read by `active_controller`.
    control_tls: Any = None
    control_sasl: Any = None

    def __init__(self, root: Path, settings: dict[str, Any] | None = None, *, metrics: bool = False,
                 log_level: str = "debug") -> None:
        super().__init__()
        self.root = root
        ports = free_ports(6 + (6 if metrics else 0))
        self.voters = {i: ("127.0.0.1", ports[i - 1]) for i in (1, 2, 3)}
        self.broker_ports = {b: ports[b - 1] for b in self.BROKER_IDS}
        self.metrics_ports = {i: ports[5 + i] for i in (1, 2, 3)} if metrics else {}
        #: The brokers' metrics.port (with ``metrics=True``): /metrics and /ready.
        self.broker_metrics_ports = {b: ports[5 + b] for b in self.BROKER_IDS} if metrics else {}
        quorum = ",".join(f"{i}@{h}:{p}" for i, (h, p) in self.voters.items())
        common = {
            "controller.quorum.voters": quorum,
            "controller.listener.names": "CONTROLLER",
            "num.partitions": 3,
            "default.replication.factor": 3,
            "min.insync.replicas": 2,
            "offsets.topic.replication.factor": 3,
            "broker.heartbeat.interval.ms": 300,
            "broker.session.timeout.ms": 3000,
            "replica.lag.time.max.ms": 3000,
            "controller.quorum.election.timeout.ms": 1000,
            "controller.quorum.fetch.timeout.ms": 2000,
            **(settings or {}),
        }
        configs = []
        for node_id, (host, port) in self.voters.items():
            props = {"process.roles": "controller", "node.id": node_id, "listeners": f"CONTROLLER://{host}:{port}",
                     "log.dirs": root / f"controller-{node_id}", **common}
            if metrics:
                props["metrics.port"] = self.metrics_ports[node_id]
            configs.append(self._write(f"controller-{node_id}", props))
            self.controllers[node_id] = Proc(f"controller-{node_id}", ["controller", "-c", str(configs[-1])],
                                             cond=self.cond, log_level=log_level)
        for broker_id, port in self.broker_ports.items():
            props = {"process.roles": "broker", "node.id": broker_id,
                     "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                     "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                     "inter.broker.listener.name": "PLAINTEXT", "log.dirs": self.data_dir(broker_id), **common}
            if metrics:
                props["metrics.port"] = self.broker_metrics_ports[broker_id]
            configs.append(self._write(f"broker-{broker_id}", props))
            self.brokers[broker_id] = Proc(f"broker-{broker_id}", ["broker", "-c", str(configs[-1])],
                                         cond=self.cond, log_level=log_level)
        self.configs = configs
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.broker_ports.values())
        self.log_dir = root / "logs"

    def _write(self, name: str, props: dict[str, Any]) -> Path:
        path = self.root / f"{name}.properties"
        path.write_text(format_properties({k: str(v) for k, v in props.items()}))
        return path

    def data_dir(self, broker_id: int) -> Path:
        return self.root / f"broker-{broker_id}"

    def start(self) -> None:
        format_storage(self.configs)
        for proc in self.controllers.values():
            proc.start()
        marks = {broker_id: proc.start() for broker_id, proc in self.brokers.items()}
        for proc in self.brokers.values():
            proc.wait_for("broker running")
        self.wait_brokers_serving(marks)

    def wait_brokers_serving(self, since: dict[int, int], brokers: set[int] | None = None,
                             timeout: float = 60.0) -> None:
        """Wait until each broker's metadata (what its Metadata answers list) has every broker of
        ``brokers`` (default: all) unfenced, as its "brokers changed" lines after ``since`` say. Until
        then a client may be told of a broker by one and not by another, and librdkafka drops a
        broker it is not told of, failing what it had in flight there."""
        want = sorted(self.brokers if brokers is None else brokers)
        for broker_id, proc in self.brokers.items():
            if proc.running:
                proc.wait_for("brokers changed", timeout=timeout, since=since.get(broker_id, 0),
                              where=lambda line: all(b in line.get("serving", ()) for b in want))

    def restart_broker(self, broker_id: int) -> None:
        """Start a stopped broker again and wait until the controller has unfenced it."""
        proc = self.brokers[broker_id]
        mark = proc.start()
        proc.wait_for("broker running", since=mark)

    def active_controller(self) -> int:
        """The id of the active controller (the quorum leader), asked of the live controllers."""
        live = [self.voters[i] for i, p in self.controllers.items() if p.running]
        status = trio.run(fetch_status, live, 5.0, self.control_tls, self.control_sasl)
        return status["leader_id"]

    def wait_for_active_controller(self, since: dict[int, int], exclude: int | None = None,
                                   timeout: float = 60.0) -> int:
        """The controller (not ``exclude``) that logs "active controller" after the marks in ``since``."""
        def active() -> int | None:
            for node_id, proc in self.controllers.items():
                if node_id != exclude and proc.find("active controller", since=since.get(node_id, 0)):
                    return node_id
            return None

        return self.wait_until(active, "a new active controller", timeout)

    def marks(self) -> dict[int, int]:
        return {node_id: proc.mark() for node_id, proc in self.controllers.items()}


def create_topics(bootstrap: str, topics: list[Any], timeout: float = 20.0, attempts: int = 4,
                  deployment: Deployment | None = None, client_config: dict[str, str] | None = None) -> None:
    """Create ``topics`` (confluent_kafka NewTopic) with the admin client, retrying (with a new client)
    when the request was lost with the connection it was sent on, or got no answer in ``timeout``:
    librdkafka drops a broker's connection when a metadata answer does not list that broker (one
    another has not yet seen unfenced), failing what was in flight there with _DESTROY_BROKER. A
    retried topic that exists already was made the first time. When it gives up, it says what each
    attempt got, and the last log lines of ``deployment``'s processes. ``client_config``: more settings of
    the admin client (security.protocol, SASL and TLS settings of a secured listener)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    pending = {t.topic: t for t in topics}
    seen: list[str] = []
    for attempt in range(attempts):
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **(client_config or {})})
        futures = admin.create_topics(list(pending.values()), operation_timeout=timeout / 2)
        for name, future in futures.items():
            try:
                future.result(timeout=timeout)
            except FutureTimeout:
                seen.append(f"attempt {attempt + 1}, {name}: no answer in {timeout:g}s")
                continue
            except KafkaException as exc:
                code = exc.args[0].code()
                if code in (KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                    seen.append(f"attempt {attempt + 1}, {name}: {exc.args[0]}")
                    continue
                if not (attempt > 0 and code == KafkaError.TOPIC_ALREADY_EXISTS):
                    raise
            del pending[name]
        if not pending:
            return
    logs = "" if deployment is None else "\n" + "\n".join(
        f"--- {proc.name}:\n{proc.tail(20)}" for proc in deployment.procs)
    raise AssertionError(f"could not create {sorted(pending)}:\n" + "\n".join(seen) + logs)


#: Group-coordinator answers a Kafka client retries (after FindCoordinator again): a coordinator that
#: just moved, or is still loading the group's partition. librdkafka returns them from a synchronous
#: commit() or committed() instead of retrying.
COORDINATOR_RETRIABLE = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE")


def retry_coordinator(call: Callable[[], Any], attempts: int = 40, backoff_s: float = 0.25) -> Any:
    """``call()``, asked again (after ``backoff_s``, a client's retry.backoff.ms) while it fails with a
    coordinator error that Kafka's own clients retry."""
    from confluent_kafka import KafkaException

    for attempt in range(attempts):
        try:
            return call()
        except KafkaException as exc:
            if exc.args[0].name() not in COORDINATOR_RETRIABLE or attempt == attempts - 1:
                raise
            time.sleep(backoff_s)
    raise AssertionError("unreachable")


def kraftpy_cli(*args: Any, expect_exit: int = 0) -> str:
    """Run a `kraftpy` command in this process (typer's runner: the command's own code, without an
    interpreter's start); its output (stdout and stderr), or AssertionError with the output when it
    exits with another code than `expect_exit`."""
    from kraftpy.cli.main import app
    from tests.helpers.cli_runner import CliRunner

    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exit_code != expect_exit:
        raise AssertionError(f"kraftpy {' '.join(map(str, args))} exited {result.exit_code}:\n{result.output}")
    return result.output


class DynamicQuorumCluster(Deployment):
    """A dynamic controller quorum (KIP-853) that starts as one controller and grows: controllers 1-3
    (1 formatted with ``--standalone``, 2 and 3 with ``--no-initial-controllers``, running as observers
    until added) and brokers 4 and 5, every node configured with controller.quorum.bootstrap.servers.
    The changes are made the way an operator makes them, with `kraftpy storage format` and `kraftpy quorum`
    (`add_controller`, `remove_controller`, `replace_disk`)."""

    name = "dynamic-quorum"
    replication_factor = 2
    CONTROLLER_IDS = (1, 2, 3)
    BROKER_IDS = (4, 5)

    def __init__(self, root: Path, settings: dict[str, Any] | None = None, log_level: str = "info") -> None:
        super().__init__()
        self.root = root
        ports = free_ports(5)
        self.controller_ports = dict(zip(self.CONTROLLER_IDS, ports[:3], strict=True))
        self.broker_ports = dict(zip(self.BROKER_IDS, ports[3:], strict=True))
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.controller_ports.values())
        self.bootstrap_controller = bootstrap
        common = {
            "controller.quorum.bootstrap.servers": bootstrap,
            "controller.listener.names": "CONTROLLER",
            "num.partitions": 2,
            "default.replication.factor": 2,
            "min.insync.replicas": 2,
            "offsets.topic.replication.factor": 2,
            "broker.heartbeat.interval.ms": 300,
            "broker.session.timeout.ms": 3000,
            "replica.lag.time.max.ms": 3000,
            "controller.quorum.election.timeout.ms": 1000,
            "controller.quorum.fetch.timeout.ms": 2000,
            **(settings or {}),
        }
        self.session_timeout_s = int(common["broker.session.timeout.ms"]) / 1000
        self.configs: dict[int, Path] = {}
        for node_id, port in self.controller_ports.items():
            self.configs[node_id] = self._write(f"controller-{node_id}", {
                "process.roles": "controller", "node.id": node_id, "listeners": f"CONTROLLER://127.0.0.1:{port}",
                "log.dirs": self.data_dir(node_id), **common})
            self.controllers[node_id] = Proc(f"controller-{node_id}", ["controller", "-c", str(self.configs[node_id])],
                                             cond=self.cond, log_level=log_level)
        for broker_id, port in self.broker_ports.items():
            self.configs[broker_id] = self._write(f"broker-{broker_id}", {
                "process.roles": "broker", "node.id": broker_id, "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}", "inter.broker.listener.name": "PLAINTEXT",
                "log.dirs": self.data_dir(broker_id), **common})
            self.brokers[broker_id] = Proc(f"broker-{broker_id}", ["broker", "-c", str(self.configs[broker_id])],
                                           cond=self.cond, log_level=log_level)
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.broker_ports.values())
        self.cluster_id = random_uuid_str()
        self.log_dir = root / "logs"

    def _write(self, name: str, props: dict[str, Any]) -> Path:
        path = self.root / f"{name}.properties"
        path.write_text(format_properties({k: str(v) for k, v in props.items()}))
        return path

    def data_dir(self, node_id: int) -> Path:
        return self.root / f"node-{node_id}"

    def format(self, node_id: int, *flags: str) -> str:
        return kraftpy_cli("storage", "format", "-c", self.configs[node_id], "-t", self.cluster_id, *flags)

    def start(self) -> None:
        self.format(1, "--standalone")
        for node_id in (2, 3):
            self.format(node_id, "--no-initial-controllers")
        for broker_id in self.BROKER_IDS:
            self.format(broker_id)
        for proc in self.controllers.values():
            proc.start()
        marks = {broker_id: proc.start() for broker_id, proc in self.brokers.items()}
        for proc in self.brokers.values():
            proc.wait_for("broker running")
        for broker_id, proc in self.brokers.items():
            proc.wait_for("brokers changed", since=marks[broker_id],
                          where=lambda line: all(b in line.get("serving", ()) for b in self.BROKER_IDS))

    # -- what an operator does -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return json.loads(kraftpy_cli("quorum", "describe", "--replication", "--json",
                                      "--bootstrap-controller", self.bootstrap_controller))

    def directory_id(self, node_id: int) -> str:
        text = (self.data_dir(node_id) / "meta.properties").read_text()
        return next(line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("directory.id="))

    def voters(self) -> dict[int, str]:
        """The voters as the leader describes them: node id -> directory id."""
        return {v["id"]: v["directory_id"] for v in self.status()["voters"]}

    def wait_caught_up(self, node_id: int, timeout: float = 30.0) -> None:
        """Until the leader sees `node_id` (its current disk) fetch the log to its end, as an operator
        checks with describe --replication before add-controller."""
        directory = self.directory_id(node_id)

        def caught_up() -> bool:
            status = self.status()
            return any(o["id"] == node_id and o["directory_id"] == directory and o["lag"] == 0
                       and o["last_caught_up_ms_ago"] is not None for o in status["observers"])

        self.eventually(caught_up, f"controller {node_id} caught up as an observer", timeout)

    def add_controller(self, node_id: int) -> str:
        self.wait_caught_up(node_id)
        return kraftpy_cli("quorum", "add-controller", "-c", self.configs[node_id],
                           "--bootstrap-controller", self.bootstrap_controller)

    def remove_controller(self, node_id: int, directory_id: str) -> str:
        return kraftpy_cli("quorum", "remove-controller", "--controller-id", node_id,
                           "--controller-directory-id", directory_id, "--bootstrap-controller",
                           self.bootstrap_controller)

    def replace_disk(self, node_id: int) -> str:
        """The controller's disk fails: it is killed, its directory wiped and formatted again with
        --no-initial-controllers (a new directory id), and started; returns the old directory id."""
        old = self.directory_id(node_id)
        self.controllers[node_id].kill()
        shutil.rmtree(self.data_dir(node_id))
        self.format(node_id, "--no-initial-controllers")
        self.controllers[node_id].start()
        return old

    def broker_fenced_intervals(self) -> dict[int, list[float]]:
        """Each broker's stretches of being fenced after it first ran, in seconds (an open one up to now)."""
        out: dict[int, list[float]] = {}
        for broker_id, proc in self.brokers.items():
            intervals: list[float] = []
            started = fenced_at = None
            for line in list(proc.lines):
                if line.get("event") != "broker state changed":
                    continue
                at = _line_time(line)
                if line.get("new") == "running":
                    if fenced_at is not None:
                        intervals.append(at - fenced_at)
                    started, fenced_at = True, None
                elif line.get("new") == "fenced" and started:
                    fenced_at = at
            if fenced_at is not None:
                intervals.append(time.time() - fenced_at)
            out[broker_id] = intervals
        return out


def _line_time(line: Line) -> float:
    """A JSON log line's time, in seconds since the epoch."""
    from datetime import datetime

    stamp = line.get("timestamp")
    assert isinstance(stamp, str), f"no timestamp in {line}"
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
