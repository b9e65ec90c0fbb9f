"""`kraftpy reassign` and `kraftpy leaders` against a real cluster: 3 controllers, brokers 4, 5 and 6.

One cluster serves the module (tests run in file order: the last ones add broker 7 and take broker 6
away). The commands run as subprocesses; their exit codes and output, the cluster's metadata afterwards,
the records (read back by an ordinary consumer) and the brokers' log directories are checked. Followers
fetch at most 64 KiB per partition per fetch, so a throttled move of a few hundred KiB takes many fetches.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import trio

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import DescribeConfigsRequest, IncrementalAlterConfigsRequest
from kraftpy.storage.formatter import format_dirs
from kraftpy.storage.meta_properties import read_meta_properties
from tests.helpers.deployments import Proc, ProcessCluster, create_topics
from tests.helpers.processes import free_ports
from tests.helpers.terminal import run_on_terminal

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import NewTopic  # noqa: E402

from tests.helpers import forkserver  # noqa: E402

QUIET = {"log_level": 0}
FETCH_MAX = 65536


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("reassign")
    with ProcessCluster(root, {"replica.fetch.max.bytes": FETCH_MAX, "min.insync.replicas": 1}) as deployment:
        deployment.eventually(lambda: len(trio.run(_brokers, deployment.bootstrap)) == 3, "all brokers listed")
        yield deployment


async def _brokers(bootstrap: str) -> dict:
    async with AdminClient(parse_addresses(bootstrap)) as admin:
        return dict(admin.brokers)


def kraftpy(cluster, *args: object) -> subprocess.CompletedProcess:
    return forkserver.run([*(str(a) for a in args), "--bootstrap-server",
                           cluster.bootstrap], capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


def write_moves(path: Path, moves: dict[tuple[str, int], list[int]]) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}))
    return path


def partitions(cluster, topic: str) -> dict[int, tuple[list[int], list[int], int]]:
    """partition -> (replicas, isr, leader), as a broker's metadata says."""
    async def ask():
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            response = await admin.metadata([topic])
            return {p.partition_index: (list(p.replica_nodes), list(p.isr_nodes), p.leader_id)
                    for t in response.topics for p in t.partitions}
    return trio.run(ask)


def normalized(state: tuple[list[int], list[int], int]) -> tuple[list[int], list[int], int]:
    """(replicas, sorted ISR, leader): the ISR's order is the order members joined in."""
    return state[0], sorted(state[1]), state[2]


def produce(cluster, topic: str, count: int, size: int = 100) -> list[bytes]:
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    values = [f"{i:08d}".encode() + b"x" * (size - 8) for i in range(count)]
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0
    return values


def consume(cluster, topic: str, count: int) -> list[bytes]:
    consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=count - len(got), timeout=0.5):
            if msg.error() is None:
                got.append(msg.value())
    consumer.close()
    return got


def make_topic(cluster, topic: str, replicas: list[list[int]]) -> None:
    create_topics(cluster.bootstrap, [NewTopic(topic, num_partitions=len(replicas), replica_assignment=replicas)])
    cluster.eventually(lambda: partitions(cluster, topic).get(0, ([], [], -1))[2] >= 0, f"{topic} has a leader")


def topic_config(cluster, topic: str, key: str) -> str | None:
    async def ask():
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            Resource = DescribeConfigsRequest.DescribeConfigsResource
            response = await admin.request(ApiKey.DESCRIBE_CONFIGS, DescribeConfigsRequest(
                resources=[Resource(resource_type=2, resource_name=topic, configuration_keys=[key])]))
            entries = response.results[0].configs
            return next((e.value for e in entries if e.name == key and e.config_source == 1), None)
    return trio.run(ask)


def unthrottle_brokers(cluster) -> None:
    async def send():
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
            Config = IncrementalAlterConfigsRequest.AlterableConfig
            await admin.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, IncrementalAlterConfigsRequest(resources=[
                Resource(resource_type=4, resource_name=str(b), configs=[
                    Config(name=k, config_operation=1, value=None)
                    for k in ("leader.replication.throttled.rate", "follower.replication.throttled.rate")])
                for b in admin.brokers]))
    trio.run(send)


def segment_bytes(cluster, broker: int, topic: str) -> bytes:
    directory = cluster.data_dir(broker) / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


