"""The nemesis: the seeded schedule, process faults on real child processes, and both network
backends with plain TCP echo servers standing in for the nodes."""

from __future__ import annotations

import functools
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
from collections import Counter

import attrs
import pytest
import trio

from tests.jepsen import nemesis as nm
from tests.jepsen.proxy import (
    Proxy,
    Route,
    SocketOwners,
    ThreadedProxy,
    _owns,
    by_source_address,
    socket_inode,
)

CONTROLLERS = ["c1", "c2", "c3"]
BROKERS = ["b1", "b2", "b3"]
NODES = CONTROLLERS + BROKERS

# --- the schedule --------------------------------------------------------------------------------


def test_parse_kinds():
    assert nm.parse_kinds("kill,pause") == ("kill", "pause")
    assert nm.parse_kinds("all") == nm.KINDS
    assert nm.parse_kinds("none") == ()
    assert nm.parse_kinds("partition,all") == ("partition", "kill", "pause", "link", "roll", "membership")
    assert nm.parse_kinds("roll") == ("roll",)
    with pytest.raises(ValueError, match="unknown nemesis 'bogus'"):
        nm.parse_kinds("kill,bogus")


def test_schedule_is_deterministic_per_seed():
    a = nm.schedule(7, nm.KINDS, CONTROLLERS, BROKERS, 300)
    b = nm.schedule(7, nm.KINDS, CONTROLLERS, BROKERS, 300)
    c = nm.schedule(8, nm.KINDS, CONTROLLERS, BROKERS, 300)
    assert a == b
    assert a != c
    assert [f.to_json() for f in a] == [f.to_json() for f in b]


@pytest.mark.parametrize("seed", range(20))
def test_schedule_shape(seed):
    faults = nm.schedule(seed, nm.KINDS, CONTROLLERS, BROKERS, 200, interval=10, heal_before_end=5)
    assert 12 <= len(faults) <= 25
    prev_stop = 0.0
    for i, f in enumerate(faults):
        assert f.id == i
        assert f.variant in nm.VARIANTS[f.kind]
        assert prev_stop < f.start < f.stop <= 195  # healed before the next one starts, and before the end
        assert 3 <= f.stop - f.start <= 6
        prev_stop = f.stop
        if f.kind in ("kill", "pause"):
            assert f.nodes and set(f.nodes) <= set(NODES)
            if f.variant == "majority":
                group = CONTROLLERS if f.nodes[0] in CONTROLLERS else BROKERS
                assert set(f.nodes) <= set(group) and len(f.nodes) == 2
            if f.variant == "leader":
                assert f.partition in range(3) and f.nodes[0] in BROKERS
            if f.variant == "controller":
                assert f.nodes[0] in CONTROLLERS
        if f.kind == "link":
            (victim,) = f.nodes
            assert len(f.links) == 5 and all(victim in p for p in f.links)
            assert (f.delay_ms > 0) == (f.variant == "slow") and (f.loss > 0) == (f.variant == "lossy")


def test_schedule_uses_only_the_kinds_asked_for():
    faults = nm.schedule(1, ("pause",), CONTROLLERS, BROKERS, 500)
    assert {f.kind for f in faults} == {"pause"}
    assert Counter(f.variant for f in faults).keys() == set(nm.VARIANTS["pause"])
    assert nm.schedule(1, (), CONTROLLERS, BROKERS, 500) == []


def test_group_schedules_add_the_coordinator_and_leave_others_as_they_were():
    plain = nm.schedule(3, nm.KINDS, CONTROLLERS, BROKERS, 2000)
    assert plain == nm.schedule(3, nm.KINDS, CONTROLLERS, BROKERS, 2000, group=False)
    assert all(f.variant != "coordinator" for f in plain)
    group = nm.schedule(3, ("kill", "pause"), CONTROLLERS, BROKERS, 2000, group=True)
    coordinators = [f for f in group if f.variant == "coordinator"]
    assert coordinators and {f.kind for f in coordinators} == {"kill", "pause"}
    assert all(f.nodes[0] in BROKERS for f in coordinators)  # the fallback target is a broker


