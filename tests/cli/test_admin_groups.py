"""`kraftpy groups list | describe | delete | reset-offsets` against a real `kraftpy dev`.

One `kraftpy dev` serves the module; each test makes its own topics and groups. Groups are real:
librdkafka consumers in this process join them and commit. The commands run as subprocesses and
their output (tab-separated when piped), exit codes and the group's offsets afterwards (read by an
ordinary consumer) are checked.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import trio

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.cli.groups import parse_datetime, parse_topic_spec
from kraftpy.cli.main import app
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.consumer_protocol import (
    AssignmentError,
    ConsumerProtocolAssignment,
    decode_assignment,
    encode_assignment,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import OffsetCommitRequest
from kraftpy.protocol.schema import Versions
from tests.helpers.cli_runner import CliRunner
from tests.helpers.deployments import DevDeployment, create_topics
from tests.helpers.processes import free_ports
from tests.helpers.terminal import run_on_terminal

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import NewTopic  # noqa: E402

from tests.helpers import forkserver  # noqa: E402

QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    with DevDeployment(tmp_path_factory.mktemp("groups") / "dev") as deployment:
        yield deployment


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kraftpy(*args: object) -> subprocess.CompletedProcess:
    return forkserver.run([*(str(a) for a in args)], capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def groups(dev, *args: object) -> subprocess.CompletedProcess:
    return kraftpy("groups", *args, "--bootstrap-server", dev.bootstrap)


def table(stdout: str) -> list[dict[str, str]]:
    """Tab-separated output (a header line, then rows) as dicts."""
    lines = stdout.splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]


def make_topic(dev, partitions: int, records_per_partition: int, *, timestamps: list[int] | None = None) -> str:
    topic = name("t")
    create_topics(dev.bootstrap, [NewTopic(topic, partitions, 1)])
    produce(dev, topic, {p: records_per_partition for p in range(partitions)}, timestamps=timestamps)
    return topic


def produce(dev, topic: str, counts: dict[int, int], *, timestamps: list[int] | None = None) -> None:
    producer = ck.Producer({"bootstrap.servers": dev.bootstrap, **QUIET})
    for partition, count in counts.items():
        for i in range(count):
            extra = {"timestamp": timestamps[i]} if timestamps else {}
            producer.produce(topic, value=f"v{i}".encode(), partition=partition, **extra)
    assert producer.flush(30) == 0


def consumer(dev, group: str, **config) -> ck.Consumer:
    return ck.Consumer({"bootstrap.servers": dev.bootstrap, "group.id": group, "enable.auto.commit": False,
                        "auto.offset.reset": "earliest", **QUIET, **config})


def consume_and_commit(c: ck.Consumer, count: int) -> None:
    """Read ``count`` records and commit synchronously what was read."""
    got = 0
    deadline = time.monotonic() + 30
    while got < count:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"read {got} of {count}")
        for msg in c.consume(num_messages=count - got, timeout=0.5):
            if msg.error() is None:
                got += 1
    c.commit(asynchronous=False)


def committed(dev, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as an ordinary consumer reads them (OffsetFetch)."""
    c = consumer(dev, group)
    try:
        tps = c.committed([ck.TopicPartition(topic, p) for p in range(partitions)], timeout=20)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}


def empty_group(dev, topic: str, partitions: int, count: int) -> str:
    """A group that committed ``count`` records of ``topic`` and has no member any more."""
    group = name("g")
    c = consumer(dev, group)
    c.subscribe([topic])
    consume_and_commit(c, count)
    c.close()
    return group


# -- pure parts ------------------------------------------------------------------------------------


def test_assignment_bytes_round_trip_and_reject_garbage():
    data = encode_assignment({"a": [2, 0], "b": [1]}, b"user")
    assert decode_assignment(data) == {"a": [0, 2], "b": [1]}
    assert decode_assignment(encode_assignment({"a": [5]}, version=0)) == {"a": [5]}
    # A newer version is read with the known layout (Kafka's compatibility rule); trailing fields ignored.
    assert decode_assignment(b"\x00\x07" + encode_assignment({"a": [1]})[2:] + b"\x00\x00") == {"a": [1]}
    assert decode_assignment(b"") == {}
    with pytest.raises(AssignmentError):
        decode_assignment(b"\x00\x01\x00\x00\x00\x05")