# -- moves ------------------------------------------------------------------------------------------


def test_move_a_partition_with_data_to_other_brokers(cluster, tmp_path):
    make_topic(cluster, "moved", [[4, 5]])
    values = produce(cluster, "moved", 300)
    plan = write_moves(tmp_path / "plan.json", {("moved", 0): [5, 6]})
    result = kraftpy(cluster, "reassign", "execute", "--reassignment-json-file", plan, "--wait")
    assert result.returncode == 0, result.stderr
    assert "Current partition replica assignment" in result.stdout and '"replicas":[4,5]' in result.stdout
    verify = kraftpy(cluster, "reassign", "verify", "--reassignment-json-file", plan)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "Reassignment of partition moved-0 is completed." in verify.stdout
    cluster.eventually(lambda: normalized(partitions(cluster, "moved")[0]) == ([5, 6], [5, 6], 5),
               "the new replicas")
    assert consume(cluster, "moved", 300) == values
    # The new replica holds the leader's bytes; the old replica's files are gone.
    cluster.eventually(lambda: segment_bytes(cluster, 6, "moved") == segment_bytes(cluster, 5, "moved"),
                       "broker 6 holds the leader's bytes")
    cluster.eventually(lambda: not any(cluster.data_dir(4).glob("moved-0*")), "broker 4's replica deleted")


def test_execute_wait_shows_a_progress_bar_on_a_terminal(cluster, tmp_path):
    """On a terminal, ``--wait`` draws a bar on stderr of the partitions moved; stdout stays the plain
    rollback file."""
    make_topic(cluster, "barred", [[4, 5], [4, 5]])
    produce(cluster, "barred", 200)
    plan = write_moves(tmp_path / "plan.json", {("barred", 0): [5, 6], ("barred", 1): [6, 5]})
    run = run_on_terminal("reassign", "execute", "--reassignment-json-file", plan, "--wait",
                          "--bootstrap-server", cluster.bootstrap)
    assert run.returncode == 0
    screen, stdout = run.screen, run.piped
    assert "moving partitions" in screen and "━" in screen and "2/2" in screen
    assert '"replicas":[4,5]' in stdout and "━" not in stdout
    cluster.eventually(lambda: [p[0] for _, p in sorted(partitions(cluster, "barred").items())] == [[5, 6], [6, 5]],
               "the new replicas")


