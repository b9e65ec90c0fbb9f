"""The runner's parts that need no brokers: the cluster plan, the configuration files (validated by
kraftpy's own loader), the schedule file, the process handling, and the clear failure when the
kraftpy command cannot start brokers."""

from __future__ import annotations

import json
import logging
import re
import shlex
import sys

import pytest

from kraftpy.config.loader import load_config
from kraftpy.ids import uuid_from_str
from tests.jepsen import nemesis as nm
from tests.jepsen import runner


def test_plan_netns_layout(tmp_path):
    plan = runner.plan_cluster(tmp_path, seed=7, network="netns")
    assert [n.name for n in plan.nodes] == ["c1", "c2", "c3", "b1", "b2", "b3"]
    assert [n.node_id for n in plan.nodes] == [1, 2, 3, 101, 102, 103]
    assert [n.host for n in plan.nodes] == [f"10.77.0.{10 + k}" for k in range(6)]
    assert plan.voters == "1@10.77.0.10:9093,2@10.77.0.11:9093,3@10.77.0.12:9093"
    assert plan.bootstrap == "10.77.0.13:9092,10.77.0.14:9092,10.77.0.15:9092"
    net = nm.NetnsNetwork([n.name for n in plan.nodes])
    assert all(net.addresses[n.name] == n.host for n in plan.nodes)


def test_plan_proxy_layout_routes_every_node_through_the_proxy(tmp_path):
    plan = runner.plan_cluster(tmp_path, seed=7, network="proxy", controllers=3, brokers=4, base_port=21000)
    assert plan.voters == "1@127.0.0.1:21100,2@127.0.0.1:21101,3@127.0.0.1:21102"
    assert plan.bootstrap.split(",")[0] == "127.0.0.1:21103"
    routes = plan.proxy_routes()
    assert [(r.node, r.listen, r.target) for r in routes][3] == ("b1", ("127.0.0.1", 21103), ("127.0.0.1", 21003))
    none = runner.plan_cluster(tmp_path, seed=7, network="none", base_port=21000)
    assert none.voters == "1@127.0.0.1:21000,2@127.0.0.1:21001,3@127.0.0.1:21002"


def test_plan_rejects_impossible_clusters(tmp_path):
    with pytest.raises(ValueError, match="replication factor 3"):
        runner.plan_cluster(tmp_path, seed=1, brokers=2)
    with pytest.raises(ValueError, match="network"):
        runner.plan_cluster(tmp_path, seed=1, network="carrier-pigeon")


def test_cluster_id_is_a_seeded_uuid():
    assert runner.cluster_id_for(7) == runner.cluster_id_for(7) != runner.cluster_id_for(8)
    assert len(uuid_from_str(runner.cluster_id_for(7))) == 16


@pytest.mark.parametrize("network", ["netns", "proxy", "none"])
def test_configs_are_valid_kraftpy_configs(tmp_path, network):
    plan = runner.plan_cluster(tmp_path, seed=3, network=network)
    paths = runner.write_configs(plan)
    assert len(paths) == 6
    for node in plan.nodes:
        config = load_config(node.config)
        assert config.unknown == ()
        assert config.node_id == node.node_id
        assert config.roles == frozenset([node.role])
        assert [(v.node_id, v.host, v.port) for v in config.voters] == [
            (c.node_id, c.advertised_host, c.advertised_port) for c in plan.controllers]
        assert config["min.insync.replicas"] == 2
        assert config["default.replication.factor"] == 3
        assert config["num.partitions"] == 3
        assert config["offsets.topic.num.partitions"] == 50 and config["offsets.topic.replication.factor"] == 3
        assert config["unclean.leader.election.enable"] is False
        assert config.log_dirs == [node.data_dir]
        assert node.data_dir.is_dir()
        if node.role == "broker":
            (listener,) = config.broker_listeners
            assert (listener.host, listener.port) == (node.host, node.port)
            (advertised,) = config.advertised_listeners
            assert (advertised.host, advertised.port) == (node.advertised_host, node.advertised_port)
        else:
            assert (config.controller_listener.host, config.controller_listener.port) == (node.host, node.port)


