"""A short transaction campaign against real processes: 3 controllers and 3 brokers, transactional
producers (some transactions aborted on purpose, clients killed and replaced), read_committed and
read_uncommitted consumers, the consume-transform-produce process, kill -9 faults (the transform's
transaction coordinator among the targets), the final read and the transaction checker."""

from __future__ import annotations

import json

import pytest

from tests.jepsen import runner
from tests.jepsen.history import TXN, TXN_FINAL_READ, read_history
from tests.jepsen.report import HISTORY, RESULTS, SUMMARY, TXN_ANOMALIES

pytestmark = pytest.mark.slow

SEED = 13


def test_txn_kill_smoke_campaign_is_valid(tmp_path):
    out = tmp_path / "run"
    # Its own ports (--base-port): make test runs test files in two workers, so two campaigns may run at once.
    code = runner.main(["--workload", "txn", "--time-limit", "20", "--nemesis", "kill", "--interval", "8",
                        "--churn-interval", "8", "--seed", str(SEED), "--base-port", "19400", "--out", str(out), "--network", "none",
                        "--producers", "2", "--consumers", "1", "--offsets-partitions", "4", "--txn-partitions", "4",
                        "--transaction-timeout-ms", "6000", "--startup-timeout", "120",
                        "--final-read-timeout", "60"])
    log = (out / "runner.log").read_text() if (out / "runner.log").exists() else ""
    assert code != 2, f"the harness failed:\n{log}"
    results = json.loads((out / RESULTS).read_text())
    summary = (out / SUMMARY).read_text()
    assert results["workload"] == "txn" and results["nemesis"] == ["kill"]
    assert {k: results[k] for k in TXN_ANOMALIES} == dict.fromkeys(TXN_ANOMALIES, 0), summary
    assert results["valid"] is True and results["ok"] is True, summary
    assert code == 0
    txns = results["details"]["transactions"]
    assert txns["committed"] > 0 and txns["deliberately_aborted"] > 0, summary
    assert txns["transform_committed"] > 0, summary
    assert results["details"]["read_uncommitted"]["aborted_records_seen"] > 0, summary  # aborts were in the log
    assert results["details"]["harness_errors"] == [], results["details"]["harness_errors"]
    history = read_history(out / HISTORY)
    finals = [op for op in history if op.f == TXN_FINAL_READ and op.type == "ok" and op.error is None]
    assert len(finals) == 9, summary  # every partition of the three topics read to its end
    assert any(op.f == TXN and op.type == "ok" and op.reads for op in history)  # the transform committed
