"""`kraftpy cluster describe`, `kraftpy features describe|upgrade|downgrade|disable`, `kraftpy quorum status`, `kraftpy cluster unregister`'s errors, and the `kraftpy topics` behaviour that needs
several brokers (replica placement, the partition filters after a broker dies), on a 3+3 cluster.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from kraftpy.ids import Uuid
from kraftpy.metadata.cluster_describe import broker_state
from kraftpy.metadata.image import BrokerRegistration
from tests.helpers import forkserver
from tests.helpers.deployments import ProcessCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ProcessCluster(tmp_path_factory.mktemp("admin-cluster"), log_level="info") as c:
        yield c


def kraftpy(*args: object) -> subprocess.CompletedProcess:
    return forkserver.run([*(str(a) for a in args)], capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def controllers(cluster, first: int | None = None) -> str:
    ids = sorted(cluster.voters, key=lambda i: i != first)
    return ",".join(f"{cluster.voters[i][0]}:{cluster.voters[i][1]}" for i in ids)


def describe(cluster, *source: object) -> dict:
    result = kraftpy("cluster", "describe", *source, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def until(check, attempts: int = 40):
    """Ask again (each ask is a process run) until ``check()`` is truthy: the brokers' metadata follows
    the controller's by a moment."""
    for _ in range(attempts):
        found = check()
        if found:
            return found
    raise AssertionError("never held")


def test_cluster_and_features_from_brokers_and_the_active_controller(cluster):
    by_broker = until(lambda: (d := describe(cluster, "--bootstrap-server", cluster.bootstrap))
                      and len(d["brokers"]) == 3 and d)
    assert [(b["id"], b["state"]) for b in by_broker["brokers"]] == [(4, "Running"), (5, "Running"), (6, "Running")]
    assert [f"{b['host']}:{b['port']}" for b in by_broker["brokers"]] == [
        f"127.0.0.1:{cluster.broker_ports[i]}" for i in (4, 5, 6)]

    active = cluster.active_controller()
    follower = next(i for i in cluster.voters if i != active)
    # Asked of a controller that is not active first: it points at the one that is.
    by_controller = describe(cluster, "--bootstrap-controller", controllers(cluster, first=follower))
    assert by_controller["controller_id"] == active
    assert by_controller["cluster_id"] == by_broker["cluster_id"]
    assert [(b["id"], b["state"]) for b in by_controller["brokers"]] == [(4, "Running"), (5, "Running"),
                                                                         (6, "Running")]
    assert all(b["epoch"] > 0 for b in by_controller["brokers"])
    assert [c["id"] for c in by_controller["controllers"]] == [1, 2, 3]

    piped = kraftpy("cluster", "describe", "--bootstrap-controller", controllers(cluster)).stdout.splitlines()
    assert piped[0] == f"# ClusterId: {by_broker['cluster_id']}  ControllerId: {active}"
    assert piped[1].split("\t") == ["BrokerId", "Address", "Rack", "State", "Epoch"]
    assert [line.split("\t")[3] for line in piped[2:]] == ["Running"] * 3

    for source in (["--bootstrap-server", cluster.bootstrap], ["--bootstrap-controller", controllers(cluster)]):
        result = kraftpy("features", "describe", *source, "--json")
        assert result.returncode == 0, result.stderr
        # kraft.version (0: controller.quorum.voters) is listed where its supported range is reported.
        [feature] = [row for row in json.loads(result.stdout) if row["feature"] != "kraft.version"]
        assert feature["feature"] == "metadata.version"
        assert feature["supported_min_version"] <= feature["finalized_version_level"] <= \
            feature["supported_max_version"]
        assert feature["epoch"] >= 0

    both = kraftpy("cluster", "describe", "--bootstrap-server", cluster.bootstrap,
                   "--bootstrap-controller", controllers(cluster))
    assert both.returncode == 2


