"""A combined node (controller + broker in one process, what `kraftpy dev` runs), in-process:
it activates, registers and unfences its broker, serves Kafka requests, and exports metrics."""

from __future__ import annotations

import threading
from pathlib import Path

import trio

from kraftpy.node import KraftNode
from tests.helpers.nodes import formatted_node_config
from tests.helpers.processes import free_ports


async def http_get(port: int, path: str) -> tuple[str, str]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    await stream.aclose()
    head, _, body = data.decode().partition("\r\n\r\n")
    return head.split("\r\n")[0], body


async def api_versions(port: int) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    # ApiVersions v0: size, api key 18, version 0, correlation id 7, client id "t"
    request = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + (7).to_bytes(4, "big") + b"\x00\x01t"
    await stream.send_all(len(request).to_bytes(4, "big") + request)
    data = await stream.receive_some(65536)
    await stream.aclose()
    return data


async def test_combined_node_serves_and_exports_metrics(tmp_path: Path) -> None:
    port, controller_port, metrics_port = free_ports(3)
    config, cluster_id = formatted_node_config(tmp_path, port, controller_port, {"metrics.port": str(metrics_port)})
    node = KraftNode(config, cluster_id)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(60):  # bounds a failure only
            await node.ready.wait()
        assert node.controller is not None and node.controller.active is not None
        assert node.broker is not None and node.broker.running
        reply = await api_versions(port)
        assert reply[4:8] == (7).to_bytes(4, "big")  # the correlation id comes back

        status, body = await http_get(node.metrics_port, "/metrics")
        assert status == "HTTP/1.1 200 OK"
        assert 'kraftpy_active_controller{node_id="1"} 1.0' in body
        assert 'kraftpy_broker_running{node_id="1"} 1.0' in body
        assert 'kraftpy_requests_total{api_key="18"}' in body
        assert "kraftpy_raft_high_watermark" in body
        # Every commit the broker applied (its registration, its unfencing, ...) has its apply latency.
        applied = [line for line in body.splitlines()
                   if line.startswith('kraftpy_metadata_apply_latency_seconds_count{node_id="1"}')]
        assert applied and float(applied[0].split()[-1]) >= 2
        status, _ = await http_get(node.metrics_port, "/other")
        assert status == "HTTP/1.1 404 Not Found"

        await node.stop_gracefully()
        assert node.lifecycle is not None and node.lifecycle.state.value == "stopping"
        nursery.cancel_scope.cancel()


async def test_a_restarted_broker_is_unfenced_only_once_its_logs_are_open(tmp_path: Path, monkeypatch) -> None:
    """The broker heartbeats the offset of the image its handlers use (its logs open), not the one its
    loader replayed: while its logs are still being opened the controller keeps it fenced, and makes it
    no partition's leader, however many heartbeats say the log was read past its registration."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kraftpy.broker.lifecycle import BrokerState
    from kraftpy.broker.replica_manager import ReplicaManager

    port, controller_port = free_ports(2)
    config, cluster_id = formatted_node_config(tmp_path, port, controller_port)
    node = KraftNode(config, cluster_id)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(60):  # bounds a failure only
            await node.ready.wait()
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
            futures = await trio.to_thread.run_sync(lambda: admin.create_topics([NewTopic("t", 3, 1)]))
            await trio.to_thread.run_sync(futures["t"].result, 30)
            while len(node.broker.replicas.partitions) < 3:
                await trio.sleep(0.01)
            await node.stop_gracefully()
        nursery.cancel_scope.cancel()

    opening = threading.Event()
    release = threading.Event()
    original = ReplicaManager._open_logs

    def held_open(self, *args):
        opening.set()
        release.wait(60)
        return original(self, *args)

    monkeypatch.setattr(ReplicaManager, "_open_logs", held_open)
    node = KraftNode(config, cluster_id)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(60):  # bounds a failure only
            await trio.to_thread.run_sync(opening.wait)
            lifecycle = node.lifecycle
            while lifecycle is None or lifecycle.state is not BrokerState.FENCED:
                await trio.sleep(0.01)
                lifecycle = node.lifecycle
            loader = node.loader
            while loader.image.provenance.last_offset < lifecycle.broker_epoch:
                await trio.sleep(0.01)
            # Three heartbeats answered since the loader read past the registration.
            answered = trio.Event()
            count = [0]
            call = lifecycle.controller.call

            async def counted(request, **kwargs):
                response = await call(request, **kwargs)
                count[0] += 1
                if count[0] == 3:
                    answered.set()
                return response

            lifecycle.controller.call = counted
            await answered.wait()
            assert lifecycle.state is BrokerState.FENCED
            assert not node.broker.running
            assert node.broker.published_offset < lifecycle.broker_epoch
            release.set()
            await node.ready.wait()
            assert node.broker.published_offset >= lifecycle.broker_epoch
            assert len(node.broker.replicas.partitions) == 3
        await node.stop_gracefully()
        nursery.cancel_scope.cancel()