def test_membership_faults_target_controllers():
    faults = nm.schedule(4, ("membership",), CONTROLLERS, BROKERS, 400)
    assert {f.variant for f in faults} == set(nm.VARIANTS["membership"])
    assert all(len(f.nodes) == 1 and f.nodes[0] in CONTROLLERS for f in faults)


def test_a_roll_restarts_brokers_then_controllers():
    faults = nm.schedule(2, ("roll",), CONTROLLERS, BROKERS, 200)
    assert faults and {(f.kind, f.variant) for f in faults} == {("roll", "all")}
    assert all(f.nodes == tuple(BROKERS + CONTROLLERS) for f in faults)


def _sees(node, nodes, cut):
    return {n for n in nodes if n == node or tuple(sorted((node, n))) not in cut}


@pytest.mark.parametrize("n", [3, 5, 6, 7])
def test_partition_variants(n):
    import random

    nodes = [f"n{i}" for i in range(n)]
    majority = n // 2 + 1
    for seed in range(10):
        rnd = random.Random(seed)
        one = set(nm.partition_cut("one", nodes, rnd))
        isolated = [x for x in nodes if len(_sees(x, nodes, one)) == 1]
        assert len(isolated) == 1 and len(one) == n - 1
        maj = set(nm.partition_cut("majority", nodes, rnd))
        sizes = sorted(len(_sees(x, nodes, maj)) for x in nodes)
        assert sizes == [n - majority] * (n - majority) + [majority] * majority
        bridge = set(nm.partition_cut("bridge", nodes, rnd))
        assert sum(len(_sees(x, nodes, bridge)) == n for x in nodes) == 1  # the bridge sees everyone
        ring = set(nm.partition_cut("ring", nodes, rnd))
        views = [frozenset(_sees(x, nodes, ring)) for x in nodes]
        assert all(len(v) >= majority for v in views)
        if n >= 5:
            assert ring and len(set(views)) == n  # no two nodes share a majority


# --- process faults ----------------------------------------------------------------------------


@attrs.define
class FakeNode:
    name: str
    role: str
    address: str
    process: subprocess.Popen | None = None


class FakeCluster:
    """Nodes are `cat` processes blocked on their stdin."""

    def __init__(self) -> None:
        self._nodes = [FakeNode(n, "controller" if n.startswith("c") else "broker", "127.0.0.1") for n in NODES]
        for node in self._nodes:
            node.process = self._spawn()
        self.active: str | None = "c2"
        self.leaders = {0: "b3"}
        self.coordinator: str | None = "b2"
        self.restarted: list[str] = []
        #: What a roll did, in order: ("restart", name) and ("back", name).
        self.events: list[tuple[str, str]] = []
        #: How many times `is_back` answers False after a restart before it answers True (None: never).
        self.polls_until_back: int | None = 2
        self._polls: dict[str, int] = {}

    @staticmethod
    def _spawn() -> subprocess.Popen:
        return subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)

    def nodes(self):
        return self._nodes

    def node(self, name):
        return next(n for n in self._nodes if n.name == name)

    def active_controller(self):
        if self.active is None:
            raise ConnectionError("no quorum")
        return self.active

    def partition_leader(self, partition):
        return self.leaders.get(partition)

    def group_coordinator(self):
        return self.coordinator

    def restart(self, name):
        self.restarted.append(name)
        self.events.append(("restart", name))
        self._polls[name] = 0
        self.node(name).process = self._spawn()

    def is_back(self, name):
        self._polls[name] = self._polls.get(name, 0) + 1
        back = self.polls_until_back is not None and self._polls[name] > self.polls_until_back
        if back:
            self.events.append(("back", name))
        return back

    def close(self):
        for node in self._nodes:
            if node.process.poll() is None:
                node.process.kill()
            node.process.wait()
            node.process.stdin.close()