def test_quorum_status_from_a_broker_matches_the_controllers(cluster):
    def status(*source: object) -> dict:
        result = kraftpy("quorum", "status", *source, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    by_controller = status("--bootstrap-controller", controllers(cluster))
    # DescribeQuorum through a broker, which asks the quorum's leader: the same leader, voters and observers.
    by_broker = until(lambda: (d := status("--bootstrap-server", cluster.bootstrap))
                      and sorted(o["id"] for o in d["observers"]) == [4, 5, 6] and d)
    assert by_broker["cluster_id"] == by_controller["cluster_id"]
    assert (by_broker["leader_id"], by_broker["leader_epoch"]) == (by_controller["leader_id"],
                                                                    by_controller["leader_epoch"])
    assert sorted(v["id"] for v in by_broker["voters"]) == [1, 2, 3]
    assert by_broker["high_watermark"] >= by_controller["high_watermark"] > 0
    assert all(v["last_fetch_ms_ago"] is not None for v in by_broker["voters"])
    piped = kraftpy("quorum", "status", "--bootstrap-server", cluster.bootstrap).stdout.splitlines()
    assert piped[1] == f"LeaderId:               {by_controller['leader_id']}"

    both = kraftpy("quorum", "status", "--bootstrap-server", cluster.bootstrap, "--bootstrap-controller",
                   controllers(cluster))
    assert both.returncode == 2
    assert both.stderr == "kraftpy: give exactly one of --bootstrap-controller and --bootstrap-server\n"
    for flag in ("--bootstrap-server", "--bootstrap-controller"):
        unreachable = kraftpy("quorum", "status", flag, "127.0.0.1:1")
        assert unreachable.returncode == 3, (flag, unreachable.stderr)
        assert unreachable.stderr.count("\n") == 1 and unreachable.stderr.startswith("kraftpy: no ")


def test_features_upgrade_downgrade_and_disable_with_their_errors(cluster):
    def features(*args: object) -> subprocess.CompletedProcess:
        return kraftpy("features", *args, "--bootstrap-server", cluster.bootstrap)

    [current] = [r for r in json.loads(features("describe", "--json").stdout) if r["feature"] == "metadata.version"]
    level = current["finalized_version_level"]
    checked = features("upgrade", "--feature", f"metadata.version={level}", "--dry-run")
    assert checked.returncode == 0 and checked.stdout == f"metadata.version can be upgraded to {level}.\n"
    done = features("upgrade", "--feature", f"metadata.version={level}", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"feature": "metadata.version", "level": level, "error": None,
                                        "message": f"metadata.version was upgraded to {level}."}]
    # Refusals are Kafka's error code in one line on stderr, exit 1; nothing changes.
    beyond = features("upgrade", "--feature", f"metadata.version={current['supported_max_version'] + 1}")
    assert beyond.returncode == 1 and beyond.stdout == ""
    assert beyond.stderr.startswith(f"Could not upgrade metadata.version to {current['supported_max_version'] + 1}."
                                    " INVALID_UPDATE_VERSION: ") and beyond.stderr.count("\n") == 1
    unknown = features("upgrade", "--feature", "no.such.feature=1")
    assert unknown.returncode == 1 and "INVALID_UPDATE_VERSION" in unknown.stderr
    for args in (["downgrade", "--feature", "metadata.version=1"], ["disable", "--feature", "metadata.version"]):
        refused = features(*args)
        assert refused.returncode == 1, args
        assert "INVALID_UPDATE_VERSION: Refusing to lower metadata.version" in refused.stderr, refused.stderr
    usage = features("upgrade", "--feature", "metadata.version")
    assert usage.returncode == 2
    assert usage.stderr == "kraftpy: --feature metadata.version: expected NAME=LEVEL, for example metadata.version=7\n"
    [after] = [r for r in json.loads(features("describe", "--json").stdout) if r["feature"] == "metadata.version"]
    assert after["finalized_version_level"] == level


def test_configs_and_features_asked_of_a_follower_controller_alone(cluster):
    """With --bootstrap-controller naming only a controller that is not active, the command follows its
    pointer to the active one: a topic config altered and described, an upgrade validated."""
    active = cluster.active_controller()
    follower = next(i for i in cluster.voters if i != active)
    only = "{}:{}".format(*cluster.voters[follower])
    assert kraftpy("topics", "create", "--topic", "by-follower", "--bootstrap-server", cluster.bootstrap).returncode == 0
    alter = kraftpy("configs", "alter", "--entity-type", "topics", "--entity-name", "by-follower",
                    "--add-config", "retention.ms=60000", "--bootstrap-controller", only)
    assert alter.returncode == 0, alter.stderr
    assert alter.stdout == "Completed updating config for topic by-follower.\n"
    shown = kraftpy("configs", "describe", "--entity-type", "topics", "--entity-name", "by-follower", "--json",
                    "--bootstrap-controller", only)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["configs"] == [{"name": "retention.ms", "value": "60000",
                                                    "source": "DYNAMIC_TOPIC_CONFIG", "sensitive": False,
                                                    "read_only": False}]
    [current] = [r for r in json.loads(kraftpy("features", "describe", "--json", "--bootstrap-controller", only).stdout)
                 if r["feature"] == "metadata.version"]
    level = current["finalized_version_level"]
    checked = kraftpy("features", "upgrade", "--feature", f"metadata.version={level}", "--dry-run",
                      "--bootstrap-controller", only)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == f"metadata.version can be upgraded to {level}.\n"


