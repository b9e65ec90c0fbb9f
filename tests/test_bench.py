"""The benchmarks that build what they measure in-process still run against the code as it is: a change
to a request or a record they use fails here, not first in `make bench`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
