"""`kraftpy configs` and `kraftpy features upgrade|downgrade|disable` with ``--bootstrap-controller``
(KIP-919) against a real `kraftpy dev`: what the active controller is asked and changes is what a
broker shows after, and its refusals read as the broker path's do.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.helpers import forkserver
from tests.helpers.deployments import DevDeployment


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    with DevDeployment(tmp_path_factory.mktemp("bootstrap-controller") / "dev") as deployment:
        yield deployment


def run(*args: object) -> subprocess.CompletedProcess:
    return forkserver.run([*(str(a) for a in args)], capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def by_broker(dev, *args: object) -> subprocess.CompletedProcess:
    return run(*args, "--bootstrap-server", dev.bootstrap)


def by_controller(dev, *args: object) -> subprocess.CompletedProcess:
    host, port = dev.controller_address
    return run(*args, "--bootstrap-controller", f"{host}:{port}")


def described(ask, dev, entity_type: str, *args: object) -> dict[str, tuple[str, str]]:
    """--json describe of one entity through ``ask``: name -> (value, source)."""
    result = ask(dev, "configs", "describe", "--entity-type", entity_type, *args, "--json")
    assert result.returncode == 0, result.stderr
    return {c["name"]: (c["value"], c["source"]) for c in json.loads(result.stdout)["configs"]}


def follows(check, attempts: int = 40) -> None:
    """Ask again (each ask is a process run, no sleep) until ``check()`` holds: a broker's metadata follows
    the controller's by a moment."""
    for _ in range(attempts):
        if check():
            return
    raise AssertionError("the broker never showed the controller's change")


