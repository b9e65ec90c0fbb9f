"""`Cluster`: a real kraftpy cluster for a test, run by a supervisor process (`kraftpy.testing._supervisor`).

This side lives in the test's process and imports nothing but the standard library until a cluster
starts (and then only the configuration schema, to refuse a bad override before anything runs): the
cluster's event loops, sockets and files are all in the supervisor's process group, so a test's own
event loop (asyncio or trio) never shares a thread with a broker.

Requests go to the supervisor one at a time, as JSON lines on its stdin, and block until it answers on
its stdout; every method has an ``a``-prefixed twin for async tests (asyncio or trio) that runs it in
a worker thread. If this process dies, the supervisor sees the end of its stdin and removes
everything; if the `Cluster` is forgotten without `close`, it is closed when garbage-collected or at
the interpreter's exit.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: How long the test waits beyond a request's own deadline before it takes the supervisor for hung.
GRACE_S = 15.0


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` has something to read within ``timeout`` seconds. poll, not select: a test process may
    hold more than FD_SETSIZE (1024) descriptors, and select() refuses any numbered beyond that (select()
    only where the platform has no poll)."""
    if not hasattr(select, "poll"):
        return bool(select.select([fd], [], [], max(timeout, 0))[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(timeout, 0) * 1000))


class ClusterError(Exception):
    """What the cluster could not do. ``code`` is the Kafka error's name (``TOPIC_ALREADY_EXISTS``...)
    when a broker answered with one, else None."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TopicInfo:
        return cls(data["name"], tuple(PartitionInfo(p["partition"], p["leader"], tuple(p["replicas"]),
                                                     tuple(p["isr"])) for p in data["partitions"]))


async def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread of the running event loop, asyncio's or trio's."""
    call = functools.partial(fn, *args, **kwargs)
    try:
        import asyncio

        asyncio.get_running_loop()
    except RuntimeError:
        import trio

        return await trio.to_thread.run_sync(call)
    return await asyncio.to_thread(call)


