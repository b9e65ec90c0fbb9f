"""A short Jepsen campaign against real processes: 3 controllers and 3 brokers, the queue workload,
one fault kind (kill -9, restarted) on brokers that reserve their segments' disk blocks
(log.preallocate), the final read and the checker. The whole test stays under two
minutes on a two-core machine; the long campaigns are `make jepsen` and `make soak`.

The start-up and final-read timeouts are generous: each wait ends as soon as the cluster answers or
the read reaches the high watermark, so they only bound a failure. Only the workload's own duration
(`--time-limit`) is spent in full."""

from __future__ import annotations

import json

import pytest

from tests.jepsen import runner
from tests.jepsen.history import read_history
from tests.jepsen.report import HISTORY, PLOT, RESULTS, SUMMARY

pytestmark = pytest.mark.slow

SEED = 7


def test_kill_smoke_campaign_is_valid(tmp_path):
    out = tmp_path / "run"
    # Brokers reserving each segment's blocks and rolling every two seconds (log.preallocate): the kills land
    # on reserved, rolling segments. The group and transaction smoke campaigns kill brokers on the defaults.
    code = runner.main(["--time-limit", "35", "--nemesis", "kill", "--seed", str(SEED), "--out", str(out),
                        "--startup-timeout", "120", "--final-read-timeout", "120", "--preallocate"])
    log = (out / "runner.log").read_text() if (out / "runner.log").exists() else ""
    assert code != 2, f"the harness failed:\n{log}"
    results = json.loads((out / RESULTS).read_text())
    summary = (out / SUMMARY).read_text()
    assert results["seed"] == SEED and results["nemesis"] == ["kill"]
    assert results["acked"] > 0, summary
    assert results["valid"] is True, summary
    # One producer sent in bursts, several requests in flight: its sends kept their order.
    assert results["details"]["pipelined_acked"] > 0 and results["reordered"] == 0, summary
    assert code == 0
    assert results["details"]["harness_errors"] == [], results["details"]["harness_errors"]
    history = read_history(out / HISTORY)
    starts = [op for op in history if op.f == "nemesis" and op.fault["phase"] == "start"]
    assert starts and all(op.fault["kind"] == "kill" for op in starts)
    assert (out / PLOT).stat().st_size > 0
    # The replicas of every partition hold the same batches once healed: none diverged, none left behind.
    replicas = results["details"]["replicas"]
    assert replicas["partitions"] > 0 and replicas["replicas"] == 3 * replicas["partitions"], replicas
    assert results["replicas_diverged"] == 0 and replicas["behind"] == [], replicas
    reserved = results["details"]["preallocate"]
    assert reserved["segments"] > reserved["replicas"] > 0, reserved  # segments rolled during the campaign
    assert reserved["finished_segments_still_reserved"] == 0, reserved
    # The session consumer read through fetch sessions under the kills, and reached every high watermark.
    sessions = results["details"]["session_consumers"]
    assert sessions["drains"] == 1 and sessions["records"] > 0 and results["session_reads_behind"] == 0, sessions
    assert "session consumers (fetch sessions)" in summary
