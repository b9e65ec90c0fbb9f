"""Benchmark the log cleaner against a plain read+write copy of the same segments; print a markdown section.

For each case a log of ``--mib`` MiB of keyed records (100-byte values, 16-byte keys drawn from K
keys, 100 records a batch, segments of 16 MiB) is written once; then, each round, on a fresh copy of
its directory:

* the cleaner: one pass over every segment but the active one (the offset map over all of it, then
  the copy into cleaned segments, fsynced, swapped in), the way the broker runs it in its worker
  thread, unthrottled;
* the baseline: the same segment files read in 512 KiB chunks and written to new files, fsynced.

Throughput is the input bytes over the time, best of ``--rounds`` rounds; the files are in the page
cache for both (each round's copy of the directory has just been written). The goal is a ratio of at
least 0.5x. The section printed says how it was run and what each column means.
``python bench/cleaner.py --mib 16 --rounds 2`` runs a shorter benchmark.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kraftpy.protocol.records import SimpleRecord, build_batch  # noqa: E402
from kraftpy.storage import offset_map  # noqa: E402
from kraftpy.storage.cleaner import Cleaner, CleanerConfig, log_to_clean  # noqa: E402
from kraftpy.storage.log import Log  # noqa: E402
from kraftpy.storage.log_config import LogConfig  # noqa: E402

MIB = 1024 * 1024
NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=16 * MIB, compact=True, delete=False)
CHUNK = 512 * 1024


def write_log(directory: Path, mib: int, keys: int) -> int:
    """A log of about ``mib`` MiB; returns the bytes of its non-active segments."""
    rng = random.Random(7)
    names = [b"key-%012d" % i for i in range(keys)]
    value = bytes(rng.randrange(256) for _ in range(100))
    log = Log.open(directory, CONFIG, clock=lambda: NOW)
    while log.size_in_bytes < mib * MIB:
        records = [SimpleRecord(names[rng.randrange(keys)], value, timestamp=NOW) for _ in range(100)]
        log.append_as_leader(build_batch(records), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    size = sum(segment.size for segment in log.segments[:-1])
    log.close()
    return size


def clean(directory: Path, accelerated: bool) -> tuple[float, int, int]:
    log = Log.open(directory, CONFIG, clock=lambda: NOW, clean_shutdown=False)
    log.update_high_watermark(log.log_end_offset)
    cleaner = Cleaner(CleanerConfig(), accelerated=accelerated)
    start = time.perf_counter()
    result = cleaner.clean(log, log_to_clean(log, None, NOW), NOW, {})
    result.swap_in(log)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed, result.stats.bytes_read, result.stats.bytes_written


def plain_copy(source: Path, target: Path) -> float:
    target.mkdir()
    files = sorted(p for p in source.iterdir() if p.suffix == ".log")[:-1]  # not the active segment
    start = time.perf_counter()
    for path in files:
        src = os.open(path, os.O_RDONLY)
        dst = os.open(target / path.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        position = 0
        while True:
            data = os.pread(src, CHUNK, position)
            if not data:
                break
            view = memoryview(data)
            while view:
                view = view[os.write(dst, view):]
            position += len(data)
        os.fsync(dst)
        os.close(dst)
        os.close(src)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python-mib", type=int, default=8, help="log size for the Python-loops row")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kraftpy-bench-cleaner-") as tmp:
        root = Path(tmp)
        cases = [(f"{args.mib} MiB, 1,000 keys", args.mib, 1000, True),
                 (f"{args.mib} MiB, 100,000 keys", args.mib, 100_000, True)]
        if offset_map.ACCELERATED:
            cases.append((f"{args.python_mib} MiB, 1,000 keys, Python loops", args.python_mib, 1000, False))
        for name, mib, keys, accelerated in cases:
            pristine = root / f"pristine-{keys}-{mib}"
            size = write_log(pristine, mib, keys)
            best_clean = best_copy = float("inf")
            written = 0
            for round_ in range(args.rounds):
                work = root / f"work-{round_}"
                shutil.copytree(pristine, work)
                elapsed, _, written = clean(work, accelerated)
                best_clean = min(best_clean, elapsed)
                copied = root / f"copy-{round_}"
                best_copy = min(best_copy, plain_copy(pristine, copied))
                shutil.rmtree(work)
                shutil.rmtree(copied)
            rows.append((name, size, written, size / MIB / best_clean, size / MIB / best_copy))
            shutil.rmtree(pristine)

    print("## cleaner\n")
    print("The log cleaner (one pass over a compacted log: offset map, then the copy into cleaned segments, "
          "fsynced and swapped in) against a plain read+write copy of the same segment files, fsynced, in the "
          "same run. Each log is written once (keyed records: 100-byte values, 16-byte keys drawn at random "
          "from the number of keys shown, 100 records a batch, 16 MiB segments); each round then cleans a fresh "
          "copy of its directory with a new cleaner, unthrottled, as the broker's worker thread runs a pass, and "
          "copies the same segment files in 512 KiB reads and writes; the files are in the page cache for both. "
          f"Best of {args.rounds} rounds for each.\n")
    print("Columns: *log*, its size and how many distinct keys its records draw from; *input MiB*, the bytes "
          "of the segments cleaned (every segment but the active one); *output MiB*, the bytes of the cleaned "
          "segments written; *cleaner MiB/s*, input MiB over the time of the whole pass (map, copy, fsync, "
          "swap); *plain copy MiB/s*, input MiB over the time of the read+write copy with its fsyncs; "
          "*ratio*, cleaner over plain copy.\n")
    scan = "the C record loops" if offset_map.ACCELERATED else "the Python record loops (no C compiler at install)"
    print(f"The cleaner ran with {scan}; the last row runs the Python loops an install without a C compiler "
          "has, on a smaller log.\n")
    print("| log | input MiB | output MiB | cleaner MiB/s | plain copy MiB/s | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, size, written, cleaner_rate, copy_rate in rows:
        print(f"| {name} | {size / MIB:.1f} | {written / MIB:.2f} | {cleaner_rate:.0f} | {copy_rate:.0f} "
              f"| {cleaner_rate / copy_rate:.2f}x |")
    print()
    main_rows = [r for r in rows if "Python" not in r[0]]
    worst = min(r[3] / r[4] for r in main_rows)
    print(f"Goal (cleaner at least 0.5x of the plain copy, C loops): {worst:.2f}x at worst, "
          f"{'met' if worst >= 0.5 else 'NOT met'}.\n")
    print(f"Run: `python bench/cleaner.py --mib {args.mib} --rounds {args.rounds}` on {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}; 100-byte values, "
          f"16-byte keys, 100 records a batch, 16 MiB segments, best of {args.rounds} rounds.")


if __name__ == "__main__":
    main()
