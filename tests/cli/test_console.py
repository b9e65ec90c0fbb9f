"""`kraftpy console produce | consume` against a real `kraftpy dev`.

One `kraftpy dev` serves the module; each test has its own topics. The commands run as
subprocesses: produce is fed on stdin (or a file) and checked by reading the topic with an ordinary
consumer; consume reads what an ordinary producer wrote, and its group's commits are read back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid

import pytest

from kraftpy.cli.main import app
from tests.helpers.cli_runner import CliRunner
from tests.helpers.deployments import DevDeployment, create_topics
from tests.helpers.processes import free_ports, interruptible
from tests.helpers.terminal import run_on_terminal

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import NewTopic  # noqa: E402

from tests.helpers import forkserver  # noqa: E402

QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    with DevDeployment(tmp_path_factory.mktemp("console") / "dev") as deployment:
        yield deployment


def make_topic(dev, partitions: int = 1) -> str:
    topic = f"c-{uuid.uuid4().hex[:8]}"
    create_topics(dev.bootstrap, [NewTopic(topic, partitions, 1)])
    return topic


def console(dev, *args: object, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return forkserver.run(["console", *(str(a) for a in args),
                           "--bootstrap-server", dev.bootstrap],
                          input=stdin, capture_output=True, timeout=90)


def read_all(dev, topic: str, count: int) -> list[ck.Message]:
    c = ck.Consumer({"bootstrap.servers": dev.bootstrap, "group.id": "test-reader", **QUIET})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    out: list[ck.Message] = []
    while len(out) < count:
        msg = c.poll(10)
        assert msg is not None, f"read {len(out)} of {count}"
        if msg.error() is None:
            out.append(msg)
    c.close()
    return out


def produce(dev, topic: str, records: list[tuple[bytes | None, bytes, list | None]], timestamp: int) -> None:
    producer = ck.Producer({"bootstrap.servers": dev.bootstrap, **QUIET})
    for key, value, headers in records:
        producer.produce(topic, value=value, key=key, headers=headers, partition=0, timestamp=timestamp)
    assert producer.flush(30) == 0


def committed(dev, group: str, topic: str) -> int:
    c = ck.Consumer({"bootstrap.servers": dev.bootstrap, "group.id": group, **QUIET})
    [tp] = c.committed([ck.TopicPartition(topic, 0)], timeout=20)
    c.close()
    return tp.offset


def test_produce_keys_headers_and_separators(dev):
    topic = make_topic(dev)
    lines = b"h1:a,h2:b\tk1:v1\n\tk2:v2:with:colons\nh3:c\tk3:\n"
    result = console(dev, "produce", "--topic", topic, "--property", "parse.key=true", "--property",
                     "key.separator=:", "--property", "parse.headers=true", "--compression-codec", "gzip",
                     "--request-required-acks", "all", stdin=lines)
    assert result.returncode == 0, result.stderr
    records = read_all(dev, topic, 3)
    assert [(m.key(), m.value(), m.headers()) for m in records] == [
        (b"k1", b"v1", [("h1", b"a"), ("h2", b"b")]),
        (b"k2", b"v2:with:colons", None),
        (b"k3", b"", [("h3", b"c")]),
    ]


def test_produce_a_bad_line_stops_with_its_number(dev, tmp_path):
    topic = make_topic(dev)
    path = tmp_path / "lines.txt"
    path.write_bytes(b"a=1\nno separator here\nb=2\n")
    result = console(dev, "produce", "--topic", topic, "--file", path, "--property", "parse.key=true",
                     "--property", "key.separator==")
    assert result.returncode == 1
    assert result.stderr.decode().strip() == "kraftpy: line 2: no key separator '=' found"
    # The line before the bad one was sent.
    assert [(m.key(), m.value()) for m in read_all(dev, topic, 1)] == [(b"a", b"1")]


def test_consume_prints_what_the_properties_ask(dev):
    topic = make_topic(dev)
    produce(dev, topic, [(b"k0", b"v0", [("h", b"x"), ("n", None)]), (None, b"v1", None), (b"k2", b"v2", None)],
            timestamp=1_700_000_000_123)
    result = console(dev, "consume", "--topic", topic, "--from-beginning", "--max-messages", 2,
                     "--property", "print.key=true", "--property", "print.timestamp=true",
                     "--property", "print.partition=true", "--property", "print.offset=true",
                     "--property", "print.headers=true", "--property", "key.separator= | ")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == [
        "CreateTime:1700000000123 | Partition:0 | Offset:0 | h:x,n:null | k0 | v0",
        "CreateTime:1700000000123 | Partition:0 | Offset:1 | NO_HEADERS | null | v1",
    ]
    assert result.stderr.decode() == "Processed a total of 2 messages\n"
    # --partition with --offset starts there; the value alone by default.
    result = console(dev, "consume", "--topic", topic, "--partition", 0, "--offset", 2, "--max-messages", 1)
    assert result.returncode == 0 and result.stdout == b"v2\n"


def test_json_prints_one_object_per_record_and_a_produce_summary(dev):
    topic = make_topic(dev)
    sent = console(dev, "produce", "--topic", topic, "--property", "parse.key=true", "--json",
                   stdin=b"k0\tv0\nk1\tv1\n")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == {"topic": topic, "records_delivered": 2}
    produce(dev, topic, [(None, b"\xff\xfe", [("h", b"x"), ("n", None)])], timestamp=1_700_000_000_123)
    result = console(dev, "consume", "--topic", topic, "--from-beginning", "--max-messages", 3, "--json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert [(r["offset"], r["key"], r.get("value")) for r in lines[:2]] == [(0, "k0", "v0"), (1, "k1", "v1")]
    assert lines[2] == {"topic": topic, "partition": 0, "offset": 2, "timestamp": 1_700_000_000_123,
                        "headers": [{"key": "h", "value": "x"}, {"key": "n", "value": None}],
                        "key": None, "value_base64": "//4="}


def test_command_config_is_the_client_settings_file(dev, tmp_path):
    topic = make_topic(dev)
    settings = tmp_path / "client.properties"
    settings.write_text("message.max.bytes=1000\n")
    # The same file under Kafka's older console names and under the admin commands' --command-config.
    for flag in ("--command-config", "--producer.config"):
        refused = console(dev, "produce", "--topic", topic, flag, settings, stdin=b"x" * 2000 + b"\n")
        assert refused.returncode == 1, (flag, refused.stderr)
        assert refused.stderr.decode().startswith(f"kraftpy: topic {topic}: MSG_SIZE_TOO_LARGE"), refused.stderr
    missing = console(dev, "consume", "--topic", topic, "--command-config", tmp_path / "none.properties")
    assert missing.returncode == 2
    assert missing.stderr.decode() == (f"kraftpy: --command-config={tmp_path / 'none.properties'}: cannot read: "
                                       "No such file or directory\n")


def test_consume_in_a_group_commits_what_it_printed(dev):
    topic = make_topic(dev)
    produce(dev, topic, [(None, f"v{i}".encode(), None) for i in range(5)], timestamp=0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = console(dev, "consume", "--topic", topic, "--group", group, "--from-beginning", "--max-messages", 3)
    assert first.returncode == 0, first.stderr
    assert first.stdout == b"v0\nv1\nv2\n"
    assert committed(dev, group, topic) == 3
    second = console(dev, "consume", "--topic", topic, "--group", group, "--max-messages", 2)
    assert second.returncode == 0, second.stderr
    assert second.stdout == b"v3\nv4\n"
    assert committed(dev, group, topic) == 5


def test_ctrl_c_ends_cleanly_with_the_count(dev):
    topic = make_topic(dev)
    produce(dev, topic, [(None, f"v{i}".encode(), None) for i in range(4)], timestamp=0)
    process = subprocess.Popen(
        [sys.executable, "-m", "kraftpy", "console", "consume", "--topic", topic, "--from-beginning",
         "--bootstrap-server", dev.bootstrap], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=interruptible)
    try:
        assert process.stdout is not None and process.stderr is not None
        lines = [process.stdout.readline() for _ in range(4)]  # waits for each record to be printed
        assert lines == [b"v0\n", b"v1\n", b"v2\n", b"v3\n"]
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
        assert process.stderr.read() == b"Processed a total of 4 messages\n"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_timeout_and_errors(dev):
    topic = make_topic(dev)
    idle = console(dev, "consume", "--topic", topic, "--timeout-ms", 300)
    assert idle.returncode == 0 and idle.stdout == b""
    assert idle.stderr == b"Processed a total of 0 messages\n"

    missing = console(dev, "consume", "--topic", "no-such-topic", "--max-messages", 1)
    assert missing.returncode == 1
    assert missing.stderr.decode().splitlines()[-1] == (
        "kraftpy: topic no-such-topic: UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist")

    port = free_ports(1)[0]
    unreachable = forkserver.run(["console", "produce", "--topic", topic, "--bootstrap-server",
                                  f"127.0.0.1:{port}"], input=b"x\n", capture_output=True, timeout=60)
    assert unreachable.returncode == 3
    assert unreachable.stderr.decode().startswith(f"kraftpy: no broker answered at 127.0.0.1:{port}: ")
    assert unreachable.stderr.count(b"\n") == 1


def test_usage_errors_exit_2():
    runner = CliRunner()
    for args, message in [
        (["consume", "--topic", "t", "--offset", "3"], "--offset needs --partition"),
        (["consume", "--topic", "t", "--property", "print.colour=true"], "--property print.colour=true"),
        (["consume", "--topic", "t", "--property", "print.key=yes"], "expected true or false"),
        (["consume", "--topic", "t", "--isolation-level", "dirty"], "--isolation-level=dirty"),
        (["produce", "--topic", "t", "--compression-codec", "brotli"], "--compression-codec=brotli"),
        (["produce", "--topic", "t", "--request-required-acks", "2"], "--request-required-acks=2"),
    ]:
        result = runner.invoke(app, ["console", *args, "--bootstrap-server", "127.0.0.1:1"])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)


@pytest.mark.slow
def test_progress_bar_when_producing_a_large_file_on_a_terminal(dev, tmp_path):
    topic = make_topic(dev)
    path = tmp_path / "big.txt"
    count = 11_000
    path.write_bytes(b"".join(b"%06d" % i + b"x" * 94 + b"\n" for i in range(count)))  # 1.1 MB
    run = run_on_terminal("console", "produce", "--topic", topic, "--file", path, "--bootstrap-server", dev.bootstrap,
                          timeout=60)
    assert run.returncode == 0
    screen = run.screen
    assert "produce" in screen and "━" in screen  # the bar's label and its track
    c = ck.Consumer({"bootstrap.servers": dev.bootstrap, "group.id": "count", **QUIET})
    low, high = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
    c.close()
    assert (low, high) == (0, count)
