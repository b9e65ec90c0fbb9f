"""Faults end in one clear line and keep data: real `kraftpy` processes meet a port already in use,
a full disk (a small tmpfs) and kill -9.

A fatal fault prints exactly one line that is not a JSON log line — ``kraftpy: <what failed>`` —
and exits 1; no traceback. A full disk fails produces with KAFKA_STORAGE_ERROR while reads go on, a
metadata-log write on it stops the process, a restart on it says so, and once space is freed every
acknowledged record is there.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import trio

from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import CreateTopicsRequest
from tests.helpers import forkserver
from tests.helpers.filesystems import fill, small_filesystem
from tests.helpers.processes import format_all, free_ports, write_properties
from tests.helpers.protocol import batch, fetch, metadata, produce, values_of

pytestmark = pytest.mark.slow


class Run:
    """One `kraftpy` command: its stdout, its stderr split into JSON log lines and other lines."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.process: trio.Process | None = None
        self.logs: list[dict] = []
        self.other: list[str] = []
        self.stdout = b""
        self._changed = trio.Event()
        self._pumps_done = [trio.Event(), trio.Event()]

    async def start(self, nursery: trio.Nursery) -> Run:
        self.process = await forkserver.open_trio_process([*self.args, "--log-format", "json"],
                                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        nursery.start_soon(self._pump_stderr)
        nursery.start_soon(self._pump_stdout)
        return self

    async def _pump_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        buf = b""
        async for chunk in self.process.stderr:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                text = raw.decode(errors="replace")
                try:
                    self.logs.append(json.loads(text))
                except json.JSONDecodeError:
                    self.other.append(text)
            self._changed.set()
            self._changed = trio.Event()
        self._pumps_done[0].set()

    async def _pump_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        async for chunk in self.process.stdout:
            self.stdout += chunk
            self._changed.set()
            self._changed = trio.Event()
        self._pumps_done[1].set()

    async def wait_for_log(self, event: str, **fields: object) -> None:
        """Wait until a log line with ``event`` (and ``fields``) appears."""
        with trio.fail_after(60):  # bounds a failure only
            while not any(e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
                          for e in self.logs):
                assert self.process is not None
                if self.process.returncode is not None and all(p.is_set() for p in self._pumps_done):
                    raise AssertionError(f"exited {self.process.returncode}: {self.other} {self.logs[-5:]}")
                await self._changed.wait()

    async def wait_running(self) -> None:
        await self.wait_for_log("broker running")

    async def exit_code(self) -> int:
        assert self.process is not None
        with trio.fail_after(60):
            code = await self.process.wait()
            for done in self._pumps_done:  # everything it wrote is read
                await done.wait()
        return code

    def one_line(self) -> str:
        """The fatal line: the only stderr line that is not a JSON log line."""
        assert len(self.other) == 1 and not any("Traceback" in line for line in self.other), self.other
        assert self.other[0].startswith("kraftpy: "), self.other
        return self.other[0]


async def run_to_exit(args: list[str]) -> Run:
    run = Run(args)
    async with trio.open_nursery() as nursery:
        await run.start(nursery)
        assert await run.exit_code() == 1, (run.other, run.logs[-5:])
    return run


def dev_args(directory: Path, port: int, controller_port: int) -> list[str]:
    return ["dev", "--dir", str(directory), "--port", str(port), "--controller-port", str(controller_port)]


def taken_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


# -- a port in use -----------------------------------------------------------------------------------


async def test_the_kafka_port_in_use_is_one_line(tmp_path):
    sock, port = taken_port()
    with sock:
        (controller_port,) = free_ports(1)
        run = await run_to_exit(dev_args(tmp_path, port, controller_port))
    assert run.one_line() == (
        f"kraftpy: cannot listen on 127.0.0.1:{port}: Address already in use (EADDRINUSE) "
        f"(listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port})")


async def test_the_controller_port_in_use_is_one_line(tmp_path):
    sock, controller_port = taken_port()
    with sock:
        (port,) = free_ports(1)
        run = await run_to_exit(dev_args(tmp_path, port, controller_port))
    assert run.one_line().startswith(f"kraftpy: cannot listen on 127.0.0.1:{controller_port}: Address already in use "
                                     f"(EADDRINUSE) (listeners=PLAINTEXT://127.0.0.1:{port},")


async def test_a_controller_process_whose_port_is_in_use_says_so_in_one_line(tmp_path):
    sock, port = taken_port()
    with sock:
        config = write_properties(tmp_path / "controller.properties", {
            "process.roles": "controller", "node.id": 1, "controller.quorum.voters": f"1@127.0.0.1:{port}",
            "listeners": f"CONTROLLER://127.0.0.1:{port}", "controller.listener.names": "CONTROLLER",
            "log.dirs": tmp_path / "data"})
        format_all([config])
        run = await run_to_exit(["server", "-c", str(config)])
    assert run.one_line() == (f"kraftpy: cannot listen on 127.0.0.1:{port}: Address already in use (EADDRINUSE) "
                              f"(listeners=CONTROLLER://127.0.0.1:{port})")


# -- a full disk ---------------------------------------------------------------------------------------


async def create_topic(conn: KafkaConnection, name: str) -> int:
    request = CreateTopicsRequest(timeout_ms=5000, topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1)])
    response = await conn.request(ApiKey.CREATE_TOPICS, 7, request)
    return response.topics[0].error_code


