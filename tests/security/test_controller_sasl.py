"""SASL on the controller listener (kraftpy.rpc.control): a real ControlServer and ControlClient on
127.0.0.1 authenticate with SCRAM-SHA-512 or PLAIN before any request is served; a wrong password,
an unknown mechanism, a principal the authorizer refuses and a client that skips the exchange are each
answered with Kafka's error, closed and logged in one line without the secret; a failed login waits
connection.failed.authentication.delay.ms. The quorum and cluster tools log in. A controller checks
SCRAM against its bootstrap checkpoint until it has replayed the log, and with an authorizer admits
super users and ClusterAction holders only. The configuration checks made at start. And a 3+3 process
cluster with SASL_SSL and SCRAM-SHA-512 on every listener, where a controller with a wrong password
cannot join."""

from __future__ import annotations

import json
import random
import struct
import time
from pathlib import Path

import pytest
import structlog
import trio
import trio.testing

from kraftpy.admin.client import AdminConnectionError
from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.cli.cluster import ask_active_controller
from kraftpy.cli.quorum import fetch_status
from kraftpy.config import ConfigError, load_config
from kraftpy.config.properties import format_properties
from kraftpy.ids import random_uuid_str
from kraftpy.metadata.bootstrap import parse_add_scram, write_bootstrap
from kraftpy.metadata.controller_server import ControllerServer
from kraftpy.metadata.messages import (
    AclCreation,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kraftpy.metadata.records import UserScramCredentialRecord
from kraftpy.metadata.rpc import API_OF, CONTROLLER_APIS, WIRE
from kraftpy.node.raft_node import RaftNode
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeClusterRequest, DescribeQuorumRequest
from kraftpy.rpc.control import (
    SASL_AUTHENTICATION_TIMEOUT_S,
    AuthenticationFailed,
    ControlClient,
    ControlServer,
    RpcError,
    pack,
    unpack,
)
from kraftpy.security.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from kraftpy.security.controller_sasl import ControlSasl, controller_login, server_sasl
from kraftpy.security.sasl import SaslLogin
from kraftpy.security.scram import ScramClient, ScramCredential, salted_password
from kraftpy.storage.formatter import format_dirs
from tests.helpers import forkserver
from tests.helpers.deployments import ProcessCluster, create_topics
from tests.security.tls_support import Pki, load_properties_dict

SECRET = "controller-secret"
_CRED = ScramCredential.from_password("SCRAM-SHA-512", SECRET)
CONTROLLER_512 = UserScramCredentialRecord("controller", 2, _CRED.salt, _CRED.stored_key, _CRED.server_key,
                                           _CRED.iterations)
PLAIN_USERS = {"broker": "broker-secret"}


def lookup(name: str, code: int):
    return CONTROLLER_512 if (name, code) == ("controller", 2) else None


def settings(**kw) -> ControlSasl:
    return ControlSasl(kw.pop("mechanisms", ("PLAIN", "SCRAM-SHA-512")), PLAIN_USERS, lookup,
                       kw.pop("delay_ms", 0), **kw)


class Recorder:
    """The handler behind the listener: records what it served."""

    def __init__(self) -> None:
        self.served: list[str] = []

    async def __call__(self, api, body):
        self.served.append(api)
        return {"echo": body}


async def start(nursery, sasl: ControlSasl):
    handler = Recorder()
    server = ControlServer(handler, sasl=sasl)
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    return handler, port


def client(nursery, port, login: SaslLogin | None) -> ControlClient:
    # The timeouts only bound a failure: no check waits for them to pass.
    return ControlClient(nursery, "127.0.0.1", port, request_timeout=30, connect_timeout=30, sasl=login)


def closing_lines(logs) -> list[dict]:
    return [line for line in logs if str(line.get("event", "")).startswith("closing connection")]


async def test_scram_sha_512_with_the_right_password_is_served():
    with trio.fail_after(30), structlog.testing.capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            handler, port = await start(nursery, settings())
            c = client(nursery, port, SaslLogin("SCRAM-SHA-512", "controller", SECRET))
            assert await c.request("raft", {"n": 1}) == {"echo": {"n": 1}}
            assert await c.request("raft", {"n": 2}) == {"echo": {"n": 2}}  # the same, authenticated, connection
            assert handler.served == ["raft", "raft"]
            nursery.cancel_scope.cancel()
    ok = [line for line in logs if line["event"] == "SASL authenticated"]
    assert len(ok) == 1 and ok[0]["principal"] == "User:controller" and ok[0]["mechanism"] == "SCRAM-SHA-512"
    assert closing_lines(logs) == []


async def test_plain_with_the_listener_users():
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            handler, port = await start(nursery, settings())
            c = client(nursery, port, SaslLogin("PLAIN", "broker", "broker-secret"))
            assert await c.request("BrokerHeartbeat", {}) == {"echo": {}}
            wrong = client(nursery, port, SaslLogin("PLAIN", "broker", "guess"))
            with pytest.raises(AuthenticationFailed) as refused:
                await wrong.request("BrokerHeartbeat", {})
            assert refused.value.code == "SASL_AUTHENTICATION_FAILED"
            assert "Invalid username or password" in refused.value.message
            assert handler.served == ["BrokerHeartbeat"]
            nursery.cancel_scope.cancel()


async def test_a_wrong_scram_password_is_refused_closed_and_logged_without_the_secret():
    with trio.fail_after(30), structlog.testing.capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            handler, port = await start(nursery, settings())
            c = client(nursery, port, SaslLogin("SCRAM-SHA-512", "controller", "not-the-secret"))
            with pytest.raises(AuthenticationFailed) as refused:
                await c.request("raft", {})
            # A refused login is a failed connect: the next request tries again (and fails again).
            with pytest.raises(AuthenticationFailed):
                await c.request("raft", {})
            assert handler.served == []
            nursery.cancel_scope.cancel()
    assert refused.value.code == "SASL_AUTHENTICATION_FAILED"
    assert refused.value.message.endswith("Authentication failed during authentication due to invalid credentials "
                                          "with SASL mechanism SCRAM-SHA-512")
    lines = closing_lines(logs)
    assert [line["event"] for line in lines] == ["closing connection: SASL authentication failed"] * 2
    assert lines[0]["principal"] == "User:controller" and lines[0]["mechanism"] == "SCRAM-SHA-512"
    assert lines[0]["peer"].startswith("127.0.0.1:")
    # The client logs once for the streak of failures.
    assert [line["event"] for line in logs].count("SASL authentication to a controller failed") == 1
    assert "not-the-secret" not in repr(logs) and SECRET not in repr(logs)


async def test_a_client_that_skips_the_exchange_is_answered_then_closed():
    with trio.fail_after(30), structlog.testing.capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            handler, port = await start(nursery, settings())
            # kraftpy's client without a login: its first request is refused.
            with pytest.raises(RpcError) as refused:
                await client(nursery, port, None).request("raft", {})
            assert refused.value.code == "ILLEGAL_SASL_STATE"
            # A raw peer: the answer, then the connection is closed (no second request is read).
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(frame({"id": 7, "api": "QuorumStatus", "body": {}}) +
                                  frame({"id": 8, "api": "QuorumStatus", "body": {}}))
            answer = await read_frame(stream)
            assert answer["id"] == 7 and answer["error"] == "ILLEGAL_SASL_STATE"
            assert await stream.receive_some(100) == b""
            assert handler.served == []
            nursery.cancel_scope.cancel()
    lines = closing_lines(logs)
    assert [line["event"] for line in lines] == ["closing connection: SASL authentication required"] * 2
    assert lines[1]["api"] == "QuorumStatus"


async def test_a_mechanism_the_listener_does_not_enable_is_refused():
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            _, port = await start(nursery, settings(mechanisms=("SCRAM-SHA-512",)))
            with pytest.raises(AuthenticationFailed) as refused:
                await client(nursery, port, SaslLogin("PLAIN", "broker", "broker-secret")).request("raft", {})
            assert refused.value.code == "UNSUPPORTED_SASL_MECHANISM"
            assert "enabled: SCRAM-SHA-512" in refused.value.message
            nursery.cancel_scope.cancel()


async def test_an_authenticated_principal_the_authorizer_refuses_is_closed():
    asked = []

    def authorize(principal, host):
        asked.append((principal, host))
        return None if principal == "User:controller" else "no ClusterAction on the cluster (DefaultDeny)"

    with trio.fail_after(30), structlog.testing.capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            handler, port = await start(nursery, settings(authorize=authorize))
            with pytest.raises(AuthenticationFailed) as refused:
                await client(nursery, port, SaslLogin("PLAIN", "broker", "broker-secret")).request("raft", {})
            assert refused.value.code == "CLUSTER_AUTHORIZATION_FAILED"
            c = client(nursery, port, SaslLogin("SCRAM-SHA-512", "controller", SECRET))
            assert await c.request("raft", {}) == {"echo": {}}
            assert handler.served == ["raft"]
            nursery.cancel_scope.cancel()
    assert asked == [("User:broker", "127.0.0.1"), ("User:controller", "127.0.0.1")]
    denied = [line for line in logs if line["event"] == "closing connection: control plane access denied"]
    assert len(denied) == 1 and denied[0]["principal"] == "User:broker"


async def test_the_tools_log_in_and_stop_at_a_refused_login():
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            handler, port = await start(nursery, settings())
            address = [("127.0.0.1", port)]
            good = SaslLogin("SCRAM-SHA-512", "controller", SECRET)
            assert await fetch_status(address, 30, None, good) == {"echo": {}}
            assert await ask_active_controller(address, 30, None, good) == {"echo": {}}
            bad = SaslLogin("SCRAM-SHA-512", "controller", "guess")
            with pytest.raises(RpcError) as refused:
                await fetch_status(address, 30, None, bad)
            assert "SASL_AUTHENTICATION_FAILED" in str(refused.value)
            # kraftpy cluster describe does not ask again until its (here hour-long) timeout: the answer is final.
            with pytest.raises(AdminConnectionError) as failed:
                await ask_active_controller(address, 3600, None, bad)
            assert "SASL authentication as 'controller' (SCRAM-SHA-512)" in str(failed.value)
            assert handler.served == ["QuorumStatus", "DescribeClusterState"]
            nursery.cancel_scope.cancel()


def frame(msg) -> bytes:
    payload = pack(msg)
    return struct.pack(">I", len(payload)) + payload


async def read_frame(stream) -> dict:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = await stream.receive_some(65536)
        assert chunk, "connection closed"
        data += chunk
    return unpack(data[4:])


async def test_a_failed_login_is_answered_after_the_delay(autojump_clock):
    # In memory, on the virtual clock: the server's side of one connection.
    server = ControlServer(Recorder(), sasl=settings(delay_ms=5000))
    client_side, server_side = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._handle_connection, server_side)
        await client_side.send_all(frame({"id": 1, "api": "SaslHandshake", "body": {"mechanism": "SCRAM-SHA-512"}}))
        assert (await read_frame(client_side))["body"]["mechanisms"] == ["PLAIN", "SCRAM-SHA-512"]
        scram = ScramClient("SCRAM-SHA-512", "controller", "wrong")
        await client_side.send_all(frame({"id": 2, "api": "SaslAuthenticate", "body": {"token": scram.first_message()}}))
        server_first = (await read_frame(client_side))["body"]["token"]
        started = trio.current_time()
        await client_side.send_all(frame({"id": 3, "api": "SaslAuthenticate",
                                          "body": {"token": scram.final_message(server_first)}}))
        answer = await read_frame(client_side)
        assert trio.current_time() - started >= 5.0
        assert answer["id"] == 3 and answer["error"] == "SASL_AUTHENTICATION_FAILED"
        assert await client_side.receive_some(10) == b""


