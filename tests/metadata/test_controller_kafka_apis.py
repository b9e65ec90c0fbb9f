"""The Kafka APIs a controller serves on its listener (what kafka-metadata-quorum.sh --bootstrap-controller
and admin clients with bootstrap.controllers ask), beside the control plane on the same port: a `kraftpy dev`
process answers ApiVersions, DescribeQuorum, DescribeCluster for controllers, DescribeConfigs,
IncrementalAlterConfigs and UpdateFeatures (what kafka-configs.sh and kafka-features.sh send with
--bootstrap-controller); anything else closes that connection and nothing else. The SASL_SSL cluster test (tests/security/test_controller_sasl.py) asks the
same over an authenticated connection, followers included."""

from __future__ import annotations

import time
import types
import uuid

import pytest
import structlog
import trio

from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.cli.cluster import ask_active_controller
from kraftpy.metadata import metadata_version
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.controller_kafka import ControllerKafkaApis
from kraftpy.metadata.image import EMPTY_IMAGE
from kraftpy.metadata.messages import ConfigSource
from kraftpy.metadata.records import ConfigResourceType, UserScramCredentialRecord
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    AddRaftVoterRequest,
    ApiVersionsRequest,
    CreateTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeQuorumRequest,
    IncrementalAlterConfigsRequest,
    MetadataRequest,
    RemoveRaftVoterRequest,
    UpdateFeaturesRequest,
)
from kraftpy.rpc.control import ControlClient, ControlServer, RpcError
from kraftpy.security.authorizer import AclIndex
from kraftpy.security.controller_sasl import ControlSasl
from kraftpy.security.sasl import SaslLogin
from kraftpy.security.scram import ScramCredential
from tests.helpers.deployments import DevDeployment

TOPIC_CONFIG, BROKER_CONFIG = ConfigResourceType.TOPIC, ConfigResourceType.BROKER


def quorum_request(topic: str = "__cluster_metadata", partition: int = 0) -> DescribeQuorumRequest:
    return DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name=topic, partitions=[DescribeQuorumRequest.PartitionData(partition_index=partition)])])


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    with DevDeployment(tmp_path_factory.mktemp("dev")) as deployment:
        yield deployment


def ask(dev: DevDeployment, api_key: int, version: int, request):
    async def go():
        with trio.fail_after(30):  # bounds a failure only
            async with await KafkaConnection.connect(*dev.controller_address) as conn:
                return await conn.request(api_key, version, request)
    return trio.run(go)


def test_api_versions_lists_only_what_the_controller_listener_serves(dev):
    versions = ask(dev, ApiKey.API_VERSIONS, 4, ApiVersionsRequest(client_software_name="t",
                                                                    client_software_version="1"))
    assert versions.error_code == ErrorCode.NONE
    assert {(k.api_key, k.min_version, k.max_version) for k in versions.api_keys} == {
        (ApiKey.API_VERSIONS, 0, 4), (ApiKey.DESCRIBE_QUORUM, 0, 2), (ApiKey.DESCRIBE_CLUSTER, 0, 1),
        (ApiKey.DESCRIBE_CONFIGS, 1, 4), (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1), (ApiKey.UPDATE_FEATURES, 0, 2),
        (ApiKey.ADD_RAFT_VOTER, 0, 0), (ApiKey.REMOVE_RAFT_VOTER, 0, 0)}
    assert {f.name for f in versions.finalized_features} >= {"metadata.version"}