def test_topic_configs_through_the_controller(dev):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    assert by_broker(dev, "topics", "create", "--topic", topic).returncode == 0
    alter = ("configs", "alter", "--entity-type", "topics", "--entity-name", topic)

    checked = by_controller(dev, *alter, "--add-config", "retention.ms=60000", "--dry-run")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == f"Validated updating config for topic {topic} (nothing changed).\n"
    assert described(by_controller, dev, "topics", "--entity-name", topic) == {}

    done = by_controller(dev, *alter, "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Completed updating config for topic {topic}.\n"
    own = {"cleanup.policy": ("compact,delete", "DYNAMIC_TOPIC_CONFIG"),
           "retention.ms": ("60000", "DYNAMIC_TOPIC_CONFIG")}
    assert described(by_controller, dev, "topics", "--entity-name", topic) == own
    # What the controller wrote is what a broker describes, once it has replayed it.
    follows(lambda: described(by_broker, dev, "topics", "--entity-name", topic) == own)
    every = described(by_controller, dev, "topics", "--entity-name", topic, "--all")
    assert every["segment.ms"] == ("604800000", "DEFAULT_CONFIG")

    # A bad value: the controller's INVALID_CONFIG, in the same one line as through a broker; exit 1.
    bad = by_controller(dev, *alter, "--add-config", "retention.ms=soon")
    same = by_broker(dev, *alter, "--add-config", "retention.ms=soon")
    assert bad.returncode == same.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr == same.stderr
    assert bad.stderr.startswith(f"kraftpy: topic {topic}: INVALID_CONFIG: ") and bad.stderr.count("\n") == 1
    missing = by_controller(dev, "configs", "describe", "--entity-type", "topics", "--entity-name", "no-such-topic")
    assert missing.returncode == 1
    assert missing.stderr.startswith("kraftpy: topic no-such-topic: UNKNOWN_TOPIC_OR_PARTITION")

    gone = by_controller(dev, *alter, "--delete-config", "retention.ms", "--json")
    assert gone.returncode == 0, gone.stderr
    assert json.loads(gone.stdout) == {"entity_type": "topics", "entity_name": topic, "set": {},
                                       "deleted": ["retention.ms"], "dry_run": False}
    follows(lambda: described(by_broker, dev, "topics", "--entity-name", topic) == {
        "cleanup.policy": ("compact,delete", "DYNAMIC_TOPIC_CONFIG")})


def test_broker_and_default_configs_through_the_controller(dev):
    brokers = ("configs", "alter", "--entity-type", "brokers")
    try:
        assert by_controller(dev, *brokers, "--entity-default", "--add-config",
                             "log.retention.ms=3600000").returncode == 0
        assert by_controller(dev, *brokers, "--entity-name", 1, "--add-config",
                             "message.max.bytes=2000000").returncode == 0
        for ask in (by_controller, by_broker):
            follows(lambda: described(ask, dev, "brokers", "--entity-default") == {  # noqa: B023
                "log.retention.ms": ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")})
            follows(lambda: described(ask, dev, "brokers", "--entity-name", 1) == {  # noqa: B023
                "message.max.bytes": ("2000000", "DYNAMIC_BROKER_CONFIG")})
        # Every registered broker, as the controller's image lists them.
        listed = by_controller(dev, "configs", "describe", "--entity-type", "brokers", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [d["entity_name"] for d in json.loads(listed.stdout)] == ["1"]

        static = by_controller(dev, *brokers, "--entity-name", 1, "--add-config", "log.dirs=/x")
        assert static.returncode == 1
        assert static.stderr == "kraftpy: broker 1: INVALID_CONFIG: Cannot update these configs dynamically: " \
                                "log.dirs\n"
    finally:
        assert by_controller(dev, *brokers, "--entity-name", 1, "--delete-config",
                             "message.max.bytes").returncode == 0
        assert by_controller(dev, *brokers, "--entity-default", "--delete-config",
                             "log.retention.ms").returncode == 0
    follows(lambda: described(by_broker, dev, "brokers", "--entity-default") == {})


def test_what_stays_with_the_brokers_is_one_line(dev):
    group = by_controller(dev, "configs", "describe", "--entity-type", "groups", "--entity-name", "g")
    assert group.returncode == 2
    assert group.stderr == ("kraftpy: --entity-type groups is described and altered through a broker: use "
                            "--bootstrap-server (--bootstrap-controller takes topics and brokers)\n")
    every_topic = by_controller(dev, "configs", "describe", "--entity-type", "topics")
    assert every_topic.returncode == 2 and every_topic.stderr.count("\n") == 1
    host, port = dev.controller_address
    both = by_broker(dev, "configs", "describe", "--entity-type", "brokers", "--entity-name", 1,
                     "--bootstrap-controller", f"{host}:{port}")
    assert both.returncode == 2
    assert both.stderr == "kraftpy: give exactly one of --bootstrap-server and --bootstrap-controller\n"


def test_features_through_the_controller(dev):
    [current] = [r for r in json.loads(by_controller(dev, "features", "describe", "--json").stdout)
                 if r["feature"] == "metadata.version"]
    level = current["finalized_version_level"]
    checked = by_controller(dev, "features", "upgrade", "--feature", f"metadata.version={level}", "--dry-run")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == f"metadata.version can be upgraded to {level}.\n"
    as_json = by_controller(dev, "features", "upgrade", "--feature", f"metadata.version={level}", "--dry-run",
                            "--json")
    assert json.loads(as_json.stdout) == [{"feature": "metadata.version", "level": level, "error": None,
                                           "message": f"metadata.version can be upgraded to {level}."}]

    for args in (["downgrade", "--feature", "metadata.version=1"], ["disable", "--feature", "metadata.version"],
                 ["upgrade", "--feature", f"metadata.version={current['supported_max_version'] + 1}"]):
        refused = by_controller(dev, "features", *args)
        same = by_broker(dev, "features", *args)
        assert refused.returncode == same.returncode == 1, (args, refused.stderr)
        assert refused.stdout == ""
        assert refused.stderr == same.stderr and refused.stderr.count("\n") == 1
        assert "INVALID_UPDATE_VERSION" in refused.stderr
    [after] = [r for r in json.loads(by_broker(dev, "features", "describe", "--json").stdout)
               if r["feature"] == "metadata.version"]
    assert after["finalized_version_level"] == level
