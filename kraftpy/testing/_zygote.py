"""The zygote: a fork server holding kraftpy's modules imported once, from which every node is forked.

Importing a node's modules takes Python about a second; a cluster of four processes would pay it
four times over, on the cores the test needs. The supervisor imports them once, forks this process
before it starts its own event loop, and asks it for nodes: each is a `fork()` of the zygote (no
import, no interpreter start) running `kraftpy.testing._node` in an event loop of its own.

The zygote is a plain blocking loop, without threads or an event loop (forking from one is unsafe).
It speaks JSON lines over a socket pair with the supervisor:

- ``{"spawn": spec}`` -> ``{"spawned": token, "pid": pid}``: fork a node (`_node.run(spec)`).
- a node exits -> ``{"exited": pid, "code": code}`` (the zygote reaps its children on SIGCHLD).
- ``{"quit": true}``, or the end of the socket (the supervisor is gone): SIGKILL every node still
  running (resumed first, in case it is paused), reap them, remove the cluster's directory unless it
  is kept, and exit.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import select
import shutil
import signal
import socket
import sys
import traceback
from collections.abc import Iterable
from typing import Any, NoReturn


class Zygote:
    def __init__(self, sock: socket.socket, directory: str | None) -> None:
        self.sock = sock
        #: Removed when the zygote exits (None: kept).
        self.directory = directory
        self.children: set[int] = set()
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)

    def serve(self) -> NoReturn:
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        buffer = b""
        try:
            while True:
                readable, _, _ = select.select([self.sock, self._wake_r], [], [])
                if self._wake_r in readable:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    self._reap()
                if self.sock in readable:
                    data = self.sock.recv(65536)
                    if not data:
                        break
                    buffer += data
                    *lines, buffer = buffer.split(b"\n")
                    if any(self._handle(json.loads(line)) for line in lines if line):
                        break
        except BaseException:
            traceback.print_exc()
        finally:
            self._quit()

    def _handle(self, message: dict[str, Any]) -> bool:
        """Do what ``message`` asks; True to quit."""
        if "spawn" in message:
            spec = message["spawn"]
            pid = self._fork(spec)
            self._send({"spawned": spec["token"], "pid": pid})
            return False
        return bool(message.get("quit"))

    def _send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(json.dumps(message).encode() + b"\n")

    def _fork(self, spec: dict[str, Any]) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        zygote = os.getpid()
        pid = os.fork()
        if pid:
            self.children.add(pid)
            return pid
        code = 1
        try:
            self.sock.close()
            signal.set_wakeup_fd(-1)
            os.close(self._wake_r)
            os.close(self._wake_w)
            for signum in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL if signum != signal.SIGINT else signal.default_int_handler)
            from kraftpy.testing import _node

            _node.die_with_parent(zygote)
            _node.redirect_output(spec["log"])
            code = _node.run(spec)
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self._send({"exited": pid, "code": os.waitstatus_to_exitcode(status)})

    def _quit(self) -> NoReturn:
        kill_and_reap(self.children)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.sock.close()
        os._exit(0)


def kill_and_reap(pids: Iterable[int]) -> None:
    """SIGKILL each of the calling process's children ``pids`` (resumed first, in case it is paused) and
    reap them."""
    pids = list(pids)
    for pid in pids:
        for signum in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def start(directory: str | None) -> tuple[int, socket.socket]:
    """Fork the zygote from the calling process (which must have no other thread); returns its pid
    and the supervisor's end of the socket pair. The zygote imports the nodes' modules itself, before
    it serves: the caller forks it before its own heavy imports, and both import side by side."""
    ours, theirs = socket.socketpair()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        theirs.close()
        return pid, ours
    try:
        ours.close()
        # The supervisor's stdin and stdout are the test's pipes: the zygote and its nodes must not hold
        # them open (the test sees the supervisor's exit as the end of its stdout).
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
        zygote = Zygote(theirs, directory)
        # The import makes hundreds of thousands of objects that live as long as the process: the cyclic
        # collector is paused meanwhile (its passes over them took a tenth of the import), and they are
        # frozen out of its reach, in the zygote and in every node forked from it (nor are their pages
        # written by its passes, so the nodes keep sharing them).
        gc.disable()
        # structlog imports rich, when it is installed, for the tracebacks of its console renderer: a
        # node logs JSON lines (kraftpy.testing._node), and rich was a tenth of the import.
        sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
        try:
            from kraftpy.testing import _node  # noqa: F401 (every node is forked with them imported)
        except BaseException:
            traceback.print_exc()
            zygote._quit()
        gc.freeze()
        gc.enable()
        zygote.serve()
    finally:
        os._exit(1)
