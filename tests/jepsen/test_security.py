"""The security parts of the harness that need no brokers: the secured cluster's configuration files
(validated by kraftpy's own loader), the certificates, the SCRAM users given to `storage format`, the
workload's client settings, the security fault kinds in the schedule and the nemesis, and the
checker's unauthorized writes and security facts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kraftpy.config.loader import load_config
from kraftpy.metadata.bootstrap import parse_add_scram
from kraftpy.security.authorizer import parse_super_users
from kraftpy.security.tls import client_settings as tls_client_settings
from kraftpy.security.tls import describe_certificate, server_context
from tests.jepsen import nemesis as nm
from tests.jepsen import runner
from tests.jepsen import security as sec
from tests.jepsen.checker import check
from tests.jepsen.synthetic import Builder

REFUSED = "TOPIC_AUTHORIZATION_FAILED"


@pytest.mark.parametrize("network", ["netns", "proxy", "none"])
def test_secured_configs_are_valid_kraftpy_configs(tmp_path, network):
    plan = runner.plan_cluster(tmp_path, seed=3, network=network, security="sasl_ssl")
    runner.write_configs(plan)
    sec.Pki(plan)  # the loader reads the key stores
    client_addresses = {(b.host, b.client_port) for b in plan.brokers}
    assert all(b.client_port for b in plan.brokers) and len(client_addresses) == 3
    assert not client_addresses & {(n.host, n.port) for n in plan.nodes}
    assert plan.bootstrap == ",".join(f"{b.host}:{b.client_port}" for b in plan.brokers)
    for node in plan.nodes:
        config = load_config(node.config)
        assert config.unknown == ()
        assert config["ssl.keystore.location"] == str(sec.keystore(plan, node))
        assert config["ssl.truststore.location"] == str(sec.ca_file(plan))
        assert config.listener_value("CONTROLLER", "ssl.client.auth") == "required"
        # Every node logs in to the controllers with SCRAM, inside mutual TLS.
        assert config.security_protocol("CONTROLLER") == "SASL_SSL"
        assert config["sasl.mechanism.controller.protocol"] == "SCRAM-SHA-512"
        assert config["authorizer.class.name"] == sec.AUTHORIZER
        assert "User:controller" in parse_super_users(config["super.users"])
        if node.role == "controller":
            continue
        listeners = {listener.name: listener for listener in config.broker_listeners}
        assert config.security_protocol("INTERNAL") == "SSL"
        assert (listeners["INTERNAL"].host, listeners["INTERNAL"].port) == (node.host, node.port)
        assert config.security_protocol("CLIENT") == "SASL_SSL"
        assert listeners["CLIENT"].port == node.client_port
        assert config.listener_value("INTERNAL", "ssl.client.auth") == "required"
        assert config.listener_value("CLIENT", "ssl.client.auth") == "none"  # clients log in with SCRAM
        assert config["authorizer.class.name"] == sec.AUTHORIZER
        assert config["allow.everyone.if.no.acl.found"] is False
        assert parse_super_users(config["super.users"]) == {
            "User:admin", "User:controller", *(sec.principal(b) for b in plan.brokers)}


def test_unsecured_configs_are_as_before(tmp_path):
    plan = runner.plan_cluster(tmp_path, seed=3, network="none")
    runner.write_configs(plan)
    text = plan.brokers[0].config.read_text()
    assert "ssl." not in text and "sasl" not in text and "authorizer" not in text
    assert plan.bootstrap == ",".join(b.advertised for b in plan.brokers)
    assert sec.client_settings(plan) == {} and sec.format_args(plan.controllers[0], plan) == []
    assert sec.control_tls(plan) is None and sec.control_sasl(plan) is None


def test_scram_users_are_written_by_the_controllers_format(tmp_path):
    plan = runner.plan_cluster(tmp_path, seed=3, network="none", security="sasl_ssl")
    assert sec.format_args(plan.brokers[0], plan) == []
    args = sec.format_args(plan.controllers[0], plan)
    assert args[::2] == ["--add-scram"] * 3
    records = [parse_add_scram(text) for text in args[1::2]]
    assert sorted(r.name for r in records) == sorted([sec.ADMIN_USER, sec.CONTROLLER_USER, sec.WORKLOAD_USER])
    assert {r.mechanism for r in records} == {2}  # SCRAM-SHA-512
    # reproducible per run, different per user
    assert sec.password(plan, sec.WORKLOAD_USER) == sec.password(plan, sec.WORKLOAD_USER) != \
        sec.password(plan, sec.ADMIN_USER)


def test_certificates_name_the_node_and_rotate_to_a_new_serial(tmp_path):
    plan = runner.plan_cluster(tmp_path, seed=3, network="proxy", security="sasl_ssl")
    pki = sec.Pki(plan)
    for node in plan.nodes:
        described = describe_certificate(str(sec.keystore(plan, node)))
        assert f"User:{described['subject']}" == sec.principal(node)
        server_context(tls_client_settings({"ssl.keystore.type": "PEM",
                                            "ssl.keystore.location": str(sec.keystore(plan, node)),
                                            "ssl.truststore.type": "PEM",
                                            "ssl.truststore.location": str(sec.ca_file(plan))}))
    node = plan.brokers[1]
    before = sec.keystore(plan, node).read_bytes()
    serial = pki.issue(node)
    after = sec.keystore(plan, node).read_bytes()
    assert after != before and int(serial, 16) > 0
    assert describe_certificate(str(sec.keystore(plan, node)))["subject"] == sec.principal(node)[len("User:"):]
    assert not list((tmp_path / sec.PKI_DIR).glob("*.new"))
    assert sec.control_tls(plan) is not None


def test_client_properties_are_what_librdkafka_takes(tmp_path):
    from confluent_kafka import Producer

    plan = runner.plan_cluster(tmp_path, seed=3, network="none", security="sasl_ssl")
    sec.Pki(plan)
    settings = sec.client_settings(plan, sec.WORKLOAD_USER)
    assert settings["security.protocol"] == "SASL_SSL" and settings["sasl.mechanism"] == "SCRAM-SHA-512"
    assert settings["sasl.username"] == sec.WORKLOAD_USER
    assert sec.client_settings(plan)["sasl.username"] == sec.ADMIN_USER
    path = sec.write_client_properties(plan, tmp_path / "client.properties", sec.WORKLOAD_USER)
    assert sec.read_client_properties(str(path)) == {k: str(v) for k, v in settings.items()}
    assert sec.read_client_properties(None) == {}
    Producer({"bootstrap.servers": plan.bootstrap, **sec.read_client_properties(str(path))})
    workload = runner.Workload(plan, None, topic="jepsen", seed=1, producers=0, consumers=0, op_timeout=5,
                               log=print)
    assert workload.producer_config()["sasl.username"] == sec.WORKLOAD_USER


def test_security_kinds_parse_and_schedule():
    assert nm.parse_kinds("cert-rotate,acl-flap") == ("cert-rotate", "acl-flap")
    assert nm.parse_kinds("security") == nm.SECURITY_KINDS
    assert nm.parse_kinds("all") == nm.KINDS
    assert nm.parse_kinds("all", security=True) == nm.KINDS + nm.SECURITY_KINDS
    faults = nm.schedule(4, nm.SECURITY_KINDS, ["c1", "c2", "c3"], ["b1", "b2", "b3"], 200, interval=5)
    assert {f.kind for f in faults} == set(nm.SECURITY_KINDS)
    for f in faults:
        assert f.variant in nm.VARIANTS[f.kind]
        if f.kind == "cert-rotate":
            assert len(f.nodes) == 1 and f.nodes[0] in {"c1", "c2", "c3", "b1", "b2", "b3"}
    assert faults == nm.schedule(4, nm.SECURITY_KINDS, ["c1", "c2", "c3"], ["b1", "b2", "b3"], 200, interval=5)


def test_security_nemeses_need_a_secured_cluster(tmp_path):
    code = runner.main(["--nemesis", "acl-flap", "--dry-run", "--out", str(tmp_path / "run"), "--seed", "1",
                        "--network", "none"])
    assert code == 2
    assert "needs --security sasl_ssl" in (tmp_path / "run" / "runner.log").read_text()
    assert runner.main(["--nemesis", "all", "--security", "sasl_ssl", "--dry-run", "--network", "proxy",
                        "--out", str(tmp_path / "ok"), "--seed", "1"]) == 0
    schedule = json.loads((tmp_path / "ok" / "schedule.json").read_text())
    assert schedule["security"] == "sasl_ssl"
    assert set(schedule["nemesis"]) >= set(nm.SECURITY_KINDS)
    with pytest.raises(RuntimeError, match="--security sasl_ssl"):
        nm.Nemesis(FakeCluster()).start(nm.Fault(0, "acl-flap", "write", 0, 1))


class FakeCluster:
    def nodes(self) -> list[Any]:
        return []


class RecordingFaults:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def start(self, fault: nm.Fault) -> dict[str, Any]:
        self.calls.append(("start", fault.kind))
        return {"targets": ["User:jepsen"], "acls_removed": 1}

    def stop(self, fault: nm.Fault) -> dict[str, Any]:
        self.calls.append(("stop", fault.kind))
        return {"restored": True}


def test_the_nemesis_hands_security_faults_to_the_security_side_and_heals_them():
    faults = RecordingFaults()
    nemesis = nm.Nemesis(FakeCluster(), security=faults)
    fault = nm.Fault(3, "acl-flap", "write", 0, 1)
    started = nemesis.start(fault)
    assert started["kind"] == "acl-flap" and started["targets"] == ["User:jepsen"] and started["acls_removed"] == 1
    nemesis.heal_all()  # an active security fault is undone like any other
    assert faults.calls == [("start", "acl-flap"), ("stop", "acl-flap")]
    nemesis.start(nm.Fault(4, "credential-flap", "password", 0, 1))
    assert nemesis.stop(nm.Fault(4, "credential-flap", "password", 0, 1))["restored"] is True


def test_cert_rotate_rewrites_the_key_store_and_counts_the_reloads_the_node_logged(tmp_path):
    plan = runner.plan_cluster(tmp_path, seed=3, network="none", security="sasl_ssl")
    pki = sec.Pki(plan)
    (plan.out / "logs").mkdir()
    log = plan.out / "logs" / "b2.log"
    log.write_text('{"event": "ssl certificates reloaded", "listener": "CLIENT"}\n')  # an earlier one
    faults = sec.SecurityFaults(plan, pki, topic_prefix="jepsen")
    before = sec.keystore(plan, plan.node("b2")).read_bytes()
    fault = nm.Fault(0, "cert-rotate", "one", 0, 1, nodes=("b2",))
    started = faults.start(fault)
    assert started["targets"] == ["b2"] and started["serial"]
    assert sec.keystore(plan, plan.node("b2")).read_bytes() != before
    with open(log, "a") as f:
        f.write('{"event": "ssl certificates reloaded", "listener": "INTERNAL"}\n')
        f.write('{"event": "ssl certificates reloaded", "listener": "CLIENT"}\n')
    assert faults.stop(fault) == {"targets": ["b2"], "reloads": 2}
    fault = nm.Fault(1, "cert-rotate", "one", 0, 1, nodes=("b2",))
    faults.start(fault)
    assert faults.stop(fault)["reloads"] == 0  # nothing reloaded since this rotation


# --- the checker ------------------------------------------------------------------------------------


def test_unauthorized_writes_are_counted_and_are_definite_failures():
    b = Builder()
    b.send(0, 1, 0, offset=0)
    b.send(0, 2, 0, result="fail", error=REFUSED)
    b.send(0, 3, 1, result="fail", error=f"produce: KafkaError{{code={REFUSED},val=29}}")
    b.send(0, 4, 0, offset=1)
    b.final_read(9, 0, [(0, 0, 1), (0, 1, 4)])
    b.final_read(9, 1, [])
    r = check(b.ops)
    assert r["valid"] is True, r
    assert r["unauthorized_writes"] == 2 and r["unauthorized_writes_read"] == 0
    assert r["details"]["unauthorized_writes"] == {"refused_by_broker": 1, "refused_by_client": 1}
    assert "security" not in r["details"]


def test_an_unauthorized_write_found_in_the_log_makes_the_run_invalid():
    b = Builder()
    b.send(0, 1, 0, result="fail", error=REFUSED)
    b.send(0, 2, 0, offset=1)
    b.final_read(9, 0, [(0, 0, 1), (0, 1, 2)])
    r = check(b.ops)
    assert r["valid"] is False
    assert r["aborted_reads"] == 1 and r["unauthorized_writes_read"] == 1
    assert r["details"]["unauthorized_writes_read"] == [
        {"value": 1, "refused_by": "broker", "at": [{"partition": 0, "offset": 0}]}]


def test_security_facts_come_from_the_nemesis_records():
    b = Builder()
    b.nemesis("start", {"id": 0, "kind": "cert-rotate", "variant": "one", "targets": ["b1"], "serial": "ab"})
    b.nemesis("stop", {"id": 0, "kind": "cert-rotate", "variant": "one", "targets": ["b1"], "reloads": 2})
    b.nemesis("start", {"id": 1, "kind": "cert-rotate", "variant": "one", "targets": ["c1"], "serial": "cd"})
    b.nemesis("stop", {"id": 1, "kind": "cert-rotate", "variant": "one", "targets": ["c1"], "reloads": 0})
    b.nemesis("start", {"id": 2, "kind": "acl-flap", "variant": "write", "acls_removed": 1})
    b.nemesis("stop", {"id": 2, "kind": "acl-flap", "variant": "write"})
    b.nemesis("start", {"id": 3, "kind": "credential-flap", "variant": "password", "old_password_refused": True})
    b.nemesis("stop", {"id": 3, "kind": "credential-flap", "variant": "password"})
    b.nemesis("start", {"id": 4, "kind": "acl-flap", "variant": "write", "error": "RuntimeError()"})
    b.send(0, 1, 0, offset=0)
    b.final_read(9, 0, [(0, 0, 1)])
    r = check(b.ops)
    assert r["details"]["security"] == {"cert_rotations": 2, "cert_reloads_seen": 1, "acl_flaps": 1,
                                        "acls_removed": 1, "credential_flaps": 1, "old_password_refused": 1}


def test_the_summary_says_what_the_security_faults_did():
    from tests.jepsen.report import summary_text

    b = Builder()
    b.nemesis("start", {"id": 0, "kind": "acl-flap", "variant": "write", "acls_removed": 1})
    b.send(0, 1, 0, result="fail", error=REFUSED)
    b.nemesis("stop", {"id": 0, "kind": "acl-flap", "variant": "write"})
    b.final_read(9, 0, [])
    r = check(b.ops)
    r["details"]["security"]["mode"] = "sasl_ssl"
    assert "security: sasl_ssl unauthorized_writes=1 (read later: 0) cert_rotations=0 (reloads seen: 0) " \
           "acl_flaps=1 credential_flaps=0 (old password refused: 0)" in summary_text(r, []).splitlines()
    r = check(Builder().ops)
    assert not any(line.startswith("security:") for line in summary_text(r, []).splitlines())
