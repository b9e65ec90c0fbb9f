"""Every deployment file under deploy/ runs kraftpy with a configuration kraftpy accepts.

Docker and Kubernetes are not run here; their files are parsed. For each node a file starts (a
properties file, a ConfigMap entry, a compose service, a StatefulSet pod for each ordinal, a systemd
unit), the configuration it would run with (the file plus its ``--override`` arguments, shell
placeholders replaced by the values a pod or a service would have) is loaded with kraftpy's own
loader: every key must be in the schema, every value must pass validation, including the rules
between keys (a controller's node.id among the voters, ...). Readiness probes and healthchecks must
ask ``GET /ready`` on the node's ``metrics.port``: Kubernetes' as plain httpGet probes, which the
kubelet sends to the pod's address from outside, so there the endpoint must listen on every interface
(``metrics.host`` 0.0.0.0 or ::); compose's from inside the container, with the endpoint on every
interface too so that a Prometheus in the compose network can scrape it.
"""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import pytest
import yaml

from kraftpy.config import KraftConfig, load_config
from kraftpy.config.keys import BY_NAME
from kraftpy.config.properties import parse_properties
from kraftpy.ids import uuid_from_str

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
LOCAL = DEPLOY / "local"
COMPOSE = DEPLOY / "compose"
K8S = DEPLOY / "kubernetes"
SYSTEMD = DEPLOY / "systemd"

READY = re.compile(r"http://127\.0\.0\.1:(\d+)/ready")
#: metrics.host values that listen on every interface (what a probe from outside the pod reaches).
EVERY_INTERFACE = ("0.0.0.0", "::")


def load(text: str, overrides: list[str], where: str) -> KraftConfig:
    """kraftpy's loader on ``text`` plus ``overrides``; an unknown key fails like a bad value."""
    config = load_config(text=text, overrides=overrides)
    assert not config.unknown, f"{where}: keys kraftpy does not know: {[e.key for e in config.unknown]}"
    return config


def command_args(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """(the kraftpy subcommand words, --config, --override values) of a kraftpy command line."""
    assert argv[0].endswith("kraftpy"), argv
    words, config, overrides = [], None, []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in ("--config", "-c"):
            config = argv[i + 1]
            i += 2
        elif arg == "--override":
            overrides.append(argv[i + 1])
            i += 2
        elif arg.startswith("--override="):
            overrides.append(arg.split("=", 1)[1])
            i += 1
        elif arg.startswith("-"):
            i += 2 if arg in ("--cluster-id", "-t", "--log-format", "--log-level") else 1
        else:
            words.append(arg)
            i += 1
    return words, config, overrides


def test_every_override_anywhere_names_a_schema_key() -> None:
    """A catch-all over the raw text of every deployment file."""
    seen = 0
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        for key in re.findall(r"--override[ =\"',]+([A-Za-z0-9_.-]+)=", path.read_text()):
            assert key in BY_NAME, f"{path.relative_to(ROOT)}: --override {key}: not a kraftpy configuration key"
            seen += 1
    assert seen > 20


# --- deploy/local


LOCAL_FILES = sorted(LOCAL.glob("*.properties"))


@pytest.mark.parametrize("path", LOCAL_FILES, ids=lambda p: p.name)
def test_local_properties_are_valid(path: Path) -> None:
    config = load(path.read_text(), [], str(path))
    assert config.role_name == path.stem.split("-")[0]


def test_local_cluster_is_three_controllers_and_three_brokers() -> None:
    configs = {p.stem: load(p.read_text(), [], str(p)) for p in LOCAL_FILES}
    voters = {v.node_id: v.port for v in configs["controller-1"].voters}
    for name, config in configs.items():
        assert {v.node_id: v.port for v in config.voters} == voters, name
    assert sorted(c.node_id for c in configs.values()) == [1, 2, 3, 4, 5, 6]
    for i in (1, 2, 3):
        assert configs[f"controller-{i}"].controller_listener.port == voters[i]


# --- systemd


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_systemd_unit(role: str) -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # systemd's keys are case-sensitive
    unit.read(SYSTEMD / f"kraftpy-{role}@.service")
    service = unit["Service"]
    assert service["Type"] == "simple"
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["LimitNOFILE"]) >= 65536
    # Long enough for a controlled shutdown (a broker moves its leaderships away first).
    assert int(service["TimeoutStopSec"]) >= 120
    words, config, overrides = command_args(shlex.split(service["ExecStart"]))
    assert words == [role]
    assert config == f"/etc/kraftpy/{role}-%i.properties"
    # The unit's config files are made from deploy/local's, whose instance names are the node ids' files.
    for path in LOCAL.glob(f"{role}-*.properties"):
        assert load(path.read_text(), overrides, f"{path} with ExecStart's overrides").roles == {role}
    assert unit["Install"]["WantedBy"] == "multi-user.target"


