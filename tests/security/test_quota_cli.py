"""`kraftpy configs describe|alter --entity-type users|clients` against a real `kraftpy dev`: client
quotas set, described (text and --json), deleted, the default entities, and Kafka's refusals."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import forkserver
from tests.helpers.deployments import DevDeployment


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    with DevDeployment(tmp_path_factory.mktemp("quotas") / "dev") as deployment:
        yield deployment


def configs(dev, *args: object) -> subprocess.CompletedProcess:
    return forkserver.run(["configs", *(str(a) for a in args),
                           "--bootstrap-server", dev.bootstrap],
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


def described(dev, *args: object):
    result = configs(dev, "describe", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_client_quotas(dev):
    result = configs(dev, "alter", "--entity-type", "clients", "--entity-name", "app",
                     "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Completed updating config for client app."
    assert configs(dev, "alter", "--entity-type", "clients", "--entity-default",
                   "--add-config", "request_percentage=12.5").returncode == 0

    assert described(dev, "--entity-type", "clients", "--entity-name", "app") == {
        "entity_type": "clients", "entity_name": "app",
        "quotas": {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0}}
    assert described(dev, "--entity-type", "clients", "--entity-default") == {
        "entity_type": "clients", "entity_name": None, "quotas": {"request_percentage": 12.5}}
    every = described(dev, "--entity-type", "clients")
    assert [d["entity_name"] for d in every] == [None, "app"]

    text = configs(dev, "describe", "--entity-type", "clients", "--entity-name", "app")
    assert text.stdout.strip() == (
        "Quota configs for client-id 'app' are consumer_byte_rate=2097152, producer_byte_rate=1048576")

    assert configs(dev, "alter", "--entity-type", "clients", "--entity-name", "app",
                   "--delete-config", "consumer_byte_rate").returncode == 0
    assert described(dev, "--entity-type", "clients", "--entity-name", "app")["quotas"] == {
        "producer_byte_rate": 1048576.0}


def test_user_quotas_and_the_default_user(dev):
    assert configs(dev, "alter", "--entity-type", "users", "--entity-name", "alice",
                   "--add-config", "producer_byte_rate=4096").returncode == 0
    assert configs(dev, "alter", "--entity-type", "users", "--entity-default",
                   "--add-config", "consumer_byte_rate=8192").returncode == 0
    assert described(dev, "--entity-type", "users", "--entity-name", "alice") == {
        "entity_type": "users", "entity_name": "alice", "quotas": {"producer_byte_rate": 4096.0},
        "scram_credentials": []}
    assert described(dev, "--entity-type", "users", "--entity-default") == {
        "entity_type": "users", "entity_name": None, "quotas": {"consumer_byte_rate": 8192.0},
        "scram_credentials": []}
    text = configs(dev, "describe", "--entity-type", "users", "--entity-default")
    assert text.stdout.strip() == "Quota configs for the default user-principal are consumer_byte_rate=8192"


@pytest.mark.parametrize(("args", "message"), [
    (["--entity-name", "app", "--add-config", "fetch_rate=1"], "fetch_rate is not a client quota"),
    (["--entity-name", "app", "--add-config", "producer_byte_rate=lots"], "producer_byte_rate=lots: not a number"),
    (["--entity-name", "app", "--add-config", "producer_byte_rate=10.5"],
     "producer_byte_rate is not an integer"),
])
def test_refusals_are_one_line(dev, args, message):
    result = configs(dev, "alter", "--entity-type", "clients", *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
