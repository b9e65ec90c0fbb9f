"""The campaign's report: counts per port, api and mutation class, findings, memory, acknowledgements.

Findings are grouped by (kind, mutation class, api): the JSON keeps every group with its count and
its first examples (frame index, detail, the line that replays it), so a soak of 100,000 frames
writes a report of a few hundred kilobytes, not one entry per frame.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import attrs

from tests.fuzz.frames import Frame

#: Kinds that fail a campaign (`Report.failures`); the others are reported for a reader to judge.
FAILING_KINDS = (
    "start-failed", "crash", "restart-failed", "hang", "unclean-stop", "unknown-server-error",
    "rss-growth", "rss-peak", "open-files-growth", "verify-failed",
    "acked-missing", "acked-unreadable", "acked-behind-poison", "acked-different", "ack-without-batch",
    "malformed-response", "wrong-correlation-id",
    # the handshake campaign's (tests.fuzz.handshake_campaign)
    "auth-bypass", "legit-refused", "not-closed", "login-failed", "harness-error",
)
EXAMPLES_PER_GROUP = 5


@attrs.define
class Finding:
    kind: str
    frame: Frame | None = None
    message: str = ""
    frame_index: int | None = None
    klass: str | None = None
    suspects: list[int] | None = None
    #: The open known bug this finding belongs to (it then does not fail the campaign).
    known: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.frame is not None:
            self.frame_index = self.frame.index
            self.klass = self.frame.klass

    def group(self) -> tuple[str, str, str, str]:
        api = self.frame.api.split(" v")[0] if self.frame is not None else "-"
        return self.kind, self.klass or "-", api, self.known or ""

    def example(self, seed: int, replay: str = "python -m tests.fuzz replay --seed {seed} --frame {index}",
                ) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message[:2000]}
        if self.frame_index is not None:
            out["frame"] = self.frame_index
            out["replay"] = replay.format(seed=seed, index=self.frame_index)
        if self.frame is not None:
            out["detail"] = self.frame.detail
            out["port"] = self.frame.port
            if len(self.frame.data) <= 512:
                out["hex"] = self.frame.data.hex()
        if self.suspects:
            out["suspects"] = self.suspects
            out["replay"] = (f"python -m tests.fuzz replay --seed {seed} "
                             + " ".join(f"--frame {i}" for i in self.suspects))
        return out


@attrs.define
class Report:
    seed: int
    frames_planned: int
    frames_sent: int = 0
    duration_s: float = 0.0
    directory: str = ""
    #: (port, api, class) -> outcome -> count
    outcomes: dict[tuple[str, str, str], collections.Counter] = attrs.Factory(
        lambda: collections.defaultdict(collections.Counter))
    findings: list[Finding] = attrs.Factory(list)
    acks: collections.Counter = attrs.Factory(collections.Counter)
    control_errors: collections.Counter = attrs.Factory(collections.Counter)
    skipped_by_bug: collections.Counter = attrs.Factory(collections.Counter)
    log_events: dict[str, int] = attrs.Factory(dict)
    memory: dict[str, Any] = attrs.Factory(dict)
    rss_samples: list[tuple[int, int]] = attrs.Factory(list)
    fd_samples: list[tuple[int, int]] = attrs.Factory(list)
    verification: dict[str, Any] = attrs.Factory(dict)
    target: dict[str, Any] = attrs.Factory(dict)
    #: frame index -> mutation class, and the client port each frame used (to tie log lines to frames).
    klass_of: dict[int, str] = attrs.Factory(dict)
    #: Seconds spent per mutation class, and the slowest frames as (seconds, index, api, class).
    seconds: collections.Counter = attrs.Factory(collections.Counter)
    slowest: list[tuple[float, int, str, str]] = attrs.Factory(list)
    #: Tags of the frames whose Produce was acknowledged (their findings come after the run).
    tags_of: dict[int, frozenset[str]] = attrs.Factory(dict)
    #: Known bugs whose findings are reported as known rather than failing.
    tolerated: list[Any] = attrs.Factory(list)
    _ports: dict[int, int] = attrs.Factory(dict)
    #: The line that replays one input ({seed}, {index}).
    replay_command: str = "python -m tests.fuzz replay --seed {seed} --frame {index}"

    def count(self, frame: Frame, outcome: str) -> None:
        self.outcomes[(frame.port, frame.api.split(" v")[0], frame.klass)][outcome] += 1
        self.klass_of[frame.index] = frame.klass

    def timed(self, frame: Frame, seconds: float) -> None:
        self.seconds[frame.klass] += seconds
        self.slowest.append((round(seconds, 3), frame.index, frame.api, frame.klass))
        if len(self.slowest) > 100:
            self.slowest.sort(reverse=True)
            del self.slowest[10:]

    def note_port(self, local_port: int, frame: Frame) -> None:
        self._ports[local_port] = frame.index

    def frame_of_peer(self, peer: Any) -> int | None:
        if not isinstance(peer, str) or ":" not in peer:
            return None
        try:
            return self._ports.get(int(peer.rsplit(":", 1)[1]))
        except ValueError:
            return None

    def add(self, finding: Finding, tags: frozenset[str] | None = None) -> None:
        tags = finding.frame.tags if finding.frame is not None else tags
        if tags is not None:
            for bug in self.tolerated:
                if finding.kind in bug.tolerate and bug.matches(tags):
                    finding.known = bug.name
                    break
        self.findings.append(finding)

    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.kind in FAILING_KINDS and f.known is None]

    def kinds(self) -> collections.Counter:
        return collections.Counter(f.kind for f in self.findings)

    @property
    def rss_growth_kb(self) -> int:
        return self.memory.get("final_rss_kb", 0) - self.memory.get("baseline_rss_kb", 0)

    def to_json(self) -> dict[str, Any]:
        groups: dict[tuple[str, str, str, str], list[Finding]] = collections.defaultdict(list)
        for finding in self.findings:
            groups[finding.group()].append(finding)
        per_api: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        per_class: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for (port, api, klass), outcomes in self.outcomes.items():
            per_api[f"{port}:{api}"].update(outcomes)
            per_class[klass].update(outcomes)
        return {
            "seed": self.seed,
            "frames_planned": self.frames_planned,
            "frames_sent": self.frames_sent,
            "duration_s": self.duration_s,
            "directory": self.directory,
            "passed": not self.failures(),
            "failures": collections.Counter(f.kind for f in self.failures()),
            "findings": [
                {"kind": kind, "class": klass, "api": api, "count": len(items), "known_bug": known or None,
                 "examples": [f.example(self.seed, self.replay_command) for f in items[:EXAMPLES_PER_GROUP]]}
                for (kind, klass, api, known), items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            ],
            "per_api": {k: dict(v) for k, v in sorted(per_api.items())},
            "per_class": {k: dict(v) for k, v in sorted(per_class.items())},
            "acks_per_class": dict(self.acks),
            "seconds_per_class": {k: round(v, 2) for k, v in self.seconds.most_common()},
            "slowest_frames": sorted(self.slowest, reverse=True)[:10],
            "control_errors": dict(self.control_errors),
            "skipped_by_known_bug": dict(self.skipped_by_bug),
            "memory": {**self.memory, "rss_growth_kb": self.rss_growth_kb},
            "rss_samples": self.rss_samples,
            "open_files_samples": self.fd_samples,
            "verification": self.verification,
            "target": self.target,
            "log_events": self.log_events,
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n")

    def summary(self) -> str:
        data = self.to_json()
        memory = data["memory"]
        lines = [
            f"kraftpy fuzz: seed {self.seed}, {self.frames_sent} frames in {self.duration_s:.1f}s "
            f"({'PASSED' if data['passed'] else 'FAILED'})",
            f"memory: baseline {memory.get('baseline_rss_kb', 0) // 1024} MiB, final "
            f"{memory.get('final_rss_kb', 0) // 1024} MiB, peak {memory.get('peak_rss_kb', 0) // 1024} MiB",
            f"acknowledged batches: {self.verification.get('acks', 0)}, checked "
            f"{self.verification.get('checked', 0)}",
        ]
        if self.skipped_by_bug:
            lines.append("skipped (known bugs): " + ", ".join(f"{k} {v}" for k, v in sorted(self.skipped_by_bug.items())))
        outcome_totals: collections.Counter = collections.Counter()
        for counts in self.outcomes.values():
            outcome_totals.update(counts)
        lines.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcome_totals.items())))
        if not data["findings"]:
            lines.append("findings: none")
        for group in data["findings"]:
            example = group["examples"][0]
            known = f" (known: {group['known_bug']})" if group["known_bug"] else ""
            lines.append(f"- {group['kind']} x{group['count']} [{group['class']} {group['api']}]{known}: "
                         f"{example.get('detail', '')} {example['message'][:200]!r}")
            if "replay" in example:
                lines.append(f"    {example['replay'][:200]}")
        return "\n".join(lines)