def test_placement_and_partition_filters_when_a_broker_dies(cluster):
    topics = ("topics", "--bootstrap-server", cluster.bootstrap)
    result = kraftpy(*topics[:1], "create", "--topic", "placed", "--replica-assignment", "4:5,5:6,6:4",
                     *topics[1:])
    assert result.returncode == 0, result.stderr
    assert kraftpy(*topics[:1], "create", "--topic", "spread", "--partitions", 2, "--replication-factor", 3,
                   *topics[1:]).returncode == 0
    doc = json.loads(kraftpy(*topics[:1], "describe", "--topic", "placed", "--json", *topics[1:]).stdout)
    assert [p["replicas"] for p in doc["topics"][0]["partitions"]] == [[4, 5], [5, 6], [6, 4]]
    assert [p["leader"] for p in doc["topics"][0]["partitions"]] == [4, 5, 6]

    def filtered(flag: str) -> list[tuple[str, str]]:
        out = kraftpy(*topics[:1], "describe", flag, *topics[1:])
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert not any(line.startswith("# Topics") for line in lines)  # partitions only
        return [tuple(line.split("\t")[:2]) for line in lines[2:] if line.split("\t")[0] in ("placed", "spread")]

    assert filtered("--under-replicated-partitions") == []
    assert filtered("--unavailable-partitions") == []

    mark = {i: p.mark() for i, p in cluster.controllers.items()}
    cluster.brokers[6].kill()
    cluster.wait_until(lambda: any(p.find("fenced brokers whose sessions expired", since=mark[i])
                                   for i, p in cluster.controllers.items()), "broker 6 fenced")
    states = {b["id"]: b["state"] for b in describe(cluster, "--bootstrap-controller", controllers(cluster))["brokers"]}
    assert states == {4: "Running", 5: "Running", 6: "Fenced"}
    by_broker = until(lambda: (d := describe(cluster, "--bootstrap-server", cluster.bootstrap))
                      and {b["id"]: b["state"] for b in d["brokers"]}.get(6) == "Fenced" and d)
    assert {b["id"]: b["state"] for b in by_broker["brokers"]} == {4: "Running", 5: "Running", 6: "Fenced"}

    under = until(lambda: (rows := filtered("--under-replicated-partitions")) and len(rows) == 4 and rows)
    assert sorted(under) == [("placed", "1"), ("placed", "2"), ("spread", "0"), ("spread", "1")]
    # min.insync.replicas=2: the RF-2 partitions on 6 are below it, the RF-3 ones at it.
    assert sorted(filtered("--under-min-isr-partitions")) == [("placed", "1"), ("placed", "2")]
    assert sorted(filtered("--at-min-isr-partitions")) == [("placed", "0"), ("spread", "0"), ("spread", "1")]
    assert filtered("--unavailable-partitions") == []
    offline = json.loads(kraftpy(*topics[:1], "describe", "--topic", "placed", "--json", *topics[1:]).stdout)
    assert [p["offline"] for p in offline["topics"][0]["partitions"]] == [[], [6], [6]]

    cluster.restart_broker(6)


def test_unregister_an_unknown_broker_fails_with_kafkas_error(cluster):
    result = kraftpy("cluster", "unregister", "--id", 42, "--bootstrap-server", cluster.bootstrap)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "kraftpy: broker 42: BROKER_ID_NOT_REGISTERED: Broker ID 42 is not registered.\n"
    # Nothing changed: every broker is still there.
    states = {b["id"]: b["state"] for b in describe(cluster, "--bootstrap-controller", controllers(cluster))["brokers"]}
    assert set(states) == {4, 5, 6}
    # (Unregistering a known broker, after moving its replicas away, is in test_admin_reassign.py.)


def test_broker_states_as_the_controller_names_them():
    def reg(fenced: bool, stopping: bool) -> BrokerRegistration:
        return BrokerRegistration(id=1, epoch=5, incarnation_id=Uuid(bytes(16)), listeners=(), features=(),
                                  rack=None, fenced=fenced, in_controlled_shutdown=stopping)

    assert broker_state(reg(False, False)) == "Running"
    assert broker_state(reg(True, False)) == "Fenced"
    assert broker_state(reg(False, True)) == "Stopping"