MESSAGES = Path(__file__).resolve().parents[3] / "shared" / "reference" / "kafka-protocol" / "messages"


@pytest.mark.skipif(not MESSAGES.is_dir(), reason="reference message definitions not present")
def test_assignment_declaration_matches_kafka():
    from tests.coordinator.test_records import _dsl_fields, _json_fields, _normalize_defaults

    ref = json.loads(re.sub(r"^\s*//.*$", "", (MESSAGES / "ConsumerProtocolAssignment.json").read_text(), flags=re.M))
    schema = ConsumerProtocolAssignment.SCHEMA
    assert Versions.parse(ref["validVersions"]) == schema.versions
    assert Versions.parse(ref["flexibleVersions"]) == schema.flexible
    for version in schema.versions:
        assert _dsl_fields(schema.fields, version) == _normalize_defaults(_json_fields(ref["fields"], {}, version))


def test_datetime_and_topic_specs():
    assert parse_datetime("2024-01-02T03:04:05.678Z") == 1704164645678
    assert parse_datetime("2024-01-02T04:04:05.678+01:00") == 1704164645678
    assert parse_datetime("2024-01-02T03:04:05Z") == 1704164645000
    for bad in ("2024-01-02", "yesterday", "2024-01-02 03:04:05"):
        with pytest.raises(ValueError):
            parse_datetime(bad)
    assert parse_topic_spec("t") == ("t", None)
    assert parse_topic_spec("t:2,0") == ("t", [0, 2])
    for bad in ("t:x", ":1", "t:-1", "t:"):
        with pytest.raises(ValueError):
            parse_topic_spec(bad)


# -- against a cluster -----------------------------------------------------------------------------


async def admin_commit(bootstrap: str, group: str, topic: str, offset: int) -> int:
    """An admin's OffsetCommit (generation -1, no member id) for partition 0; its error code."""
    async with AdminClient(parse_addresses(bootstrap)) as admin:
        request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                 committed_metadata="")])])
        response = await admin.coordinator_request(group, ApiKey.OFFSET_COMMIT, request)
        return response.topics[0].partitions[0].error_code


