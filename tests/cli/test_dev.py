"""`kraftpy dev`: a one-process cluster that serves real clients, stops cleanly on Ctrl-C (SIGINT)
and keeps its data for the next run on the same directory."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import pytest
import trio
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.processes import free_ports

pytestmark = pytest.mark.slow


async def start_dev(directory: Path, port: int) -> tuple[trio.Process, list[str]]:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "kraftpy", "dev", "--dir", str(directory), "--port", str(port),
         "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines: list[str] = []
    buf = b""
    assert process.stdout is not None
    with trio.fail_after(60):  # bounds a failure only, like every timeout here
        while not any("kraftpy dev is running" in line for line in lines):
            chunk = await process.stdout.receive_some(4096)
            assert chunk, f"kraftpy dev exited: {lines}"
            buf += chunk
            *done, buf = buf.split(b"\n")
            lines += [d.decode() for d in done]
    return process, lines


async def stop(process: trio.Process) -> int:
    process.send_signal(signal.SIGINT)
    with trio.fail_after(60):
        return await process.wait()


def produce(bootstrap: str, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("events", 2, 1)])["events"].result(60)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                         "compression.type": "lz4"})
    for i in range(n):
        producer.produce("events", key=b"k%d" % (i % 7), value=b"event-%d" % i, partition=i % 2)
    assert producer.flush(60) == 0


def read_all(bootstrap: str, n: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "dev-test",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("events", p, 0) for p in (0, 1)])
    values = []
    deadline = time.monotonic() + 60
    while len(values) < n and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


async def test_dev_serves_stops_cleanly_and_keeps_data(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    bootstrap = f"127.0.0.1:{port}"
    process, lines = await start_dev(tmp_path / "dev", port)
    assert any(f"bootstrap.servers={bootstrap}" in line for line in lines)
    await trio.to_thread.run_sync(produce, bootstrap, 50)
    assert sorted(await trio.to_thread.run_sync(read_all, bootstrap, 50)) == sorted(b"event-%d" % i for i in range(50))
    assert await stop(process) == 0

    process, _ = await start_dev(tmp_path / "dev", port)
    try:
        again = await trio.to_thread.run_sync(read_all, bootstrap, 50)
        assert sorted(again) == sorted(b"event-%d" % i for i in range(50))
    finally:
        assert await stop(process) == 0
    assert (tmp_path / "dev" / "server.properties").exists()
