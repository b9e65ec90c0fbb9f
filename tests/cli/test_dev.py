"""`kraftpy dev`: a one-process cluster that serves real clients, stops cleanly on Ctrl-C (SIGINT)
and keeps its data for the next run on the same directory."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import confluent_kafka
import pytest
import trio
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers import forkserver
from tests.helpers.processes import free_ports

pytestmark = pytest.mark.slow


async def start_dev(directory: Path, port: int, controller_port: int, *args: str) -> tuple[trio.Process, list[str]]:
    """Both ports given (reserved by the test): dev's default controller port, port + 1, may be another
    test's in the meantime."""
    process = await forkserver.open_trio_process(
        ["dev", "--dir", str(directory), "--port", str(port), "--controller-port", str(controller_port),
         "--log-format", "json", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
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
    port, controller_port = free_ports(2)
    bootstrap = f"127.0.0.1:{port}"
    process, lines = await start_dev(tmp_path / "dev", port, controller_port)
    assert any(f"bootstrap.servers={bootstrap}" in line for line in lines)
    await trio.to_thread.run_sync(produce, bootstrap, 50)
    assert sorted(await trio.to_thread.run_sync(read_all, bootstrap, 50)) == sorted(b"event-%d" % i for i in range(50))
    assert await stop(process) == 0

    process, _ = await start_dev(tmp_path / "dev", port, controller_port)
    try:
        again = await trio.to_thread.run_sync(read_all, bootstrap, 50)
        assert sorted(again) == sorted(b"event-%d" % i for i in range(50))
    finally:
        assert await stop(process) == 0
    assert (tmp_path / "dev" / "server.properties").exists()


def test_bad_override_stops_with_one_line_naming_key_and_value(tmp_path: Path) -> None:
    done = forkserver.run(["dev", "--dir", str(tmp_path / "dev"),
                           "--override", "num.partitions=zero"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--override" in lines[0] and "num.partitions=zero" in lines[0]
    assert "Traceback" not in done.stderr


def metrics_status(port: int) -> int | None:
    """The status of GET /metrics on 127.0.0.1:port, or None when nothing listens there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return response.status
    except urllib.error.URLError:
        return None


def partitions_of_new_topic(bootstrap: str, topic: str) -> int:
    """Produce to a topic that does not exist yet (auto-created with num.partitions) and count its partitions."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"x")
    assert producer.flush(60) == 0
    return len(producer.list_topics(topic, timeout=30).topics[topic].partitions)


async def test_user_keys_survive_restarts_and_override_wins(tmp_path: Path) -> None:
    port, controller_port, file_metrics, override_metrics = free_ports(4)
    bootstrap = f"127.0.0.1:{port}"
    directory = tmp_path / "dev"
    process, _ = await start_dev(directory, port, controller_port)
    assert await stop(process) == 0
    config = directory / "server.properties"
    # The user changes one of dev's keys, adds two of their own and a comment.
    text = config.read_text().replace("num.partitions=1\n", "num.partitions=3\n")
    text += f"# mine\nmetrics.port={file_metrics}\nlog.retention.hours=1\n"
    config.write_text(text)

    process, _ = await start_dev(directory, port, controller_port, "--override", f"metrics.port={override_metrics}")
    try:
        assert config.read_text() == text  # nothing the user wrote is rewritten
        assert await trio.to_thread.run_sync(partitions_of_new_topic, bootstrap, "auto-created") == 3
        assert await trio.to_thread.run_sync(metrics_status, override_metrics) == 200
        assert await trio.to_thread.run_sync(metrics_status, file_metrics) is None
    finally:
        assert await stop(process) == 0

    # A key dev needs that the user deleted is put back; the user's lines stay as they were.
    config.write_text(text.replace("group.initial.rebalance.delay.ms=0\n", ""))
    process, _ = await start_dev(directory, port, controller_port)
    try:
        assert await trio.to_thread.run_sync(metrics_status, file_metrics) == 200
    finally:
        assert await stop(process) == 0
    now = config.read_text()
    assert now.startswith(text.replace("group.initial.rebalance.delay.ms=0\n", ""))
    assert now.rstrip().endswith("group.initial.rebalance.delay.ms=0")