class Node:
    """The controller or a broker of a `Cluster`, and the faults a test strikes it with.

    Each call returns once its fault has taken effect: ``kill`` and ``stop`` once the process has
    exited, ``pause`` once it is stopped, ``isolate`` once its connections to the other nodes are cut
    (clients still reach it). ``start``, ``resume`` and ``heal`` return once the cluster is whole
    again: every broker that is running, not paused and not isolated is listed by every other one.
    """

    def __init__(self, cluster: Cluster, status: Mapping[str, Any]) -> None:
        self._cluster = cluster
        self._status = dict(status)

    def __repr__(self) -> str:
        return f"<kraftpy.testing.Node {self.name} {self.state}{' isolated' if self.isolated else ''}>"

    @property
    def name(self) -> str:
        """``controller``, ``broker-1``, ``broker-2``..."""
        return self._status["name"]

    @property
    def role(self) -> str:
        return self._status["role"]

    @property
    def node_id(self) -> int:
        """``node.id``: 1..N for the brokers, 3000 for the controller."""
        return self._status["node_id"]

    @property
    def port(self) -> int | None:
        """A broker's client port (its PLAINTEXT listener on 127.0.0.1); None for the controller."""
        return self._status["port"]

    @property
    def address(self) -> str | None:
        return f"127.0.0.1:{self.port}" if self.port else None

    @property
    def pid(self) -> int | None:
        """The process's id while it runs."""
        return self._status["pid"]

    @property
    def state(self) -> str:
        """``running``, ``paused`` or ``stopped`` (as last seen by this process)."""
        return self._status["state"]

    @property
    def isolated(self) -> bool:
        return self._status["isolated"]

    @property
    def data_dir(self) -> Path:
        return Path(self._status["data_dir"])

    @property
    def log_path(self) -> Path:
        """The node's log (JSON lines)."""
        return Path(self._status["log"])

    def _do(self, op: str, timeout: float) -> Node:
        self._status = self._cluster._request(op, {"name": self.name}, timeout)
        return self

    def kill(self, *, timeout: float = 30.0) -> Node:
        """SIGKILL (kill -9): no controlled shutdown, nothing flushed."""
        return self._do("kill", timeout)

    def stop(self, *, timeout: float = 60.0) -> Node:
        """SIGTERM: a graceful stop (a broker's controlled shutdown moves its leaderships first)."""
        return self._do("stop", timeout)

    def start(self, *, timeout: float = 60.0) -> Node:
        """Start it again (same data, same client port) and wait until it serves."""
        return self._do("start", timeout)

    def restart(self, *, kill: bool = False, timeout: float = 60.0) -> Node:
        """``stop()`` (``kill()`` with ``kill=True``), then ``start()``."""
        (self.kill if kill else self.stop)(timeout=timeout)
        return self.start(timeout=timeout)

    def pause(self, *, timeout: float = 30.0) -> Node:
        """SIGSTOP: the process is frozen, its connections stay open and silent."""
        return self._do("pause", timeout)

    def resume(self, *, timeout: float = 60.0) -> Node:
        """SIGCONT."""
        return self._do("resume", timeout)

    def isolate(self, *, timeout: float = 30.0) -> Node:
        """Cut it off from the other nodes (Linux): their connections to it and its own are closed and
        refused until `heal`. Clients still reach it."""
        return self._do("isolate", timeout)

    def heal(self, *, timeout: float = 60.0) -> Node:
        """Reconnect it, and resume it if paused."""
        self._cluster._update(self._cluster._request("heal", {"name": self.name}, timeout))
        return self

    async def akill(self, **kw: Any) -> Node:
        return await _in_thread(self.kill, **kw)

    async def astop(self, **kw: Any) -> Node:
        return await _in_thread(self.stop, **kw)

    async def astart(self, **kw: Any) -> Node:
        return await _in_thread(self.start, **kw)

    async def arestart(self, **kw: Any) -> Node:
        return await _in_thread(self.restart, **kw)

    async def apause(self, **kw: Any) -> Node:
        return await _in_thread(self.pause, **kw)

    async def aresume(self, **kw: Any) -> Node:
        return await _in_thread(self.resume, **kw)

    async def aisolate(self, **kw: Any) -> Node:
        return await _in_thread(self.isolate, **kw)

    async def aheal(self, **kw: Any) -> Node:
        return await _in_thread(self.heal, **kw)


