"""Run every benchmark and write docs/benchmarks.md.

Each ``bench/<name>.py`` prints one markdown section (its results and how they were measured);
this script runs them one after another, in separate processes so that none warms up another,
and assembles the page. The page it replaces is kept as docs/benchmarks-previous.md, so the last
run's figures stand beside the new ones. ``python bench/run.py storage protocol`` runs only those
and replaces their sections in the page (each then says it was run by itself, and when).
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["storage", "cleaner", "protocol", "validation", "raft", "metadata", "broker", "peers", "latency", "restart", "roll", "scale", "scale_cluster", "replication", "fetch_sessions", "groups",
         "txn", "spark", "testing"]


def main(argv: list[str]) -> int:
    names = argv or [n for n in ORDER if (ROOT / "bench" / f"{n}.py").exists()]
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
        page.write_text(head.rstrip("\n") + "\n" + "\n".join(body.rstrip("\n") + "\n" for _, body in kept))
        print("updated docs/benchmarks.md: " + ", ".join(names), file=sys.stderr)
        return 1 if failed else 0
    if page.exists():
        previous.write_text(page.read_text().replace("# Benchmarks", "# Benchmarks (the previous run)", 1))
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
    page.write_text("\n".join(header) + "\n".join(sections))
    print("wrote docs/benchmarks.md", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