def test_describe_quorum_on_the_controller_listener(dev):
    now_ms = time.time() * 1000
    for version in (0, 1, 2):
        response = ask(dev, ApiKey.DESCRIBE_QUORUM, version, quorum_request())
        (partition,) = response.topics[0].partitions
        assert (response.error_code, partition.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
        assert partition.leader_id == 1 and partition.high_watermark > 0
        assert [v.replica_id for v in partition.current_voters] == [1]
        if version >= 1:
            assert abs(partition.current_voters[0].last_caught_up_timestamp - now_ms) < 60_000
        if version == 2:
            assert [(n.node_id, [(li.name, li.host, li.port) for li in n.listeners]) for n in response.nodes] == [
                (1, [("CONTROLLER", *dev.controller_address)])]
    other = ask(dev, ApiKey.DESCRIBE_QUORUM, 2, quorum_request("orders", 3))
    assert other.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_raft_voter_changes_on_a_static_quorum_are_refused_with_kafkas_codes(dev):
    """kafka-metadata-quorum.sh add-controller / remove-controller against a controller.quorum.voters
    quorum (kraft.version 0): UNSUPPORTED_VERSION with the reason; another cluster's request
    INCONSISTENT_CLUSTER_ID. (tests/integration/test_dynamic_quorum.py removes a voter this way.)"""
    cluster_id = ask(dev, ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(endpoint_type=2)).cluster_id
    directory = uuid.UUID(bytes=bytes(range(1, 17)))
    remove = ask(dev, ApiKey.REMOVE_RAFT_VOTER, 0, RemoveRaftVoterRequest(cluster_id=cluster_id, voter_id=1,
                                                                          voter_directory_id=directory))
    assert remove.error_code == ErrorCode.UNSUPPORTED_VERSION and "kraft.version is 0" in remove.error_message
    add = ask(dev, ApiKey.ADD_RAFT_VOTER, 0, AddRaftVoterRequest(
        cluster_id="another-cluster", timeout_ms=1000, voter_id=2, voter_directory_id=directory,
        listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host="127.0.0.1", port=1)]))
    assert add.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID


def test_describe_cluster_names_the_controllers(dev):
    response = ask(dev, ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(
        include_cluster_authorized_operations=True, endpoint_type=2))
    assert response.error_code == ErrorCode.NONE and response.endpoint_type == 2
    assert response.controller_id == 1 and response.cluster_id
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(1, *dev.controller_address)]
    assert response.cluster_authorized_operations > 0  # no authorizer: every cluster operation
    # Brokers are described by brokers (and v0 can only ask for brokers); an unknown type is refused.
    for version, request in ((1, DescribeClusterRequest(endpoint_type=1)), (0, DescribeClusterRequest())):
        assert ask(dev, ApiKey.DESCRIBE_CLUSTER, version, request).error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE
    assert ask(dev, ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(endpoint_type=7)).error_code == \
        ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


def test_topic_and_broker_configs_are_described_and_altered_through_the_controller(dev):
    """kafka-configs.sh --bootstrap-controller: DescribeConfigs from the controller's image, IncrementalAlterConfigs
    written by the active controller; what one sets, the other (and the broker) shows."""
    async def create_topic():
        host, port = dev.bootstrap.split(":")
        async with await KafkaConnection.connect(host, int(port)) as conn:
            return await conn.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[
                CreateTopicsRequest.CreatableTopic(name="configured", num_partitions=1, replication_factor=1,
                                                   configs=[CreateTopicsRequest.CreatableTopicConfig(
                                                       name="retention.ms", value="3600000")])]))

    assert trio.run(create_topic).topics[0].error_code == ErrorCode.NONE
    R = DescribeConfigsRequest.DescribeConfigsResource

    def describe(*resources):
        return ask(dev, ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=list(resources))).results

    topic, missing = describe(R(resource_type=TOPIC_CONFIG, resource_name="configured",
                                configuration_keys=["retention.ms", "cleanup.policy"]),
                              R(resource_type=TOPIC_CONFIG, resource_name="absent", configuration_keys=None))
    assert topic.error_code == ErrorCode.NONE
    assert {c.name: (c.value, c.config_source) for c in topic.configs} == {
        "retention.ms": ("3600000", ConfigSource.TOPIC_CONFIG), "cleanup.policy": ("delete", ConfigSource.DEFAULT_CONFIG)}
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    Resource, Config = IncrementalAlterConfigsRequest.AlterConfigsResource, IncrementalAlterConfigsRequest.AlterableConfig
    alter = IncrementalAlterConfigsRequest(validate_only=False, resources=[
        Resource(resource_type=TOPIC_CONFIG, resource_name="configured", configs=[
            Config(name="retention.ms", config_operation=0, value="7200000")]),
        Resource(resource_type=BROKER_CONFIG, resource_name="", configs=[
            Config(name="log.retention.ms", config_operation=0, value="86400000")]),
        Resource(resource_type=TOPIC_CONFIG, resource_name="configured", configs=[
            Config(name="no.such.config", config_operation=0, value="1")])])
    answers = ask(dev, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter).responses
    assert [a.error_code for a in answers] == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.INVALID_CONFIG]
    topic, defaults = describe(R(resource_type=TOPIC_CONFIG, resource_name="configured",
                                 configuration_keys=["retention.ms"]),
                               R(resource_type=BROKER_CONFIG, resource_name="", configuration_keys=None))
    assert [(c.name, c.value) for c in topic.configs] == [("retention.ms", "7200000")]
    assert ("log.retention.ms", "86400000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) in {
        (c.name, c.value, c.config_source) for c in defaults.configs}


