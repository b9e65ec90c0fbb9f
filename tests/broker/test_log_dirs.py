"""DescribeLogDirs against a real broker with two log directories: every partition in the directory
that holds it, with the bytes of its segments; the volume's sizes from version 4; a directory that
could not be loaded answered KAFKA_STORAGE_ERROR; a caller without DESCRIBE on the cluster refused;
kafka-python's admin client reading it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeLogDirsRequest
from tests.helpers import forkserver
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, produce

Request = DescribeLogDirsRequest


def segment_bytes(partition_dir: Path) -> int:
    return sum(f.stat().st_size for f in partition_dir.glob("*.log"))


async def test_each_directory_lists_its_partitions_and_their_sizes(tmp_path):
    dirs = (tmp_path / "d1", tmp_path / "d2")
    async with open_cluster(tmp_path, brokers=1, log_dirs=dirs) as cluster:
        await cluster.create_topic("t", partitions=4)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for partition in range(4):
                await produce(conn, "t", partition, batch(*[b"x" * 100] * (partition + 1)))
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            response = await admin.request(ApiKey.DESCRIBE_LOG_DIRS, Request(topics=None), version=4)
            assert response.error_code == ErrorCode.NONE
            assert [r.log_dir for r in response.results] == [os.path.abspath(d) for d in dirs]
            found = {}
            for result in response.results:
                assert result.error_code == ErrorCode.NONE
                assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
                for topic in result.topics:
                    for p in topic.partitions:
                        found[(topic.name, p.partition_index)] = (Path(result.log_dir), p.partition_size, p.offset_lag)
            assert {k for k in found if k[0] == "t"} == {("t", p) for p in range(4)}
            for (topic, index), (log_dir, size, lag) in found.items():
                if topic != "t":
                    continue
                partition_dir = log_dir / f"t-{index}"
                assert partition_dir.is_dir()  # listed under the directory that holds it
                assert size == segment_bytes(partition_dir) > 0
                assert lag == 0
            sizes = [found[("t", p)][1] for p in range(4)]
            assert sizes == sorted(sizes) and len(set(sizes)) == 4  # more records, more bytes

            # Named partitions only; version 1 has neither error_code nor the volume's sizes.
            named = await admin.request(ApiKey.DESCRIBE_LOG_DIRS, Request(topics=[
                Request.DescribableLogDirTopic(topic="t", partitions=[2])]), version=1)
            listed = [(t.name, p.partition_index) for r in named.results for t in r.topics for p in t.partitions]
            assert listed == [("t", 2)]
            assert all(r.total_bytes == -1 for r in named.results)


async def test_a_directory_that_did_not_load_is_a_storage_error(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a file where a log directory should be\n")
    async with open_cluster(tmp_path, brokers=1, log_dirs=(tmp_path / "good", not_a_dir)) as cluster:
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            response = await admin.request(ApiKey.DESCRIBE_LOG_DIRS, Request(topics=None), version=4)
        errors = {r.log_dir: r.error_code for r in response.results}
        assert errors == {os.path.abspath(tmp_path / "good"): ErrorCode.NONE,
                          os.path.abspath(not_a_dir): ErrorCode.KAFKA_STORAGE_ERROR}
        offline = next(r for r in response.results if r.error_code != ErrorCode.NONE)
        assert offline.topics == [] and offline.total_bytes == -1


async def test_without_describe_on_the_cluster_the_request_is_refused(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            response = await admin.request(ApiKey.DESCRIBE_LOG_DIRS, Request(topics=None), version=4)
        assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and response.results == []


async def test_kafka_python_describes_log_dirs(tmp_path):
    admin_module = pytest.importorskip("kafka.admin")
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("kp", partitions=2)

        def describe():
            admin = admin_module.KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
            try:
                return admin.describe_log_dirs()
            finally:
                admin.close()

        described = await trio.to_thread.run_sync(describe)
        text = repr(described)
        assert os.path.abspath(tmp_path / "broker-1") in text and "'kp'" in text


async def test_the_log_dirs_command_prints_kafkas_document(tmp_path):
    dirs = (tmp_path / "d1", tmp_path / "d2")
    async with open_cluster(tmp_path, brokers=1, log_dirs=dirs) as cluster:
        await cluster.create_topic("t", partitions=2)
        await cluster.create_topic("other", partitions=1)
        command = ["log-dirs", "describe", "--bootstrap-server", cluster.bootstrap]
        done = await forkserver.run_async([*command, "--topic-list", "t", "--json"])
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        assert document["version"] == 1 and [b["broker"] for b in document["brokers"]] == [1]
        log_dirs = document["brokers"][0]["logDirs"]
        assert [d["logDir"] for d in log_dirs] == [os.path.abspath(d) for d in dirs]
        partitions = sorted(p["partition"] for d in log_dirs for p in d["partitions"])
        assert partitions == ["t-0", "t-1"]  # only the topic asked for
        assert all(d["error"] is None for d in log_dirs)

        table = await forkserver.run_async(command)
        assert table.returncode == 0 and "other-0" in table.stdout.decode()
        wrong = await forkserver.run_async([*command, "--broker-list", "9"])
        assert wrong.returncode == 2 and "no broker 9" in wrong.stderr.decode()