async def connect(port: int) -> KafkaConnection:
    return await KafkaConnection.connect("127.0.0.1", port)


async def read_back(run: Run, port: int) -> list[bytes]:
    """Every record of t-0, once the (re)started broker leads it."""
    await run.wait_for_log("became leader", partition="t-0")
    async with await connect(port) as conn:
        data = await fetch(conn, "t", 0, 0, partition_max_bytes=1 << 22, max_bytes=1 << 22)
        assert data.error_code == ErrorCode.NONE, data
        return values_of(data.records)


async def create_t(run: Run, port: int) -> None:
    async with await connect(port) as conn:
        assert await create_topic(conn, "t") == ErrorCode.NONE
    await run.wait_for_log("became leader", partition="t-0")


async def test_a_full_disk_fails_produces_stops_on_metadata_writes_and_loses_nothing(tmp_path):
    data = tmp_path / "fs"
    port, controller_port = free_ports(2)
    args = dev_args(data / "dev", port, controller_port)
    with small_filesystem(data, "2m"):
        run = Run(args)
        async with trio.open_nursery() as nursery:
            await run.start(nursery)
            await run.wait_running()
            acknowledged: list[bytes] = []
            await create_t(run, port)
            async with await connect(port) as conn:
                filler = fill(data)
                for i in range(400):
                    value = b"%04d" % i + bytes(1020)
                    result = await produce(conn, "t", 0, batch(value), acks=-1)
                    if result.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                        break
                    assert result.error_code == ErrorCode.NONE, result
                    acknowledged.append(value)
                else:
                    pytest.fail("the file system never filled up")
                # Reads go on: every acknowledged record is served.
                data_read = await fetch(conn, "t", 0, 0, partition_max_bytes=1 << 22, max_bytes=1 << 22)
                assert values_of(data_read.records) == acknowledged

                # Metadata writes: the controller's log cannot be written; the process stops.
                try:
                    for i in range(200):
                        await create_topic(conn, f"more-{i}")
                except ConnectionClosed:
                    pass
            assert await run.exit_code() == 1
        line = run.one_line()
        metadata_dir = data / "dev" / "data" / "__cluster_metadata-0"
        assert line.startswith("kraftpy: cannot write ") and "No space left on device (ENOSPC)" in line, line
        assert str(metadata_dir) in line, line

        # A restart on the full disk says so in one line.
        restart = await run_to_exit(args)
        assert "No space left on device (ENOSPC)" in restart.one_line()

        # Space freed: every acknowledged record is there.
        filler.unlink()
        run = Run(args)
        async with trio.open_nursery() as nursery:
            await run.start(nursery)
            await run.wait_running()
            assert await read_back(run, port) == acknowledged
            run.process.send_signal(signal.SIGINT)
            assert await run.exit_code() == 0


# -- kill -9 -------------------------------------------------------------------------------------------


async def serve_one_record(run: Run, nursery: trio.Nursery, port: int, value: bytes) -> None:
    """Start ``run`` (a `kraftpy dev`) and wait until it serves; create topic t and write ``value`` to it."""
    await run.start(nursery)
    await run.wait_running()
    await create_t(run, port)
    async with await connect(port) as conn:
        assert (await produce(conn, "t", 0, batch(value), acks=-1)).error_code == ErrorCode.NONE