def test_dry_run_writes_configs_and_a_reproducible_schedule(tmp_path):
    args = ["--time-limit", "120", "--nemesis", "kill,partition", "--seed", "7", "--network", "proxy",
            "--dry-run"]
    assert runner.main([*args, "--out", str(tmp_path / "a")]) == 0
    assert runner.main([*args, "--out", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "schedule.json").read_text())
    b = json.loads((tmp_path / "b" / "schedule.json").read_text())
    assert a == b
    assert a["seed"] == 7 and a["nemesis"] == ["kill", "partition"] and a["network"] == "proxy"
    assert {f["kind"] for f in a["faults"]} == {"kill", "partition"}
    assert a["faults"][-1]["stop"] <= 120
    assert sorted(p.name for p in (tmp_path / "a" / "config").iterdir()) == [
        f"{n}.properties" for n in ("b1", "b2", "b3", "c1", "c2", "c3")]
    assert runner.main([*args[:-3], "--seed", "8", "--out", str(tmp_path / "c"), "--network", "proxy",
                        "--dry-run"]) == 0
    c = json.loads((tmp_path / "c" / "schedule.json").read_text())
    assert c["faults"] != a["faults"]


def test_network_faults_need_a_network_backend(tmp_path):
    with pytest.raises(runner.HarnessError, match="network backend"):
        runner.choose_network("none", ["kill", "link"])
    assert runner.choose_network("none", ["kill", "pause"]) == "none"
    assert runner.choose_network("auto", []) in ("netns", "proxy")


