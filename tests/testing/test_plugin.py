"""The pytest plugin, in pytest sessions of their own: the fixtures, their options in the ini file and on
the command line, a cluster per pytest-xdist worker, nothing done until a test asks, bad options refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.inner_pytest import InnerSuite, leftovers

pytestmark = pytest.mark.slow

FIXTURES = '''
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from inner_support import cluster_facts, report


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
    report(test="a", topic=topic, brokers=len(kraftpy_cluster.brokers), **cluster_facts(kraftpy_cluster))


def test_b_another_topic_sees_only_its_records(kraftpy_cluster, kraftpy_topic):
    compacted = kraftpy_topic(partitions=1, config={"cleanup.policy": "compact"})
    topic = kraftpy_topic()
    assert compacted != topic and len(kraftpy_cluster.describe_topic(compacted).partitions) == 1
    assert produce_and_read(kraftpy_cluster.bootstrap_servers, topic, [b"b1"]) == [b"b1"]
    kraftpy_cluster.broker(2).kill()  # a fault: the plugin restores the cluster after this test
    report(test="b", topic=topic)


def test_c_finds_the_cluster_restored(kraftpy_cluster):
    assert [(b.state, b.isolated) for b in kraftpy_cluster.brokers] == [("running", False)] * 2
    report(test="c", pid=kraftpy_cluster.broker(2).pid)
'''


def test_the_fixtures_with_options_from_the_ini_file(tmp_path: Path):
    suite = InnerSuite(tmp_path, {"test_fixtures.py": FIXTURES}, ini="""
        kraftpy_brokers = 2
        kraftpy_config =
            num.partitions=3
            broker.session.timeout.ms=1500
    """)
    code, out, reports = suite.run()
    assert code == 0, out
    a, b, c = reports
    assert a["brokers"] == 2 and a["topic"] != b["topic"]
    assert Path(a["directory"]).is_relative_to(suite.basetemp)
    assert c["pid"] != a["processes"]["broker-2"]  # broker 2 was started again after test b
    assert not leftovers(a), leftovers(a)


XDIST = '''
import os
from inner_support import cluster_facts, report_file

def test_{name}(kraftpy_cluster, kraftpy_topic):
    kraftpy_topic()
    report_file("{name}", worker=os.environ["PYTEST_XDIST_WORKER"], **cluster_facts(kraftpy_cluster))
'''


def test_each_xdist_worker_gets_a_cluster_of_its_own(tmp_path: Path):
    suite = InnerSuite(tmp_path, {"test_one.py": XDIST.format(name="one"), "test_two.py": XDIST.format(name="two")})
    code, out, _ = suite.run("-p", "xdist", "-n", "2", "--dist", "loadfile", "--kraftpy-brokers", "1")
    assert code == 0, out
    one, two = (json.loads((suite.reports / f"{name}.json").read_text()) for name in ("one", "two"))
    assert {one["worker"], two["worker"]} == {"gw0", "gw1"}
    assert one["bootstrap"] != two["bootstrap"] and one["processes"]["supervisor"] != two["processes"]["supervisor"]
    for facts in (one, two):
        assert Path(facts["directory"]).parent.name == f"popen-{facts['worker']}"  # its worker's own tmp dir
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


def test_bad_options_are_refused_naming_the_option_and_the_value(tmp_path: Path):
    suite = InnerSuite(tmp_path, {"test_lazy.py": LAZY})
    for args, message in [
        (["--kraftpy-brokers", "none"], "--kraftpy-brokers=none: the number of brokers is a whole number, at least 1"),
        (["--kraftpy-config", "num.partitions"], "--kraftpy-config: 'num.partitions' is not KEY=VALUE"),
        (["--kraftpy-config", "num.partitions=many"], "kraftpy_config: num.partitions=many: not an integer"),
        (["--kraftpy-config", "node.id=7"], "kraftpy_config: node.id=7: set by kraftpy.testing itself"),
    ]:
        code, out, _ = suite.run(*args)
        assert code == pytest.ExitCode.USAGE_ERROR and f"ERROR: {message}" in out, out
