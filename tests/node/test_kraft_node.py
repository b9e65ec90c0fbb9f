"""A combined node (controller + broker in one process, what `kraftpy dev` runs), in-process:
it activates, registers and unfences its broker, serves Kafka requests, and exports metrics."""

from __future__ import annotations

from pathlib import Path

import trio

from kraftpy.cli.dev import dev_properties
from kraftpy.config import load_config
from kraftpy.config.properties import format_properties
from kraftpy.ids import random_uuid_str
from kraftpy.node import KraftNode
from kraftpy.storage.formatter import format_dirs
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
    values = {**dev_properties(tmp_path, port, controller_port), "metrics.port": str(metrics_port)}
    (tmp_path / "server.properties").write_text(format_properties(values))
    config = load_config(tmp_path / "server.properties")
    cluster_id = random_uuid_str()
    format_dirs(config.all_dirs, cluster_id, config.node_id)
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
        status, _ = await http_get(node.metrics_port, "/other")
        assert status == "HTTP/1.1 404 Not Found"

        await node.stop_gracefully()
        assert node.lifecycle is not None and node.lifecycle.state.value == "stopping"
        nursery.cancel_scope.cancel()