@pytest.fixture
def cluster():
    c = FakeCluster()
    yield c
    c.close()


def _state(proc):
    return nm._proc_state(proc.pid)


def test_kill_active_controller_then_restart(cluster):
    nemesis = nm.Nemesis(cluster)
    fault = nm.Fault(0, "kill", "controller", 0, 1, nodes=("c1",))
    old = cluster.node("c2").process
    resolved = nemesis.start(fault)
    assert resolved["targets"] == ["c2"]
    assert old.returncode == -9
    assert cluster.node("c1").process.poll() is None
    nemesis.stop(fault)
    assert cluster.restarted == ["c2"]
    assert cluster.node("c2").process.poll() is None


def test_kill_falls_back_to_the_scheduled_node(cluster):
    cluster.active = None
    nemesis = nm.Nemesis(cluster)
    fault = nm.Fault(0, "kill", "controller", 0, 1, nodes=("c3",))
    assert nemesis.start(fault)["targets"] == ["c3"]
    fault = nm.Fault(1, "kill", "leader", 0, 1, nodes=("b1",), partition=7)  # no known leader
    assert nemesis.start(fault)["targets"] == ["b1"]


def test_kill_majority(cluster):
    nemesis = nm.Nemesis(cluster)
    fault = nm.Fault(0, "kill", "majority", 0, 1, nodes=("b1", "b2"))
    nemesis.start(fault)
    assert [n.process.returncode for n in cluster.nodes()] == [None, None, None, -9, -9, None]
    nemesis.stop(fault)
    assert cluster.restarted == ["b1", "b2"]


def test_pause_leader_and_resume(cluster):
    nemesis = nm.Nemesis(cluster)
    fault = nm.Fault(0, "pause", "leader", 0, 1, nodes=("b1",), partition=0)
    assert nemesis.start(fault)["targets"] == ["b3"]
    assert _state(cluster.node("b3").process) in ("T", "t")
    nemesis.stop(fault)
    assert _state(cluster.node("b3").process) not in ("T", "t")
    assert cluster.restarted == []


def test_kill_the_group_coordinator_or_the_scheduled_broker(cluster):
    nemesis = nm.Nemesis(cluster)
    fault = nm.Fault(0, "kill", "coordinator", 0, 1, nodes=("b1",))
    assert nemesis.start(fault)["targets"] == ["b2"]
    assert cluster.node("b2").process.returncode == -9 and cluster.node("b1").process.poll() is None
    nemesis.stop(fault)
    assert cluster.restarted == ["b2"]
    cluster.coordinator = None  # no coordinator known (yet)
    assert nemesis.start(nm.Fault(1, "pause", "coordinator", 0, 1, nodes=("b1",)))["targets"] == ["b1"]
    nemesis.heal_all()


def test_heal_all_resumes_paused_processes(cluster):
    nemesis = nm.Nemesis(cluster)
    nemesis.start(nm.Fault(0, "pause", "majority", 0, 1, nodes=("c1", "c3")))
    assert _state(cluster.node("c1").process) in ("T", "t")
    nemesis.heal_all()
    assert _state(cluster.node("c1").process) not in ("T", "t")
    assert _state(cluster.node("c3").process) not in ("T", "t")


def test_network_fault_needs_a_backend(cluster):
    with pytest.raises(RuntimeError, match="network backend"):
        nm.Nemesis(cluster).start(nm.Fault(0, "partition", "one", 0, 1, cut=(("c1", "c2"),)))


class RecordingNetwork:
    def __init__(self):
        self.calls = []

    def partition(self, cut):
        self.calls.append(("partition", tuple(cut)))

    def set_links(self, pairs, **kw):
        self.calls.append(("links", tuple(pairs), kw))

    def heal(self):
        self.calls.append(("heal",))


