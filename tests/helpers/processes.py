"""Real kraftpy processes for tests: configs on free ports, start, kill, and waiting on their logs.

Each process logs JSON lines on stderr; `KraftProcess.wait_for` waits until a line with the given
event (and fields) appears — an event to wait on, not a clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import trio

from kraftpy.ids import random_uuid_str
from kraftpy.testing._supervisor import free_ports
from tests.helpers import forkserver


def write_properties(path: Path, values: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


class KraftProcess:
    def __init__(self, name: str, role: str, config: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.role = role
        self.config = config
        self.env = env
        self.process: trio.Process | None = None
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._changed = trio.Event()

    async def start(self, nursery: trio.Nursery) -> None:
        self.lines.clear()
        self.process = await forkserver.open_trio_process(
            [self.role, "-c", self.config, "--log-format", "json", "--log-level", "debug"],
            env={**os.environ, **(self.env or {})})
        nursery.start_soon(self._pump, self.process)

    async def _pump(self, process: trio.Process) -> None:
        buf = b""
        assert process.stderr is not None
        async for chunk in process.stderr:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                self.raw.append(text)
                try:
                    self.lines.append(json.loads(text))
                except json.JSONDecodeError:
                    self.lines.append({"event": text})
            self._changed.set()
            self._changed = trio.Event()
        self._changed.set()

    def find(self, event: str, **fields: Any) -> dict[str, Any] | None:
        for line in self.lines:
            if line.get("event") == event and all(line.get(k) == v for k, v in fields.items()):
                return line
        return None

    async def wait_for(self, event: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        with trio.fail_after(timeout):
            while True:
                found = self.find(event, **fields)
                if found is not None:
                    return found
                if self.process is not None and self.process.returncode is not None:
                    raise AssertionError(f"{self.name} exited ({self.process.returncode}):\n" + "\n".join(self.raw[-20:]))
                await self._changed.wait()

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    async def wait(self, timeout: float = 30.0) -> int:
        assert self.process is not None
        with trio.fail_after(timeout):
            return await self.process.wait()


def controller_configs(root: Path, count: int = 3, **extra: Any) -> tuple[list[Path], dict[int, tuple[str, int]]]:
    ports = free_ports(count)
    voters = {i + 1: ("127.0.0.1", port) for i, port in enumerate(ports)}
    quorum = ",".join(f"{i}@{h}:{p}" for i, (h, p) in voters.items())
    paths = []
    for node_id, (host, port) in voters.items():
        paths.append(write_properties(root / f"controller-{node_id}.properties", {
            "process.roles": "controller",
            "node.id": node_id,
            "controller.quorum.voters": quorum,
            "listeners": f"CONTROLLER://{host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": root / f"controller-{node_id}",
            **extra,
        }))
    return paths, voters


def format_all(configs: list[Path], cluster_id: str | None = None) -> str:
    cluster_id = cluster_id or random_uuid_str()
    for config in configs:
        forkserver.run(["storage", "format", "-c", config, "-t", cluster_id], check=True, capture_output=True)
    return cluster_id


def interruptible() -> None:
    """A ``preexec_fn``: the child starts with SIGINT at its default and unblocked, as a command typed at a
    terminal does, whatever the test process inherited. A suite started in the background of a script
    (``make test &``) ignores SIGINT, a real child inherits that, and Python then leaves Ctrl-C ignored:
    a test that sends SIGINT to a fresh interpreter would wait for nothing. (Forked processes get
    Python's handler from the fork server.)"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class DevProcess:
    """``kraftpy dev`` in a subprocess, for tests that drive it from blocking code (Spark, clients).

    ``start`` returns once the JSON log says "broker running"; ``stop`` sends SIGINT (Ctrl-C) and
    waits for a clean exit. Usable as a context manager.
    """

    def __init__(self, directory: Path, *, session: bool = False) -> None:
        self.directory = directory
        #: Started in a session of its own (as a service or a terminal of its own is): on Linux with
        #: autogroup scheduling it then shares the cores with its clients as a group, not thread by thread.
        self.session = session
        self.port, self.controller_port = free_ports(2)
        self.process: subprocess.Popen | None = None
        self.lines: list[dict[str, Any]] = []
        self._changed = threading.Condition()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> DevProcess:
        self.process = forkserver.popen(
            ["dev", "--dir", str(self.directory), "--port", str(self.port),
             "--controller-port", str(self.controller_port), "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=self.session)
        threading.Thread(target=self._pump, args=(self.process,), daemon=True).start()
        self.wait_for("broker running", timeout)
        return self

    def _pump(self, process: subprocess.Popen) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            text = raw.decode(errors="replace").rstrip("\n")
            try:
                line = json.loads(text)
            except json.JSONDecodeError:
                line = {"event": text}
            with self._changed:
                self.lines.append(line if isinstance(line, dict) else {"event": text})
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, event: str, timeout: float = 30.0) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next((line for line in self.lines if line.get("event") == event), None)

        assert self.process is not None
        with self._changed:
            ok = self._changed.wait_for(lambda: found() is not None or self.process.poll() is not None, timeout)
            line = found()
        if line is None:
            tail = "\n".join(str(x.get("event")) for x in self.lines[-20:])
            state = f"exited ({self.process.returncode})" if ok else f"no {event!r} within {timeout}s"
            raise AssertionError(f"kraftpy dev {state}:\n{tail}")
        return line

    def stop(self, timeout: float = 30.0) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def __enter__(self) -> DevProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