async def test_kraftpy_dev_killed_registers_its_broker_at_once_when_restarted(tmp_path):
    """The restarted controller does not give the dead process's broker a session to wait out."""
    port, controller_port = free_ports(2)
    args = dev_args(tmp_path / "dev", port, controller_port)
    run = Run(args)
    async with trio.open_nursery() as nursery:
        await serve_one_record(run, nursery, port, b"before")
        run.process.kill()
        await run.process.wait()
        nursery.cancel_scope.cancel()
    run = Run(args)
    async with trio.open_nursery() as nursery:
        await run.start(nursery)
        await run.wait_running()
        assert not [e for e in run.logs if e.get("event") == "registration refused, retrying"]
        assert await read_back(run, port) == [b"before"]
        run.process.send_signal(signal.SIGINT)
        assert await run.exit_code() == 0


# -- a directory another process uses -----------------------------------------------------------------


async def test_a_second_process_on_the_same_directories_is_one_line_and_the_first_goes_on(tmp_path):
    """Two processes on the same logs would overwrite each other's batches: the second is refused, naming
    the directory and the pid that holds it, before it opens anything; the first serves on, its records
    all there. kill -9 of the holder leaves no lock behind."""
    port, controller_port, port2, controller_port2 = free_ports(4)
    directory = tmp_path / "dev"
    run = Run(dev_args(directory, port, controller_port))
    async with trio.open_nursery() as nursery:
        await serve_one_record(run, nursery, port, b"first")
        second = await run_to_exit(dev_args(directory, port2, controller_port2))
        data = directory / "data"
        assert second.one_line() == (
            f"kraftpy: {data} is in use by another process (pid {run.process.pid}) (it holds {data / '.lock'}): "
            "one kraftpy process a directory; stop that one first, or give this one directories of its own")
        assert not second.logs  # refused before it started anything

        async with await connect(port) as conn:
            assert (await produce(conn, "t", 0, batch(b"second"), acks=-1)).error_code == ErrorCode.NONE
        assert await read_back(run, port) == [b"first", b"second"]
        run.process.kill()
        await run.process.wait()
        nursery.cancel_scope.cancel()
    run = Run(dev_args(directory, port, controller_port))
    async with trio.open_nursery() as nursery:
        await run.start(nursery)
        await run.wait_running()
        assert await read_back(run, port) == [b"first", b"second"]
        run.process.send_signal(signal.SIGINT)
        assert await run.exit_code() == 0


# -- a partition directory that cannot be opened -------------------------------------------------------


async def test_kraftpy_dev_with_a_partition_it_cannot_open_reports_it_offline_instead_of_leading_it(tmp_path):
    """The probe's case: one broker, a partition whose directory became a file. It is not a leader
    that answers NOT_LEADER_OR_FOLLOWER forever: its heartbeat reports it, the controller takes the
    leadership away (no other replica: no leader), and requests get KAFKA_STORAGE_ERROR."""
    port, controller_port = free_ports(2)
    args = dev_args(tmp_path / "dev", port, controller_port)
    run = Run(args)
    async with trio.open_nursery() as nursery:
        await run.start(nursery)
        await run.wait_running()
        await create_t(run, port)
        async with await connect(port) as conn:
            assert (await produce(conn, "t", 0, batch(b"kept"), acks=-1)).error_code == ErrorCode.NONE
        run.process.send_signal(signal.SIGINT)
        assert await run.exit_code() == 0
    partition_dir = tmp_path / "dev" / "data" / "t-0"
    aside = partition_dir.with_name("t-0.aside")
    partition_dir.rename(aside)
    partition_dir.write_bytes(b"")

    run = Run(args)
    async with trio.open_nursery() as nursery:
        await run.start(nursery)
        await run.wait_running()
        await run.wait_for_log("replica offline: KAFKA_STORAGE_ERROR until a restart", partition="t-0")
        await run.wait_for_log("partition of an offline replica changed", partition="t-0", leader=-1)
        async with await connect(port) as conn:
            assert (await produce(conn, "t", 0, batch(b"x"), acks=-1)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert (await fetch(conn, "t", 0, 0)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            response = await metadata(conn, ["t"], auto_create=False)
            partition = response.topics[0].partitions[0]
            assert partition.leader_id == -1 and partition.offline_replicas == [1]
            assert partition.error_code == ErrorCode.LEADER_NOT_AVAILABLE
        run.process.send_signal(signal.SIGINT)
        assert await run.exit_code() == 0

    partition_dir.unlink()
    aside.rename(partition_dir)
    run = Run(args)
    async with trio.open_nursery() as nursery:
        await run.start(nursery)
        await run.wait_running()
        assert await read_back(run, port) == [b"kept"]
        run.process.send_signal(signal.SIGINT)
        assert await run.exit_code() == 0
