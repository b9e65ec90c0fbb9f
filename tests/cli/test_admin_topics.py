"""`kraftpy topics create | list | describe | alter | delete` against a real `kraftpy dev`.

One `kraftpy dev` serves the module; each test uses its own topics. The commands run as subprocesses;
their output (tab-separated when piped, or --json), exit codes and the cluster's resulting state are
checked. Placement across several brokers and the partition filters are in test_admin_cluster.py.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import uuid

import pytest

from kraftpy.cli.main import app
from kraftpy.cli.topics import parse_replica_assignment
from tests.helpers import forkserver
from tests.helpers.cli_runner import CliRunner
from tests.helpers.deployments import DevDeployment
from tests.helpers.processes import free_ports, interruptible
from tests.helpers.terminal import run_on_terminal


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    with DevDeployment(tmp_path_factory.mktemp("topics") / "dev") as deployment:
        yield deployment


def name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kraftpy(*args: object) -> subprocess.CompletedProcess:
    return forkserver.run([*(str(a) for a in args)], capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def topics(dev, *args: object) -> subprocess.CompletedProcess:
    return kraftpy("topics", *args, "--bootstrap-server", dev.bootstrap)


def tables(stdout: str) -> dict[str, list[dict[str, str]]]:
    """Piped output: ``# Title`` lines, each followed by a tab-separated header and rows."""
    out: dict[str, list[dict[str, str]]] = {}
    title, header = None, None
    for line in stdout.splitlines():
        if line.startswith("# "):
            title, header = line[2:], None
            out[title] = []
        elif header is None:
            header = line.split("\t")
        else:
            out[title].append(dict(zip(header, line.split("\t"), strict=True)))
    return out


def describe_json(dev, topic: str) -> dict:
    result = topics(dev, "describe", "--topic", topic, "--json")
    assert result.returncode == 0, result.stderr
    [doc] = json.loads(result.stdout)["topics"]
    return doc


def test_create_list_describe_alter_delete(dev):
    topic = name()
    result = topics(dev, "create", "--topic", topic, "--partitions", 3, "--config", "retention.ms=60000",
                    "--config", "cleanup.policy=compact,delete")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"Created topic {topic}."

    assert topic in topics(dev, "list").stdout.splitlines()

    piped = tables(topics(dev, "describe", "--topic", topic).stdout)
    [summary] = piped["Topics"]
    assert summary["Topic"] == topic and summary["PartitionCount"] == "3" and summary["ReplicationFactor"] == "1"
    assert "retention.ms=60000" in summary["Configs"] and "cleanup.policy=compact,delete" in summary["Configs"]
    assert len(summary["TopicId"]) == 22
    assert [(p["Partition"], p["Leader"], p["Replicas"], p["Isr"], p["Offline"]) for p in piped["Partitions"]] == [
        (str(i), "1", "1", "1", "") for i in range(3)]

    doc = describe_json(dev, topic)
    assert doc["id"] == summary["TopicId"]
    assert doc["configs"]["retention.ms"] == "60000"
    assert [p["leader"] for p in doc["partitions"]] == [1, 1, 1]

    result = topics(dev, "alter", "--topic", topic, "--partitions", 5)
    assert result.returncode == 0, result.stderr
    assert describe_json(dev, topic)["partition_count"] == 5

    result = topics(dev, "delete", "--topic", topic)
    assert result.returncode == 0, result.stderr
    assert topic not in topics(dev, "list").stdout.splitlines()


def test_create_with_a_replica_assignment(dev):
    topic = name()
    assert topics(dev, "create", "--topic", topic, "--replica-assignment", "1,1").returncode == 0
    doc = describe_json(dev, topic)
    assert [p["replicas"] for p in doc["partitions"]] == [[1], [1]]
    # alter: either only the new partitions, or all of them with the existing ones first.
    assert topics(dev, "alter", "--topic", topic, "--partitions", 3, "--replica-assignment", "1").returncode == 0
    assert topics(dev, "alter", "--topic", topic, "--partitions", 4,
                  "--replica-assignment", "1,1,1,1").returncode == 0
    assert describe_json(dev, topic)["partition_count"] == 4
    result = topics(dev, "alter", "--topic", topic, "--partitions", 6, "--replica-assignment", "1")
    assert result.returncode == 1
    assert "INVALID_REPLICA_ASSIGNMENT" in result.stderr
    result = topics(dev, "create", "--topic", name(), "--replica-assignment", "1:7")
    assert result.returncode == 1
    assert result.stderr.startswith("kraftpy: topic ") and "INVALID_REPLICA_ASSIGNMENT" in result.stderr
    assert "broker 7" in result.stderr