def test_schedule_runner_records_and_heals(cluster):
    net = RecordingNetwork()
    faults = [
        nm.Fault(0, "partition", "one", 0, 0, cut=(("b1", "c1"),)),
        nm.Fault(1, "link", "lossy", 0, 0, nodes=("c1",), links=(("c1", "c2"),), loss=0.2),
        nm.Fault(2, "kill", "one", 0, 0, nodes=("b2",)),
    ]
    records = []
    runner = nm.ScheduleRunner(faults, nm.Nemesis(cluster, net), lambda phase, f: records.append((phase, f)))
    runner.start()
    runner.join()
    assert runner.errors == []
    assert [(p, f["id"]) for p, f in records] == [("start", 0), ("stop", 0), ("start", 1), ("stop", 1),
                                                  ("start", 2), ("stop", 2)]
    assert records[4][1]["targets"] == ["b2"]
    assert net.calls == [("partition", (("b1", "c1"),)), ("heal",),
                         ("links", (("c1", "c2"),), {"delay_ms": 0.0, "jitter_ms": 0.0, "loss": 0.2}),
                         ("heal",), ("heal",)]
    assert cluster.restarted == ["b2"]


def test_schedule_runner_reports_fault_errors_and_goes_on(cluster):
    faults = [nm.Fault(0, "partition", "one", 0, 0, cut=(("b1", "c1"),)),
              nm.Fault(1, "kill", "one", 0, 0, nodes=("b2",))]
    records = []
    runner = nm.ScheduleRunner(faults, nm.Nemesis(cluster), lambda phase, f: records.append((phase, f)))
    runner.start()
    runner.join()
    assert "network backend" in records[0][1]["error"]
    assert len(records) == 4 and len(runner.errors) >= 1
    assert cluster.restarted == ["b2"]


# --- backend 2: the TCP proxy --------------------------------------------------------------------

SOURCES = {"127.0.0.11": "a", "127.0.0.12": "b", "127.0.0.13": "c"}
SOURCE_OF = {v: k for k, v in SOURCES.items()}


async def _echo(stream):
    async with stream:
        async for data in stream:
            await stream.send_all(data)


async def _start_proxy(nursery, **kw):
    listeners = await nursery.start(functools.partial(trio.serve_tcp, _echo, 0, host="127.0.0.1"))
    echo_port = listeners[0].socket.getsockname()[1]
    routes = [Route(n, ("127.0.0.1", echo_port)) for n in "abc"]
    proxy = Proxy(routes, identify=by_source_address(SOURCES), seed=3, **kw)
    await nursery.start(proxy.run)
    return proxy


async def _connect(proxy, src, dst):
    return await trio.open_tcp_stream(*proxy.address(dst), local_address=SOURCE_OF.get(src))


async def _roundtrip(stream, payload=b"ping") -> bool:
    try:
        await stream.send_all(payload)
        got = b""
        while len(got) < len(payload):
            data = await stream.receive_some()
            if not data:
                return False
            got += data
        return got == payload
    except (trio.BrokenResourceError, OSError):
        return False


async def _once(proxy, src, dst, payload=b"ping") -> bool:
    async with await _connect(proxy, src, dst) as stream:
        return await _roundtrip(stream, payload)


async def test_proxy_partition_refuses_closes_and_heals(nursery):
    proxy = await _start_proxy(nursery)
    open_ab = await _connect(proxy, "a", "b")
    assert await _roundtrip(open_ab)
    proxy.partition([("b", "a")])
    assert not await _roundtrip(open_ab)  # the open connection was closed
    await open_ab.aclose()
    assert not await _once(proxy, "a", "b")
    assert not await _once(proxy, "b", "a")
    assert await _once(proxy, "a", "c")
    assert await _once(proxy, None, "b")  # clients are never partitioned
    assert proxy.stats["refused"] == 2 and proxy.stats["closed_by_partition"] == 1
    proxy.heal()
    assert await _once(proxy, "a", "b")
    assert await _once(proxy, "b", "a")


