"""The supervisor of a test cluster: one process between the test and the cluster's nodes.

Theory of operation::

    test process ──stdin/stdout, JSON lines──▶ supervisor (its own session; trio)
                                                 ├─ proxy: the nodes' internal listeners (kraftpy.testing.proxy)
                                                 ├─ admin clients: topics, metadata (kraftpy.admin.client)
                                                 ├─ lifeline listener ◀── one connection from each node
                                                 └─ socket pair ──▶ zygote (fork server, no event loop)
                                                                     ├─ controller  (fork)
                                                                     ├─ broker 1    (fork)
                                                                     └─ broker N    (fork)

The test process starts ``python -m kraftpy.testing._start SPEC`` in a session of its own (the
terminal's Ctrl-C reaches the test, not the cluster), which forks the zygote and then runs this;
`kraftpy.testing.Cluster` talks to it one request at a time: ``{"op": ..., "args": {...}}`` in,
``{"ok": result}`` or ``{"error": message, "code": name}`` out. The first line out is the answer to the start: the cluster is up, or why it is not.

The zygote (`kraftpy.testing._zygote`) is forked first, before anything heavy is imported: it imports
the nodes' modules while the supervisor imports its own (two imports side by side on two cores), and
the supervisor has it fork each node. A node says who it is on the lifeline, then
``ready`` once it serves; the supervisor then waits until every broker's Metadata lists every broker
that should be serving, as a client sees it, before it answers.

Nothing outlives the test: the end of stdin (the test process is gone, killed with -9 or not) is a
``close``. Closing asks the zygote to quit: it kills every node (resumed first if paused), reaps them,
removes the cluster's directory and exits; the supervisor waits for that, answers and exits. If the
supervisor itself dies, the zygote sees its socket end and does the same; if the zygote dies, the
kernel kills the nodes (Linux) and each node sees its lifeline end.

Faults (`kraftpy.testing.faults`, the fault harness's process nemeses): ``kill`` (SIGKILL), ``stop``
(SIGTERM, a controlled shutdown), ``start``, ``pause`` (SIGSTOP), ``resume`` (SIGCONT), ``isolate``
(the proxy refuses and closes every connection between the node and the other nodes; clients still
reach it) and ``heal``. What heals (start, resume, heal, restore) answers once the cluster is whole
again: every broker that should be serving is listed by every such broker.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from kraftpy.admin.client import AdminClient, AdminConnectionError, ClientConfig
from kraftpy.broker.client import ConnectionClosed
from kraftpy.config import load_config
from kraftpy.ids import random_uuid_str
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import CreateTopicsRequest, DeleteTopicsRequest
from kraftpy.storage.formatter import format_dirs
from kraftpy.testing import _config, faults
from kraftpy.testing.proxy import Proxy, Route, SocketOwners, socket_inode

#: How many times a node is started again on new ports when one it was given is taken meanwhile.
BIND_ATTEMPTS = 3
#: The first and the longest pause between two looks at the brokers' metadata.
POLL_FIRST_S, POLL_MAX_S = 0.001, 0.02


class CommandError(Exception):
    """What a request gets as its error: a message, and the Kafka error's name when one was answered."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class NodeProcess:
    """A node process as `kraftpy.testing.faults` expects one (`subprocess.Popen`'s shape). It is the
    zygote's child, not ours: its exit is learnt from the zygote's report (`exited`), which a fault
    running in a worker thread waits for (`wait`)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.gone = trio.Event()
        self._exited = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def exited(self, code: int) -> None:
        """Called in the supervisor's trio thread when the zygote reports the exit."""
        self.returncode = code
        self._exited.set()
        self.gone.set()


@attrs.define(eq=False)
class Node:
    name: str
    role: str
    node_id: int
    config: Path
    log: Path
    data: Path
    route: Route
    client_port: int = 0
    process: NodeProcess | None = None
    ready: trio.Event = attrs.Factory(trio.Event)
    paused: bool = False
    isolated: bool = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def healthy(self) -> bool:
        """Running, neither paused nor cut off: it should be serving."""
        return self.running and not self.paused and not self.isolated

    def status(self) -> dict[str, Any]:
        state = "paused" if self.running and self.paused else "running" if self.running else "stopped"
        return {"name": self.name, "role": self.role, "node_id": self.node_id, "state": state,
                "isolated": self.isolated, "pid": self.process.pid if self.running and self.process else None,
                "port": self.client_port or None, "data_dir": str(self.data), "log": str(self.log)}