def test_errors_name_kafkas_code_in_one_line(dev):
    topic = name()
    assert topics(dev, "create", "--topic", topic).returncode == 0

    exists = topics(dev, "create", "--topic", topic)
    assert exists.returncode == 1
    assert exists.stderr.splitlines() == [exists.stderr.strip()]
    assert f"topic {topic}: TOPIC_ALREADY_EXISTS" in exists.stderr
    assert topics(dev, "create", "--topic", topic, "--if-not-exists").returncode == 0

    bad = topics(dev, "create", "--topic", name(), "--config", "retention.ms=soon")
    assert bad.returncode == 1
    assert bad.stderr.strip().endswith(
        "INVALID_CONFIG: Invalid value soon for configuration retention.ms: Not a number of type LONG")
    unknown_key = topics(dev, "create", "--topic", name(), "--config", "retention.hours=1")
    assert unknown_key.returncode == 1 and "INVALID_CONFIG" in unknown_key.stderr

    rf = topics(dev, "create", "--topic", name(), "--replication-factor", 3)
    assert rf.returncode == 1 and "INVALID_REPLICATION_FACTOR" in rf.stderr

    shrink = topics(dev, "alter", "--topic", topic, "--partitions", 1)
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in shrink.stderr

    missing = name("missing")
    for result in (topics(dev, "describe", "--topic", missing), topics(dev, "delete", "--topic", missing),
                   topics(dev, "alter", "--topic", missing, "--partitions", 2)):
        assert result.returncode == 1, result
        assert f"topic {missing}: UNKNOWN_TOPIC_OR_PARTITION" in result.stderr
        assert "Traceback" not in result.stderr
    assert topics(dev, "delete", "--topic", missing, "--if-exists").returncode == 0

    internal = topics(dev, "delete", "--topic", "__consumer_offsets")
    assert internal.returncode == 1 and "__consumer_offsets" in internal.stderr


def test_usage_errors_exit_2_and_unreachable_exit_3(dev):
    for args in (["create", "--topic", "x", "--replica-assignment", "1:x"],
                 ["create", "--topic", "x", "--replica-assignment", "1:1"],
                 ["create", "--topic", "x", "--replica-assignment", "1,1:1"],
                 ["create", "--topic", "x", "--partitions", 2, "--replica-assignment", "1"],
                 ["create", "--topic", "x", "--config", "novalue"],
                 ["create", "--topic", "x", "--partitions", 0]):
        result = topics(dev, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("kraftpy: ")
    [port] = free_ports(1)
    result = kraftpy("topics", "list", "--bootstrap-server", f"127.0.0.1:{port}")
    assert result.returncode == 3
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [["topics", "list", "--bootstrap-server"],
                                     ["quorum", "status", "--bootstrap-controller"],
                                     ["cluster", "describe", "--bootstrap-controller"]])
def test_ctrl_c_while_waiting_for_an_answer_is_one_line_and_exit_130(command):
    """A server that accepts the connection and never answers: the command waits; Ctrl-C ends it."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(60)
        process = subprocess.Popen([sys.executable, "-m", "kraftpy", *command,
                                    f"127.0.0.1:{server.getsockname()[1]}"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=interruptible)
        connection, _ = server.accept()  # the command is connected and waits for its answer
        with connection:
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert (out, err) == ("", "kraftpy: interrupted\n")


STUBBORN_COMMAND = """
import trio
from kraftpy.cli.admin_common import run_trio

async def command():
    try:
        print("waiting", flush=True)
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):  # a clean-up whose peer never answers
            print("ending", flush=True)
            await trio.sleep_forever()

