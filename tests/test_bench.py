"""The benchmarks that build what they measure in-process still run against the code as it is: a change
to a request or a record they use fails here, not first in `make bench`."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench_module(name: str):
    """bench/<name>.py, imported as the benchmark runs it (bench/ first on the path while it loads)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_the_testing_benchmark_runs_at_small_sizes():
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "testing.py"), "--quick"], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "## testing" in run.stdout
    assert "fixture request to the first acknowledged produce" in run.stdout


def test_the_metadata_benchmark_runs_at_small_sizes():
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "metadata.py"), "--sizes", "100,200", "--reps", "5"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "## metadata" in run.stdout
    assert "fence one broker" in run.stdout


def test_the_requests_benchmark_runs_against_kraftpy():
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "requests.py"), "--requests", "50", "--warmup", "5",
                          "--rounds", "1", "--spaced", "20", "--no-peers"], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "## requests" in run.stdout
    rows = [line for line in run.stdout.splitlines() if line.startswith("| Produce, one record")]
    assert len(rows) == 1 and " µs / - / - |" in rows[0], run.stdout
    assert rows[0].endswith(" µs / - |"), rows[0]  # the spaced requests' CPU, kraftpy's alone


def _page(date: str, ratio: str, verdict: str, other: str = "2.00x") -> str:
    return (f"# Benchmarks\n\nRun on {date}: 2 cores.\n## peers\n\nText.\n\n"
            "| phase | client | record | acks | kraftpy / best peer |\n|---|---|---:|---|---:|\n"
            f"| produce | cperf (C) | 100 B | 1 | {ratio} |\n"
            f"| produce | cperf (C) | 100 B | all | {other} |\n\n"
            f"Goal (kraftpy ≥ 1.5x the best peer): **{verdict}** for produce.\n")


def test_bench_run_lists_the_tracked_ratios_that_moved_against_the_previous_page():
    run = bench_module("run")
    old = _page("2026-11-01", "1.25x", "not met")
    new = _page("2026-11-02", "1.60x", "met", other="2.02x")  # 2.00x -> 2.02x moved by 1%: not listed
    changes = run.ratio_changes(old, new)
    assert changes == [
        "peers: produce / cperf (C) / 100 B / 1, kraftpy / best peer: 1.25x → 1.60x",
        "peers: goal (kraftpy ≥ 1.5x the best peer): not met → met",
    ]
    page = run.with_comparison(new, changes, run.page_date(old))
    assert page.startswith(new.rstrip("\n"))
    assert f"## {run.COMPARED}" in page and "the page of 2026-11-01" in page and "- peers: goal" in page
    # Written anew each time, never twice.
    again = run.with_comparison(page, [], run.page_date(new))
    assert again.count(f"## {run.COMPARED}") == 1 and "None moved." in again
    assert run.ratio_changes(new, new) == []


def test_a_partial_bench_run_keeps_the_comparison_lines_of_the_sections_it_did_not_run():
    run = bench_module("run")
    page = run.with_comparison(_page("2026-11-02", "1.60x", "met"), [
        "peers: produce / cperf (C) / 100 B / 1, kraftpy / best peer: 1.25x → 1.60x",
        "latency: goal (end-to-end p99 ≤ 10 ms): met → not met",
    ], "2026-11-01")
    # A run of the latency section alone rewrites its own lines and leaves the peers' as they were.
    assert run.compared_lines(page, exclude=["latency"]) == [
        "peers: produce / cperf (C) / 100 B / 1, kraftpy / best peer: 1.25x → 1.60x"]
    assert run.compared_lines(page, exclude=["peers", "latency"]) == []
    assert run.compared_lines("# Benchmarks\n", exclude=[]) == []


def test_bench_run_refuses_a_name_that_is_no_section_before_running_anything():
    page = ROOT / "docs" / "benchmarks.md"
    before = page.read_bytes()
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--help"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert run.returncode == 2
    assert "not a section: --help" in run.stderr and "latency" in run.stderr
    assert page.read_bytes() == before  # no "## --help" section of a failed benchmark