class LineReader:
    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def line(self) -> bytes | None:
        """The next line without its newline; None at the end of the stream."""
        while b"\n" not in self.buffer:
            try:
                chunk = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                chunk = b""
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


class ZygoteClient:
    """The supervisor's side of the zygote's socket pair: spawn requests, and exit reports."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        self.processes: dict[int, NodeProcess] = {}
        #: The node each process forked for (set as the zygote reports the fork: before it can connect).
        self.nodes: dict[int, Node] = {}
        #: The node each spawn request is for, by token.
        self.pending: dict[str, Node] = {}
        self._spawned: dict[str, trio.Event] = {}
        self._pids: dict[str, int] = {}
        self.alive = True
        self.gone = trio.Event()
        self._sending = trio.Lock()

    async def run(self) -> None:
        reader = LineReader(self.stream)
        while (line := await reader.line()) is not None:
            message = json.loads(line)
            if "spawned" in message:
                token, pid = message["spawned"], message["pid"]
                self.processes[pid] = NodeProcess(pid)
                self.nodes[pid] = self.pending.pop(token)
                self._pids[token] = pid
                self._spawned.pop(token).set()
            elif "exited" in message:
                self.nodes.pop(message["exited"], None)
                process = self.processes.pop(message["exited"], None)
                if process is not None:
                    process.exited(message["code"])
        # The zygote is gone, and with it (the kernel kills them) every node it forked.
        self.alive = False
        for process in self.processes.values():
            process.exited(-signal.SIGKILL)
        self.processes.clear()
        self.nodes.clear()
        self.gone.set()

    async def spawn(self, node: Node, spec: dict[str, Any]) -> NodeProcess:
        if not self.alive:
            raise CommandError("the zygote that forks the cluster's nodes has exited")
        self.pending[spec["token"]] = node
        event = self._spawned[spec["token"]] = trio.Event()
        async with self._sending:
            await self.stream.send_all(json.dumps({"spawn": spec}).encode() + b"\n")
        with trio.fail_after(30):
            await event.wait()
        pid = self._pids.pop(spec["token"])
        return self.processes.get(pid) or _already_exited(pid)

    async def quit(self) -> None:
        """Ask the zygote to kill every node, remove the directory and exit; wait until it has."""
        if self.alive:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                async with self._sending:
                    await self.stream.send_all(b'{"quit": true}\n')
        with contextlib.suppress(ChildProcessError):
            await trio.to_thread.run_sync(os.waitpid, self.pid, 0)
        with trio.move_on_after(5):
            await self.gone.wait()


def _already_exited(pid: int) -> NodeProcess:
    process = NodeProcess(pid)
    process.exited(-1)
    return process


class Supervisor:
    def __init__(self, spec: dict[str, Any], zygote: ZygoteClient) -> None:
        self.directory = Path(spec["directory"])
        self.brokers = int(spec["brokers"])
        self.overrides: dict[str, str] = spec["overrides"]
        self.log_level: str = spec["log_level"]
        self.keep: bool = spec["keep"]
        self.start_timeout: float = spec["start_timeout"]
        self.zygote = zygote
        self.lifeline_port = 0
        self.tokens: dict[str, Node] = {}
        self._tokens = itertools.count(1)
        self.admins: dict[int, AdminClient] = {}
        self.controller: Node
        self.broker_nodes: list[Node] = []
        self.proxy: Proxy
        self.out: trio.lowlevel.FdStream
        #: What the request in progress waits for, said when its deadline passes.
        self.waiting_for = "the nodes to start"
        #: Connections to the proxy whose node was not found (they pass the cuts as a client would).
        self.unidentified = 0

    # -- the nodes -------------------------------------------------------------------------------

    @property
    def nodes(self) -> list[Node]:
        return [self.controller, *self.broker_nodes]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise CommandError(f"no node {name!r} in this cluster: {', '.join(n.name for n in self.nodes)}")

    def _pids(self) -> dict[int, str]:
        """The running nodes' processes (read in the proxy's worker threads: a copy, made at once)."""
        return {pid: node.name for pid, node in dict(self.zygote.nodes).items()}

    def identify(self, peer: tuple[str, int]) -> str | None:
        """Which node a connection to the proxy comes from (in a worker thread). Only nodes connect to
        the proxy's ports, so a peer whose socket is there but whose owner is not known yet is a node
        still being forked: looked for again a few times before it passes as a client. A peer whose
        socket is gone (it closed, or its process was killed) is nobody to cut off."""
        ports = self._proxy_ports()
        for _ in range(50):
            if socket_inode(peer, ports) is None:
                return None
            name = self._owners(peer)
            if name is not None:
                return name
            time.sleep(0.02)
        self.unidentified += 1
        print(f"kraftpy.testing: the proxy could not tell which node {peer} is", file=sys.stderr, flush=True)
        return None

    def _plan(self) -> None:
        controller_route = Route("controller", ("127.0.0.1", 0))
        self.controller = Node("controller", "controller", _config.CONTROLLER_ID, self.directory / "controller.properties",
                               self.directory / "controller.log", self.directory / "controller", controller_route)
        for i in range(1, self.brokers + 1):
            self.broker_nodes.append(Node(f"broker-{i}", "broker", i, self.directory / f"broker-{i}.properties",
                                          self.directory / f"broker-{i}.log", self.directory / f"broker-{i}",
                                          Route(f"broker-{i}", ("127.0.0.1", 0))))

    def _write_config(self, node: Node, *, new_client_port: bool) -> None:
        """The node's properties on free ports: its real listener behind the proxy always, its client
        port when ``new_client_port`` (a broker's first start; clients keep it across restarts)."""
        real, client = free_ports(2)
        node.route.target = ("127.0.0.1", real)
        if new_client_port or not node.client_port:
            node.client_port = client if node.role == "broker" else 0
        if node.role == "controller":
            text = _config.controller_properties(self.directory, real, node.route.port, self.brokers, self.overrides)
        else:
            text = _config.broker_properties(self.directory, node.node_id, node.client_port, real, node.route.port,
                                             self.controller.route.port, self.brokers, self.overrides)
        node.config.write_text(text)

    async def _spawn(self, node: Node) -> None:
        token = f"{node.name}-{next(self._tokens)}"
        self.tokens[token] = node
        node.ready = trio.Event()
        node.paused = False
        node.process = await self.zygote.spawn(node, {
            "token": token, "config": str(node.config), "log": str(node.log), "log_level": self.log_level,
            "lifeline": self.lifeline_port})

    async def _start_node(self, node: Node, *, first: bool) -> None:
        """Start ``node`` and wait until it is ready; on a port taken meanwhile, again on new ones."""
        for attempt in range(BIND_ATTEMPTS):
            mark = node.log.stat().st_size if node.log.exists() else 0
            await self._spawn(node)
            assert node.process is not None
            gone = node.process.gone
            self.waiting_for = f"{node.name} to serve"
            async with trio.open_nursery() as race:
                async def until(event: trio.Event) -> None:
                    await event.wait()
                    race.cancel_scope.cancel()
                race.start_soon(until, node.ready)
                race.start_soon(until, gone)
            if node.ready.is_set():
                return
            output = node.log.read_text(errors="replace")[mark:]
            if "cannot listen on" in output and attempt + 1 < BIND_ATTEMPTS:
                self._write_config(node, new_client_port=first)
                continue
            raise CommandError(f"{node.name} exited (code {node.process.returncode}) before it served:\n"
                               f"{log_tail(node.log)}")

    # -- the cluster as clients see it ------------------------------------------------------------

    def admin(self, node: Node) -> AdminClient:
        admin = self.admins.get(node.node_id)
        if admin is None or admin.bootstrap != [("127.0.0.1", node.client_port)]:
            admin = self.admins[node.node_id] = AdminClient(
                [("127.0.0.1", node.client_port)], ClientConfig(client_id="kraftpy-testing", request_timeout_s=10))
        return admin

    def healthy_brokers(self) -> list[Node]:
        return [b for b in self.broker_nodes if b.healthy]

    def any_broker(self) -> Node:
        healthy = self.healthy_brokers()
        if not healthy:
            raise CommandError("no broker is serving (each is stopped, paused or isolated)")
        return healthy[0]

    async def _poll(self, check: Callable[[], Awaitable[Any]], what: str) -> Any:
        """``await check()`` until it returns something truthy (connection errors count as not yet);
        the request's deadline bounds it, and its error names ``what`` was awaited."""
        self.waiting_for = what
        pause = POLL_FIRST_S
        while True:
            try:
                found = await check()
            except (AdminConnectionError, ConnectionClosed, OSError):
                found = None
            if found:
                return found
            await trio.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)

    async def wait_whole(self) -> None:
        """Until every healthy broker's Metadata lists every healthy broker, and every partition has its
        healthy replicas in sync again (a restarted or resumed broker has caught up), as every healthy
        broker tells it."""
        healthy = self.healthy_brokers()
        expected = {b.node_id for b in healthy}

        async def lists_all(broker: Node) -> bool:
            response = await self.admin(broker).metadata([])
            return expected <= {b.node_id for b in response.brokers}

        await self._on_each(healthy, lists_all, f"every broker to list brokers {sorted(expected)}")
        if not healthy:
            return

        async def in_sync() -> bool:
            views = []
            for broker in healthy:
                response = await self.admin(broker).metadata(None)
                views.append({(t.name, p.partition_index): (p.leader_id, tuple(sorted(p.isr_nodes)), set(p.replica_nodes))
                              for t in response.topics for p in t.partitions})
            behind = [f"{name}-{index} (replicas {sorted(replicas)}, in sync {list(isr)})"
                      for (name, index), (_, isr, replicas) in views[0].items() if not expected & replicas <= set(isr)]
            # A broker just resumed or reconnected answers from what it knew before until it catches up:
            # every broker must tell the same leaders and in-sync replicas.
            agreed = all(view == views[0] for view in views[1:])
            self.waiting_for = ("every partition's serving replicas to be in sync" + (": " + ", ".join(behind[:10])
                                if behind else "") + ("" if agreed else ", and every broker to agree on it"))
            return not behind and agreed
        await self._poll(in_sync, "every partition's serving replicas to be in sync")

    async def metadata(self, topic: str, broker: Node | None = None) -> Any:
        response = await self.admin(broker or self.any_broker()).metadata([topic])
        (entry,) = response.topics
        return entry

    # -- start and stop ---------------------------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        self._plan()
        await self.nursery.start(self.proxy_run)
        for node in self.nodes:
            self._write_config(node, new_client_port=True)
        cluster_id = random_uuid_str()
        for node in self.nodes:
            config = load_config(node.config)
            format_dirs(config.all_dirs, cluster_id, config.node_id)
        began = time.monotonic()
        async with trio.open_nursery() as nursery:
            for node in self.nodes:
                nursery.start_soon(lambda n=node: self._start_node(n, first=True))
        ready = time.monotonic()
        await self.wait_whole()
        timings = {"nodes_ready_s": round(ready - began, 4), "whole_s": round(time.monotonic() - began, 4)}
        return {"cluster_id": cluster_id, "timings": timings, **self.status()}

    def _proxy_ports(self) -> set[int]:
        return {n.route.port for n in self.nodes}

    async def proxy_run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._owners = SocketOwners(self._pids, remote_ports=self._proxy_ports)
        self.proxy = Proxy([n.route for n in self.nodes], identify=self.identify, hold=True)
        await self.proxy.run(task_status=task_status)

    def status(self) -> dict[str, Any]:
        return {"bootstrap": ",".join(f"127.0.0.1:{b.client_port}" for b in self.broker_nodes),
                "directory": str(self.directory), "supervisor": os.getpid(), "zygote": self.zygote.pid,
                "nodes": [n.status() for n in self.nodes],
                "proxy": {**self.proxy.stats, "unidentified": self.unidentified}}

    async def close(self, graceful: bool) -> dict[str, Any]:
        if graceful:
            for group in (self.broker_nodes, [self.controller]):
                async with trio.open_nursery() as nursery:
                    for node in group:
                        if node.running:
                            nursery.start_soon(trio.to_thread.run_sync, lambda n=node: faults.terminate(
                                n.process, timeout=30, kill_timeout=10))
        for admin in self.admins.values():
            with contextlib.suppress(Exception):
                await admin.aclose()
        await self.zygote.quit()
        return {"closed": True}

    # -- requests ---------------------------------------------------------------------------------

    async def op_status(self) -> dict[str, Any]:
        return self.status()

    async def op_create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                              config: dict[str, str]) -> dict[str, Any]:
        Topic = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(topics=[Topic(
            name=name, num_partitions=-1 if partitions is None else partitions,
            replication_factor=-1 if replication_factor is None else replication_factor, assignments=[],
            configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in config.items()])],
            timeout_ms=10000)

        async def create() -> Any:
            response = await self.admin(self.any_broker()).request(ApiKey.CREATE_TOPICS, request)
            result = response.topics[0]
            code = ErrorCode.for_code(result.error_code)
            if code != ErrorCode.NONE:
                if code.retriable:
                    return None
                raise CommandError(f"topic {name}: {code.name}" + (f": {result.error_message}"
                                                                     if result.error_message else ""), code.name)
            return result

        await self._poll(create, f"topic {name} created")
        await self._wait_topic(name)
        return await self.op_describe_topic(name)

    async def _wait_topic(self, name: str) -> None:
        """Until every healthy broker knows ``name`` and a leader for each of its partitions."""
        async def led(broker: Node) -> bool:
            entry = await self.metadata(name, broker)
            return entry.error_code == ErrorCode.NONE and bool(entry.partitions) and all(
                p.leader_id >= 0 for p in entry.partitions)

        await self._on_each(self.healthy_brokers(), led, f"every broker to know the leaders of {name}")

    async def _on_each(self, brokers: list[Node], check: Callable[[Node], Awaitable[Any]], what: str) -> None:
        """`_poll` ``check(broker)`` for each of ``brokers``, side by side."""
        async with trio.open_nursery() as nursery:
            for broker in brokers:
                nursery.start_soon(self._poll, functools.partial(check, broker), what)

    async def op_delete_topic(self, name: str) -> dict[str, Any]:
        admin = self.admin(self.any_broker())
        response = await admin.request(ApiKey.DELETE_TOPICS, DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name=name)], topic_names=[name], timeout_ms=10000))
        result = response.responses[0]
        code = ErrorCode.for_code(result.error_code)
        if code != ErrorCode.NONE:
            raise CommandError(f"topic {name}: {code.name}" + (f": {result.error_message}" if result.error_message
                                                                 else ""), code.name)
        return {"deleted": name}

    async def op_describe_topic(self, name: str) -> dict[str, Any]:
        entry = await self.metadata(name)
        code = ErrorCode.for_code(entry.error_code)
        if code != ErrorCode.NONE:
            raise CommandError(f"topic {name}: {code.name}", code.name)
        return {"name": name, "partitions": [
            {"partition": p.partition_index, "leader": p.leader_id, "replicas": list(p.replica_nodes),
             "isr": list(p.isr_nodes)} for p in sorted(entry.partitions, key=lambda p: p.partition_index)]}

    async def op_leader(self, topic: str, partition: int, not_on: int | None) -> int:
        async def elected() -> int | None:
            entry = await self.metadata(topic)
            for p in entry.partitions:
                if p.partition_index == partition and p.leader_id >= 0 and p.leader_id != not_on:
                    return p.leader_id + 1  # truthy for node 0 too
            return None

        return await self._poll(elected, f"a leader of {topic}-{partition}") - 1

    async def op_kill(self, name: str) -> dict[str, Any]:
        node = self.node(name)
        await trio.to_thread.run_sync(lambda: faults.kill(node.process, timeout=10))
        node.paused = False
        return node.status()

    async def op_stop(self, name: str) -> dict[str, Any]:
        node = self.node(name)
        await trio.to_thread.run_sync(lambda: faults.terminate(node.process, timeout=30, kill_timeout=10))
        node.paused = False
        return node.status()

    async def op_start(self, name: str) -> dict[str, Any]:
        node = self.node(name)
        if node.running:
            raise CommandError(f"{name} is running already (pid {node.process.pid if node.process else '?'})")
        await self._start_node(node, first=False)
        await self.wait_whole()
        return node.status()

    async def op_pause(self, name: str) -> dict[str, Any]:
        node = self.node(name)
        if not node.running:
            raise CommandError(f"{name} is not running")
        await trio.to_thread.run_sync(lambda: faults.pause(node.process, timeout=10))
        node.paused = True
        return node.status()

    async def op_resume(self, name: str) -> dict[str, Any]:
        node = self.node(name)
        await trio.to_thread.run_sync(lambda: faults.resume(node.process, timeout=10))
        node.paused = False
        await self.wait_whole()
        return node.status()

    async def op_isolate(self, name: str) -> dict[str, Any]:
        node = self.node(name)
        if not sys.platform.startswith("linux"):
            raise CommandError("isolating a node needs Linux: the proxy finds which node a connection comes "
                               "from in /proc")
        node.isolated = True
        self._apply_cuts()
        return node.status()

    async def op_heal(self, name: str | None) -> dict[str, Any]:
        """Reconnect ``name`` (every node when None) and resume it if paused."""
        targets = self.nodes if name is None else [self.node(name)]
        for node in targets:
            node.isolated = False
        self._apply_cuts()
        for node in targets:
            if node.paused and node.running:
                await trio.to_thread.run_sync(lambda n=node: faults.resume(n.process, timeout=10))
            node.paused = False
        await self.wait_whole()
        return self.status()

    async def op_restore(self) -> dict[str, Any]:
        """Everything as it was started: every node reconnected, resumed and running again."""
        changed = [n.name for n in self.nodes if n.isolated or n.paused or not n.running]
        if changed:
            await self.op_heal(None)
            for node in self.nodes:
                if not node.running:
                    await self._start_node(node, first=False)
            await self.wait_whole()
        return {"restored": changed, **self.status()}

    def _apply_cuts(self) -> None:
        names = [n.name for n in self.nodes]
        cut = [(n.name, other) for n in self.nodes if n.isolated for other in names if other != n.name]
        self.proxy.heal()
        if cut:
            self.proxy.partition(cut)

    # -- the lifeline and the request loop --------------------------------------------------------

    async def lifeline(self, stream: trio.SocketStream) -> None:
        reader = LineReader(stream)
        hello = await reader.line()
        node = self.tokens.pop(json.loads(hello)["token"], None) if hello else None
        if node is None:
            return
        while (line := await reader.line()) is not None:
            if json.loads(line).get("ready"):
                node.ready.set()
        # The end of the stream: the node has exited (the zygote reports how).

    async def run(self) -> None:
        self.out = trio.lowlevel.FdStream(os.dup(1))
        requests = LineReader(trio.lowlevel.FdStream(os.dup(0)))
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            nursery.start_soon(self.zygote.run)
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            self.lifeline_port = listeners[0].socket.getsockname()[1]
            nursery.start_soon(trio.serve_listeners, self.lifeline, listeners)
            try:
                with trio.fail_after(self.start_timeout):
                    ready = await self.start()
            except Exception as exc:
                await self._answer(None, exc, during="start")
                await self.close(graceful=False)
                nursery.cancel_scope.cancel()
                return
            await self._send({"ok": ready})
            graceful = False
            while (line := await requests.line()) is not None:
                request = json.loads(line)
                if request["op"] == "close":
                    graceful = bool(request.get("args", {}).get("graceful"))
                    break
                await self._request(request)
            else:
                line = None
            closed = await self.close(graceful)
            if line is not None:
                await self._send({"ok": closed})
            nursery.cancel_scope.cancel()

    async def _request(self, request: dict[str, Any]) -> None:
        op, args = request["op"], request.get("args", {})
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            await self._send({"error": f"unknown request {op!r}", "code": None})
            return
        try:
            with trio.fail_after(float(request.get("timeout", 60))):
                result = await handler(**args)
        except Exception as exc:
            await self._answer(op, exc)
            return
        await self._send({"ok": result})

    async def _answer(self, op: str | None, exc: Exception, during: str | None = None) -> None:
        if isinstance(exc, CommandError):
            await self._send({"error": str(exc), "code": exc.code})
            return
        if isinstance(exc, trio.TooSlowError):
            what = during or op
            tails = "\n".join(f"--- {n.name}:\n{log_tail(n.log, 8)}" for n in self.nodes if n.log.exists())
            await self._send({"error": f"{what} did not finish in time (waiting for: {self.waiting_for}); the "
                              f"nodes' last log lines:\n{tails}",
                              "code": None})
            return
        traceback.print_exc()
        await self._send({"error": f"{during or op} failed: {exc!r}", "code": None})

    async def _send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self.out.send_all(json.dumps(message).encode() + b"\n")


def run(spec: dict[str, Any], zygote_pid: int, sock: socket.socket) -> int:
    """Serve the test until it closes the cluster (`kraftpy.testing._start` forked the zygote)."""
    try:
        trio.run(Supervisor(spec, ZygoteClient(zygote_pid, sock)).run)
    finally:
        sock.close()  # the zygote, if still there, sees the end and cleans up
        with contextlib.suppress(ChildProcessError):
            os.waitpid(zygote_pid, 0)
    return 0