async def test_a_peer_that_does_not_finish_authenticating_is_closed(autojump_clock):
    server = ControlServer(Recorder(), sasl=settings())
    client_side, server_side = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._handle_connection, server_side)
        await client_side.send_all(frame({"id": 1, "api": "SaslHandshake", "body": {"mechanism": "PLAIN"}}))
        await read_frame(client_side)
        started = trio.current_time()
        with structlog.testing.capture_logs() as logs:
            assert await client_side.receive_some(10) == b""  # then nothing more: closed
        assert trio.current_time() - started >= SASL_AUTHENTICATION_TIMEOUT_S
    assert [line["reason"] for line in closing_lines(logs)] == [
        f"not authenticated within {SASL_AUTHENTICATION_TIMEOUT_S:g}s"]


# -- the controller's side: credentials and who may speak the control plane ------------------------


async def call(controller, request):
    api = API_OF[type(request)]
    _, response_type = CONTROLLER_APIS[api]
    answer = await controller.handle(api, {"request": WIRE.encode(request)})
    return WIRE.decode_as(answer["response"], response_type)


async def test_a_controller_checks_the_bootstrap_credentials_until_it_replayed_the_log(tmp_path, autojump_clock,
                                                                                       nursery):
    config = load_config(text="\n".join([
        "process.roles=controller", "node.id=1", "controller.quorum.voters=1@127.0.0.1:9",
        "listeners=CONTROLLER://127.0.0.1:9", "controller.listener.names=CONTROLLER", f"log.dirs={tmp_path}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:controller",
    ]))
    cluster_id = random_uuid_str()
    format_dirs(config.all_dirs, cluster_id, config.node_id)
    bootstrapped = parse_add_scram(f"SCRAM-SHA-512=[name=controller,password={SECRET}]")
    write_bootstrap(config.metadata_log_dir, [bootstrapped])
    raft = await RaftNode.open(config, cluster_id, rng=random.Random(1))
    controller = ControllerServer(config, cluster_id, raft, rng=random.Random(2))
    # Nothing replayed yet: the bootstrap checkpoint's credential; only the super user may speak.
    assert controller.lookup_scram("controller", 2) == bootstrapped
    assert controller.authorize_control_plane("User:controller", "10.0.0.1") is None
    assert "DefaultDeny" in controller.authorize_control_plane("User:broker", "10.0.0.1")

    await nursery.start(controller.run_quorum)
    while controller.active is None:  # a single voter elects itself and activates (virtual time)
        await trio.sleep(0.01)
    while controller.loader.image.scram.credential("controller", 2) is None:  # the bootstrap records replayed
        await trio.sleep(0.01)
    # The log's credentials win from now on: a new password replaces the bootstrapped one, a deleted user
    # is unknown even though the bootstrap checkpoint still holds it.
    salt = b"another-salt"
    upsert = ScramCredentialUpsertion("controller", 2, 4096, salt,
                                      salted_password("SCRAM-SHA-512", "new-secret", salt, 4096))
    assert (await call(controller, AlterUserScramCredentialsRequest(upsertions=(upsert,)))).results[0].error_code == 0
    assert controller.lookup_scram("controller", 2).salt == salt
    delete = ScramCredentialDeletion("controller", 2)
    assert (await call(controller, AlterUserScramCredentialsRequest(deletions=(delete,)))).results[0].error_code == 0
    assert controller.lookup_scram("controller", 2) is None
    # ClusterAction on the cluster lets a principal in.
    grant = AclCreation(int(ResourceType.CLUSTER), "kafka-cluster", int(PatternType.LITERAL), "User:broker", "*",
                        int(AclOperation.CLUSTER_ACTION), int(AclPermissionType.ALLOW))
    assert (await call(controller, CreateAclsRequest((grant,)))).results[0].error_code == 0
    assert controller.authorize_control_plane("User:broker", "10.0.0.1") is None
    assert controller.authorize_control_plane("User:eve", "10.0.0.1") is not None