async def test_proxy_slow_link_delays_both_directions(nursery):
    proxy = await _start_proxy(nursery)
    proxy.set_links([("a", "b")], delay_ms=150, jitter_ms=20)
    stream = await _connect(proxy, "a", "b")
    start = trio.current_time()
    assert await _roundtrip(stream, b"x" * 1000)
    assert trio.current_time() - start >= 0.3
    proxy.heal()
    await stream.aclose()


async def test_proxy_lossy_link_drops_connections(nursery):
    proxy = await _start_proxy(nursery)
    proxy.set_links([("a", "b")], loss=1.0)
    assert not await _once(proxy, "a", "b")
    assert await _once(proxy, "a", "c")
    proxy.set_links([("a", "b")], loss=0.5)
    results = [await _once(proxy, "a", "b") for _ in range(40)]
    assert 0 < sum(results) < 40
    assert proxy.stats["dropped"] == 1 + results.count(False)
    proxy.heal()
    assert await _once(proxy, "a", "b")


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_server():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _EchoHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


CHILD = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
for line in sys.stdin:
    try:
        s.sendall(b"ping")
        data = s.recv(16)
    except OSError:
        data = b""
    print("ok" if data == b"ping" else "closed", flush=True)
    if not data:
        break
"""


def test_threaded_proxy_identifies_node_processes_by_socket_owner(echo_server):
    child: subprocess.Popen | None = None
    owners = SocketOwners(lambda: {child.pid: "a"} if child else {})
    routes = [Route("b", ("127.0.0.1", echo_server))]
    with ThreadedProxy(routes, identify=owners, seed=1) as proxy:
        port = proxy.address("b")[1]
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(port)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "ok"
            proxy.partition([("a", "b")])  # closes the child's open connection
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "closed"
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:  # this process: a client
                assert owners(s.getsockname()) is None
                s.sendall(b"hi")
                assert s.recv(16) == b"hi"
            assert proxy.stats()["closed_by_partition"] == 1
            proxy.heal()
        finally:
            child.stdin.close()
            child.wait(timeout=30)


def test_socket_inode_of_an_own_connection(echo_server):
    with socket.create_connection(("127.0.0.1", echo_server), timeout=30) as s:
        inode = socket_inode(s.getsockname())
        assert inode is not None
        assert _owns(os.getpid(), inode)


# --- backend 1: network namespaces ---------------------------------------------------------------

NETNS_REASON = nm.netns_available()
needs_netns = pytest.mark.skipif(NETNS_REASON is not None, reason=f"network namespaces: {NETNS_REASON}")

ECHO_SERVER = """
import socketserver, sys
class H(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)
socketserver.ThreadingTCPServer.allow_reuse_address = True
server = socketserver.ThreadingTCPServer((sys.argv[1], 7000), H)
server.daemon_threads = True
print("ready", flush=True)
server.serve_forever()
"""

PROBE = """
import json, socket, sys, time
timeout, size = float(sys.argv[1]), int(sys.argv[2])
out = {}
for host in sys.argv[3:]:
    start = time.monotonic()
    try:
        with socket.create_connection((host, 7000), timeout=timeout) as s:
            s.settimeout(max(timeout, size / 4000))
            s.sendall(b"x" * size)
            got = 0
            while got < size:
                data = s.recv(65536)
                if not data:
                    break
                got += len(data)
            out[host] = {"ok": got == size, "elapsed": time.monotonic() - start}
    except OSError as e:
        out[host] = {"ok": False, "error": str(e)}
