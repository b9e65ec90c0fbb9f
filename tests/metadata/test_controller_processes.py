"""Three `kraftpy controller` processes: the quorum elects an active controller, serves brokers'
requests, and after kill -9 of the active one the next keeps topics, brokers and epochs intact."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from kraftpy.cli.quorum import fetch_status
from kraftpy.ids import Uuid
from kraftpy.metadata.controller_config import DEFAULT_SUPPORTED_FEATURES
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreateTopicsRequest,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature, ConfigResourceType
from kraftpy.metadata.rpc import ControllerClient
from tests.helpers import forkserver
from tests.helpers.processes import KraftProcess, controller_configs, format_all

pytestmark = pytest.mark.slow
SUPPORTED = tuple(BrokerFeature(name, low, high) for name, (low, high) in DEFAULT_SUPPORTED_FEATURES.items())


def metadata_show(directory: Path) -> str:
    out = forkserver.run(["metadata", "show", "--log", str(directory)],
                         check=True, capture_output=True, text=True)
    return out.stdout


async def test_active_controller_failover_keeps_topics_brokers_and_epochs(tmp_path: Path) -> None:
    configs, voters = controller_configs(
        tmp_path, **{"metadata.log.max.record.bytes.between.snapshots": 300,
                     "controller.quorum.election.timeout.ms": 500})
    cluster_id = format_all(configs)
    procs = [KraftProcess(f"controller-{i}", "controller", c) for i, c in enumerate(configs, start=1)]
    async with trio.open_nursery() as nursery:
        for proc in procs:
            await proc.start(nursery)
        for proc in procs:
            await proc.wait_for("controller started")
        client = ControllerClient(nursery, voters, request_timeout=3.0)

        epochs = {}
        for broker_id in (10, 11, 12):
            response = await client.call(BrokerRegistrationRequest(
                broker_id, cluster_id, Uuid(bytes([broker_id]) * 16),
                listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
                features=SUPPORTED))
            assert response.error_code == Errors.NONE
            epochs[broker_id] = response.broker_epoch
        for broker_id, epoch in epochs.items():
            beat = await client.call(BrokerHeartbeatRequest(broker_id, epoch, current_metadata_offset=10**6))
            assert beat.error_code == Errors.NONE and not beat.is_fenced
        created = await client.call(CreateTopicsRequest((CreatableTopic("orders", 3, 3),)))
        assert created.topics[0].error_code == Errors.NONE
        altered = await client.call(IncrementalAlterConfigsRequest((AlterConfigsResource(
            ConfigResourceType.TOPIC, "orders", (AlterableConfig("retention.ms", AlterConfigOp.SET, "60000"),)),)))
        assert altered.responses[0].error_code == Errors.NONE

        status = await fetch_status(list(voters.values()))
        active = status["leader_id"]
        assert client.active_controller in (active, None)
        procs[active - 1].kill()
        await procs[active - 1].wait()

        again = await client.call(CreateTopicsRequest((CreatableTopic("orders", 3, 3),)))
        assert again.topics[0].error_code == Errors.TOPIC_ALREADY_EXISTS
        new_status = await fetch_status([a for i, a in voters.items() if i != active])
        assert new_status["leader_id"] != active and new_status["leader_epoch"] > status["leader_epoch"]
        for broker_id, epoch in epochs.items():  # the old epochs are still the brokers' epochs
            beat = await client.call(BrokerHeartbeatRequest(broker_id, epoch, current_metadata_offset=10**6))
            assert beat.error_code == Errors.NONE and not beat.is_fenced
        configs_now = await client.call(DescribeConfigsRequest((DescribeConfigsResource(
            ConfigResourceType.TOPIC, "orders", ("retention.ms",)),)))
        assert configs_now.results[0].configs[0].value == "60000"

        # The killed controller comes back, catches up (from a snapshot: the log was trimmed).
        await procs[active - 1].start(nursery)
        await procs[active - 1].wait_for("controller started")
        with trio.fail_after(30):
            while True:
                status = await fetch_status(list(voters.values()))
                caught_up = [v for v in status["voters"] if v["id"] == active and v["lag"] == 0]
                if caught_up and status["high_watermark"] > 0:
                    break
                await client.call(BrokerHeartbeatRequest(10, epochs[10], current_metadata_offset=10**6))
        for proc in procs:
            proc.signal(15)
        for proc in procs:
            assert await proc.wait() == 0
        nursery.cancel_scope.cancel()

    views = {i: metadata_show(tmp_path / f"controller-{i}") for i in voters}
    topics = [v[v.index("topics:"):] for v in views.values()]
    assert topics[0] == topics[1] == topics[2]
    assert "orders" in topics[0] and "3 partitions" in topics[0]
    snapshots = list((tmp_path / "controller-1" / "__cluster_metadata-0").glob("*.checkpoint"))
    assert snapshots, "no metadata snapshot was written"