def test_features_are_updated_through_the_controller(dev):
    """kafka-features.sh --bootstrap-controller: UpdateFeatures answered by the active controller."""
    Update = UpdateFeaturesRequest.FeatureUpdateKey
    same = ask(dev, ApiKey.UPDATE_FEATURES, 1, UpdateFeaturesRequest(validate_only=True, feature_updates=[
        Update(feature="metadata.version", max_version_level=metadata_version.LATEST, upgrade_type=1)]))
    assert same.error_code == ErrorCode.NONE, same
    down = ask(dev, ApiKey.UPDATE_FEATURES, 1, UpdateFeaturesRequest(validate_only=True, feature_updates=[
        Update(feature="metadata.version", max_version_level=metadata_version.MINIMUM, upgrade_type=1)]))
    assert ErrorCode.INVALID_UPDATE_VERSION in {down.error_code, *(r.error_code for r in down.results)}, down
    unknown = ask(dev, ApiKey.UPDATE_FEATURES, 1, UpdateFeaturesRequest(feature_updates=[
        Update(feature="metadata.version", max_version_level=metadata_version.LATEST, upgrade_type=9)]))
    assert unknown.error_code == ErrorCode.INVALID_REQUEST


def test_an_api_not_served_closes_that_connection_and_the_control_plane_goes_on(dev):
    mark = dev.proc.mark()
    with pytest.raises(ConnectionClosed):
        ask(dev, ApiKey.METADATA, 12, MetadataRequest(topics=None))
    line = dev.proc.wait_for("closing connection", since=mark,
                             where=lambda line: "not a request this controller listener serves" in line.get("why", ""))
    assert "unknown api key 3" in line["why"]
    # The msgpack control plane on the same port is unaffected.
    assert trio.run(ask_active_controller, [dev.controller_address], 30)["cluster_id"]


# -- the Kafka side of a controller listener in this process: SASL and authorization ---------------------

SCRAM_SECRET = "controller-secret"
_CREDENTIAL = ScramCredential.from_password("SCRAM-SHA-512", SCRAM_SECRET)
SCRAM_RECORD = UserScramCredentialRecord("alice", 2, _CREDENTIAL.salt, _CREDENTIAL.stored_key,
                                         _CREDENTIAL.server_key, _CREDENTIAL.iterations)


class Controller:
    """What the Kafka side reads of a controller (its id, cluster id, voters, who leads and its image)."""

    node_id = 1
    cluster_id = "kraftpy-test-cluster"
    loader = types.SimpleNamespace(leader_id=2, image=EMPTY_IMAGE)
    raft = types.SimpleNamespace(voters={1: ("127.0.0.1", 9093), 2: ("127.0.0.1", 9094)})

    controller_config = ControllerConfig(cluster_id="kraftpy-test-cluster")

    async def quorum_status(self):
        raise RpcError("NOT_LEADER_OR_FOLLOWER", "2@127.0.0.1:9094")  # a follower's answer

    async def serve_request(self, api, request):
        raise RpcError("NOT_CONTROLLER", "2")  # a follower's answer to a write

    async def serve_membership(self, api, body):
        raise RpcError("NOT_LEADER_OR_FOLLOWER", "2@127.0.0.1:9094")  # a follower's answer to a voter change


async def serve_kafka_side(nursery, *, sasl=None, acls=None) -> int:
    apis = ControllerKafkaApis(Controller(), listener_name="CONTROLLER", sasl=sasl, acls=lambda: acls)

    async def control_plane(api, body):
        return {"api": api}

    server = ControlServer(control_plane, sasl=sasl, kafka=apis.serve)
    return await nursery.start(server.serve, "127.0.0.1", 0)