def test_increase_the_replication_factor(cluster, tmp_path):
    make_topic(cluster, "grown", [[4]])
    values = produce(cluster, "grown", 50)
    plan = write_moves(tmp_path / "plan.json", {("grown", 0): [4, 5, 6]})
    result = kraftpy(cluster, "reassign", "execute", "--reassignment-json-file", plan, "--wait", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["results"] == [{"topic": "grown", "partition": 0, "error": "NONE",
                                                     "message": None}]
    # Every broker learns the completing change a little after the controller commits it.
    cluster.eventually(lambda: normalized(partitions(cluster, "grown")[0]) == ([4, 5, 6], [4, 5, 6], 4),
               "the new ISR")
    assert consume(cluster, "grown", 50) == values


def test_unknown_topic_and_bad_broker_fail_with_kafkas_codes(cluster, tmp_path):
    make_topic(cluster, "errors", [[4]])
    unknown = write_moves(tmp_path / "unknown.json", {("no-such-topic", 0): [4]})
    result = kraftpy(cluster, "reassign", "execute", "--reassignment-json-file", unknown)
    assert result.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    bad = write_moves(tmp_path / "bad.json", {("errors", 0): [4, 99]})
    result = kraftpy(cluster, "reassign", "execute", "--reassignment-json-file", bad)
    assert result.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in result.stderr and "99" in result.stderr
    assert partitions(cluster, "errors")[0][0] == [4]
    result = kraftpy(cluster, "reassign", "cancel", "--reassignment-json-file", bad)
    assert result.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in result.stderr


def test_a_throttled_move_is_held_back_until_the_throttle_is_lifted(cluster, tmp_path):
    make_topic(cluster, "slow", [[4]])
    values = produce(cluster, "slow", 3000)  # 300 KB: five fetches of 64 KiB
    plan = write_moves(tmp_path / "plan.json", {("slow", 0): [4, 5]})
    marks = {b: cluster.brokers[b].mark() for b in (4, 5)}
    result = kraftpy(cluster, "reassign", "execute", "--reassignment-json-file", plan, "--throttle", 1000)
    assert result.returncode == 0, result.stderr
    assert topic_config(cluster, "slow", "leader.replication.throttled.replicas") == "0:4"
    assert topic_config(cluster, "slow", "follower.replication.throttled.replicas") == "0:5"
    # After one 64 KiB fetch the rate is far above 1000 B/s: the leader holds the partition back (and the
    # follower stops asking for it).
    cluster.wait_until(lambda: cluster.brokers[4].find("replication throttled: partitions held back",
                                                       since=marks[4])
                       or cluster.brokers[5].find("replication throttled: partitions not fetched", since=marks[5]),
                       "the throttle holding the move back")
    verify = kraftpy(cluster, "reassign", "verify", "--reassignment-json-file", plan)
    assert verify.returncode == 1 and "slow-0 is still in progress" in verify.stdout
    assert topic_config(cluster, "slow", "leader.replication.throttled.replicas") == "0:4"
    unthrottle_brokers(cluster)  # read from the metadata at once, no restart
    # Replicas are [4, 5] from the start of the move (the target and the replicas leaving, none here); the
    # move is done when 5 joins the ISR (the same change ends the reassignment).
    cluster.eventually(lambda: normalized(partitions(cluster, "slow")[0])[:2] == ([4, 5], [4, 5]), "the move done")
    verify = kraftpy(cluster, "reassign", "verify", "--reassignment-json-file", plan)
    assert verify.returncode == 0 and "Clearing broker-level throttles" in verify.stdout
    assert topic_config(cluster, "slow", "leader.replication.throttled.replicas") is None
    assert consume(cluster, "slow", 3000) == values


def test_cancel_puts_a_move_in_progress_back(cluster, tmp_path):
    make_topic(cluster, "cancelled", [[4]])
    produce(cluster, "cancelled", 3000)
    plan = write_moves(tmp_path / "plan.json", {("cancelled", 0): [5, 6]})
    result = kraftpy(cluster, "reassign", "execute", "--reassignment-json-file", plan, "--throttle", 1000)
    assert result.returncode == 0, result.stderr
    assert partitions(cluster, "cancelled")[0][0] == [5, 6, 4]
    result = kraftpy(cluster, "reassign", "cancel", "--reassignment-json-file", plan)
    assert result.returncode == 0 and "cancelled-0" in result.stdout, result.stderr
    replicas, isr, leader = partitions(cluster, "cancelled")[0]
    assert replicas == [4] and isr == [4] and leader == 4
    verify = kraftpy(cluster, "reassign", "verify", "--reassignment-json-file", plan)
    assert verify.returncode == 1 and "are not the target" in verify.stdout
    unthrottle_brokers(cluster)


# -- leaders ----------------------------------------------------------------------------------------


def test_preferred_election_after_the_preferred_replica_changed(cluster, tmp_path):
    make_topic(cluster, "pref", [[4, 5, 6]])
    cluster.eventually(lambda: len(partitions(cluster, "pref")[0][1]) == 3, "a full ISR")
    plan = write_moves(tmp_path / "plan.json", {("pref", 0): [5, 4, 6]})
    assert kraftpy(cluster, "reassign", "execute", "--reassignment-json-file", plan).returncode == 0
    assert partitions(cluster, "pref")[0][2] == 4  # the leader stays where it was
    result = kraftpy(cluster, "leaders", "elect", "--preferred", "--topic", "pref", "--partition", 0)
    assert result.returncode == 0 and "Successfully completed leader election (PREFERRED)" in result.stdout
    assert partitions(cluster, "pref")[0][2] == 5
    again = kraftpy(cluster, "leaders", "elect", "--preferred", "--topic", "pref", "--partition", 0)
    assert again.returncode == 0 and "Valid replica already elected" in again.stdout
    missing = kraftpy(cluster, "leaders", "elect", "--preferred", "--topic", "pref", "--partition", 9)
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_unclean_election_gives_a_leaderless_partition_an_out_of_sync_leader(cluster):
    make_topic(cluster, "unclean", [[5, 6]])
    cluster.eventually(lambda: len(partitions(cluster, "unclean")[0][1]) == 2, "a full ISR")
    for broker in (6, 5):  # 6 leaves the ISR, then 5 (the last ISR member) stops: no leader
        cluster.brokers[broker].stop()
    cluster.eventually(lambda: partitions(cluster, "unclean")[0][2] == -1, "no leader")
    cluster.restart_broker(6)
    refused = kraftpy(cluster, "leaders", "elect", "--preferred", "--topic", "unclean", "--partition", 0)
    assert refused.returncode == 1 and "PREFERRED_LEADER_NOT_AVAILABLE" in refused.stderr
    result = kraftpy(cluster, "leaders", "elect", "--unclean", "--topic", "unclean", "--partition", 0)
    assert result.returncode == 0 and "Successfully completed leader election (UNCLEAN)" in result.stdout
    assert partitions(cluster, "unclean")[0][2] == 6
    cluster.restart_broker(5)


# -- adding and removing brokers (docs/operations.md) -----------------------------------------------


def add_broker(cluster, broker_id: int) -> None:
    """Format a new broker's log dir with the cluster's id and start it (docs/operations.md)."""
    [port] = free_ports(1)
    config = (cluster.root / "broker-4.properties").read_text()
    lines = [line for line in config.splitlines()
             if not line.startswith(("node.id", "listeners", "advertised.listeners", "log.dirs"))]
    lines += [f"node.id={broker_id}", f"listeners=PLAINTEXT://127.0.0.1:{port}",
              f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", f"log.dirs={cluster.data_dir(broker_id)}"]
    path = cluster.root / f"broker-{broker_id}.properties"
    path.write_text("\n".join(lines) + "\n")
    meta = read_meta_properties(cluster.data_dir(4))
    assert meta is not None
    format_dirs([cluster.data_dir(broker_id)], meta.cluster_id, broker_id)
    proc = Proc(f"broker-{broker_id}", ["broker", "-c", str(path)], cond=cluster.cond)
    cluster.brokers[broker_id] = proc
    proc.start()
    proc.wait_for("broker running")


def test_adding_a_broker_and_moving_partitions_onto_it(cluster, tmp_path):
    add_broker(cluster, 7)
    cluster.eventually(lambda: 7 in trio.run(_brokers, cluster.bootstrap), "broker 7 listed")
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "grown"}]}))
    generated = kraftpy(cluster, "reassign", "generate", "--topics-to-move-json-file", topics,
                        "--broker-list", "5,6,7", "--json")
    assert generated.returncode == 0, generated.stderr
    proposed = json.loads(generated.stdout)["proposed"]
    [entry] = proposed["partitions"]
    assert entry["topic"] == "grown" and sorted(entry["replicas"]) == [5, 6, 7]
    assert json.loads(generated.stdout)["current"]["partitions"][0]["replicas"] == [4, 5, 6]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposed))
    result = kraftpy(cluster, "reassign", "execute", "--reassignment-json-file", plan, "--wait")
    assert result.returncode == 0, result.stderr
    cluster.eventually(lambda: sorted(partitions(cluster, "grown")[0][0]) == [5, 6, 7], "grown on 5, 6, 7")
    assert len(consume(cluster, "grown", 50)) == 50