# --- compose


def compose() -> dict:
    return yaml.safe_load((COMPOSE / "compose.yaml").read_text())


def compose_config(path: str) -> str:
    assert path.startswith("/etc/kraftpy/"), path
    return (COMPOSE / "config" / path.removeprefix("/etc/kraftpy/")).read_text()


NODES = [f"{role}-{i}" for role in ("controller", "broker") for i in (1, 2, 3)]


def test_compose_nodes_run_valid_configurations() -> None:
    services = compose()["services"]
    assert set(NODES) <= set(services)
    node_ids = {}
    for name in NODES:
        service = services[name]
        words, config_path, overrides = command_args(["kraftpy", *service["command"]])
        role = name.split("-")[0]
        assert words == [role]
        config = load(compose_config(config_path), overrides, f"compose service {name}")
        assert config.roles == {role}
        node_ids[name] = config.node_id
        assert f"./config:{'/'.join(config_path.split('/')[:3])}:ro" in service["volumes"]
        assert f"{name}:/var/lib/kraftpy/data" in service["volumes"]
        assert config.log_dirs == [Path("/var/lib/kraftpy/data")]
        # The healthcheck asks this node's readiness endpoint, a plain HTTP GET from inside the container;
        # the endpoint listens on every interface, for a Prometheus in the compose network.
        probe = " ".join(service["healthcheck"]["test"])
        assert [int(p) for p in READY.findall(probe)] == [config["metrics.port"]]
        assert "urlopen(" in probe
        assert config["metrics.host"] in EVERY_INTERFACE, f"{name}: metrics.host={config['metrics.host']}"
        if role == "controller":
            assert service["depends_on"]["format"]["condition"] == "service_completed_successfully"
            # The voters name the controller services by their compose host names.
            assert f"{config.node_id}@{name}:{config.controller_listener.port}" in config.raw[
                "controller.quorum.voters"]
        else:
            assert {c: d["condition"] for c, d in service["depends_on"].items()} == {
                f"controller-{i}": "service_healthy" for i in (1, 2, 3)}
            assert config.advertised_listeners[0].host == name
    assert sorted(node_ids.values()) == [1, 2, 3, 4, 5, 6]


def test_compose_format_step_formats_every_node_with_one_cluster_id() -> None:
    doc = compose()
    service = doc["services"]["format"]
    cluster_id = re.search(r"\$\{KRAFTPY_CLUSTER_ID:-([^}]+)\}", service["environment"]["KRAFTPY_CLUSTER_ID"])
    assert cluster_id is not None
    uuid_from_str(cluster_id.group(1))
    formatted = {}
    for line in service["command"][0].splitlines():
        if not line.strip():
            continue
        argv = shlex.split(line.replace("$$KRAFTPY_CLUSTER_ID", cluster_id.group(1)))
        argv = argv[: argv.index("||")] if "||" in argv else argv
        words, config_path, overrides = command_args(argv)
        assert words == ["storage", "format"] and "--ignore-formatted" in argv
        config = load(compose_config(config_path), overrides, f"format: {line.strip()}")
        (volume,) = [v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == str(config.log_dirs[0])]
        formatted[volume] = config.node_id
    node_ids = {}
    for name in NODES:
        _, config_path, overrides = command_args(["kraftpy", *doc["services"][name]["command"]])
        node_ids[name] = load(compose_config(config_path), overrides, name).node_id
    # Each volume is formatted for the node that mounts it.
    assert formatted == node_ids
    assert set(doc["volumes"]) == set(NODES)


# --- Kubernetes


def k8s_documents() -> list[dict]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in k8s_documents() if d["kind"] == kind}


