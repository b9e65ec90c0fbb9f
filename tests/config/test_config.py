"""Loading and validating configuration: typed values, defaults, every validation error."""

from pathlib import Path

import pytest

from kraftpy.config import ConfigError, load_config
from kraftpy.config.keys import BY_NAME, KEYS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "local"

COMBINED = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:9093
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
controller.listener.names=CONTROLLER
log.dirs=/tmp/a,/tmp/b
"""


def load(text, overrides=()):
    return load_config(text=text, overrides=overrides)


def error(text, overrides=()):
    with pytest.raises(ConfigError) as err:
        load(text, overrides)
    return err.value


def test_combined_node_resolves_typed_values_and_defaults():
    c = load(COMBINED)
    assert c.roles == {"broker", "controller"}
    assert c.node_id == 1
    assert [str(v) for v in c.voters] == ["1@127.0.0.1:9093"]
    assert c.controller_listener.port == 9093
    assert [str(listener) for listener in c.broker_listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert c.advertised_listeners == c.broker_listeners
    assert c.log_dirs == [Path("/tmp/a"), Path("/tmp/b")]
    assert c.metadata_log_dir == Path("/tmp/a")
    assert c["num.partitions"] == 1
    assert c["unclean.leader.election.enable"] is False
    assert c["log.segment.bytes"] == 1073741824
    assert c.log_retention_ms == 168 * 3_600_000
    assert c.all_dirs == [Path("/tmp/a"), Path("/tmp/b")]


def test_every_key_has_a_type_and_one_line_of_doc():
    for key in KEYS:
        assert key.doc and "\n" not in key.doc, key.name
        assert key.doc.endswith("."), key.name


def test_defaults_parse_under_their_own_type():
    c = load(COMBINED)
    for key in KEYS:
        if not key.required:
            assert key.name in c.values


def test_retention_precedence_ms_minutes_hours():
    assert load(COMBINED + "log.retention.hours=2\n").log_retention_ms == 7_200_000
    assert load(COMBINED + "log.retention.hours=2\nlog.retention.minutes=3\n").log_retention_ms == 180_000
    assert load(COMBINED + "log.retention.minutes=3\nlog.retention.ms=5\n").log_retention_ms == 5
    assert load(COMBINED + "log.retention.hours=-1\n").log_retention_ms == -1
    assert load(COMBINED + "log.roll.ms=77\n").log_roll_ms == 77


def test_metadata_log_dir_override():
    assert load(COMBINED + "metadata.log.dir=/tmp/meta\n").all_dirs == [
        Path("/tmp/a"), Path("/tmp/b"), Path("/tmp/meta")]


def test_override_wins_over_file():
    c = load(COMBINED + "num.partitions=3\n", ["num.partitions=7"])
    assert c["num.partitions"] == 7
    assert c.origins["num.partitions"].source == "--override"


def test_bad_override_value_is_reported_as_override():
    e = error(COMBINED, ["num.partitions=zero"])
    assert str(e) == "--override: num.partitions=zero: not an integer"


def test_override_without_equals_is_an_error():
    e = error(COMBINED, ["num.partitions"])
    assert "key=value" in str(e)


def test_wrong_value_names_key_value_file_and_line(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(COMBINED + "# a comment\nnum.partitions=many\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:8: num.partitions=many: not an integer"
    assert (err.value.key, err.value.value, err.value.line) == ("num.partitions", "many", 8)


@pytest.mark.parametrize(
    "extra, key, reason",
    [
        ("node.id=-1\n", "node.id", "must be at least 0"),
        ("node.id=99999999999\n", "node.id", "32-bit"),
        ("num.partitions=0\n", "num.partitions", "at least 1"),
        ("default.replication.factor=40000\n", "default.replication.factor", "between 1 and 32767"),
        ("min.insync.replicas=0\n", "min.insync.replicas", "at least 1"),
        ("unclean.leader.election.enable=yes\n", "unclean.leader.election.enable", "true or false"),
        ("process.roles=broker,zookeeper\n", "process.roles", "not one of"),
        ("process.roles=broker,broker\n", "process.roles", "twice"),
        ("process.roles=\n", "process.roles", "must name"),
        ("listeners=PLAINTEXT://127.0.0.1:70000\n", "listeners", "out of range"),
        ("listeners=PLAINTEXT://127.0.0.1:http\n", "listeners", "not a number"),
        ("listeners=127.0.0.1:9092\n", "listeners", "NAME://host:port"),
        ("listeners=PLAINTEXT://:9092,PLAINTEXT://:9093\n", "listeners", "more than once"),
        ("controller.quorum.voters=1@127.0.0.1\n", "controller.quorum.voters", "host:port"),
        ("controller.quorum.voters=x@127.0.0.1:9093\n", "controller.quorum.voters", "id@host:port"),
        ("controller.quorum.voters=1@a:9093,1@b:9094\n", "controller.quorum.voters", "more than once"),
        ("controller.quorum.voters=1@a:0\n", "controller.quorum.voters", "real port"),
        ("controller.quorum.voters=2@127.0.0.1:9093\n", "node.id", "one of controller.quorum.voters"),
        ("controller.listener.names=CTRL\n", "controller.listener.names", "not in listeners"),
        ("log.message.timestamp.type=Now\n", "log.message.timestamp.type", "not one of"),
        ("compression.type=brotli\n", "compression.type", "not one of"),
        ("broker.heartbeat.interval.ms=9000\n", "broker.heartbeat.interval.ms", "smaller than"),
        ("listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:TLS\n", "listener.security.protocol.map",
         "not one of"),
        ("inter.broker.listener.name=INTERNAL\n", "inter.broker.listener.name", "no listener"),
        ("advertised.listeners=PLAINTEXT://0.0.0.0:9092\n", "advertised.listeners", "wildcard"),
        ("advertised.listeners=OTHER://h:9092\n", "advertised.listeners", "not one of listeners"),
        ("log.dirs=/a,,/b\n", "log.dirs", "empty entry"),
        ("metrics.port=65536\n", "metrics.port", "between 0 and 65535"),
        ("metrics.host=my host\n", "metrics.host", "not an IP address or host name"),
        ("metrics.host=[::]\n", "metrics.host", "not an IP address or host name"),
        ("metrics.host=\n", "metrics.host", "not an IP address or host name"),
        ("group.min.session.timeout.ms=5000000\n", "group.min.session.timeout.ms", "must not exceed"),
    ],
)
def test_validation_errors(extra, key, reason):
    e = error(COMBINED + extra)
    assert e.key == key
    assert reason in e.reason
    assert e.line is not None or e.source == "<string>"


@pytest.mark.parametrize("missing", ["process.roles", "node.id", "controller.quorum.voters",
                                     "controller.listener.names"])
def test_required_keys(missing):
    text = "".join(line + "\n" for line in COMBINED.splitlines() if not line.startswith(missing + "="))
    e = error(text)
    assert e.key == missing and "required" in e.reason


def test_broker_needs_a_listener_besides_the_controllers():
    text = COMBINED.replace("PLAINTEXT://127.0.0.1:9092,", "")
    e = error(text)
    assert e.key == "listeners" and "a listener besides the controller's" in e.reason


def test_broker_only_process_must_not_listen_on_controller_listener():
    text = COMBINED.replace("process.roles=broker,controller", "process.roles=broker")
    e = error(text)
    assert e.key == "listeners" and "controller listener" in e.reason


def test_controller_only_process_needs_no_plaintext_listener():
    c = load("process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@h:9093\n"
             "listeners=CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\n")
    assert c.is_controller and not c.is_broker


def test_unknown_keys_are_collected_not_fatal_and_ignored_kafka_keys_are_silent():
    c = load(COMBINED + "no.such.key=1\nnum.network.threads=3\n")
    assert [e.key for e in c.unknown] == ["no.such.key"]
    assert c.unknown[0].line == 7


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "127.0.0.1", "fd00::1", "kraftpy-broker-0.kraftpy-broker",
                                  "localhost"])
def test_metrics_host_takes_addresses_and_host_names(host):
    assert load(COMBINED + f"metrics.host={host}\n")["metrics.host"] == host


def test_unknown_key_lookup_raises():
    with pytest.raises(KeyError):
        load(COMBINED)["no.such.key"]


def test_ipv6_listener():
    c = load(COMBINED.replace("PLAINTEXT://127.0.0.1:9092", "PLAINTEXT://[::1]:9092"))
    assert c.broker_listeners[0].host == "::1"


@pytest.mark.parametrize("name", ["controller-1", "controller-2", "controller-3",
                                  "broker-1", "broker-2", "broker-3"])
def test_deploy_local_configs_are_valid(name):
    c = load_config(DEPLOY / f"{name}.properties")
    assert not c.unknown
    if name.startswith("broker"):
        assert c.is_broker and not c.is_controller
        assert c.broker_listeners[0].port in (9092, 9192, 9292)
    else:
        assert c.controller_listener.port in (9093, 9094, 9095)


def test_schema_names_are_unique_and_kafka_shaped():
    assert len(BY_NAME) == len(KEYS)
    for key in KEYS:
        assert key.name == key.name.lower() and " " not in key.name


DYNAMIC = """\
process.roles=controller
node.id=7
controller.quorum.bootstrap.servers=127.0.0.1:9093,c2.example:9093
listeners=CONTROLLER://127.0.0.1:9093
controller.listener.names=CONTROLLER
"""


def test_a_dynamic_quorum_names_bootstrap_servers_instead_of_voters():
    c = load(DYNAMIC)
    assert c.is_dynamic_quorum and c.voters == [] and c.node_id == 7  # no voter list to be one of
    assert c.quorum_bootstrap_servers == [("127.0.0.1", 9093), ("c2.example", 9093)]
    assert not load(COMBINED).is_dynamic_quorum


@pytest.mark.parametrize(("text", "key", "reason"), [
    (DYNAMIC.replace("127.0.0.1:9093,", "127.0.0.1,"), "controller.quorum.bootstrap.servers", "host:port"),
    (DYNAMIC.replace("127.0.0.1:9093,", "127.0.0.1:0,"), "controller.quorum.bootstrap.servers", "a real port"),
    (DYNAMIC.replace("127.0.0.1:9093,c2", ":9093,c2"), "controller.quorum.bootstrap.servers", "needs a host"),
    (DYNAMIC.replace("127.0.0.1:9093,c2.example:9093", ""), "controller.quorum.bootstrap.servers",
     "is required (or controller.quorum.bootstrap.servers"),
    (DYNAMIC.replace("controller.quorum.bootstrap.servers=127.0.0.1:9093,c2.example:9093",
                     "controller.quorum.voters="), "controller.quorum.voters", "must name at least one voter"),
])
def test_bootstrap_server_errors_name_the_key(text, key, reason):
    e = error(text)
    assert e.key == key and reason in e.reason, e


def test_a_controller_may_advertise_its_controller_listener():
    c = load(DYNAMIC.replace("CONTROLLER://127.0.0.1:9093", "CONTROLLER://0.0.0.0:9093")
             + "advertised.listeners=CONTROLLER://c7.example:9093\n")
    advertised = c.advertised_controller_listener
    assert (advertised.host, advertised.port) == ("c7.example", 9093) and c.advertised_listeners == []