def test_removing_a_broker_after_moving_everything_off_it(cluster, tmp_path):
    async def hosted_on(broker: int) -> dict[tuple[str, int], list[int]]:
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            response = await admin.metadata(None)
            return {(t.name, p.partition_index): list(p.replica_nodes) for t in response.topics
                    for p in t.partitions if broker in p.replica_nodes}

    def off_6(replicas: list[int]) -> list[int]:
        spare = next(b for b in (7, 5, 4) if b not in replicas)
        return [spare if r == 6 else r for r in replicas]

    moves = {tp: off_6(replicas) for tp, replicas in trio.run(hosted_on, 6).items()}
    assert moves
    plan = write_moves(tmp_path / "plan.json", moves)
    result = kraftpy(cluster, "reassign", "execute", "--reassignment-json-file", plan, "--wait")
    assert result.returncode == 0, result.stderr
    cluster.eventually(lambda: trio.run(hosted_on, 6) == {}, "no replica on broker 6")
    cluster.brokers[6].stop()

    result = kraftpy(cluster, "cluster", "unregister", "--id", 6)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Broker 6 is no longer registered.\n"
    cluster.eventually(lambda: 6 not in trio.run(_brokers, cluster.bootstrap), "broker 6 gone")
    del cluster.brokers[6]