run_trio(command)
"""


def test_a_second_ctrl_c_while_the_command_ends_ends_the_process_at_once():
    """The first Ctrl-C cancels the command; its clean-up waits, shielded, for ever. The second ends the
    process there and then, with the same line and status as the first would have."""
    process = subprocess.Popen([sys.executable, "-c", STUBBORN_COMMAND], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    try:
        assert process.stdout.readline() == "waiting\n"
        process.send_signal(signal.SIGINT)
        assert process.stdout.readline() == "ending\n"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    assert (out, err) == ("", "kraftpy: interrupted\n")


def test_a_command_config_setting_the_admin_client_does_not_read_is_warned_about(tmp_path):
    settings = tmp_path / "client.properties"
    settings.write_text("client.id=ops\nretries=3\nssl.truststore.type=PEM\n")
    (port,) = free_ports(1)
    result = kraftpy("topics", "list", "--bootstrap-server", f"127.0.0.1:{port}", "--command-config", settings)
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert lines[0] == (f"kraftpy: warning: --command-config={settings}: retries is not a setting the admin client "
                        "reads (ignored)")
    assert len(lines) == 2 and lines[1].startswith("kraftpy: no broker answered")


def on_a_terminal(*args: object, columns: int = 80) -> str:
    """Run ``kraftpy *args`` with stdout on a pseudo-terminal of ``columns`` columns; what it drew."""
    run = run_on_terminal(*args, terminal="stdout", columns=columns, timeout=60)
    assert run.returncode == 0, run.piped
    return re.sub(r"\x1b\[[0-9;]*m", "", run.screen)


def test_a_table_on_a_terminal_is_drawn_whole_and_piped_is_plain(dev):
    topic = name("a-rather-long-topic-name")
    configs = ("retention.ms=86400000", "cleanup.policy=compact", "segment.bytes=1048576")
    assert topics(dev, "create", "--topic", topic, *[x for c in configs for x in ("--config", c)]).returncode == 0
    doc = describe_json(dev, topic)
    screen = on_a_terminal("topics", "describe", "--topic", topic, "--bootstrap-server", dev.bootstrap)
    assert "┏" in screen and "┃ Topic" in screen and "\t" not in screen
    # 80 columns are too few for the row: cells are folded onto more lines, never cut ("…").
    assert "…" not in screen
    # The Topics table's body: each column's pieces, line after line, joined again.
    body = screen[screen.index("┡"):screen.index("└")].splitlines()[1:]
    columns = ["".join(piece.strip() for piece in pieces) for pieces in
               zip(*(line.strip().strip("│").split("│") for line in body), strict=True)]
    assert columns[:4] == [topic, doc["id"], "1", "1"]
    assert all(c in columns[4] for c in configs), columns[4]
    piped = tables(topics(dev, "describe", "--topic", topic).stdout)
    assert piped["Topics"] == [{"Topic": topic, "TopicId": doc["id"], "PartitionCount": "1",
                                "ReplicationFactor": "1",
                                "Configs": ",".join(sorted([*configs, "min.insync.replicas=1"]))}]


def test_list_excludes_internal_topics_on_request(dev):
    from confluent_kafka import Consumer, TopicPartition

    topic = name()
    assert topics(dev, "create", "--topic", topic).returncode == 0
    # A group's first commit makes the coordinator's topic, __consumer_offsets.
    consumer = Consumer({"bootstrap.servers": dev.bootstrap, "group.id": name("g"), "log_level": 0})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    names = json.loads(topics(dev, "list", "--json").stdout)
    assert "__consumer_offsets" in names and topic in names
    assert names == sorted(names)
    without = json.loads(topics(dev, "list", "--json", "--exclude-internal").stdout)
    assert "__consumer_offsets" not in without and topic in without


def test_replica_assignment_parsing():
    assert parse_replica_assignment("4:5,5:6, 6:4") == [[4, 5], [5, 6], [6, 4]]
    assert parse_replica_assignment("1") == [[1]]
    runner = CliRunner()
    result = runner.invoke(app, ["topics", "create", "--topic", "x", "--replica-assignment", "1:2,3",
                                 "--bootstrap-server", "127.0.0.1:1"])
    assert result.exit_code == 2