async def test_a_sasl_listener_authenticates_kafka_clients_and_refuses_a_wrong_password():
    sasl = ControlSasl(("SCRAM-SHA-512",), {}, lambda name, code: SCRAM_RECORD if name == "alice" else None, 0)
    with trio.fail_after(30), structlog.testing.capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            port = await serve_kafka_side(nursery, sasl=sasl)
            async with await KafkaConnection.connect("127.0.0.1", port,
                                                     sasl=SaslLogin("SCRAM-SHA-512", "alice", SCRAM_SECRET)) as conn:
                versions = await conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
                assert {k.api_key for k in versions.api_keys} == {
                    ApiKey.API_VERSIONS, ApiKey.DESCRIBE_QUORUM, ApiKey.DESCRIBE_CLUSTER, ApiKey.DESCRIBE_CONFIGS,
                    ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.UPDATE_FEATURES, ApiKey.ADD_RAFT_VOTER,
                    ApiKey.REMOVE_RAFT_VOTER, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
                cluster = await conn.request(ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(endpoint_type=2))
                assert cluster.controller_id == 2 and [b.broker_id for b in cluster.brokers] == [1, 2]
            with pytest.raises(ConnectionClosed, match="SASL_AUTHENTICATION_FAILED"):
                await KafkaConnection.connect("127.0.0.1", port, sasl=SaslLogin("SCRAM-SHA-512", "alice", "guess"))
            # Without logging in, only ApiVersions and the SASL requests are served.
            async with await KafkaConnection.connect("127.0.0.1", port) as conn:
                with pytest.raises(ConnectionClosed):
                    await conn.request(ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(endpoint_type=2))
            # A control-plane client on the same SASL listener still logs in its own way.
            client = ControlClient(nursery, "127.0.0.1", port, request_timeout=30, connect_timeout=30,
                                   sasl=SaslLogin("SCRAM-SHA-512", "alice", SCRAM_SECRET))
            assert await client.request("Echo", {}) == {"api": "Echo"}
            nursery.cancel_scope.cancel()
    closed = [line for line in logs if line["event"] == "closing connection"]
    assert [line["why"] for line in closed] == ["SASL authentication failed", "SASL authentication required"]
    assert closed[0]["principal"] == "User:alice" and "guess" not in str(closed)


async def test_with_an_authorizer_describe_cluster_needs_alter_on_the_cluster():
    acls = AclIndex(super_users=frozenset({"User:admin"}), allow_everyone_if_no_acl_found=False)
    sasl = ControlSasl(("PLAIN",), {"admin": "a", "reader": "r"}, lambda name, code: None, 0)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await serve_kafka_side(nursery, sasl=sasl, acls=acls)
            for user, password, expected in (("admin", "a", ErrorCode.NONE),
                                             ("reader", "r", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)):
                async with await KafkaConnection.connect("127.0.0.1", port,
                                                         sasl=SaslLogin("PLAIN", user, password)) as conn:
                    answer = await conn.request(ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(endpoint_type=2))
                    assert answer.error_code == expected
                    quorum = await conn.request(ApiKey.DESCRIBE_QUORUM, 2, quorum_request())
                    if user == "admin":  # allowed; this controller follows, and says who leads
                        (partition,) = quorum.topics[0].partitions
                        assert (quorum.error_code, partition.error_code) == (ErrorCode.NONE,
                                                                             ErrorCode.NOT_LEADER_OR_FOLLOWER)
                        assert "2@127.0.0.1:9094" in partition.error_message
                    else:
                        assert quorum.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    # Configs need DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, features ALTER on the cluster;
                    # what is allowed reaches this controller, which is not the active one.
                    Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
                    altered = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(
                        resources=[Resource(resource_type=TOPIC_CONFIG, resource_name="t", configs=[])]))
                    described = await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=[
                        DescribeConfigsRequest.DescribeConfigsResource(resource_type=TOPIC_CONFIG, resource_name="t",
                                                                       configuration_keys=None)]))
                    features = await conn.request(ApiKey.UPDATE_FEATURES, 1, UpdateFeaturesRequest(feature_updates=[
                        UpdateFeaturesRequest.FeatureUpdateKey(feature="metadata.version", max_version_level=21)]))
                    if user == "admin":
                        assert altered.responses[0].error_code == ErrorCode.NOT_CONTROLLER
                        assert "the active controller is 2" in altered.responses[0].error_message
                        assert described.results[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        assert features.error_code == ErrorCode.NOT_CONTROLLER
                    else:
                        assert altered.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        assert described.results[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        assert features.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    # Voter changes need ALTER on the cluster; allowed, this follower names the leader.
                    removed = await conn.request(ApiKey.REMOVE_RAFT_VOTER, 0, RemoveRaftVoterRequest(
                        cluster_id="kraftpy-test-cluster", voter_id=2, voter_directory_id=uuid.UUID(int=7)))
                    if user == "admin":
                        assert removed.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                        assert "the leader is 2@127.0.0.1:9094" in removed.error_message
                    else:
                        assert removed.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            nursery.cancel_scope.cancel()