print(json.dumps(out))
"""


@pytest.fixture
def netns():
    if NETNS_REASON is not None:
        pytest.skip(f"network namespaces: {NETNS_REASON}")
    # its own subnet: a smoke campaign in the other test worker may have 10.77.0.0/24 up at the same time
    net = nm.NetnsNetwork(["a", "b", "c"], prefix="kpt", subnet="10.78.0.0/24")
    servers = []
    with net:
        try:
            for node, addr in net.addresses.items():
                proc = subprocess.Popen(net.wrap(node, [sys.executable, "-c", ECHO_SERVER, addr]),
                                        stdout=subprocess.PIPE, text=True)
                servers.append(proc)
                assert proc.stdout.readline().strip() == "ready"
            yield net
        finally:
            for proc in servers:
                proc.kill()
                proc.wait()
                proc.stdout.close()


#: A reachable peer answers at once; this only bounds a failure, so it can be long.
REACH_TIMEOUT = 30.0
#: A dropped packet can only be observed as silence: the one place for a short timeout, used only
#: where the expected answer is "unreachable".
SILENCE_TIMEOUT = 0.5


def probe(net, node, targets, *, timeout, size=4):
    cmd = [sys.executable, "-c", PROBE, str(timeout), str(size), *(net.addresses[t] for t in targets)]
    if node is not None:
        cmd = net.wrap(node, cmd)
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                    timeout=len(targets) * (timeout + 30) + 30).stdout)
    return {t: out[net.addresses[t]] for t in targets}


def reachable(net, node, targets):
    """Which targets answer from ``node``'s namespace, each given REACH_TIMEOUT to do so."""
    return {t: r["ok"] for t, r in probe(net, node, targets, timeout=REACH_TIMEOUT).items()}


def silent(net, node, targets):
    """Which targets stay silent for SILENCE_TIMEOUT: only for checks that expect a cut."""
    return {t: not r["ok"] for t, r in probe(net, node, targets, timeout=SILENCE_TIMEOUT).items()}


@needs_netns
def test_netns_partition_and_heal(netns):
    assert reachable(netns, "a", ["b", "c"]) == {"b": True, "c": True}
    netns.partition([("a", "b")])
    try:
        assert silent(netns, "a", ["b"]) == {"b": True}
        assert silent(netns, "b", ["a"]) == {"a": True}
        assert reachable(netns, "a", ["c"]) == {"c": True}
        assert reachable(netns, "b", ["c"]) == {"c": True}
        assert reachable(netns, None, ["a", "b"]) == {"a": True, "b": True}  # the root namespace: clients
    finally:
        netns.heal()
    assert reachable(netns, "a", ["b"]) == {"b": True}
    assert reachable(netns, "b", ["a"]) == {"a": True}


@needs_netns
def test_netns_lossy_link(netns):
    netns.set_links([("a", "c")], loss=1.0)
    try:
        assert silent(netns, "a", ["c"]) == {"c": True}
        assert reachable(netns, "a", ["b"]) == {"b": True}
    finally:
        netns.heal()
    assert reachable(netns, "a", ["c"]) == {"c": True}


def shaping(netns, node: str) -> str:
    """What tc has installed on a namespace's interface: qdiscs, classes and filters."""
    return "\n".join(netns._in(node, "tc", *what, "show", "dev", "eth0").stdout
                     for what in (["qdisc"], ["class"], ["filter"]))


@needs_netns
def test_netns_slow_link(netns):
    # with netem: a delay each way; without: a rate limit of 256 kbit/s each way. The shaping is
    # checked where it is installed (no clock), and traffic still flows through it.
    netns.set_links([("a", "b")], delay_ms=150)
    try:
        for node in ("a", "b"):
            installed = shaping(netns, node)
            assert "htb" in installed
            assert ("delay 150ms" in installed) if netns.netem else ("tbf" in installed and "256Kbit" in installed)
            assert "filter" in installed  # only the a<->b traffic goes through the slow class
        assert "tbf" not in shaping(netns, "c") and "netem" not in shaping(netns, "c")
        assert reachable(netns, "a", ["b"]) == {"b": True}
    finally:
        netns.heal()
    assert "tbf" not in shaping(netns, "a") and "netem" not in shaping(netns, "a")


