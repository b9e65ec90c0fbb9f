"""Run a `kraftpy` command with one of its output streams on a pseudo-terminal (what a user at a terminal
sees: rich tables, progress bars) and the other piped."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from dataclasses import dataclass


@dataclass(frozen=True)
class TerminalRun:
    #: What the terminal showed (decoded, escape sequences kept).
    screen: str
    #: The other stream, read from its pipe.
    piped: str
    returncode: int


def run_on_terminal(*args: object, terminal: str = "stderr", columns: int = 120, timeout: float = 90) -> TerminalRun:
    """``python -m kraftpy *args`` with ``terminal`` ("stdout" or "stderr") on a pseudo-terminal of 40 rows and
    ``columns`` columns, the other stream piped; returns once the command has exited."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns)}
    env.pop("NO_COLOR", None)
    streams = {"stdout": secondary, "stderr": subprocess.PIPE} if terminal == "stdout" else \
        {"stdout": subprocess.PIPE, "stderr": secondary}
    process = subprocess.Popen([sys.executable, "-m", "kraftpy", *(str(a) for a in args)], stdin=subprocess.DEVNULL,
                               env=env, **streams)
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    pipe = process.stderr if terminal == "stdout" else process.stdout
    assert pipe is not None
    piped = pipe.read().decode(errors="replace")
    returncode = process.wait(timeout)
    return TerminalRun(b"".join(chunks).decode(errors="replace"), piped, returncode)
