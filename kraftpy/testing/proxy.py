"""A TCP proxy layer for network faults without network namespaces (no root needed).

The fault harness (``tests/jepsen``) cuts and slows links between its nodes with it when it is not
root, and `kraftpy.testing` cuts a broker off from the others with it (`Broker.isolate`).

Every node listener the other nodes use is reached through a proxy port (a `Route`: the node's
name, the port the proxy listens on, the node's real address). On each accepted connection the proxy
asks `identify(peer)` which node the connection comes from (`None`: a client, never faulted), and
then, for the pair (source node, destination node):

- partition: the connection is closed at once (a refusal), and open connections of a pair are closed
  when the pair is cut. With ``hold=True`` a new connection across the cut is held open instead, and
  silent, until the heal closes it: as the network would leave it if it dropped the packets, the
  peer waits for its own timeouts rather than reconnecting at once, again and again;
- slow link: every chunk, in both directions, is delayed by `delay_ms` plus a seeded random share of
  `jitter_ms`, keeping the order of the chunks;
- lossy link: each chunk is dropped with probability `loss`, by closing the connection (TCP has no
  way to lose a chunk and go on).

`SocketOwners` identifies the source of a connection on Linux without any cooperation from the
nodes: the peer address of the accepted connection is the local address of the node's socket, found
in /proc/net/tcp with its inode, and the inode among the open files of the node processes.

`Proxy` is trio-native (its control methods are called from its trio thread); `ThreadedProxy` runs
one in a thread of its own for synchronous callers.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import random
import socket
import struct
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any

import attrs
import trio

Pair = tuple[str, str]
Identify = Callable[[tuple[str, int]], str | None]
CHUNK = 65536


@attrs.define
class Route:
    node: str
    target: tuple[str, int]
    listen: tuple[str, int] = ("127.0.0.1", 0)
    port: int = 0  # the bound port, once the proxy runs


@attrs.frozen
class LinkFault:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0


def _key(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


class _Dropped(Exception):
    pass


@attrs.define(eq=False)
class _Conn:
    src: str | None
    dst: str
    scope: trio.CancelScope


class Proxy:
    def __init__(self, routes: Iterable[Route], *, identify: Identify | None = None, seed: int = 0,
                 hold: bool = False) -> None:
        self.routes = list(routes)
        self.identify = identify
        self.rnd = random.Random(f"kraftpy-proxy-{seed}")
        #: Hold connections across a cut open and silent until the heal, instead of refusing them.
        self.hold = hold
        self.cut: set[Pair] = set()
        self.links: dict[Pair, LinkFault] = {}
        self.conns: set[_Conn] = set()
        self.stats = {"accepted": 0, "refused": 0, "held": 0, "dropped": 0, "closed_by_partition": 0}
        self._healed = trio.Event()

    def address(self, node: str) -> tuple[str, int]:
        for r in self.routes:
            if r.node == node:
                return (r.listen[0], r.port)
        raise KeyError(node)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listens on every route and serves until cancelled; `task_status.started(self)` once bound."""
        async with trio.open_nursery() as nursery:
            for route in self.routes:
                listeners = await trio.open_tcp_listeners(route.listen[1], host=route.listen[0])
                route.port = listeners[0].socket.getsockname()[1]
                nursery.start_soon(self._serve, route, listeners)
            if isinstance(self.identify, SocketOwners) and self.identify.remote_ports is None:
                self.identify.remote_ports = lambda: {r.port for r in self.routes}  # the peers connect to us
            task_status.started(self)

    async def _serve(self, route: Route, listeners: list[trio.SocketListener]) -> None:
        await trio.serve_listeners(lambda stream: self._handle(route, stream), listeners)

    # control (from the trio thread)

    def partition(self, cut: Iterable[Pair]) -> None:
        self.cut |= {_key(a, b) for a, b in cut}
        for conn in list(self.conns):
            if conn.src is not None and _key(conn.src, conn.dst) in self.cut:
                self.stats["closed_by_partition"] += 1
                conn.scope.cancel()

    def set_links(self, pairs: Iterable[Pair], *, delay_ms: float = 0.0, jitter_ms: float = 0.0,
                  loss: float = 0.0) -> None:
        fault = LinkFault(delay_ms, jitter_ms, loss)
        for a, b in pairs:
            self.links[_key(a, b)] = fault

    def heal(self) -> None:
        self.cut.clear()
        self.links.clear()
        self._healed.set()  # held connections close: their peers connect again
        self._healed = trio.Event()

    # data path

    def _link(self, src: str | None, dst: str) -> LinkFault | None:
        return None if src is None else self.links.get(_key(src, dst))

    async def _handle(self, route: Route, client: trio.SocketStream) -> None:
        async with client:
            src: str | None = None
            if self.identify is not None:
                peer = client.socket.getpeername()
                src = await trio.to_thread.run_sync(self.identify, (peer[0], peer[1]))
            if src is not None and _key(src, route.node) in self.cut:
                if self.hold:
                    self.stats["held"] += 1
                    await self._healed.wait()
                else:
                    self.stats["refused"] += 1
                return
            try:
                upstream = await trio.open_tcp_stream(*route.target)
            except OSError:
                return
            self.stats["accepted"] += 1
            async with upstream:
                with trio.CancelScope() as scope:
                    conn = _Conn(src, route.node, scope)
                    self.conns.add(conn)
                    if src is not None and _key(src, route.node) in self.cut:
                        # Cut while the upstream connection was being made: `partition` did not see it.
                        self.stats["closed_by_partition"] += 1
                        self.conns.discard(conn)
                        return
                    try:
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(self._pipe, client, upstream, src, route.node, scope)
                            nursery.start_soon(self._pipe, upstream, client, src, route.node, scope)
                    except* (_Dropped, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
                    finally:
                        self.conns.discard(conn)

    async def _pipe(self, source: trio.SocketStream, sink: trio.SocketStream, src: str | None, dst: str,
                    scope: trio.CancelScope) -> None:
        send, receive = trio.open_memory_channel[tuple[float, bytes]](math.inf)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._deliver, receive, sink)
            async with send:
                last = 0.0
                while True:
                    data = await source.receive_some(CHUNK)
                    if not data:
                        break
                    at = trio.current_time()
                    link = self._link(src, dst)
                    if link is not None:
                        if link.loss and self.rnd.random() < link.loss:
                            self.stats["dropped"] += 1
                            scope.cancel()
                            raise _Dropped()
                        at += (link.delay_ms + link.jitter_ms * self.rnd.random()) / 1000.0
                    last = max(last, at)
                    send.send_nowait((last, data))

    @staticmethod
    async def _deliver(receive: trio.MemoryReceiveChannel[tuple[float, bytes]], sink: trio.SocketStream) -> None:
        async with receive:
            async for at, data in receive:
                await trio.sleep_until(at)
                await sink.send_all(data)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await sink.send_eof()


