"""Three `kraftpy controller` processes hold the same metadata log bytes: every batch below the high
watermark has the same offset, CRC and bytes on every node, before and after a leader failover, and
`kraftpy dump-log` of the three directories prints the same CRCs."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from kraftpy.cli.quorum import fetch_status
from kraftpy.ids import Uuid
from kraftpy.metadata.controller_config import DEFAULT_SUPPORTED_FEATURES
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreateTopicsRequest,
)
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature
from kraftpy.metadata.rpc import ControllerClient
from kraftpy.protocol.batch_header import iter_batches
from kraftpy.raft.file_log import METADATA_LOG_DIR_NAME
from tests.helpers import forkserver
from tests.helpers.processes import KraftProcess, controller_configs, format_all

pytestmark = pytest.mark.slow
SUPPORTED = tuple(BrokerFeature(name, low, high) for name, (low, high) in DEFAULT_SUPPORTED_FEATURES.items())


async def _status(voters: dict[int, tuple[str, int]], ids: list[int]) -> dict:
    return await fetch_status([voters[i] for i in ids])


async def _wait_caught_up(voters: dict[int, tuple[str, int]], ids: list[int], client: ControllerClient,
                          poke: BrokerHeartbeatRequest) -> dict:
    """The leader's status once every voter in `ids` has fetched up to its high watermark."""
    with trio.fail_after(30):
        while True:
            status = await _status(voters, ids)
            lags = {v["id"]: v["lag"] for v in status["voters"] if v["id"] in ids}
            if status["high_watermark"] > 0 and len(lags) == len(ids) and not any(lags.values()):
                return status
            await client.call(poke)  # a write, so that the high watermark moves on
            await trio.sleep(0.05)


async def _run_cluster(root: Path) -> int:
    """Three controllers commit, lose their leader, commit under the next one, take the old one
    back and stop cleanly; returns a high watermark every node's log reached."""
    configs, voters = controller_configs(root, **{"controller.quorum.election.timeout.ms": 500})
    cluster_id = format_all(configs)
    procs = {i: KraftProcess(f"controller-{i}", "controller", c) for i, c in zip(voters, configs, strict=True)}
    async with trio.open_nursery() as nursery:
        for proc in procs.values():
            await proc.start(nursery)
        for proc in procs.values():
            await proc.wait_for("controller started")
        client = ControllerClient(nursery, voters, request_timeout=3.0)
        epochs = {}
        for broker_id in (10, 11, 12):
            response = await client.call(BrokerRegistrationRequest(
                broker_id, cluster_id, Uuid(bytes([broker_id]) * 16),
                listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),), features=SUPPORTED))
            assert response.error_code == Errors.NONE
            epochs[broker_id] = response.broker_epoch
        poke = BrokerHeartbeatRequest(10, epochs[10], current_metadata_offset=10**6)
        for broker_id, epoch in epochs.items():
            await client.call(BrokerHeartbeatRequest(broker_id, epoch, current_metadata_offset=10**6))
        created = await client.call(CreateTopicsRequest((CreatableTopic("before", 6, 3),)))
        assert created.topics[0].error_code == Errors.NONE

        first = await _wait_caught_up(voters, list(voters), client, poke)
        leader = first["leader_id"]
        procs[leader].kill()
        await procs[leader].wait()
        others = [i for i in voters if i != leader]
        for broker_id, epoch in epochs.items():
            await client.call(BrokerHeartbeatRequest(broker_id, epoch, current_metadata_offset=10**6))
        created = await client.call(CreateTopicsRequest((CreatableTopic("after", 6, 3),)))
        assert created.topics[0].error_code == Errors.NONE
        second = await _status(voters, others)
        assert second["leader_epoch"] > first["leader_epoch"]

        await procs[leader].start(nursery)
        await procs[leader].wait_for("controller started")
        final = await _wait_caught_up(voters, list(voters), client, poke)
        assert final["high_watermark"] >= second["high_watermark"] > first["high_watermark"]
        for proc in procs.values():
            proc.signal(15)
        for proc in procs.values():
            assert await proc.wait() == 0
        nursery.cancel_scope.cancel()
    return final["high_watermark"]


@pytest.fixture(scope="module")
def three_logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], int]:
    root = tmp_path_factory.mktemp("replicated")
    high_watermark = trio.run(_run_cluster, root)
    return [root / f"controller-{i}" / METADATA_LOG_DIR_NAME for i in (1, 2, 3)], high_watermark


def batches_of(directory: Path) -> dict[int, tuple[int, int, bytes]]:
    """Every batch of a log directory: base offset -> (last offset, CRC, bytes)."""
    out = {}
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        for position, header in iter_batches(data):
            out[header.base_offset] = (header.last_offset, header.crc, data[position : position + header.size])
    return out


def test_every_controller_holds_the_leaders_bytes_up_to_the_high_watermark(three_logs) -> None:
    directories, high_watermark = three_logs
    logs = [batches_of(d) for d in directories]
    for log in logs:
        assert min(log) == 0  # no snapshot trimmed the log: it is compared whole
    committed = [{base: batch for base, batch in log.items() if batch[0] < high_watermark} for log in logs]
    assert committed[0] == committed[1] == committed[2]
    epochs = {int.from_bytes(data[12:16], "big") for _, _, data in committed[0].values()}
    assert len(epochs) >= 2  # the batches of the first leader's epoch and of its successor's
    assert max(last for last, _, _ in committed[0].values()) == high_watermark - 1


def dumped_crcs(directory: Path) -> dict[int, str]:
    result = forkserver.run(["dump-log", str(directory)],
                            check=True, capture_output=True, text=True)
    crcs = {}
    for line in result.stdout.splitlines():
        if line.startswith("baseOffset:"):
            fields = line.split()
            crcs[int(fields[1])] = (int(fields[3]), fields[fields.index("crc:") + 1], fields[-1])
    return crcs


def test_dump_log_prints_the_same_crcs_on_every_controller(three_logs) -> None:
    directories, high_watermark = three_logs
    dumps = [{base: (crc, valid) for base, (last, crc, valid) in dumped_crcs(d).items() if last < high_watermark}
             for d in directories]
    assert dumps[0] == dumps[1] == dumps[2]
    assert len(dumps[0]) > 5 and all(valid == "true" for _, valid in dumps[0].values())