def shell_command(container: dict, ordinal: int, statefulset: str) -> list[str]:
    """The kraftpy command line a pod's ``sh -c`` script runs, with the pod's values put in."""
    command = container["command"]
    assert command[:2] == ["sh", "-c"], command
    script = command[2]
    hostname = f"{statefulset}-{ordinal}"
    node_id = re.search(r"NODE_ID=\$\(\( \$\{HOSTNAME##\*-\} \+ (\d+) \)\)", script)
    assert node_id is not None, script
    values = {"NODE_ID": str(ordinal + int(node_id.group(1))), "HOSTNAME": hostname, "POD_NAMESPACE": "kafka",
              "CLUSTER_ID": "placeholder"}
    (line,) = [line for line in script.splitlines() if line.startswith("exec kraftpy ")]
    line = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], line)
    assert "$" not in line, line
    return shlex.split(line)[1:]


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_kubernetes_statefulset(role: str) -> None:
    name = f"kraftpy-{role}"
    statefulset = by_kind("StatefulSet")[name]
    configmap = by_kind("ConfigMap")["kraftpy"]
    uuid_from_str(configmap["data"]["cluster.id"])
    spec = statefulset["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"] == labels

    service = by_kind("Service")[spec["serviceName"]]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == labels
    budget = by_kind("PodDisruptionBudget")[name]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == labels

    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    (init,) = pod["initContainers"]
    config_volume = {v["name"]: v for v in pod["volumes"]}["config"]
    assert config_volume["configMap"]["name"] == "kraftpy"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert {m["name"]: m["mountPath"] for m in init["volumeMounts"]} == mounts
    assert [t["metadata"]["name"] for t in spec["volumeClaimTemplates"]] == ["data"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    node_ids = []
    for ordinal in range(spec["replicas"]):
        words, config_path, overrides = command_args(shell_command(container, ordinal, name))
        assert words == [role]
        key = config_path.removeprefix(mounts["config"] + "/")
        config = load(configmap["data"][key], overrides, f"{name}-{ordinal}")
        assert config.roles == {role}
        assert [str(d) for d in config.log_dirs] == [mounts["data"]]
        node_ids.append(config.node_id)
        # The init container formats the same directories for the same node id, when not formatted yet.
        init_argv = shell_command(init, ordinal, name)
        assert "--ignore-formatted" in init_argv
        init_words, init_config, init_overrides = command_args(init_argv)
        assert init_words == ["storage", "format"] and init_config == config_path
        assert load(configmap["data"][key], init_overrides, "format").node_id == config.node_id
        # Readiness is GET /ready, liveness GET /healthz, on this node's metrics.port: httpGet probes the
        # kubelet sends to the pod's address, which the endpoint listens on only with every interface.
        for probe, path in (("readinessProbe", "/ready"), ("livenessProbe", "/healthz")):
            assert set(container[probe]) & {"exec", "tcpSocket", "grpc", "httpGet"} == {"httpGet"}, probe
            get = container[probe]["httpGet"]
            assert get["path"] == path and get.get("scheme", "HTTP") == "HTTP", probe
            assert ports.get(get["port"], get["port"]) == config["metrics.port"] == ports["metrics"], probe
        assert config["metrics.host"] in EVERY_INTERFACE, f"{name}-{ordinal}: metrics.host={config['metrics.host']}"
        if role == "controller":
            # Each voter is a pod of this StatefulSet, by its stable name under the headless service.
            voter = {v.node_id: v for v in config.voters}[config.node_id]
            assert (voter.host, voter.port) == (f"{name}-{ordinal}.{spec['serviceName']}",
                                                config.controller_listener.port)
            assert service["spec"]["ports"][0]["port"] == config.controller_listener.port
        else:
            advertised = config.advertised_listeners[0]
            assert advertised.host.startswith(f"{name}-{ordinal}.{spec['serviceName']}.")
            assert advertised.port == config.broker_listeners[0].port == ports["kafka"]
    assert len(set(node_ids)) == spec["replicas"]
    # Long enough for a controlled shutdown.
    assert pod["terminationGracePeriodSeconds"] >= 120


def test_kubernetes_controllers_and_brokers_agree_on_the_quorum() -> None:
    configmap = by_kind("ConfigMap")["kraftpy"]["data"]
    controller = load(configmap["controller.properties"], ["node.id=1"], "controller.properties")
    broker = load(configmap["broker.properties"], ["node.id=100"], "broker.properties")
    assert controller.voters == broker.voters
    replicas = by_kind("StatefulSet")["kraftpy-controller"]["spec"]["replicas"]
    assert sorted(v.node_id for v in controller.voters) == list(range(1, replicas + 1))
    broker_ids = {i + 100 for i in range(by_kind("StatefulSet")["kraftpy-broker"]["spec"]["replicas"])}
    assert not broker_ids & {v.node_id for v in controller.voters}


def test_properties_in_configmap_parse_cleanly() -> None:
    for key, text in by_kind("ConfigMap")["kraftpy"]["data"].items():
        if key.endswith(".properties"):
            assert all(entry.key in BY_NAME for entry in parse_properties(text)), key
