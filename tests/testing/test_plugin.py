"""The pytest plugin, in pytest sessions of their own: the fixtures, their options in the ini file and on
the command line, a cluster per pytest-xdist worker, nothing done until a test asks, bad options refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kraftpy.testing import plugin
from tests.helpers.inner_pytest import InnerSuite, leftovers

pytestmark = pytest.mark.slow

FIXTURES = '''
import os

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from inner_support import cluster_facts, report_file


def produce_and_read(bootstrap, topic, values):
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    seen = []
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.append(message.value())
        elif len(seen) >= len(values):
            break
    consumer.close()
    return seen


def test_a_topic_of_its_own(kraftpy_cluster, kraftpy_topic, tmp_path_factory):
    topic = kraftpy_topic()
    assert topic.startswith("test_a_topic_of_its_own-")
    info = kraftpy_cluster.describe_topic(topic)
    # kraftpy_config = num.partitions=3 in pytest.ini; two brokers, so two replicas by default
    assert len(info.partitions) == 3 and all(len(p.replicas) == 2 for p in info.partitions)
    assert sorted(produce_and_read(kraftpy_cluster.bootstrap_servers, topic, [b"a1", b"a2"])) == [b"a1", b"a2"]
    assert kraftpy_cluster.data_dir.parent == tmp_path_factory.getbasetemp()
    report_file("a", topic=topic, brokers=len(kraftpy_cluster.brokers), worker=os.environ["PYTEST_XDIST_WORKER"],
                **cluster_facts(kraftpy_cluster))


def test_b_another_topic_sees_only_its_records(kraftpy_cluster, kraftpy_topic):
    compacted = kraftpy_topic(partitions=1, config={"cleanup.policy": "compact"})
    topic = kraftpy_topic()
    assert compacted != topic and len(kraftpy_cluster.describe_topic(compacted).partitions) == 1
    assert produce_and_read(kraftpy_cluster.bootstrap_servers, topic, [b"b1"]) == [b"b1"]
    kraftpy_cluster.broker(2).kill()  # a fault: the plugin restores the cluster after this test
    report_file("b", topic=topic)


def test_c_finds_the_cluster_restored(kraftpy_cluster):
    assert [(b.state, b.isolated) for b in kraftpy_cluster.brokers] == [("running", False)] * 2
    report_file("c", pid=kraftpy_cluster.broker(2).pid)
'''


OTHER = '''
import os
from inner_support import cluster_facts, report_file

def test_in_another_worker(kraftpy_cluster, kraftpy_topic):
    kraftpy_topic()
    report_file("other", worker=os.environ["PYTEST_XDIST_WORKER"], **cluster_facts(kraftpy_cluster))
'''


def test_the_fixtures_with_ini_options_and_a_cluster_per_xdist_worker(tmp_path: Path):
    suite = InnerSuite(tmp_path, {"test_fixtures.py": FIXTURES, "test_other.py": OTHER}, ini="""
        kraftpy_brokers = 2
        kraftpy_config =
            num.partitions=3
            broker.session.timeout.ms=1500
    """)
    code, out, _ = suite.run("-p", "xdist", "-n", "2", "--dist", "loadfile")
    assert code == 0, out
    a, b, c, other = (json.loads((suite.reports / f"{name}.json").read_text()) for name in ("a", "b", "c", "other"))
    assert a["brokers"] == 2 and a["topic"] != b["topic"]
    assert c["pid"] != a["processes"]["broker-2"]  # broker 2 was started again after test b killed it
    assert {a["worker"], other["worker"]} == {"gw0", "gw1"}
    assert a["bootstrap"] != other["bootstrap"] and a["processes"]["supervisor"] != other["processes"]["supervisor"]
    for facts in (a, other):
        directory = Path(facts["directory"])
        assert directory.is_relative_to(suite.basetemp) and directory.parent.name == f"popen-{facts['worker']}"
        assert not leftovers(facts), leftovers(facts)


LAZY = '''
import os, sys
from inner_support import report

def test_without_the_fixtures():
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                        children.append(int(entry))
            except OSError:
                pass
    report(plugin="kraftpy.testing.plugin" in sys.modules, children=children,
           heavy=sorted(m for m in ("kraftpy.node", "kraftpy.testing._config", "kraftpy.config", "kraftpy.admin")
                        if m in sys.modules))
'''


def test_the_plugin_does_nothing_until_a_test_asks_for_a_fixture(tmp_path: Path):
    code, out, (facts,) = InnerSuite(tmp_path, {"test_lazy.py": LAZY}).run()
    assert code == 0, out
    assert facts == {"plugin": True, "children": [], "heavy": []}


class Options:
    """What `plugin._settings` reads of a pytest config: the command line's options and the ini file's."""

    def __init__(self, options: dict | None = None, ini: dict | None = None) -> None:
        self.options = {"kraftpy_brokers": None, "kraftpy_config": [], "kraftpy_keep": False, **(options or {})}
        self.ini = {"kraftpy_brokers": "1", "kraftpy_config": [], **(ini or {})}

    def getoption(self, name: str):
        return self.options[name]

    def getini(self, name: str):
        return self.ini[name]


def test_options_the_command_line_wins_over_the_ini_file():
    settings = plugin._settings(Options({"kraftpy_brokers": "3", "kraftpy_config": ["num.partitions=4"]},
                                        {"kraftpy_brokers": "2", "kraftpy_config": ["num.partitions=3",
                                                                                      "log_retention_ms=5"]}))
    assert settings == plugin.Settings(3, {"num.partitions": "4", "log.retention.ms": "5"}, False)
    assert plugin._settings(Options()) == plugin.Settings(1, {}, False)


@pytest.mark.parametrize(("options", "ini", "message"), [
    ({"kraftpy_brokers": "none"}, {}, "--kraftpy-brokers=none: the number of brokers is a whole number, at least 1"),
    ({}, {"kraftpy_brokers": "0"}, "kraftpy_brokers=0: the number of brokers is a whole number, at least 1"),
    ({"kraftpy_config": ["num.partitions"]}, {}, "--kraftpy-config: 'num.partitions' is not KEY=VALUE"),
    ({}, {"kraftpy_config": ["num.partitions=many"]}, "kraftpy_config: num.partitions=many: not an integer"),
    ({"kraftpy_config": ["node.id=7"]}, {}, "kraftpy_config: node.id=7: set by kraftpy.testing itself"),
    ({"kraftpy_config": ["log.retension.ms=7"]}, {},
     "kraftpy_config: log.retension.ms=7: not a kraftpy configuration key"),
])
def test_a_bad_option_names_the_option_and_the_value(options, ini, message):
    with pytest.raises(pytest.UsageError) as refused:
        plugin._settings(Options(options, ini))
    assert str(refused.value).startswith(message)


def test_pytest_stops_on_a_bad_option_before_any_test(tmp_path: Path):
    code, out, _ = InnerSuite(tmp_path, {"test_lazy.py": LAZY}).run("--kraftpy-brokers", "none")
    assert code == pytest.ExitCode.USAGE_ERROR, out
    assert "ERROR: --kraftpy-brokers=none: the number of brokers is a whole number, at least 1" in out