def test_peers_reads_the_c_clients_requests_from_the_last_statistics_and_its_cpu_a_record(tmp_path):
    """bench/peers.py's columns on both sides: the requests and bytes of the last of librdkafka's
    statistics (the broker's connection, not the bootstrap one), a file emptied before each phase
    (cperf appends, and the phase runs against each broker in turn), and the load generator's CPU
    a record over the whole phase."""
    import json
    import types

    peers = bench_module("peers")
    path = tmp_path / "phase.stats"
    path.write_text("stale line of the other broker's phase\n")
    assert peers.stats_args(path) == (f"cperf.stats={path}", f"statistics.interval.ms={peers.STATS_INTERVAL_MS}")
    assert not path.exists()
    assert peers.client_requests(path, "Fetch") == (0, 0)  # a phase too short for one snapshot

    def snapshot(fetches: int, received: int) -> str:
        return json.dumps({"brokers": {
            "127.0.0.1:9092/bootstrap": {"nodeid": -1, "req": {"Fetch": 0, "Metadata": 2}, "rxbytes": 500},
            "127.0.0.1:9092/1": {"nodeid": 1, "req": {"Fetch": fetches, "ListOffsets": 1}, "rxbytes": received,
                                 "txbytes": 7}}})

    path.write_text(snapshot(2, 2_000_000) + "\n" + snapshot(5, 5_300_000) + "\n\n")
    assert peers.client_requests(path, "Fetch") == (5, 5_300_000)
    assert peers.client_requests(path, "Produce") == (0, 7)
    meter = types.SimpleNamespace(server=0.5, client=0.25, children=0.75, wall=2.0)
    row = peers.meter_row(1_000_000, 1.5, meter, (5, 5_300_000))
    assert round(row.client_ns) == 1_000  # all of the client's second of CPU over the million records
    assert row.client_cores == 0.5 and row.records_per_s == 1_000_000 / 1.5
    assert peers.request_bytes(row) == f"{5_300_000 / 5 / 1024:,.0f}"


def test_peers_goal_leaves_out_the_reference_row_and_takes_the_best_peer():
    """The verdict names every C-client row under 1.5x the best peer (Redis where it is faster than
    Tansu), and not the reference row of a raised max.partition.fetch.bytes, which is outside the goal."""
    peers = bench_module("peers")

    def row(rate: float) -> peers.Row:
        return peers.Row(rate, 1.0, 0.5, 0.5, 100.0)

    kraft = {("produce", "c", 100, "1"): row(1_600_000), ("consume", "c", 100, "-"): row(1_400_000),
             (peers.LARGE_ANSWERS_PHASE, "c", 100, "-"): row(1_000_000),
             ("produce", "python", 100, "1"): row(100)}
    peer = {("produce", "c", 100, "1"): row(1_000_000), ("consume", "c", 100, "-"): row(900_000),
            (peers.LARGE_ANSWERS_PHASE, "c", 100, "-"): row(2_000_000),
            ("produce", "python", 100, "1"): row(1_000_000)}
    redis = {("consume", 100): row(1_000_000)}
    # produce: 1.6x Tansu, met; consume: 1.56x Tansu but 1.4x Redis, missed; the reference row and the
    # Python client's row are not the goal's.
    assert peers.goal_misses(kraft, peer, redis) == ["consume 100 B"]
    assert peers.best_peer_ratio(kraft[("consume", "c", 100, "-")], peer[("consume", "c", 100, "-")],
                                 redis[("consume", 100)]) == 1.4
    assert "max.partition.fetch.bytes=6 MiB" in peers.LARGE_ANSWERS_PHASE


def test_latency_reads_the_machines_busy_time_from_proc_stat(tmp_path):
    """bench/latency.py's share of the machine busy over a run: every tick but idle and iowait, of the
    first line (all cores) of /proc/stat; the per-core lines after it are not counted again."""
    latency = bench_module("latency")
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 800 40 3 2 7 0 0\ncpu0 50 2 25 400 20 1 1 3 0 0\nintr 12345\n")
    assert latency.machine_ticks(str(stat)) == (160, 1000)  # steal (7) is past the seven fields read
    busy, total = latency.machine_ticks()
    assert 0 < busy < total
