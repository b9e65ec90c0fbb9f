"""The report: results.json, summary.txt and the PNG from a synthetic history."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.jepsen import report
from tests.jepsen.checker import check
from tests.jepsen.history import write_history
from tests.jepsen.synthetic import Builder, synthetic_run

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def test_fault_windows_pair_start_and_stop_and_close_open_ones():
    b = Builder()
    b.nemesis("start", {"id": 0, "kind": "kill", "variant": "one"}, at=1_000)
    b.nemesis("stop", {"id": 0, "kind": "kill", "variant": "one"}, at=5_000)
    b.nemesis("start", {"id": 1, "kind": "partition"}, at=9_000)
    b.send(0, 1, 0, offset=0)
    windows = report.fault_windows(b.ops)
    assert [(w["label"], w["start"], w["stop"]) for w in windows] == [
        ("kill one", 1_000, 5_000), ("partition", 9_000, b.ops[-1].time)]


def test_results_and_summary(tmp_path):
    history = synthetic_run(5, seconds=12)
    results = check(history, seed=5, nemesis=["kill", "pause"])
    report.write_report(history, results, tmp_path)
    saved = json.loads((tmp_path / report.RESULTS).read_text())
    for key in ("valid", "acked", "lost", "unseen", "duplicated", "inconsistent_offsets", "nonmonotonic",
                "aborted_reads", "availability", "seed", "nemesis"):
        assert key in saved
    assert saved["seed"] == 5 and saved["nemesis"] == ["kill", "pause"]
    summary = (tmp_path / report.SUMMARY).read_text()
    assert "valid: True" in summary and "seed: 5" in summary
    assert f"faults: {len(report.fault_windows(history))}" in summary


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is not installed")
def test_png_is_rendered(tmp_path):
    history = synthetic_run(9, seconds=20)
    written = report.write_report(history, check(history, seed=9, nemesis=["all"]), tmp_path)
    png = written["plot"]
    assert png is not None and png.exists()
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


def test_report_main_rechecks_a_directory(tmp_path, capsys):
    history = synthetic_run(2, seconds=6)
    write_history(tmp_path / report.HISTORY, history)
    (tmp_path / report.RESULTS).write_text(json.dumps({"seed": 2, "nemesis": ["link"]}))
    assert report.main([str(tmp_path)]) == 0
    assert json.loads((tmp_path / report.RESULTS).read_text())["nemesis"] == ["link"]
    assert "valid: True" in capsys.readouterr().out


def test_a_group_run_reports_the_group_checks(tmp_path):
    b = Builder()
    b.send(0, 10, 0, offset=0)
    b.send(0, 11, 0, offset=1)
    b.assign("m1", [0])
    b.consume("m1", 1, [(0, 0, 10), (0, 1, 11)])
    b.commit("m1", 1, [(0, 2)])
    b.committed(2, [(0, 1)])  # went back
    b.drain(3, [(0, 2)])
    results = check(b.ops, seed=1, nemesis=["kill"])
    report.write_report(b.ops, results, tmp_path)
    saved = json.loads((tmp_path / report.RESULTS).read_text())
    assert saved["workload"] == "group"
    assert (saved["group_lost"], saved["committed_regressions"], saved["redelivered_after_commit"]) == (0, 1, 0)
    summary = (tmp_path / report.SUMMARY).read_text()
    assert "valid: False" in summary
    assert "group: group_lost=0, committed_regressions=1, redelivered_after_commit=0" in summary
    assert "group: drained=True acked_commits=1 committed_reads=1 assignment_changes=1 deliveries=2 redeliveries=0" in summary
    assert "committed_regressions (first 1 of 1):" in summary


def _valid_group_history(directory: Path) -> None:
    """A valid group run's history: one value sent, consumed, committed and drained."""
    b = Builder()
    b.send(0, 10, 0, offset=0)
    b.assign("m1", [0])
    b.consume("m1", 1, [(0, 0, 10)])
    b.commit("m1", 1, [(0, 1)])
    b.drain(3, [(0, 1)])
    write_history(directory / report.HISTORY, b.ops)


def test_report_main_keeps_what_the_runner_knew(tmp_path, capsys):
    _valid_group_history(tmp_path)
    facts = dict(zip(report.RUN_FACTS, ("g", "range", False, 4, 1, 0), strict=True))
    (tmp_path / report.RESULTS).write_text(json.dumps({"seed": 3, "nemesis": ["kill"], "details": {
        "network": "proxy", "harness_errors": ["x"], "group": {**facts, "acked_commits": 99},
        "duplicated_provenance": [{"value": 10, "verdict": "new epoch", "copies": []}]}}))
    assert report.main([str(tmp_path)]) == 0
    saved = json.loads((tmp_path / report.RESULTS).read_text())
    assert saved["valid"] is True
    assert saved["details"]["network"] == "proxy" and saved["details"]["harness_errors"] == ["x"]
    assert saved["details"]["duplicated_provenance"][0]["verdict"] == "new epoch"  # read from logs, kept
    group = saved["details"]["group"]
    assert {k: group[k] for k in report.RUN_FACTS} == facts
    assert group["acked_commits"] == 1  # checked again, not carried over
    assert "group: g assignor=range static=False members started=4 stopped=1 killed=0" in capsys.readouterr().out


def test_report_main_keeps_the_replicas_read_from_the_logs(tmp_path, capsys):
    _valid_group_history(tmp_path)
    replicas = {"partitions": 1, "replicas": 3, "behind": [],
                "diverged": [{"partition": 0, "replicas": {"b4": {"batches": 2, "last_offset": 1}}}]}
    (tmp_path / report.RESULTS).write_text(json.dumps({"seed": 3, "nemesis": ["kill"], "replicas_diverged": 1,
                                                       "details": {"replicas": replicas}}))
    assert report.main([str(tmp_path)]) == 1  # the history alone is valid; the logs were not
    saved = json.loads((tmp_path / report.RESULTS).read_text())
    assert saved["valid"] is False and saved["replicas_diverged"] == 1
    assert saved["details"]["replicas"] == replicas
    assert "replicas: 3 of 1 partitions read after the stop; diverged=1 behind=0" in capsys.readouterr().out
