"""Run every benchmark and write docs/benchmarks.md.

Each ``bench/<name>.py`` prints one markdown section (its results and how they were measured);
this script runs them one after another, in separate processes so that none warms up another,
and assembles the page. The page it replaces is kept as docs/benchmarks-previous.md, so the last
run's figures stand beside the new ones. ``python bench/run.py storage protocol`` runs only those
and replaces their sections in the page (each then says it was run by itself, and when).

Tracked ratios: every table cell of the form ``1.25x`` (a ratio between two things measured in the
same run, the figures the goals are set on) and every goal verdict is compared with the same cell
of the page as it was before this run (same section, same table, same row label, same column);
each that moved by 5% or more, and each verdict that changed, is printed at the end of the run and
listed in the page's last section, "Against the previous run", old beside new. Nothing fails on a
regression: a timed test would fail on a busy machine, a benchmark says what it saw.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["storage", "cleaner", "protocol", "validation", "raft", "metadata", "broker", "peers", "requests", "catchup", "latency", "restart", "roll", "scale", "scale_cluster", "replication", "fetch_sessions", "groups",
         "txn", "spark", "testing"]


COMPARED = "Against the previous run"
#: A ratio cell: ``1.25x``, possibly in bold.
RATIO = re.compile(r"^\**(\d+(?:\.\d+)?)x\**$")
VERDICT = re.compile(r"^Goal \(([^)]*)\).*?\*\*(met|not met)\*\*", re.MULTILINE)
#: A ratio that moved by less than this (relative) is not listed.
MOVED = 0.05


def sections_of(text: str) -> dict[str, str]:
    """The page's sections by their title (the text after ``## ``)."""
    return {part.split("\n", 1)[0].strip(): part for part in text.split("\n## ")[1:]}


def tracked(section: str) -> dict[tuple, str]:
    """The section's ratio cells, keyed by (table, row label, column), and its goal verdicts."""
    found: dict[tuple, str] = {}
    table = -1
    header: list[str] = []
    seen: dict[str, int] = {}
    previous_is_row = False
    for line in section.splitlines():
        if not line.startswith("|"):
            previous_is_row = False
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not previous_is_row:
            table, header, seen = table + 1, cells, {}
        elif not set("".join(cells)) <= set("-: "):
            label = " / ".join(cells[:4]) if len(cells) > 4 else cells[0]
            seen[label] = seen.get(label, 0) + 1
            for column, cell in zip(header, cells, strict=False):
                if RATIO.match(cell):
                    found[(table, label, seen[label], column)] = cell.strip("*")
        previous_is_row = True
    for goal, verdict in VERDICT.findall(section):
        found[("goal", goal)] = verdict
    return found


def ratio_changes(old_page: str, new_page: str, names: list[str] | None = None) -> list[str]:
    """Lines naming every tracked ratio that moved by MOVED or more, and every verdict that changed."""
    old, new = sections_of(old_page), sections_of(new_page)
    lines = []
    for title, section in new.items():
        if title == COMPARED or title not in old or (names is not None and title not in names):
            continue
        before, after = tracked(old[title]), tracked(section)
        for key, value in after.items():
            was = before.get(key)
            if was is None or was == value:
                continue
            if key[0] == "goal":
                lines.append(f"{title}: goal ({key[1]}): {was} → {value}")
                continue
            old_ratio, new_ratio = float(was.rstrip("x")), float(value.rstrip("x"))
            if old_ratio and abs(new_ratio - old_ratio) / old_ratio >= MOVED:
                _, label, _, column = key
                lines.append(f"{title}: {label}, {column}: {was} → {value}")
    return lines


def with_comparison(page: str, changes: list[str], previous_date: str | None) -> str:
    """The page with its last section, COMPARED, written anew from ``changes``."""
    head = page.split(f"\n## {COMPARED}\n", 1)[0].rstrip("\n") + "\n"
    since = f" (the page of {previous_date})" if previous_date else ""
    body = (f"\n## {COMPARED}\n\nTracked ratios (cells such as `1.25x`) that moved by {MOVED:.0%} or more, and goal "
            f"verdicts that changed, against the page this run replaced{since}, old → new. A ratio compares two "
            "things measured in the same run, so it moves less with the machine than the figures it divides.\n\n")
    body += "".join(f"- {line}\n" for line in changes) if changes else "None moved.\n"
    return head + body