# -- configuration ------------------------------------------------------------------------------


def controller_props(**extra: str) -> str:
    props = {"process.roles": "controller", "node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9093",
             "controller.listener.names": "CONTROLLER", "listeners": "CONTROLLER://127.0.0.1:9093",
             "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT", "log.dirs": "/tmp/unused",
             "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
             "listener.name.controller.scram-sha-512.sasl.jaas.config":
                 'org.apache.kafka.common.security.scram.ScramLoginModule required username="controller" '
                 f'password="{SECRET}";', **extra}
    return "".join(f"{k}={v}\n" for k, v in props.items() if v)


def test_the_client_login_comes_from_the_controller_listener_jaas_config():
    config = load_config(text=controller_props())
    assert controller_login(config) == SaslLogin("SCRAM-SHA-512", "controller", SECRET)
    sasl = server_sasl(config, lookup_scram=lookup)
    assert sasl is not None and sasl.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    plain = load_config(text=controller_props(**{"listener.security.protocol.map": "CONTROLLER:PLAINTEXT"}))
    assert controller_login(plain) is None and server_sasl(plain, lookup_scram=lookup) is None


@pytest.mark.parametrize(("extra", "key", "reason"), [
    ({"listener.name.controller.scram-sha-512.sasl.jaas.config": ""},
     "listener.name.controller.scram-sha-512.sasl.jaas.config", "needs username and password"),
    ({"listener.name.controller.scram-sha-512.sasl.jaas.config":
      f'org.apache.kafka.common.security.scram.ScramLoginModule required user_x="{SECRET}";'},
     "listener.name.controller.scram-sha-512.sasl.jaas.config", "needs username and password"),
    ({"sasl.mechanism.controller.protocol": "GSSAPI"}, "sasl.mechanism.controller.protocol", "GSSAPI (Kerberos)"),
    ({"listener.name.controller.sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER"},
     "listener.name.controller.sasl.enabled.mechanisms", "OAUTHBEARER is not available on the controller listener"),
    ({"listener.name.controller.sasl.enabled.mechanisms": "PLAIN"},
     "sasl.mechanism.controller.protocol", "the controller listener CONTROLLER does not enable it"),
])
def test_sasl_on_the_controller_listener_that_cannot_work_stops_at_start(extra, key, reason):
    with pytest.raises(ConfigError) as failed:
        load_config(text=controller_props(**extra))
    assert failed.value.key == key and reason in failed.value.reason
    assert SECRET not in str(failed.value) and "\n" not in str(failed.value)


