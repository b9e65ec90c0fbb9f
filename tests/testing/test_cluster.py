"""`kraftpy.testing.cluster`: a real cluster as a context manager and an async one (asyncio and trio),
its topics and admin helper, its processes apart from the test's, bad input refused, nothing left."""

from __future__ import annotations

import asyncio
import json
import os
import socket

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition

from kraftpy.testing import ClusterError, cluster
from kraftpy.testing.faults import process_state

pytestmark = pytest.mark.slow


def gone(pid: int) -> bool:
    """No process ``pid``, or one that has exited and waits to be reaped (it runs no code, holds no port)."""
    return process_state(pid) in (None, "Z")


def refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def consume_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    try:
        for _ in range(200):  # bounds a failure only: each poll returns as soon as records arrive
            if len(values) >= count:
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_a_cluster_serves_clients_and_leaves_nothing_behind(tmp_path):
    with cluster(brokers=1, directory=tmp_path, num_partitions=2) as c:
        assert c.data_dir.parent == tmp_path and c.data_dir.is_dir()
        assert (c.brokers[0].data_dir / "meta.properties").exists()
        processes = c.processes()
        assert set(processes) == {"supervisor", "zygote", "controller", "broker-1"}
        # Its own process group, not the test's: the terminal's Ctrl-C and the test's event loop stay apart.
        assert all(os.getpgid(pid) != os.getpgid(0) for pid in processes.values())
        assert c.controller.node_id == 3000 and [b.node_id for b in c.brokers] == [1]

        orders = c.create_topic("orders", partitions=3, config={"cleanup.policy": "compact"})
        assert [p.partition for p in orders.partitions] == [0, 1, 2]
        assert all(p.leader == 1 and p.isr == (1,) for p in orders.partitions)
        # The default partition count is the override's, num.partitions=2.
        assert len(c.create_topic("payments").partitions) == 2
        with pytest.raises(ClusterError) as exists:
            c.create_topic("orders")
        assert exists.value.code == "TOPIC_ALREADY_EXISTS" and "orders" in str(exists.value)

        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "enable.idempotence": True})
        for i in range(30):
            producer.produce("orders", key=b"k%d" % i, value=b"order-%d" % i, partition=i % 3)
        assert producer.flush(30) == 0
        assert sorted(consume_all(c.bootstrap_servers, "orders", 3, 30)) == sorted(b"order-%d" % i for i in range(30))
        assert consume_all(c.bootstrap_servers, "payments", 2, 0) == []  # a topic sees only its own records

        c.delete_topic("payments")
        with pytest.raises(ClusterError) as missing:
            c.describe_topic("payments")
        assert missing.value.code == "UNKNOWN_TOPIC_OR_PARTITION"
        # Each node, once ready, froze what it had made out of the garbage collector's reach (no full
        # collection walks it again: pauses of tens of milliseconds under load).
        for node in (c.controller, *c.brokers):
            frozen = [json.loads(line) for line in node.log_path.read_text().splitlines()
                      if "frozen out of the garbage collector" in line]
            assert len(frozen) == 1 and frozen[0]["frozen"] > 10_000, node.name
        directory, port = c.data_dir, c.brokers[0].port
    assert not directory.exists()
    assert all(gone(pid) for pid in processes.values()), processes
    assert refused(port)


def test_bad_input_is_refused_naming_the_key_and_the_value(tmp_path):
    with pytest.raises(ValueError, match=r"brokers=0: .*at least 1"):
        cluster(brokers=0)
    with pytest.raises(ValueError, match=r"^log.retention.ms=soon: not an integer"):
        cluster(log_retention_ms="soon")
    with pytest.raises(ValueError, match=r"^log.retension.ms=1000: not a kraftpy configuration key"):
        cluster(**{"log.retension.ms": 1000})
    with pytest.raises(ValueError, match=r"^listeners=PLAINTEXT://:9092: set by kraftpy.testing itself"):
        cluster(listeners="PLAINTEXT://:9092")
    with pytest.raises(ValueError, match=r"^log_level='loud'"):
        cluster(log_level="loud")
    unstarted = cluster()
    with pytest.raises(ClusterError, match="not started"):
        unstarted.bootstrap_servers  # noqa: B018
    with pytest.raises(ClusterError, match="not running"):
        unstarted.create_topic("t")
    assert not list(tmp_path.iterdir())


def test_a_start_that_fails_says_why_and_leaves_nothing(tmp_path):
    with pytest.raises(ClusterError, match=r"^the cluster did not start: start did not finish in time \(waiting for: "):
        cluster(directory=tmp_path, start_timeout=0.01).start()
    assert not list(tmp_path.iterdir())


async def test_async_with_under_trio_keeps_the_event_loop_running(tmp_path):
    """Starting and using the cluster never blocks the test's own event loop: a task of it keeps
    ticking meanwhile, and the cluster's processes are not this one."""
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        async with cluster(directory=tmp_path) as c:
            started_ticks = ticks
            topic = await c.acreate_topic("events", partitions=2)
            assert topic.name == "events" and len(topic.partitions) == 2
            assert (await c.aleader("events", 1)).node_id == 1
            assert os.getpid() not in c.processes().values()
            directory = c.data_dir
        nursery.cancel_scope.cancel()
    assert started_ticks > 100  # the loop ran while the cluster started in a worker thread
    assert not directory.exists()


def test_async_with_under_asyncio_serves_aiokafka(tmp_path):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main() -> list[bytes]:
        async with cluster(directory=tmp_path) as c:
            await c.acreate_topic("clicks")
            producer = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all")
            await producer.start()
            try:
                for i in range(5):
                    await producer.send_and_wait("clicks", b"click-%d" % i)
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer("clicks", bootstrap_servers=c.bootstrap_servers, auto_offset_reset="earliest")
            await consumer.start()
            values: list[bytes] = []
            try:
                for _ in range(20):  # bounds a failure only: getmany returns once records arrive
                    records = await consumer.getmany(timeout_ms=1000)
                    values += [r.value for batch in records.values() for r in batch]
                    if len(values) >= 5:
                        return values
                return values
            finally:
                await consumer.stop()

    assert asyncio.run(main()) == [b"click-%d" % i for i in range(5)]
    assert not list(tmp_path.iterdir())


def test_a_test_process_holding_more_than_1024_descriptors_drives_a_cluster(tmp_path):
    """A test process may hold descriptors numbered past FD_SETSIZE (a suite's leftovers, a pool of
    connections): the cluster's handle waits on its supervisor with poll(), which takes any number."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1400
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the open-file limit ({hard}) is below {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    null = os.open(os.devnull, os.O_RDONLY)
    held = [os.dup(null) for _ in range(1100)]
    try:
        with cluster(brokers=1, directory=tmp_path) as c:
            assert max(held) > 1024
            assert [p.partition for p in c.create_topic("wide").partitions] == [0]
    finally:
        for fd in [null, *held]:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("with_poll", [True, False], ids=["poll", "select where there is no poll"])
def test_the_handle_waits_for_its_supervisors_answer_with_a_deadline(monkeypatch, with_poll):
    import select

    from kraftpy.testing._cluster import _readable

    if not with_poll:
        monkeypatch.delattr(select, "poll", raising=False)
    r, w = os.pipe()
    try:
        assert not _readable(r, 0.01)
        os.write(w, b"{}\n")
        assert _readable(r, 0.01)
    finally:
        os.close(r)
        os.close(w)
