"""A short consumer-group campaign against real processes: 3 controllers and 3 brokers, three group
members replaced and killed now and then, kill -9 faults (the group's coordinator among the targets),
the drain, the final read and the checker, in about a minute on two cores."""

from __future__ import annotations

import json

import pytest

from tests.jepsen import runner
from tests.jepsen.history import ASSIGN, COMMIT, CONSUME, read_history
from tests.jepsen.member import evidence
from tests.jepsen.report import HISTORY, RESULTS, SUMMARY

pytestmark = pytest.mark.slow

SEED = 11


def test_group_kill_smoke_campaign_is_valid(tmp_path):
    out = tmp_path / "run"
    # Its own ports (--base-port): make test runs test files in two workers, so two campaigns may run at once.
    code = runner.main(["--workload", "group", "--time-limit", "25", "--nemesis", "kill", "--interval", "9",
                        "--churn-interval", "9", "--seed", str(SEED), "--base-port", "19200", "--out", str(out), "--network", "none",
                        "--offsets-partitions", "6", "--startup-timeout", "120", "--final-read-timeout", "60",
                        "--drain-timeout", "60"])
    log = (out / "runner.log").read_text() if (out / "runner.log").exists() else ""
    assert code != 2, f"the harness failed:\n{log}"
    results = json.loads((out / RESULTS).read_text())
    summary = (out / SUMMARY).read_text()
    members_log = out / "logs" / "members.log"
    if members_log.exists():  # a finding comes with what the members were told (a CI run keeps only its output)
        summary += "\n\nwhere the members' positions came from (librdkafka):\n" + "\n".join(
            evidence(members_log.read_text(errors="replace")))
    assert results["workload"] == "group" and results["nemesis"] == ["kill"]
    assert results["acked"] > 0, summary
    assert (results["group_lost"], results["committed_regressions"], results["redelivered_after_commit"]) == (0, 0, 0), \
        summary
    assert results["valid"] is True, summary
    assert code == 0
    group = results["details"]["group"]
    assert group["drained"] is True and group["acked_commits"] > 0 and group["committed_reads"] > 0, summary
    assert group["members_started"] > 3, summary  # members were replaced during the run
    assert results["details"]["harness_errors"] == [], results["details"]["harness_errors"]
    history = read_history(out / HISTORY)
    members = {op.member for op in history if op.f == CONSUME and op.records}
    assert len(members) >= 2, members
    assert any(op.f == ASSIGN for op in history) and any(op.f == COMMIT and op.type == "ok" for op in history)