@needs_netns
def test_netns_netem_delay(netns):
    if not netns.netem:
        pytest.skip("this kernel has no sch_netem")
    netns.set_links([("a", "c")], delay_ms=100, jitter_ms=10)
    try:
        assert "delay 100ms  10ms" in shaping(netns, "a") or "delay 100ms 10ms" in shaping(netns, "a")
        assert reachable(netns, "a", ["c"]) == {"c": True}
    finally:
        netns.heal()


@needs_netns
def test_netns_setup_and_teardown_are_idempotent():
    net = nm.NetnsNetwork(["x"], prefix="kpu", first_host=100, subnet="10.79.0.0/24")
    net.setup()
    net.setup()  # removes the leftovers first
    assert "kpu-x" in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    net.teardown()
    net.teardown()
    assert "kpu-x" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert "kpubr" not in links and "kpuv0" not in links


def test_netns_network_validates_names():
    with pytest.raises(ValueError, match="prefix"):
        nm.NetnsNetwork(["a"], prefix="much-too-long")
    net = nm.NetnsNetwork(["a", "b"], prefix="kpz")
    assert net.addresses == {"a": "10.77.0.10", "b": "10.77.0.11"} and net.root_address == "10.77.0.1"
    other = nm.NetnsNetwork(["a"], prefix="kpy", subnet="10.78.0.0/24")
    assert other.addresses == {"a": "10.78.0.10"} and other.root_address == "10.78.0.1"
    with pytest.raises(ValueError, match="do not fit"):
        nm.NetnsNetwork(["a", "b"], prefix="kpx", first_host=254)
    assert net.wrap("b", ["kraftpy", "broker"]) == ["ip", "netns", "exec", "kpz-b", "kraftpy", "broker"]



def test_roll_stops_each_node_with_sigterm_and_waits_until_it_is_back(cluster):
    nemesis = nm.Nemesis(cluster, poll_interval=0.001)
    fault = nm.Fault(0, "roll", "all", 0, 1, nodes=tuple(BROKERS + CONTROLLERS))
    old = {n.name: n.process for n in cluster.nodes()}
    resolved = nemesis.start(fault)
    assert all(proc.returncode == -15 for proc in old.values())  # SIGTERM, not SIGKILL
    # one node at a time: the next restart only once the one before is back
    assert cluster.events == [(what, name) for name in BROKERS + CONTROLLERS for what in ("restart", "back")]
    assert [n["node"] for n in resolved["roll"]["nodes"]] == BROKERS + CONTROLLERS
    assert nemesis.rolls == [resolved["roll"]] and resolved["roll"]["total_s"] >= 0
    assert all(n["back_s"] >= n["stopped_s"] >= 0 for n in resolved["roll"]["nodes"])
    nemesis.stop(fault)  # nothing left to heal: no other restart
    assert cluster.restarted == BROKERS + CONTROLLERS
    assert all(n.process.poll() is None for n in cluster.nodes())


def test_roll_gives_up_on_a_node_that_does_not_come_back(cluster):
    cluster.polls_until_back = None
    nemesis = nm.Nemesis(cluster, roll_node_timeout=0.05, poll_interval=0.001)
    fault = nm.Fault(0, "roll", "all", 0, 1, nodes=("b1", "b2"))
    with pytest.raises(TimeoutError, match="b1 was not back"):
        nemesis.start(fault)
    assert cluster.restarted == ["b1"]  # b2 was never stopped
    assert cluster.node("b2").process.poll() is None


def test_schedule_runner_records_a_roll_as_it_begins_and_its_timings_as_it_ends(cluster):
    fault = nm.Fault(0, "roll", "all", 0, 0, nodes=("b1", "c1"))
    records = []

    def record(phase, f):
        records.append((phase, f, list(cluster.events)))

    runner = nm.ScheduleRunner([fault], nm.Nemesis(cluster, poll_interval=0.001), record)
    runner.start()
    runner.join()
    assert runner.errors == []
    (start, started, events_at_start), (stop, stopped, _) = records
    assert (start, stop) == ("start", "stop")
    assert events_at_start == [] and "roll" not in started  # recorded before the first node stopped
    assert [n["node"] for n in stopped["roll"]["nodes"]] == ["b1", "c1"]