class ThreadedProxy:
    """A `Proxy` running in its own thread with its own trio loop; a context manager."""

    def __init__(self, routes: Iterable[Route], *, identify: Identify | None = None, seed: int = 0) -> None:
        self.proxy = Proxy(routes, identify=identify, seed=seed)
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="fault-proxy", daemon=True)

    def __enter__(self) -> ThreadedProxy:
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise RuntimeError(f"the proxy did not start: {self._error!r}") from self._error
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _main(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._scope = scope
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.proxy.run)
                    self._started.set()

        try:
            trio.run(main)
        except BaseException as e:  # reported to the caller of __enter__
            self._error = e
        finally:
            self._started.set()

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._token is None or not self._thread.is_alive():
            raise RuntimeError("the proxy is not running")
        return trio.from_thread.run_sync(lambda: fn(*args, **kwargs), trio_token=self._token)

    def address(self, node: str) -> tuple[str, int]:
        return self.proxy.address(node)

    def partition(self, cut: Iterable[Pair]) -> None:
        self._call(self.proxy.partition, list(cut))

    def set_links(self, pairs: Iterable[Pair], *, delay_ms: float = 0.0, jitter_ms: float = 0.0,
                  loss: float = 0.0) -> None:
        self._call(self.proxy.set_links, list(pairs), delay_ms=delay_ms, jitter_ms=jitter_ms, loss=loss)

    def heal(self) -> None:
        self._call(self.proxy.heal)

    def stats(self) -> dict[str, int]:
        return dict(self._call(lambda: self.proxy.stats))

    def close(self) -> None:
        if self._thread.is_alive() and self._token is not None and self._scope is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        if self._thread.ident is not None:
            self._thread.join()


# --- who is on the other end -------------------------------------------------------------------


def by_source_address(addresses: dict[str, str]) -> Identify:
    """Identifies nodes by the source address of their connections (nodes that bind their outgoing
    sockets to an address of their own)."""
    names = {ipaddress.ip_address(a): n for a, n in addresses.items()}

    def identify(peer: tuple[str, int]) -> str | None:
        return names.get(ipaddress.ip_address(peer[0]))

    return identify


def _parse_proc_address(text: str) -> tuple[str, int]:
    host_hex, port_hex = text.split(":")
    raw = bytes.fromhex(host_hex)
    # /proc prints the address as 32-bit words in host byte order
    words = b"".join(struct.pack("=I", struct.unpack(">I", raw[i:i + 4])[0]) for i in range(0, len(raw), 4))
    if len(words) == 4:
        host = socket.inet_ntop(socket.AF_INET, words)
    else:
        addr = ipaddress.IPv6Address(words)
        host = str(addr.ipv4_mapped or addr)
    return host, int(port_hex, 16)


def socket_inode(local: tuple[str, int], remote_ports: Collection[int] | None = None) -> int | None:
    """The inode of the TCP socket whose local address is `local`, from /proc/net/tcp{,6}; with
    `remote_ports`, only a socket connected to one of those ports (Linux gives one ephemeral port to
    several outgoing connections when they go to different addresses: the local address alone may
    name another process's socket)."""
    want = (str(ipaddress.ip_address(local[0])), local[1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    fields = line.split()
                    if len(fields) > 9 and _parse_proc_address(fields[1]) == want and fields[9] != "0" and (
                            remote_ports is None or _parse_proc_address(fields[2])[1] in remote_ports):
                        return int(fields[9])
        except OSError:
            continue
    return None


def _parents() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat") as fh:
                    out[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
    return out


def _descendants(pid: int, parents: dict[int, int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def _owns(pid: int, inode: int) -> bool:
    target = f"socket:[{inode}]"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
    return False


class SocketOwners:
    """Identifies the node process (or one of its children) that owns the other end of a loopback
    connection. `pids()` gives the current {pid: node name} (nodes are restarted with new pids)."""

    def __init__(self, pids: Callable[[], dict[int, str]], *,
                 remote_ports: Callable[[], Collection[int]] | None = None) -> None:
        self.pids = pids
        #: The proxy's ports: the peer's socket is the one connected to one of them.
        self.remote_ports = remote_ports

    def __call__(self, peer: tuple[str, int]) -> str | None:
        inode = socket_inode(peer, None if self.remote_ports is None else self.remote_ports())
        if inode is None:
            return None
        pids = self.pids()
        for pid, name in pids.items():
            if _owns(pid, inode):
                return name
        parents = _parents()  # the node may be a child of the process started (a wrapper)
        for pid, name in pids.items():
            for p in _descendants(pid, parents)[1:]:
                if _owns(p, inode):
                    return name
        return None