def test_unknown_nemesis_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        runner.main(["--nemesis", "meteor", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "unknown nemesis 'meteor'" in capsys.readouterr().err


FAKE_KRAFTPY_WITHOUT_BROKER = """
import sys
if sys.argv[1] in ("storage", "controller"):
    sys.exit(0)
print("Usage: kraftpy [OPTIONS] COMMAND [ARGS]...", file=sys.stderr)
print("Error: No such command '%s'." % sys.argv[1], file=sys.stderr)
sys.exit(2)
"""


def test_a_kraftpy_without_brokers_fails_clearly(tmp_path, capsys):
    fake = tmp_path / "fake_kraftpy.py"
    fake.write_text(FAKE_KRAFTPY_WITHOUT_BROKER)
    cmd = [sys.executable, str(fake)]
    with pytest.raises(runner.HarnessError, match=r"`kraftpy broker` is not available .*No such command 'broker'"):
        runner.check_kraftpy(cmd)
    code = runner.main(["--time-limit", "5", "--nemesis", "kill", "--seed", "1", "--network", "none",
                        "--out", str(tmp_path / "run"), "--kraftpy", shlex.join(cmd)])
    assert code == 2
    assert "`kraftpy broker` is not available" in capsys.readouterr().err
    assert "`kraftpy broker` is not available" in (tmp_path / "run" / "runner.log").read_text()


def test_the_real_kraftpy_command_passes_the_check():
    cmd = runner.default_kraftpy()
    assert cmd == [sys.executable, "-m", "kraftpy"]
    assert runner.check_kraftpy(cmd) is None  # storage, controller and broker all answer --help


FAKE_NODE = """
import signal, sys
print("node", " ".join(sys.argv[1:]), flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    signal.pause()
"""


def test_process_cluster_starts_restarts_and_stops_nodes(tmp_path):
    fake = tmp_path / "fake_node.py"
    fake.write_text(FAKE_NODE)
    plan = runner.plan_cluster(tmp_path / "run", seed=1, network="none", controllers=1, brokers=3)
    runner.write_configs(plan)
    cluster = runner.ProcessCluster(plan, [sys.executable, str(fake)], topic="t", log=lambda s: None)
    try:
        cluster.start_all()
        assert len(cluster.pids()) == 4
        nemesis = nm.Nemesis(cluster)
        fault = nm.Fault(0, "kill", "one", 0, 1, nodes=("b2",))
        old_pid = cluster.node("b2").process.pid
        nemesis.start(fault)
        assert cluster.exited() == ["b2 (exit -9)"]
        nemesis.stop(fault)
        assert cluster.exited() == [] and cluster.node("b2").process.pid != old_pid
        assert cluster.node("b2").starts == 2
        nemesis.start(nm.Fault(1, "pause", "one", 0, 1, nodes=("c1",)))
    finally:
        cluster.stop_all()  # also continues paused nodes
    # terminated (a node may get SIGTERM before its handler is installed), none killed after a timeout
    assert all(n.process.returncode in (0, -15) for n in cluster.nodes())
    log = (plan.out / "logs" / "b2.log").read_text()
    assert log.count("--- start") == 2
    assert f"fake_node.py broker --config {plan.node('b2').config}" in log


def test_send_errors_are_classified():
    assert runner.classify_send_error("_MSG_TIMED_OUT") == "info"
    assert runner.classify_send_error("NOT_ENOUGH_REPLICAS_AFTER_APPEND") == "info"
    assert runner.classify_send_error("_UNKNOWN_PARTITION") == "fail"
    assert runner.classify_send_error("MSG_SIZE_TOO_LARGE") == "fail"
    assert runner.decode_value(b"42") == 42
    assert runner.decode_value(b"junk") == "junk"


#: The workload's keys under the names librdkafka reports them by.
LIBRDKAFKA_NAMES = {"bootstrap.servers": "metadata.broker.list", "acks": "request.required.acks",
                    "linger.ms": "queue.buffering.max.ms", "retries": "message.send.max.retries"}


def librdkafka_settings(make_client, config, serve_logs):
    """The properties a client holds after construction, as librdkafka itself reports them (its
    `debug=conf` dump of every property that was set), keyed by librdkafka's names."""
    lines = []

    class Capture(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger("tests.jepsen.librdkafka-conf")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = Capture()
    logger.addHandler(handler)
    try:
        client = make_client({**config, "logger": logger, "debug": "conf"})
        serve_logs(client)
    finally:
        logger.removeHandler(handler)
    return dict(m.groups() for line in lines if (m := re.match(r"CONF .*?:   (\S+) = (.*)$", line)))


def as_librdkafka(config):
    """``config`` (without its logger) as librdkafka prints it: its names, its spelling of values."""

    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return "-1" if v == "all" else str(v)

    return {LIBRDKAFKA_NAMES.get(k, k): value(v) for k, v in config.items() if k not in ("logger", "debug")}


def test_client_configs_are_accepted_by_librdkafka(tmp_path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    plan = runner.plan_cluster(tmp_path, seed=1, network="none", base_port=1)  # nothing listens there
    workload = runner.Workload(plan, recorder=None, topic="t", seed=1, producers=1, consumers=1,
                               op_timeout=5, log=lambda s: None)
    producer_config = workload.producer_config()
    consumer_config = workload.consumer_config(0)
    assert producer_config["logger"] is consumer_config["logger"] is runner.CLIENT_LOGGER

    held = librdkafka_settings(confluent_kafka.Producer, producer_config, lambda p: p.flush(0))
    expected = as_librdkafka(producer_config)
    assert {k: held.get(k) for k in expected} == expected  # every setting arrived, none was changed
    assert held["message.timeout.ms"] == "5000" and held["request.required.acks"] == "-1"
    assert held["enable.idempotence"] == "true"
    assert producer_config["debug"] == "eos"  # (librdkafka_settings asks for its own debug context)

    def close(consumer):
        consumer.poll(0)
        consumer.close()

    held = librdkafka_settings(confluent_kafka.Consumer, consumer_config, close)
    expected = as_librdkafka(consumer_config)
    assert {k: held.get(k) for k in expected} == expected
    assert held["group.id"] == "jepsen-1-0" and held["auto.offset.reset"] == "error"

    # The check is real: librdkafka refuses a key it does not know and a value it cannot parse.
    with pytest.raises(confluent_kafka.KafkaException, match="No such configuration property"):
        confluent_kafka.Producer({**producer_config, "no.such.property": 1})
    with pytest.raises(confluent_kafka.KafkaException, match="request.required.acks"):
        confluent_kafka.Producer({**producer_config, "acks": "most"})


def test_a_membership_campaign_plans_a_dynamic_quorum(tmp_path):
    """`--nemesis membership` (and `all`): every node finds the quorum through
    controller.quorum.bootstrap.servers, and the controllers are formatted with every controller as an
    initial voter (directory ids from the cluster id, the same for the same seed)."""
    plan = runner.plan_cluster(tmp_path, seed=3, network="none", base_port=21000, dynamic=True)
    runner.write_configs(plan)
    for node in plan.nodes:
        config = load_config(node.config)
        assert config.voters == [] and config.is_dynamic_quorum
        assert config.quorum_bootstrap_servers == [("127.0.0.1", p) for p in (21000, 21001, 21002)]
    (c1, c2, c3), brokers = plan.controllers, plan.brokers
    args = runner.quorum_format_args(c2, plan)
    assert args[0] == "--initial-controllers" and args[1] == ",".join(
        f"{c.node_id}@127.0.0.1:{c.port}:{plan.directory_id(c)}" for c in (c1, c2, c3))
    assert all(len(uuid_from_str(plan.directory_id(c))) == 16 for c in (c1, c2, c3))
    assert runner.quorum_format_args(brokers[0], plan) == []
    static = runner.plan_cluster(tmp_path, seed=3, network="none", base_port=21000)
    assert runner.quorum_format_args(static.controllers[0], static) == []
    assert runner.main(["--nemesis", "membership", "--seed", "3", "--network", "none", "--dry-run",
                        "--out", str(tmp_path / "m")]) == 0
    schedule = json.loads((tmp_path / "m" / "schedule.json").read_text())
    assert {f["kind"] for f in schedule["faults"]} == {"membership"}
    assert "controller.quorum.bootstrap.servers" in (tmp_path / "m" / "config" / "b1.properties").read_text()
