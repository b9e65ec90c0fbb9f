"""Reports of a run: results.json, summary.txt and a PNG of latency and throughput over time with
the fault windows shaded.

`python -m tests.jepsen.report DIR` checks DIR/history.jsonl again and rewrites the report (the seed
and nemesis are taken from an existing DIR/results.json when there is one).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.jepsen.checker import check, pair_ops
from tests.jepsen.history import FAIL, INFO, NEMESIS, OK, Op, read_history
from tests.jepsen.txn_checker import check_txn, is_txn_history

RESULTS = "results.json"
SUMMARY = "summary.txt"
PLOT = "latency-throughput.png"
HISTORY = "history.jsonl"
#: what the runner adds to details.group (kept when a report is rewritten)
TXN_ANOMALIES = ("aborted_reads", "lost_committed_writes", "duplicated_committed_writes", "g0", "g1c",
                 "nonmonotonic_polls", "transform_lost")
RUN_FACTS = ("group_id", "assignor", "static_members", "members_started", "members_stopped", "members_killed")


def fault_windows(history: list[Op]) -> list[dict[str, Any]]:
    """Fault windows from the nemesis records: start and stop paired by fault id; a fault still on
    when the history ends lasts until its last op."""
    end = history[-1].time if history else 0
    started: dict[Any, Op] = {}
    windows: list[dict[str, Any]] = []
    for op in history:
        if op.f != NEMESIS or not op.fault:
            continue
        fid = op.fault.get("id")
        if op.fault.get("phase") == "start":
            started[fid] = op
        elif op.fault.get("phase") == "stop" and fid in started:
            s = started.pop(fid)
            windows.append({"id": fid, "kind": s.fault.get("kind"), "label": _label(s.fault),
                            "start": s.time, "stop": op.time})
    for fid, s in started.items():
        windows.append({"id": fid, "kind": s.fault.get("kind"), "label": _label(s.fault),
                        "start": s.time, "stop": end})
    windows.sort(key=lambda w: w["start"])
    return windows


def _label(fault: dict[str, Any]) -> str:
    kind = fault.get("kind", "?")
    variant = fault.get("variant")
    return f"{kind} {variant}" if variant else str(kind)


def write_results(results: dict[str, Any], out: Path) -> Path:
    path = out / RESULTS
    path.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")
    return path


def summary_text(results: dict[str, Any], windows: list[dict[str, Any]]) -> str:
    if results.get("workload") == "txn":
        return txn_summary_lines(results, windows)
    lines = [
        f"valid: {results['valid']}",
        f"seed: {results['seed']}    nemesis: {results['nemesis']}",
        f"acked sends: {results['acked']}    availability: "
        + ("n/a" if results["availability"] is None else f"{results['availability'] * 100:.1f}%"),
        "anomalies: " + ", ".join(f"{k}={results.get(k)}" for k in (
            "lost", "unseen", "duplicated", "inconsistent_offsets", "nonmonotonic", "aborted_reads", "reordered")),
    ]
    replicas = results.get("details", {}).get("replicas")
    if replicas is not None:
        lines.append(f"replicas: {replicas['replicas']} of {replicas['partitions']} partitions read after the stop; "
                     f"diverged={len(replicas['diverged'])} behind={len(replicas['behind'])}")
    sessions = results.get("details", {}).get("session_consumers")
    if sessions and sessions["drains"]:
        lines.append(f"session consumers (fetch sessions): {sessions['polls']} polls, {sessions['records']} records "
                     f"read; drained to every high watermark: {results.get('session_reads_behind')} partitions behind")
    pipelined = results.get("details", {}).get("pipelined_acked")
    if pipelined:
        lines.append(f"pipelined sends acknowledged: {pipelined} (checked for reordering)")
    if results.get("workload") == "group":
        g = results.get("details", {}).get("group", {})
        lines.append("group: " + ", ".join(f"{k}={results[k]}" for k in (
            "group_lost", "committed_regressions", "redelivered_after_commit")))
        lines.append(f"group: drained={g.get('drained')} acked_commits={g.get('acked_commits')} "
                     f"committed_reads={g.get('committed_reads')} assignment_changes={g.get('assignment_changes')} "
                     f"deliveries={g.get('deliveries')} redeliveries={g.get('redeliveries')} "
                     f"group_unseen={g.get('group_unseen_count')} "
                     f"redelivered_after_racing_commit={g.get('redelivered_after_racing_commit_count')} "
                     f"unassigned_reads={g.get('unassigned_reads_count')}")
        if "members_started" in g:
            lines.append(f"group: {g['group_id']} assignor={g['assignor']} static={g['static_members']} "
                         f"members started={g['members_started']} stopped={g['members_stopped']} "
                         f"killed={g['members_killed']}")
    unexpected = results.get("details", {}).get("unexpected_count", 0)
    if unexpected:
        lines.append(f"unexpected values read (never sent): {unexpected}")
    for f, lat in sorted(results.get("latency", {}).items()):
        lines.append(f"latency {f}: n={lat['count']} p50={lat['p50_ms']:.1f}ms p90={lat['p90_ms']:.1f}ms "
                     f"p99={lat['p99_ms']:.1f}ms max={lat['max_ms']:.1f}ms")
    ops = results.get("details", {}).get("ops", {})
    for f, c in sorted(ops.items()):
        lines.append(f"ops {f}: " + " ".join(f"{k}={v}" for k, v in c.items()))
    network = results.get("details", {}).get("network")
    if network:
        lines.append(f"network: {network}")
    lines.extend(f"harness error: {e}" for e in results.get("details", {}).get("harness_errors") or ())
    lines.extend(security_lines(results))
    for roll in results.get("details", {}).get("rolls") or ():
        lines.append(f"roll (fault {roll['fault']}): {roll['total_s']:.1f}s for {len(roll['nodes'])} nodes: "
                     + ", ".join(f"{n['node']} {n['back_s']:.1f}s" for n in roll["nodes"]))
    membership = results.get("details", {}).get("membership")
    if membership:
        voters = membership.get("voters_at_end")
        lines.append(f"membership: removed={membership['removed']} (leaders {membership['leaders_removed']}, "
                     f"disks replaced {membership['disks_replaced']}) added={membership['added']} "
                     f"skipped={membership['skipped']} errors={len(membership['errors'])} voters at the end: "
                     + (", ".join(sorted(voters)) if isinstance(voters, dict) else str(voters)))
    lines.append(f"faults: {len(windows)}")
    for w in windows:
        lines.append(f"  {w['start'] / 1e9:8.2f}s - {w['stop'] / 1e9:8.2f}s  {w['label']}")
    details = results.get("details", {})
    for key in ("lost", "unseen", "duplicated", "inconsistent_offsets", "nonmonotonic", "aborted_reads", "reordered"):
        items = details.get(key) or []
        if items:
            lines.append(f"{key} (first {min(len(items), 5)} of {results[key]}):")
            lines.extend(f"  {json.dumps(item, default=str)}" for item in items[:5])
    for item in (details.get("duplicated_provenance") or [])[:5]:
        lines.append(f"duplicated value {item['value']}: {item['verdict']}: " + "; ".join(
            f"p{c['partition']}@{c['offset']} producer {c.get('producer_id')} epoch {c.get('producer_epoch')} "
            f"seq {c.get('sequence')} leader epoch {c.get('leader_epoch')} on {','.join(c['held_by']) or 'none'}"
            for c in item["copies"]))
    group = details.get("group", {})
    for key in ("group_lost", "committed_regressions", "redelivered_after_commit"):
        items = group.get(key) or []
        if items:
            lines.append(f"{key} (first {min(len(items), 5)} of {results[key]}):")
            lines.extend(f"  {json.dumps(item, default=str)}" for item in items[:5])
    return "\n".join(lines) + "\n"


def security_lines(results: dict[str, Any]) -> list[str]:
    """The summary's line on a secured cluster's run: writes refused by authorization (queue and
    group workloads) and what the security faults did."""
    security = results.get("details", {}).get("security")
    if not security and not results.get("unauthorized_writes"):
        return []
    security = security or {}
    refused = "" if "unauthorized_writes" not in results else (
        f" unauthorized_writes={results['unauthorized_writes']} (read later: {results.get('unauthorized_writes_read')})")
    return [f"security: {security.get('mode', '')}{refused} cert_rotations={security.get('cert_rotations', 0)} "
            f"(reloads seen: {security.get('cert_reloads_seen', 0)}) acl_flaps={security.get('acl_flaps', 0)} "
            f"credential_flaps={security.get('credential_flaps', 0)} "
            f"(old password refused: {security.get('old_password_refused', 0)})"]


def txn_summary_lines(results: dict[str, Any], windows: list[dict[str, Any]]) -> str:
    """The summary of a transaction-workload run."""
    details = results.get("details", {})
    txns = details.get("transactions", {})
    ru = details.get("read_uncommitted", {})
    lines = [
        f"valid: {results['valid']}    ok: {results['ok']}",
        f"seed: {results['seed']}    nemesis: {results['nemesis']}",
        f"transactions: committed={txns.get('committed')} aborted={txns.get('aborted')} "
        f"(deliberately {txns.get('deliberately_aborted')}) unknown={txns.get('unknown')} "
        f"transform_committed={txns.get('transform_committed')}",
        f"committed records: {results['acked']}    read_committed values read: "
        f"{details.get('read_committed_values')}    availability: "
        + ("n/a" if results["availability"] is None else f"{results['availability'] * 100:.1f}%"),
        "anomalies: " + ", ".join(f"{k}={results[k]}" for k in TXN_ANOMALIES),
        f"unseen={details.get('unseen_count')} transform_unseen={details.get('transform_unseen_count')} "
        f"inconsistent_offsets={details.get('inconsistent_offsets_count')} "
        f"unexpected={details.get('unexpected_count')} ww_interleavings (allowed)={details.get('ww_interleavings')}",
        f"read_uncommitted: {ru.get('records')} records, {ru.get('aborted_records_seen')} of aborted transactions",
    ]
    for f, lat in sorted(results.get("latency", {}).items()):
        lines.append(f"latency {f}: n={lat['count']} p50={lat['p50_ms']:.1f}ms p90={lat['p90_ms']:.1f}ms "
                     f"p99={lat['p99_ms']:.1f}ms max={lat['max_ms']:.1f}ms")
    for f, c in sorted(details.get("ops", {}).items()):
        lines.append(f"ops {f}: " + " ".join(f"{k}={v}" for k, v in c.items()))
    if details.get("network"):
        lines.append(f"network: {details['network']}")
    lines.extend(f"harness error: {e}" for e in details.get("harness_errors") or ())
    for key, value in sorted((details.get("txn_run") or {}).items()):
        lines.append(f"run: {key}={value}")
    lines.extend(security_lines(results))
    lines.append(f"faults: {len(windows)}")
    for w in windows:
        lines.append(f"  {w['start'] / 1e9:8.2f}s - {w['stop'] / 1e9:8.2f}s  {w['label']}")
    for key in (*TXN_ANOMALIES, "unseen", "inconsistent_offsets", "unexpected"):
        items = details.get(key) or []
        if items:
            lines.append(f"{key} (first {min(len(items), 5)}):")
            lines.extend(f"  {json.dumps(item, default=str)}" for item in items[:5])
    return "\n".join(lines) + "\n"


def plot(history: list[Op], windows: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Latency scatter (ok/fail/info, one marker per f) above ok-throughput per second, with the fault
    windows shaded in both. Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {OK: "#1f77b4", FAIL: "#d62728", INFO: "#ff7f0e"}
    markers = {"send": "o", "poll": "s", "final-read": "^", "consume": "D", "commit": "P", "committed": "X",
               "drain": "v",
               "txn": "o", "txn-poll": "s", "txn-final-read": "^"}
    points: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    throughput: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for inv, comp in pair_ops(history):
        if comp is None:
            continue
        xs, ys = points[(inv.f, comp.type)]
        xs.append(inv.time / 1e9)
        ys.append(max((comp.time - inv.time) / 1e6, 1e-3))
        if comp.type == OK:
            throughput[inv.f][int(comp.time // 1_000_000_000)] += 1

    fig, (ax_lat, ax_tp) = plt.subplots(2, 1, figsize=(12, 7), sharex=True,
                                        gridspec_kw={"height_ratios": [3, 2]})
    for (f, type_), (xs, ys) in sorted(points.items()):
        ax_lat.scatter(xs, ys, s=6, alpha=0.6, c=colors[type_], marker=markers.get(f, "."),
                       label=f"{f} {type_}", linewidths=0)
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("latency (ms)")
    for f, per_second in sorted(throughput.items()):
        if not per_second:
            continue
        seconds = list(range(min(per_second), max(per_second) + 1))
        ax_tp.step(seconds, [per_second.get(s, 0) for s in seconds], where="post", label=f"{f} ok/s")
    ax_tp.set_ylabel("ok ops per second")
    ax_tp.set_xlabel("time (s)")
    shades = ["#999999", "#bbbbbb"]
    for i, w in enumerate(windows):
        for ax in (ax_lat, ax_tp):
            ax.axvspan(w["start"] / 1e9, w["stop"] / 1e9, color=shades[i % 2], alpha=0.25, linewidth=0)
        ax_lat.annotate(w["label"], xy=(w["start"] / 1e9, 1.0), xycoords=("data", "axes fraction"),
                        fontsize=7, rotation=90, va="top", ha="left", alpha=0.8)
    if points:
        ax_lat.legend(loc="upper right", fontsize=7, markerscale=2)
    if throughput:
        ax_tp.legend(loc="upper right", fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_report(history: list[Op], results: dict[str, Any], out: str | Path) -> dict[str, Path | None]:
    """Writes results.json, summary.txt and (when matplotlib is installed) the PNG into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    windows = fault_windows(history)
    written: dict[str, Path | None] = {"results": write_results(results, out)}
    summary = summary_text(results, windows)
    try:
        title = f"seed {results.get('seed')}  nemesis {results.get('nemesis')}  valid {results.get('valid')}"
        written["plot"] = plot(history, windows, out / PLOT, title)
    except ImportError:
        written["plot"] = None
        summary += "plot: not drawn (matplotlib is not installed)\n"
    (out / SUMMARY).write_text(summary)
    written["summary"] = out / SUMMARY
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.jepsen.report", description=__doc__)
    ap.add_argument("dir", type=Path, help="a run's output directory holding history.jsonl")
    args = ap.parse_args(argv)
    history = read_history(args.dir / HISTORY)
    seed = nemesis = None
    prev: dict[str, Any] = {}
    old = args.dir / RESULTS
    if old.exists():
        prev = json.loads(old.read_text())
        seed, nemesis = prev.get("seed"), prev.get("nemesis")
    if is_txn_history(history):
        results = check_txn(history, seed=seed, nemesis=nemesis)
    else:
        results = check(history, seed=seed, nemesis=nemesis)
    # what the runner knew and the history does not say
    prev_details = prev.get("details", {})
    for key in ("network", "harness_errors", "txn_run", "duplicated_provenance", "replicas"):
        if key in prev_details:
            results["details"][key] = prev_details[key]
    if "replicas_diverged" in prev:  # read from the logs after the stop: it stands as the runner found it
        results["replicas_diverged"] = prev["replicas_diverged"]
        if prev["replicas_diverged"]:
            results["valid"] = False
    if "security" in prev_details:
        results["details"]["security"] = {**prev_details["security"], **results["details"].get("security", {})}
    if "group" in results["details"]:
        results["details"]["group"].update({k: v for k, v in prev_details.get("group", {}).items()
                                            if k in RUN_FACTS})
    write_report(history, results, args.dir)
    sys.stdout.write((args.dir / SUMMARY).read_text())
    return 0 if results["valid"] is True else 1


if __name__ == "__main__":
    sys.exit(main())
