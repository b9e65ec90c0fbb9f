"""One process a data directory: `lock_dirs` (a flock on each directory's .lock) refuses a second holder."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kraftpy.storage.dir_lock import LOCK_FILE, DirectoryInUse, lock_dirs
from kraftpy.storage.formatter import FormatError


def test_a_directory_held_is_refused_naming_it_and_the_holder_and_nothing_stays_locked(tmp_path):
    a, b, c = (tmp_path / name for name in "abc")
    for d in (a, b, c):
        d.mkdir()
    held = lock_dirs([a, b])
    assert (b / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    with pytest.raises(DirectoryInUse) as info:
        lock_dirs([c, b])  # c is locked first, then let go when b is refused
    assert str(info.value).startswith(f"{b} is in use by another process (pid {os.getpid()}) (it holds {b / LOCK_FILE})")
    lock_dirs([c]).release()  # not left locked by the refused call
    held.release()
    lock_dirs([a, b]).release()  # released: free again


def test_the_lock_goes_with_its_process_whatever_ends_it(tmp_path):
    """A holder killed with SIGKILL leaves its .lock file, but no lock: the next process takes it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from kraftpy.storage.dir_lock import lock_dirs; "
                               "lock_dirs([sys.argv[1]]); print('held', flush=True); time.sleep(600)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(DirectoryInUse, match=f"pid {holder.pid}"):
            lock_dirs([tmp_path])
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / LOCK_FILE).exists()
    lock_dirs([tmp_path]).release()


def test_a_lock_file_that_cannot_be_opened_is_one_line_naming_it(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    (b / LOCK_FILE).mkdir(parents=True)  # where the file would be, a directory
    with pytest.raises(FormatError) as info:
        lock_dirs([a, b])
    assert str(info.value) == f"cannot lock {b / LOCK_FILE}: Is a directory (EISDIR)"
    lock_dirs([a]).release()  # a was let go