def compared_lines(page: str, exclude: list[str]) -> list[str]:
    """The lines of the page's COMPARED section, but those of the sections in ``exclude``."""
    section = page.split(f"\n## {COMPARED}\n", 1)[1] if f"\n## {COMPARED}\n" in page else ""
    lines = [line[2:] for line in section.splitlines() if line.startswith("- ")]
    return [line for line in lines if line.split(":", 1)[0] not in exclude]


def page_date(page: str) -> str | None:
    found = re.search(r"^Run on (\d{4}-\d{2}-\d{2})", page, re.MULTILINE)
    return found.group(1) if found else None


def report(changes: list[str]) -> None:
    print("bench: tracked ratios against the previous run:" if changes else
          "bench: no tracked ratio moved against the previous run", file=sys.stderr)
    for line in changes:
        print(f"  {line}", file=sys.stderr)


def main(argv: list[str]) -> int:
    known = [n for n in ORDER if (ROOT / "bench" / f"{n}.py").exists()]
    unknown = [n for n in argv if n not in known]
    if unknown:
        # Before anything runs: a mistyped name (or an option) would otherwise become a failed
        # section of the page.
        print(f"usage: python bench/run.py [SECTION ...]; not a section: {' '.join(unknown)}\n"
              f"sections: {' '.join(known)}", file=sys.stderr)
        return 2
    names = argv or known
    sections = []
    failed = []
    for name in names:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py")], cwd=ROOT,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            failed.append(name)
            sys.stderr.write(proc.stderr)
            sections.append(f"## {name}\n\nThe benchmark failed:\n\n```\n{proc.stderr[-2000:]}\n```\n")
        else:
            sections.append(proc.stdout.strip() + "\n")
    page = ROOT / "docs" / "benchmarks.md"
    previous = ROOT / "docs" / "benchmarks-previous.md"
    if argv and page.exists():
        # Only some benchmarks: their sections replace those of the page (or join it, in ORDER), each
        # marked with its date; the rest of the page stays as the last full run wrote it.
        text = page.read_text()
        head, *parts = text.split("\n## ")
        kept = [(part.split("\n", 1)[0].strip(), "## " + part) for part in parts]
        today = datetime.date.today().isoformat()
        for name, section in zip(names, sections, strict=True):
            section = section.rstrip("\n") + f"\n\n_This section was run by itself on {today}, after the rest of the page._\n"
            at = next((i for i, (n, _) in enumerate(kept) if n == name), None)
            if at is None:  # a new section: after the last one that comes before it in ORDER
                before = ORDER[:ORDER.index(name)] if name in ORDER else ORDER
                at = max((i for i, (n, _) in enumerate(kept) if n in before), default=-1) + 1
                kept.insert(at, (name, section))
            else:
                kept[at] = (name, section)
        kept = [(name, body) for name, body in kept if name != COMPARED]
        updated = head.rstrip("\n") + "\n" + "\n".join(body.rstrip("\n") + "\n" for _, body in kept)
        changes = ratio_changes(text, updated, names)
        # The comparison's lines of the sections not run this time stay as they were.
        page.write_text(with_comparison(updated, compared_lines(text, exclude=names) + changes, page_date(text)))
        print("updated docs/benchmarks.md: " + ", ".join(names), file=sys.stderr)
        report(changes)
        return 1 if failed else 0
    old_page = page.read_text() if page.exists() else ""
    if old_page:
        previous.write_text(old_page.replace("# Benchmarks", "# Benchmarks (the previous run)", 1))
    header = [
        "# Benchmarks",
        "",
        "<!-- Written by `make bench` (bench/run.py); each section by bench/<name>.py. -->",
        "",
        f"Run on {datetime.date.today().isoformat()}: {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {platform.system()} {platform.machine()}. Every figure below comes "
        "from the run that wrote this page, except in a section that says it was run by itself later; "
        "ratios compare two things measured in the same run. The run before this one: "
        "[benchmarks-previous.md](benchmarks-previous.md).",
        "",
    ]
    text = "\n".join(header) + "\n".join(sections)
    changes = ratio_changes(old_page, text)
    page.write_text(with_comparison(text, changes, page_date(old_page)))
    print("wrote docs/benchmarks.md", file=sys.stderr)
    report(changes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