def test_an_active_group_described_listed_and_protected(dev):
    topic = make_topic(dev, 3, 10)
    group = name("g")
    c = consumer(dev, group, **{"client.id": "reader-1"})
    c.subscribe([topic])
    consume_and_commit(c, 30)
    member = c.memberid()
    try:
        produce(dev, topic, {0: 5})  # lag 5 on partition 0

        result = groups(dev, "describe", "--group", group)
        assert result.returncode == 0, result.stderr
        rows = table(result.stdout)
        assert [(r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows] == [
            (topic, "0", "10", "15", "5"), (topic, "1", "10", "10", "0"), (topic, "2", "10", "10", "0")]
        assert {(r["GROUP"], r["CONSUMER-ID"], r["CLIENT-ID"]) for r in rows} == {(group, member, "reader-1")}
        assert all(r["HOST"].endswith("127.0.0.1") for r in rows)

        members = table(groups(dev, "describe", "--group", group, "--members", "--verbose").stdout)
        assert [(m["CONSUMER-ID"], m["#PARTITIONS"], m["ASSIGNMENT"]) for m in members] == [
            (member, "3", f"{topic}(0,1,2)")]
        state = table(groups(dev, "describe", "--group", group, "--state").stdout)
        assert [(s["STATE"], s["#MEMBERS"], s["ASSIGNMENT-STRATEGY"]) for s in state] == [("Stable", "1", "range")]

        listed = table(groups(dev, "list").stdout)
        assert {"GROUP": group, "STATE": "Stable"} in listed
        assert group not in {r["GROUP"] for r in table(groups(dev, "list", "--state", "Empty,Dead").stdout)}
        assert {"GROUP": group, "STATE": "Stable"} in table(groups(dev, "list", "--state", "stable").stdout)

        # Deleting, or resetting, a group with a member is refused, and changes nothing.
        deleted = groups(dev, "delete", "--group", group)
        assert deleted.returncode == 1
        assert deleted.stderr.strip() == f"kraftpy: group {group}: NON_EMPTY_GROUP: the group has active members"
        reset = groups(dev, "reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute")
        assert reset.returncode == 1
        assert reset.stderr.strip() == (f"kraftpy: Assignments can only be reset if the group '{group}' is "
                                        f"inactive, but the current state is Stable.")
        # The coordinator itself refuses an admin's commit to a group with members, as Kafka's does.
        assert trio.run(admin_commit, dev.bootstrap, group, topic, 0) == ErrorCode.UNKNOWN_MEMBER_ID
        assert committed(dev, group, topic, 3) == {0: 10, 1: 10, 2: 10}
    finally:
        c.close()

    # Without members: the offsets and lag stay, the owner columns show "-".
    result = groups(dev, "describe", "--group", group)
    assert result.returncode == 0
    assert f"Consumer group '{group}' has no active members." in result.stderr
    rows = table(result.stdout)
    assert [(r["PARTITION"], r["LAG"], r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"]) for r in rows] == [
        ("0", "5", "-", "-", "-"), ("1", "0", "-", "-", "-"), ("2", "0", "-", "-", "-")]
    doc = json.loads(groups(dev, "describe", "--group", group, "--json").stdout)
    assert doc["groups"][0]["state"] == "Empty" and doc["groups"][0]["members"] == []
    assert [o["lag"] for o in doc["groups"][0]["offsets"]] == [5, 0, 0]
    # And now an admin may commit.
    assert trio.run(admin_commit, dev.bootstrap, group, topic, 3) == ErrorCode.NONE


def test_reset_offsets_modes(dev):
    now = int(time.time() * 1000)
    stamps = [now - 60_000 + i * 1000 for i in range(10)]  # one second apart, a minute ago
    topic = make_topic(dev, 2, 10, timestamps=stamps)
    group = empty_group(dev, topic, 2, 20)
    reader = consumer(dev, group)  # never joins: reads the committed offsets, then resumes from them

    def offsets() -> dict[int, int]:
        tps = reader.committed([ck.TopicPartition(topic, p) for p in range(2)], timeout=20)
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}

    def reset(*args: object, execute: bool = True) -> dict[int, int]:
        result = groups(dev, "reset-offsets", "--group", group, *args, *(["--execute"] if execute else []))
        assert result.returncode == 0, result.stderr
        rows = table(result.stdout)
        assert {(r["GROUP"], r["TOPIC"]) for r in rows} == {(group, topic)}
        return {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in rows}

    # --dry-run is the default: the plan is printed, nothing is committed.
    assert reset("--topic", topic, "--to-earliest", execute=False) == {0: 0, 1: 0}
    assert offsets() == {0: 10, 1: 10}
    doc = json.loads(groups(dev, "reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-earliest",
                            "--dry-run", "--json").stdout)
    assert doc == {"group": group, "executed": False, "offsets": [{"topic": topic, "partition": 1, "new_offset": 0}]}
    assert offsets() == {0: 10, 1: 10}

    assert reset("--topic", topic, "--to-earliest") == {0: 0, 1: 0}
    assert offsets() == {0: 0, 1: 0}
    assert reset("--topic", f"{topic}:1", "--to-offset", 4) == {1: 4}
    assert offsets() == {0: 0, 1: 4}
    assert reset("--all-topics", "--shift-by", 3) == {0: 3, 1: 7}
    assert reset("--all-topics", "--shift-by", -5) == {0: 0, 1: 2}  # kept at the earliest
    assert offsets() == {0: 0, 1: 2}
    assert reset("--topic", topic, "--to-offset", 99) == {0: 10, 1: 10}  # kept at the latest
    # The first record at or after 2.5 s past the first one is the fourth (offset 3).
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((stamps[0] + 2500) // 1000)) + \
        f".{(stamps[0] + 2500) % 1000:03d}Z"
    assert reset("--topic", topic, "--to-datetime", when) == {0: 3, 1: 3}
    assert offsets() == {0: 3, 1: 3}
    assert reset("--topic", f"{topic}:0", "--to-current") == {0: 3}
    assert reset("--topic", f"{topic}:1", "--to-latest") == {1: 10}
    assert offsets() == {0: 3, 1: 10}

    # A consumer of the group resumes where the reset put it.
    reader.assign([ck.TopicPartition(topic, 0)])  # no offset given: the committed one
    msg = None
    while msg is None or msg.error() is not None:
        msg = reader.poll(10)
        assert msg is not None, "no record within 10 s"
    reader.close()
    assert msg.offset() == 3 and msg.value() == b"v3"


def test_reset_offsets_errors(dev):
    topic = make_topic(dev, 1, 3)
    group = empty_group(dev, topic, 1, 3)
    missing = groups(dev, "reset-offsets", "--group", group, "--topic", "no-such-topic", "--to-earliest")
    assert missing.returncode == 1
    assert missing.stderr.strip() == ("kraftpy: topic no-such-topic: UNKNOWN_TOPIC_OR_PARTITION: "
                                      "the topic does not exist")
    bad_partition = groups(dev, "reset-offsets", "--group", group, "--topic", f"{topic}:0,3", "--to-earliest")
    assert bad_partition.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in bad_partition.stderr
    fresh = name("g")
    no_commit = groups(dev, "reset-offsets", "--group", fresh, "--topic", topic, "--shift-by", "1")
    assert no_commit.returncode == 1
    assert f"Cannot shift offset for partition {topic}-0 since there is no current committed offset" in \
        no_commit.stderr
    # A group that does not exist yet (Dead) may get offsets: a new group's starting point.
    created = groups(dev, "reset-offsets", "--group", fresh, "--topic", topic, "--to-offset", "2", "--execute")
    assert created.returncode == 0, created.stderr
    assert committed(dev, fresh, topic, 1) == {0: 2}
    unreachable = kraftpy("groups", "list", "--bootstrap-server", f"127.0.0.1:{free_ports(1)[0]}")
    assert unreachable.returncode == 3 and unreachable.stderr.count("\n") == 1


def test_usage_errors_exit_2():
    runner = CliRunner()
    for args, message in [
        (["reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--to-latest"], "choose one of"),
        (["reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "2024-01-01"], "--to-datetime=2024-01-01"),
        (["reset-offsets", "--group", "g", "--to-earliest"], "--topic or --all-topics"),
        (["reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--execute", "--dry-run"], "--dry-run"),
        (["describe", "--bootstrap-server", "127.0.0.1:1"], "--group or --all-groups"),
        (["list", "--state", "Sleeping", "--bootstrap-server", "127.0.0.1:1"], "'Sleeping' is not one of"),
    ]:
        result = runner.invoke(app, ["groups", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)


def test_delete_groups_and_offsets(dev):
    t1 = make_topic(dev, 1, 4)
    t2 = make_topic(dev, 2, 4)
    group = name("g")
    c = consumer(dev, group)
    c.subscribe([t1, t2])
    consume_and_commit(c, 12)
    c.close()
    assert committed(dev, group, t2, 2) == {0: 4, 1: 4}

    # Only t2's offsets go.
    result = groups(dev, "delete", "--group", group, "--topic", t2)
    assert result.returncode == 0, result.stderr
    assert table(result.stdout) == [{"TOPIC": t2, "PARTITION": "0", "STATUS": "Successful"},
                                    {"TOPIC": t2, "PARTITION": "1", "STATUS": "Successful"}]
    assert committed(dev, group, t2, 2) == {}
    assert committed(dev, group, t1, 1) == {0: 4}

    # The empty group is deleted with its offsets.
    result = groups(dev, "delete", "--group", group)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    assert committed(dev, group, t1, 1) == {}
    assert group not in groups(dev, "list").stdout
    gone = groups(dev, "describe", "--group", group)
    assert gone.returncode == 1
    assert gone.stderr.strip() == (f"kraftpy: group {group}: GROUP_ID_NOT_FOUND: consumer group '{group}' "
                                   f"does not exist")
    again = groups(dev, "delete", "--group", group)
    assert again.returncode == 1
    assert again.stderr.strip() == f"kraftpy: group {group}: GROUP_ID_NOT_FOUND: the group does not exist"


@pytest.mark.slow
def test_reset_of_many_partitions_shows_a_progress_bar_on_a_terminal(dev):
    topic = make_topic(dev, 120, 0)
    group = name("g")
    run = run_on_terminal("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute",
                          "--bootstrap-server", dev.bootstrap, timeout=60)
    assert run.returncode == 0
    screen, stdout = run.screen, run.piped
    assert f"reset {group}" in screen and "━" in screen and "360/360" in screen
    assert len(table(stdout)) == 120  # the table itself still goes to stdout, plain when piped
    assert committed(dev, group, topic, 120) == dict.fromkeys(range(120), 0)