# --- membership faults ---------------------------------------------------------------------------


class MembershipCluster(FakeCluster):
    """A FakeCluster with a dynamic quorum's voters: removing a voter takes it out, adding puts the
    controller's current replica (its directory) in, replacing a disk gives it a new directory."""

    def __init__(self) -> None:
        super().__init__()
        self.directories = {c: f"{c}-disk-1" for c in CONTROLLERS}
        self.voter_set = dict(self.directories)
        self.calls: list[tuple[str, ...]] = []

    def voters(self):
        return dict(self.voter_set)

    def remove_voter(self, name, directory_id=None):
        directory = directory_id or self.directories[name]
        self.calls.append(("remove", name, directory))
        if self.voter_set.get(name) != directory:
            raise RuntimeError(f"VOTER_NOT_FOUND: {name} {directory}")
        del self.voter_set[name]

    def add_voter(self, name):
        self.calls.append(("add", name, self.directories[name]))
        self.voter_set[name] = self.directories[name]

    def replace_disk(self, name):
        old = self.directories[name]
        self.calls.append(("replace", name, old))
        self.restart(name)
        self.directories[name] = f"{name}-disk-{int(old.rsplit('-', 1)[1]) + 1}"
        return old


@pytest.fixture
def quorum():
    c = MembershipCluster()
    yield c
    c.close()


def test_membership_removes_the_leader_and_adds_it_back(quorum):
    nemesis = nm.Nemesis(quorum)
    fault = nm.Fault(0, "membership", "leader", 0, 1, nodes=("c1",))
    started = nemesis.start(fault)
    assert started["removed"] == "c2" and started["voters"] == ["c1", "c3"]  # c2 is the active controller
    healed = nemesis.stop(fault)
    assert healed["added"] == ["c2"] and healed["voters"] == CONTROLLERS
    assert quorum.calls == [("remove", "c2", "c2-disk-1"), ("add", "c2", "c2-disk-1")]


def test_membership_replaces_a_disk_removing_the_old_replica_and_adding_the_new(quorum):
    nemesis = nm.Nemesis(quorum)
    fault = nm.Fault(0, "membership", "replace", 0, 1, nodes=("c3",))
    started = nemesis.start(fault)
    assert started["replaced"] == "c3-disk-1" and "c3" not in started["voters"] and quorum.restarted == ["c3"]
    nemesis.stop(fault)
    assert quorum.voters()["c3"] == "c3-disk-2"
    assert quorum.calls == [("replace", "c3", "c3-disk-1"), ("remove", "c3", "c3-disk-1"), ("add", "c3", "c3-disk-2")]
    assert nemesis.membership_changes == [{"fault": 0, "variant": "replace", "node": "c3"}]


def test_membership_never_removes_the_last_voter_and_heal_all_adds_back(quorum):
    nemesis = nm.Nemesis(quorum)
    quorum.voter_set = {"c1": "c1-disk-1"}
    skipped = nemesis.start(nm.Fault(0, "membership", "remove", 0, 1, nodes=("c1",)))
    assert "skipped" in skipped and quorum.voters() == {"c1": "c1-disk-1"}
    quorum.voter_set = dict(quorum.directories)
    nemesis.start(nm.Fault(1, "membership", "remove", 0, 1, nodes=("c3",)))
    assert "c3" not in quorum.voters()
    nemesis.heal_all()
    assert quorum.voters() == quorum.directories


def test_membership_needs_a_dynamic_quorum(cluster):
    with pytest.raises(RuntimeError, match="dynamic quorum"):
        nm.Nemesis(cluster).start(nm.Fault(0, "membership", "remove", 0, 1, nodes=("c1",)))