def test_a_broker_needs_credentials_for_a_sasl_controller_listener():
    props = ("process.roles=broker\nnode.id=4\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
             "controller.listener.names=CONTROLLER\nlisteners=PLAINTEXT://127.0.0.1:9092\n"
             "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT\nlog.dirs=/tmp/unused\n")
    with pytest.raises(ConfigError) as failed:
        load_config(text=props)
    # The default mechanism is PLAIN (Kafka's GSSAPI is not available).
    assert failed.value.key == "listener.name.controller.plain.sasl.jaas.config"
    assert "needs username and password for this broker" in failed.value.reason


# -- a 3+3 process cluster with SASL_SSL and SCRAM-SHA-512 on every listener -------------------------

USERS = {"controller": "controller-secret", "broker": "broker-secret", "alice": "alice-secret"}


def scram_jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'


class SaslSslCluster(ProcessCluster):
    """Three controllers and three brokers; every listener, the controller listener included, is SASL_SSL
    with SCRAM-SHA-512 only. Controllers log in as ``controller``, brokers as ``broker`` (to the controllers
    and to each other); the three users are bootstrapped into the controllers' storage. With an authorizer
    whose super users are the three of them."""

    def __init__(self, root: Path, pki: Pki) -> None:
        super().__init__(root, {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                "super.users": "User:controller;User:broker;User:alice",
                                "ssl.truststore.location": str(pki.ca_file),
                                "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
                                "listener.name.controller.sasl.enabled.mechanisms": "SCRAM-SHA-512"})
        self.pki = pki
        from kraftpy.security.tls import ClientTls
        from kraftpy.security.tls import client_settings as tls_client_settings

        self.control_tls = ClientTls(tls_client_settings({
            "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file)}))
        self.control_sasl = SaslLogin("SCRAM-SHA-512", "controller", USERS["controller"])
        for path in self.configs:
            props = load_properties_dict(path)
            node_id = int(props["node.id"])
            props["ssl.keystore.location"] = str(pki.server(f"node-{node_id}"))
            if props["process.roles"] == "controller":
                props["listener.security.protocol.map"] = "CONTROLLER:SASL_SSL"
                props["listener.name.controller.scram-sha-512.sasl.jaas.config"] = scram_jaas(
                    "controller", USERS["controller"])
            else:
                port = self.broker_ports[node_id]
                props.update({
                    "listeners": f"SASL_SSL://127.0.0.1:{port}", "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
                    "listener.security.protocol.map": "CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL",
                    "inter.broker.listener.name": "SASL_SSL", "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas("broker", USERS["broker"]),
                    "listener.name.controller.scram-sha-512.sasl.jaas.config": scram_jaas("broker", USERS["broker"]),
                })
            path.write_text(format_properties(props))

    def client(self, user: str = "alice") -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user, "sasl.password": USERS[user], "ssl.ca.location": str(self.pki.ca_file)}

    def start(self) -> None:
        cluster_id = random_uuid_str()
        users = [parse_add_scram(f"SCRAM-SHA-512=[name={name},password={password}]")
                 for name, password in USERS.items()]
        for path in self.configs:
            config = load_config(path, ())
            format_dirs(config.all_dirs, cluster_id, config.node_id)
            if config.is_controller:
                write_bootstrap(config.metadata_log_dir, users)
        for proc in self.controllers.values():
            proc.start()
        marks = {broker_id: proc.start() for broker_id, proc in self.brokers.items()}
        for proc in self.brokers.values():
            proc.wait_for("broker running")
        self.wait_brokers_serving(marks)


SASL_FAILED = "closing connection: SASL authentication failed"


async def describe_each_controller(cluster: SaslSslCluster, password: str = USERS["alice"]) -> dict:
    """Each controller's DescribeQuorum and DescribeCluster (controllers), asked in the Kafka protocol on its
    SASL_SSL listener as alice."""
    answers = {}
    with trio.fail_after(60):  # bounds a failure only
        for node_id, (host, port) in cluster.voters.items():
            async with await KafkaConnection.connect(host, port, tls=cluster.control_tls,
                                                     sasl=SaslLogin("SCRAM-SHA-512", "alice", password)) as conn:
                quorum = await conn.request(ApiKey.DESCRIBE_QUORUM, 2, DescribeQuorumRequest(topics=[
                    DescribeQuorumRequest.TopicData(topic_name="__cluster_metadata", partitions=[
                        DescribeQuorumRequest.PartitionData(partition_index=0)])]))
                controllers = await conn.request(ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(endpoint_type=2))
                answers[node_id] = (quorum, controllers)
    return answers


def test_a_sasl_ssl_cluster_serves_and_a_controller_with_a_wrong_password_cannot_join(tmp_path):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import NewTopic

    root = tmp_path / "cluster"
    root.mkdir()
    with SaslSslCluster(root, Pki(tmp_path / "pki")) as cluster:
        # The quorum elected over authenticated connections, and the brokers registered through them.
        assert cluster.active_controller() in cluster.controllers  # asked over SASL_SSL
        for proc in cluster.controllers.values():
            assert proc.find(SASL_FAILED) is None
            assert proc.find("SASL authenticated", where=lambda line: line.get("principal") == "User:broker")
        create_topics(cluster.bootstrap, [NewTopic("secured", 1, 3)], deployment=cluster, client_config=cluster.client())
        producer = Producer({**cluster.client(), "acks": "all"})
        for i in range(50):
            producer.produce("secured", str(i).encode())
        assert producer.flush(30) == 0
        consumer = Consumer({**cluster.client(), "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["secured"])
        got: list[int] = []
        deadline = time.monotonic() + 30  # bounds a failure; the loop ends on the records
        while len(got) < 50 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(int(message.value()))
        consumer.close()
        assert got == list(range(50))

        # A controller restarted with a wrong password: the others refuse its votes and fetches, logged
        # with its principal, and the quorum goes on without it.
        # The quorum tool logs in with its --command-config.
        command_config = tmp_path / "admin.properties"
        command_config.write_text(format_properties({
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": scram_jaas("alice", USERS["alice"]), "ssl.truststore.location": str(cluster.pki.ca_file)}))
        controllers = ",".join(f"{h}:{p}" for h, p in cluster.voters.values())
        quorum = forkserver.run(["quorum", "status", "--bootstrap-controller", controllers,
                                 "--command-config", str(command_config), "--json"], capture_output=True, text=True)
        assert quorum.returncode == 0, quorum.stderr
        status = json.loads(quorum.stdout)
        assert sorted(v["id"] for v in status["voters"]) == [1, 2, 3]
        assert sorted(o["id"] for o in status["observers"]) == [4, 5, 6]
        # The same in the Kafka protocol (kafka-metadata-quorum.sh --bootstrap-controller): SASL_SSL on the
        # controller listener; the leader describes the quorum, the others point at it.
        described = trio.run(describe_each_controller, cluster)
        for node_id, (quorum, controllers) in described.items():
            (partition,) = quorum.topics[0].partitions
            assert controllers.controller_id == status["leader_id"]
            assert sorted((b.broker_id, b.host, b.port) for b in controllers.brokers) == sorted(
                (i, h, p) for i, (h, p) in cluster.voters.items())
            if node_id == status["leader_id"]:
                assert partition.error_code == ErrorCode.NONE and partition.leader_id == node_id
                assert sorted(v.replica_id for v in partition.current_voters) == [1, 2, 3]
                assert sorted(o.replica_id for o in partition.observers) == [4, 5, 6]
            else:
                assert partition.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        with pytest.raises(ConnectionClosed, match="SASL_AUTHENTICATION_FAILED"):
            trio.run(describe_each_controller, cluster, "wrong")
        follower = next(node_id for node_id in (3, 2, 1) if node_id != status["leader_id"])
        others = {node_id: proc for node_id, proc in cluster.controllers.items() if node_id != follower}
        rogue = cluster.controllers[follower]
        rogue.stop()
        config = next(path for path in cluster.configs if path.name == f"controller-{follower}.properties")
        props = load_properties_dict(config)
        props["listener.name.controller.scram-sha-512.sasl.jaas.config"] = scram_jaas("controller", "wrong-password")
        config.write_text(format_properties(props))
        marks = {node_id: other.mark() for node_id, other in others.items()}
        rogue_mark = rogue.start()

        def refused(node_id: int, proc) -> int:
            return sum(1 for line in proc.lines[marks[node_id]:]
                       if line.get("event") == SASL_FAILED and line.get("principal") == "User:controller")

        cluster.wait_until(lambda: all(refused(node_id, other) >= 3 for node_id, other in others.items()),
                           f"controllers {sorted(others)} refusing controller {follower}", timeout=30)
        rogue.wait_for("SASL authentication to a controller failed", since=rogue_mark)
        for node_id, other in others.items():
            assert other.find("leader changed", since=marks[node_id]) is None  # no vote got through
            assert not any("wrong-password" in json.dumps(line) for line in other.lines)
        assert not any("wrong-password" in json.dumps(line) for line in rogue.lines)
        producer.produce("secured", b"after")
        assert producer.flush(30) == 0


async def test_a_frame_over_sasl_server_max_receive_size_before_authentication_closes_the_connection():
    """sasl.server.max.receive.size on the controller listener: until the connection has authenticated a
    larger size prefix closes it before any of the frame is read; authenticated, socket.request.max.bytes
    applies."""
    with trio.fail_after(30), structlog.testing.capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            handler = Recorder()
            server = ControlServer(handler, sasl=settings(), max_frame_bytes=8 << 20, sasl_max_receive_bytes=64 * 1024)
            port = await nursery.start(server.serve, "127.0.0.1", 0)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(struct.pack(">I", 100 << 20) + b"\x83")
            assert await stream.receive_some(10) == b""
            c = client(nursery, port, SaslLogin("PLAIN", "broker", "broker-secret"))
            body = {"blob": b"x" * (1 << 20)}
            assert await c.request("raft", body) == {"echo": body}
            assert handler.served == ["raft"]
            nursery.cancel_scope.cancel()
    [closed] = closing_lines(logs)
    assert "sasl.server.max.receive.size=65536" in closed["reason"]