class _Supervisor:
    """The supervisor process and its pipes: one JSON line out, one JSON line back.

    Only the process that started it holds its pipes: a child the application forks closes them at
    once (the supervisor must see the end of its stdin when the test's process is gone, whatever its
    children do), and never stops the cluster or removes its directory."""

    def __init__(self, argv: list[str], directory: Path) -> None:
        self.directory = directory
        self.log = directory / "supervisor.log"
        self.owner = os.getpid()
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                            start_new_session=True, close_fds=True)
        self._buffer = b""
        self._lock = threading.Lock()
        _SUPERVISORS.add(self)

    def forked_away(self) -> None:
        """In a forked child: let go of the pipes without touching the supervisor (their descriptors
        now read /dev/null, so that the file objects holding them close nothing else later)."""
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError, ValueError):
                        os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)

    def _gone(self, what: str) -> ClusterError:
        code = self.process.poll()
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:]) if self.log.exists() else ""
        state = f"exited with code {code}" if code is not None else "did not answer"
        return ClusterError(f"the cluster's supervisor {state} ({what}){':' if tail else ''}\n{tail}".rstrip())

    def read(self, timeout: float, what: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._gone(what)
            if not _readable(fd, left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise self._gone(what)
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def request(self, op: str, args: Mapping[str, Any], timeout: float) -> Any:
        if os.getpid() != self.owner:
            raise ClusterError("a cluster is driven by the process that started it, not by a child it forked")
        with self._lock:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write(json.dumps({"op": op, "args": dict(args), "timeout": timeout}).encode()
                                         + b"\n")
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                raise self._gone(op) from None
            answer = self.read(timeout + GRACE_S, op)
        if "error" in answer:
            raise ClusterError(answer["error"], answer.get("code"))
        return answer["ok"]


_SUPERVISORS: weakref.WeakSet[_Supervisor] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for supervisor in list(_SUPERVISORS):
        supervisor.forked_away()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _reap(supervisor: _Supervisor, directory: Path, keep: bool) -> None:
    """Make sure nothing of the cluster is left: the supervisor told (its stdin closed) or killed
    with its whole process group, and the directory removed unless kept. Not in a forked child."""
    if os.getpid() != supervisor.owner:
        return
    process = supervisor.process
    if process.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            if process.stdin is not None:
                process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    for stream in (process.stdin, process.stdout):
        with contextlib.suppress(OSError, ValueError):
            if stream is not None:
                stream.close()
    if not keep:
        shutil.rmtree(directory, ignore_errors=True)


class Cluster:
    """A kraftpy cluster of one controller and ``brokers`` brokers on 127.0.0.1, for tests.

    ``with cluster(brokers=3) as c:`` (or ``async with``) starts it and closes it; so do `start` and
    `close`. Keyword arguments other than those below are broker and controller configuration:
    ``log_retention_ms=1000`` sets ``log.retention.ms`` (``**{"log.retention.ms": 1000}`` too). A bad
    one is refused here, before anything starts, with a ValueError naming the key and the value.

    ``directory``: where the cluster's directory (``kraftpy-XXXX``, data and logs) is made; the
    system's temporary directory by default. It is removed when the cluster closes, unless ``keep``.
    """

    def __init__(self, brokers: int = 1, *, directory: str | os.PathLike[str] | None = None, keep: bool = False,
                 log_level: str = "info", start_timeout: float = 60.0, **overrides: Any) -> None:
        if not hasattr(os, "fork"):
            raise ClusterError(f"kraftpy.testing forks its nodes: it runs on Linux and macOS, not on {sys.platform}")
        if isinstance(brokers, bool) or not isinstance(brokers, int) or brokers < 1:
            raise ValueError(f"brokers={brokers!r}: a cluster needs a whole number of brokers, at least 1")
        if log_level not in ("debug", "info", "warning", "error"):
            raise ValueError(f"log_level={log_level!r}: not one of debug, info, warning, error")
        from kraftpy.testing import _config

        self.overrides = _config.normalize_overrides(overrides)
        _config.validate(brokers, self.overrides)
        self.broker_count = brokers
        self.parent = Path(directory) if directory is not None else None
        self.keep = keep
        self.log_level = log_level
        self.start_timeout = start_timeout
        self._supervisor: _Supervisor | None = None
        self._finalizer: weakref.finalize | None = None
        self._nodes: dict[str, Node] = {}
        self._info: dict[str, Any] = {}
        #: How long the start took, in seconds: ``total``, and of it the nodes' start until each served
        #: (``nodes_ready``) and until every broker saw every other (``whole``); the rest is Python starting
        #: the supervisor and importing kraftpy once, which every node is forked with.
        self.start_timings: dict[str, float] = {}
        #: Set by any fault (a test that changed the cluster); `restore` clears it.
        self.faulted = False

    # -- life -------------------------------------------------------------------------------------

    def start(self) -> Cluster:
        """Start the cluster; returns once every broker serves and sees every other."""
        if self._supervisor is not None:
            raise ClusterError("this cluster is started already")
        if self.parent is not None:
            self.parent.mkdir(parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix="kraftpy-", dir=self.parent)).resolve()
        spec = {"directory": str(directory), "brokers": self.broker_count, "overrides": self.overrides,
                "log_level": self.log_level, "keep": self.keep, "start_timeout": self.start_timeout}
        supervisor = _Supervisor([sys.executable, "-m", "kraftpy.testing._start", json.dumps(spec)], directory)
        self._supervisor = supervisor
        self._finalizer = weakref.finalize(self, _reap, supervisor, directory, self.keep)
        began = time.monotonic()
        try:
            answer = supervisor.read(self.start_timeout + GRACE_S, "start")
            if "error" in answer:
                raise ClusterError(f"the cluster did not start: {answer['error']}", answer.get("code"))
        except BaseException:
            self._finalizer()
            self._supervisor = self._finalizer = None
            raise
        self._update(answer["ok"])
        self.start_timings = {"total": time.monotonic() - began, "nodes_ready": answer["ok"]["timings"]["nodes_ready_s"],
                              "whole": answer["ok"]["timings"]["whole_s"]}
        return self

    def close(self, *, graceful: bool = False) -> None:
        """Stop every node and remove the directory (unless ``keep``). Without ``graceful`` the nodes are
        killed: quickest, and nothing of them is kept anyway; with it, brokers shut down cleanly first
        (the default when ``keep``)."""
        supervisor, finalizer = self._supervisor, self._finalizer
        if supervisor is None or finalizer is None or not finalizer.alive:
            return
        try:
            if supervisor.process.poll() is None and os.getpid() == supervisor.owner:
                supervisor.request("close", {"graceful": graceful or self.keep}, 90.0)
                supervisor.process.wait(GRACE_S)
        except (ClusterError, subprocess.TimeoutExpired):
            pass
        finally:
            finalizer()

    @property
    def started(self) -> bool:
        return self._finalizer is not None and self._finalizer.alive

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Cluster:
        return await _in_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await _in_thread(self.close)

    def _request(self, op: str, args: Mapping[str, Any], timeout: float) -> Any:
        if self._supervisor is None or not self.started:
            raise ClusterError("the cluster is not running: start it first (or use it in a with block)")
        if op in ("kill", "stop", "pause", "isolate", "start", "resume", "heal"):
            self.faulted = True
        return self._supervisor.request(op, args, timeout)

    def _update(self, info: Mapping[str, Any]) -> None:
        self._info = dict(info)
        for status in info["nodes"]:
            node = self._nodes.get(status["name"])
            if node is None:
                self._nodes[status["name"]] = Node(self, status)
            else:
                node._status = dict(status)

    # -- what a client needs ---------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``bootstrap.servers`` for any Kafka client: every broker's address."""
        self._require()
        return self._info["bootstrap"]

    @property
    def data_dir(self) -> Path:
        """The cluster's directory: each node's data and log, and the supervisor's log."""
        self._require()
        return Path(self._info["directory"])

    @property
    def cluster_id(self) -> str:
        self._require()
        return self._info["cluster_id"]

    @property
    def brokers(self) -> tuple[Node, ...]:
        self._require()
        return tuple(n for n in self._nodes.values() if n.role == "broker")

    @property
    def controller(self) -> Node:
        self._require()
        return self._nodes["controller"]

    def broker(self, node_id: int) -> Node:
        """The broker with this ``node.id`` (1..N)."""
        for broker in self.brokers:
            if broker.node_id == node_id:
                return broker
        raise KeyError(f"no broker {node_id}: the brokers are {[b.node_id for b in self.brokers]}")

    def processes(self) -> dict[str, int]:
        """Every process of the cluster that runs now, by name: the supervisor, the zygote that forks
        the nodes, and each node."""
        info = self.status()
        pids = {"supervisor": info["supervisor"], "zygote": info["zygote"]}
        pids.update({n["name"]: n["pid"] for n in info["nodes"] if n["pid"]})
        return pids

    def status(self) -> dict[str, Any]:
        info = self._request("status", {}, 30.0)
        self._update({**self._info, **info})
        return info

    def _require(self) -> None:
        if not self._info:
            raise ClusterError("the cluster is not started: start it first (or use it in a with block)")

    # -- topics ----------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     config: Mapping[str, Any] | None = None, *, timeout: float = 30.0) -> TopicInfo:
        """Create a topic and return once every serving broker knows its partitions' leaders (a
        client's first produce to it succeeds). ``partitions`` and ``replication_factor`` default to
        the brokers' ``num.partitions`` (1) and ``default.replication.factor`` (the number of brokers,
        at most 3); ``config`` holds topic configs (``{"cleanup.policy": "compact"}``)."""
        if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int)
                                       or partitions < 1):
            raise ValueError(f"partitions={partitions!r}: a topic needs at least one partition")
        if replication_factor is not None and (isinstance(replication_factor, bool)
                                               or not isinstance(replication_factor, int)
                                               or not 1 <= replication_factor <= self.broker_count):
            raise ValueError(f"replication_factor={replication_factor!r}: between 1 and the {self.broker_count} "
                             f"broker(s) of this cluster")
        configs = {str(k): ("true" if v is True else "false" if v is False else str(v))
                   for k, v in (config or {}).items()}
        return TopicInfo.from_json(self._request("create_topic", {
            "name": name, "partitions": partitions, "replication_factor": replication_factor, "config": configs},
            timeout))

    def delete_topic(self, name: str, *, timeout: float = 30.0) -> None:
        self._request("delete_topic", {"name": name}, timeout)

    def describe_topic(self, name: str, *, timeout: float = 30.0) -> TopicInfo:
        """The topic's partitions, leaders, replicas and in-sync replicas, as a serving broker sees them."""
        return TopicInfo.from_json(self._request("describe_topic", {"name": name}, timeout))

    def leader(self, topic: str, partition: int = 0, *, not_on: Node | None = None, timeout: float = 30.0) -> Node:
        """The broker leading ``topic``'s ``partition``; with ``not_on``, waits until another broker
        leads it (after a fault struck ``not_on``), up to ``timeout``."""
        node_id = self._request("leader", {"topic": topic, "partition": partition,
                                           "not_on": None if not_on is None else not_on.node_id}, timeout)
        return self.broker(node_id)

    # -- faults ----------------------------------------------------------------------------------

    def heal(self, *, timeout: float = 60.0) -> None:
        """Reconnect every isolated node and resume every paused one; stopped nodes stay stopped."""
        self._update(self._request("heal", {"name": None}, timeout))

    def restore(self, *, timeout: float = 120.0) -> list[str]:
        """Undo every fault: every node reconnected, resumed and running, and the cluster whole again.
        Returns the names of the nodes that needed it."""
        if self._supervisor is None or not self.started:
            return []
        info = self._supervisor.request("restore", {}, timeout)
        self._update({**self._info, **info})
        self.faulted = False
        return info["restored"]

    async def acreate_topic(self, *args: Any, **kw: Any) -> TopicInfo:
        return await _in_thread(self.create_topic, *args, **kw)

    async def adelete_topic(self, *args: Any, **kw: Any) -> None:
        return await _in_thread(self.delete_topic, *args, **kw)

    async def adescribe_topic(self, *args: Any, **kw: Any) -> TopicInfo:
        return await _in_thread(self.describe_topic, *args, **kw)

    async def aleader(self, *args: Any, **kw: Any) -> Node:
        return await _in_thread(self.leader, *args, **kw)

    async def aheal(self, **kw: Any) -> None:
        return await _in_thread(self.heal, **kw)

    async def arestore(self, **kw: Any) -> list[str]:
        return await _in_thread(self.restore, **kw)


def cluster(brokers: int = 1, **kwargs: Any) -> Cluster:
    """A cluster of one controller and ``brokers`` brokers, started by ``with`` or ``async with`` (or
    `Cluster.start`): see `Cluster`."""
    return Cluster(brokers, **kwargs)
