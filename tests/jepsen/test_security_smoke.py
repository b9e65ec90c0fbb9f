"""A short campaign against a secured cluster of real processes (`--security sasl_ssl`): 3 controllers
and 3 brokers talking TLS with client certificates, the queue workload's clients logging in with
SCRAM-SHA-512 over SASL_SSL as a user holding only its ACLs, while the nemesis rotates nodes'
certificates (reloaded without a restart) and takes the producers' WRITE ACL away for a few seconds.
Nothing acknowledged may be lost, and no write refused by authorization may be in the log."""

from __future__ import annotations

import json

import pytest

from tests.jepsen import runner
from tests.jepsen.history import NEMESIS, SEND, read_history
from tests.jepsen.report import HISTORY, RESULTS, SUMMARY

pytestmark = pytest.mark.slow

SEED = 5  # with --interval 5 and --time-limit 15: cert-rotate, acl-flap, cert-rotate


def test_secured_campaign_with_cert_rotation_and_acl_flaps_is_valid(tmp_path):
    out = tmp_path / "run"
    # Its own ports (--base-port): make test runs test files in two workers, so two campaigns may run at once.
    code = runner.main(["--security", "sasl_ssl", "--nemesis", "cert-rotate,acl-flap", "--time-limit", "15",
                        "--interval", "5", "--seed", str(SEED), "--base-port", "19600", "--out", str(out), "--network", "none",
                        "--producers", "2", "--consumers", "1", "--startup-timeout", "120",
                        "--final-read-timeout", "60"])
    log = (out / "runner.log").read_text() if (out / "runner.log").exists() else ""
    assert code != 2, f"the harness failed:\n{log}"
    results = json.loads((out / RESULTS).read_text())
    summary = (out / SUMMARY).read_text()
    assert results["valid"] is True, summary
    assert code == 0
    assert results["acked"] > 0, summary
    assert results["details"]["harness_errors"] == [], results["details"]["harness_errors"]
    security = results["details"]["security"]
    assert security["mode"] == "sasl_ssl"
    # the attacks happened: certificates rotated (and a node was seen reloading one), writes refused
    assert security["cert_rotations"] == 2 and security["cert_reloads_seen"] >= 1, summary
    assert security["acl_flaps"] == 1 and security["acls_removed"] == 1, summary
    assert results["unauthorized_writes"] > 0, summary
    assert results["details"]["unauthorized_writes"]["refused_by_broker"] > 0, summary
    assert results["unauthorized_writes_read"] == 0 and results["aborted_reads"] == 0, summary
    history = read_history(out / HISTORY)
    faults = [op for op in history if op.f == NEMESIS]
    flap = next(i for i, op in enumerate(faults) if op.fault["kind"] == "acl-flap")
    # (a start is recorded once it is done: every broker applied the change)
    before, restored = faults[flap - 1].time, faults[flap + 1].time
    assert faults[flap - 1].fault["kind"] == "cert-rotate" and faults[flap + 1].fault["phase"] == "stop"
    assert faults[flap].fault["applied_on"] == ["b1", "b2", "b3"]
    refused = [op for op in history if op.f == SEND and op.type == "fail"]
    assert refused and all("TOPIC_AUTHORIZATION_FAILED" in op.error for op in refused)
    assert all(before < op.time for op in refused)  # none before the flap began
    # writes are acknowledged again once the ACL is back
    assert any(op.f == SEND and op.type == "ok" and op.time > restored for op in history)
    # the nodes served a SASL_SSL client listener and TLS between themselves
    assert "CLIENT://" in (out / "config" / "b1.properties").read_text()
