"""A pytest session of its own, in a child process, for tests of the kraftpy pytest plugin.

`InnerSuite` writes test files and a ``pytest.ini`` into a directory, runs ``python -m pytest`` there
(with a ``--basetemp`` inside it, so that it never tidies the outer session's temporary directories),
and hands the inner tests two pipes: ``report(**facts)`` writes a JSON line the outer test reads with
`InnerSuite.next_report` (an event, not a clock), and ``block()`` waits on a pipe nobody writes to,
until the inner pytest is interrupted or killed.

`cluster_facts` is what an inner test reports of the session's cluster, and `wait_gone` the check
that none of it is left: its processes, its brokers' ports, its directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from kraftpy.testing.faults import process_state

#: Imported by the inner tests: ``from inner_support import report, block, cluster_facts``.
SUPPORT = '''
import json, os, signal

# A pytest started from a terminal stops on Ctrl-C. One started by a suite that was itself started in the
# background of a non-interactive shell (`make test &` in a script) inherits SIGINT ignored, and Python
# then leaves it ignored: the inner suite is the user's, whose Ctrl-C raises KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

def report(**facts):
    fd = int(os.environ["INNER_REPORT_FD"])
    os.write(fd, (json.dumps(facts) + "\\n").encode())

def report_file(name, **facts):
    """For tests in pytest-xdist workers, which do not inherit the report pipe: a file of its own."""
    with open(os.path.join(os.environ["INNER_REPORTS"], name + ".json"), "w") as out:
        json.dump(facts, out)

def block():
    """Wait until this process is interrupted or killed: nobody writes to this pipe."""
    os.read(int(os.environ["INNER_BLOCK_FD"]), 1)

def cluster_facts(cluster):
    return {"processes": cluster.processes(), "directory": str(cluster.data_dir),
            "ports": [b.port for b in cluster.brokers], "bootstrap": cluster.bootstrap_servers}
'''


def _threads(pid: int) -> list[tuple[str, ...]]:
    """Each thread of process ``pid``: its name and its signal masks (SigIgn, SigBlk, SigCgt), as the kernel has them."""
    found = []
    with contextlib.suppress(OSError):
        for task in sorted(os.listdir(f"/proc/{pid}/task")):
            with contextlib.suppress(OSError):
                status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/task/{task}/status").read_text()
                              .splitlines() if ":\t" in line)
                found.append((status.get("Name", "?"), *(status.get(k, "?") for k in ("SigIgn", "SigBlk", "SigCgt"))))
    return found


class Ended(Exception):
    """The inner suite closed its report pipe: it has exited."""


class InnerSuite:
    def __init__(self, directory: Path, files: dict[str, str], ini: str = "") -> None:
        self.directory = directory
        self.basetemp = directory / "basetemp"
        #: Where ``report_file`` writes.
        self.reports = directory / "reports"
        self.reports.mkdir()
        (directory / "pytest.ini").write_text("[pytest]\n" + textwrap.dedent(ini))
        (directory / "inner_support.py").write_text(SUPPORT)
        for name, text in files.items():
            (directory / name).write_text(textwrap.dedent(text))
        self.process: subprocess.Popen[str] | None = None
        self._reports: list[dict[str, Any]] = []
        self._buffer = b""

    def start(self, *args: str) -> InnerSuite:
        report_r, report_w = os.pipe()
        block_r, self._block_w = os.pipe()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "KRAFTPY_"))}
        env.update(INNER_REPORT_FD=str(report_w), INNER_BLOCK_FD=str(block_r), PYTHONPATH=str(self.directory),
                   INNER_REPORTS=str(self.reports))
        self.log = self.directory / "inner-pytest.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={self.basetemp}",
                 *args], cwd=self.directory, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, pass_fds=(report_w, block_r))
        os.close(report_w)
        os.close(block_r)
        self._report_r = report_r
        return self

    def next_report(self, timeout: float = 120.0) -> dict[str, Any]:
        """The next JSON line an inner test reported; waits for it (bounded by ``timeout``)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            poller = select.poll()  # not select(): this process may hold more than 1024 descriptors
            poller.register(self._report_r, select.POLLIN)
            if not poller.poll(max(left, 0) * 1000):
                raise AssertionError(f"no report from the inner suite within {timeout}s:\n{self.output()}")
            chunk = os.read(self._report_r, 65536)
            if not chunk:
                raise Ended()
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def wait(self, timeout: float = 180.0) -> int:
        assert self.process is not None
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            threads = _threads(self.process.pid)
            # pytest's faulthandler writes every thread's stack to the output on SIGABRT: where it hangs.
            self.process.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(30)
            raise AssertionError(f"the inner suite did not exit within {timeout}s; its threads (name, ignored, "
                                 f"blocked, caught signals): {threads}\n{self.output()}") from None
        finally:
            os.close(self._report_r)
            os.close(self._block_w)
        return self.process.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def run(self, *args: str, timeout: float = 180.0) -> tuple[int, str, list[dict[str, Any]]]:
        """Run to the end: the exit code, the output and every report."""
        self.start(*args)
        reports = []
        while True:
            try:
                reports.append(self.next_report(timeout))
            except Ended:
                break
        code = self.wait(timeout)
        return code, self.output(), reports


def gone(pid: int) -> bool:
    """No process ``pid``, or one that exited and waits to be reaped (it runs no code, holds no port)."""
    return process_state(pid) in (None, "Z")


def refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def leftovers(facts: dict[str, Any]) -> list[str]:
    """What is left of the cluster ``facts`` describe: live processes, open ports, its directory."""
    left = [f"process {name} ({pid})" for name, pid in facts["processes"].items() if not gone(pid)]
    left += [f"port {port}" for port in facts["ports"] if not refused(port)]
    if Path(facts["directory"]).exists():
        left.append(f"directory {facts['directory']}")
    return left


def wait_gone(facts: dict[str, Any], timeout: float = 30.0) -> None:
    """Until nothing of the cluster is left (it cleans up after the process that started it is gone)."""
    deadline = time.monotonic() + timeout
    while left := leftovers(facts):
        if time.monotonic() > deadline:
            raise AssertionError(f"left after {timeout}s: {left}")
        time.sleep(0.05)
