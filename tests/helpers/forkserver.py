"""`python -m kraftpy ...` for the tests, forked from a process that imported kraftpy once.

Every node of a test cluster and every command a CLI test runs is a `python -m kraftpy` process,
and each spent most of its first second importing kraftpy (a node's modules take about a second of
a core on a slow machine, a command's half of one): over the suite, hundreds of CPU-seconds spent
importing the same modules again. The fork server is a Python process that imported them once
(with the cyclic collector's reach frozen over them, as kraftpy.testing's zygote does); each
process the tests start is a `fork()` of it that runs ``kraftpy`` as `python -m kraftpy` would
(`runpy.run_module("kraftpy", run_name="__main__")` with ``sys.argv`` set, its own environment,
working directory and standard streams), and exits the way the interpreter exits: atexit handlers,
non-daemon threads joined, the exit code of its ``SystemExit``, a traceback and 1 for an uncaught
exception, death by SIGINT for an uncaught KeyboardInterrupt.

What a test holds is a `ForkedProcess`, with `subprocess.Popen`'s interface (`pid`, `poll`, `wait`,
`send_signal`, `kill`, `returncode`, `stdout`/`stderr` pipes): the process is the fork server's
child, not the test's, so its exit status reaches the test over a socket of its own. `run` is
`subprocess.run` for a command. `open_trio_process` is the same process for a trio test (its
``stderr`` a trio stream, ``await wait()``).

One fork server serves each test process (started at its first use, gone when the test process
is: it kills the processes it forked when its control socket closes). ``KRAFTPY_TEST_FORKSERVER=0``
starts every process as a fresh interpreter instead. What this cannot serve (a different
interpreter, an installed package in its own venv: tests/packaging) starts real processes.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from kraftpy.testing._cluster import _readable

#: The modules every forked process finds imported: a node's and the commands'.
PRELOAD = ("kraftpy.cli.main", "kraftpy.cli.servers", "kraftpy.cli.dev", "kraftpy.node", "kraftpy.cli.topics",
           "kraftpy.cli.groups", "kraftpy.cli.configs", "kraftpy.cli.storage", "kraftpy.cli.console",
           "kraftpy.cli.quorum", "kraftpy.cli.metadata_cmd", "kraftpy.cli.cluster", "kraftpy.cli.features",
           "kraftpy.cli.reassign", "kraftpy.cli.transactions", "kraftpy.cli.acls", "kraftpy.cli.perf")
_FDS = 4  # stdin, stdout, stderr and the process's status socket


def enabled() -> bool:
    return os.environ.get("KRAFTPY_TEST_FORKSERVER", "1") != "0"


def kraftpy_argv(args: Sequence[object]) -> list[str]:
    """The command line a fresh process would run (and `ForkedProcess.args`)."""
    return [sys.executable, "-m", "kraftpy", *(str(a) for a in args)]


# --- the server -------------------------------------------------------------------------------------


class _Server:
    """The fork server's loop: a blocking select over its control socket and a SIGCHLD wake-up pipe,
    without threads or an event loop (forking from one is unsafe)."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        #: pid -> that process's status socket (the test's end has the other).
        self.children: dict[int, socket.socket] = {}
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)

    def serve(self) -> dict[str, Any] | None:
        """Serve until the control socket closes (None: the server exits), or return a spawn request
        in the forked child, which then runs it."""
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            while True:
                readable, _, _ = select.select([self.control, self._wake_r], [], [])
                if self._wake_r in readable:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    self._reap()
                if self.control in readable:
                    request = self._receive()
                    if request is None:
                        break
                    if self._fork(*request):
                        return request[0]
        except BaseException:
            traceback.print_exc()
        self._quit()
        return None

    def _receive(self) -> tuple[dict[str, Any], list[int]] | None:
        fds = array.array("i")
        data, ancillary, _, _ = self.control.recvmsg(1 << 20, socket.CMSG_SPACE(_FDS * fds.itemsize))
        if not data:
            return None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        return json.loads(data), list(fds)

    def _fork(self, spec: dict[str, Any], fds: list[int]) -> bool:
        """Fork the process ``spec`` asks for; True in the child."""
        stdin, stdout, stderr, status = fds
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                # The server's sockets are closed below with every other descriptor: their objects must not
                # close those numbers again later, when the process may have opened files under them.
                self.control.detach()
                for sock in self.children.values():
                    sock.detach()
                self.children.clear()
                _become(spec, stdin, stdout, stderr)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            return True
        for fd in (stdin, stdout, stderr):
            os.close(fd)
        sock = socket.socket(fileno=status)
        self.children[pid] = sock
        _send(sock, {"pid": pid})
        return False

    def _reap(self) -> None:
        while self.children:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            sock = self.children.pop(pid, None)
            if sock is not None:
                _send(sock, {"exit": os.waitstatus_to_exitcode(wait_status)})
                sock.close()

    def _quit(self) -> None:
        from kraftpy.testing._zygote import kill_and_reap

        kill_and_reap(self.children)


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(json.dumps(message).encode() + b"\n")


def _become(spec: dict[str, Any], stdin: int, stdout: int, stderr: int) -> None:
    """In the forked child: the process a fresh `python -m kraftpy ARGS` would be at its start."""
    if spec.get("session"):
        os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in ((0, stdin), (1, stdout), (2, stderr)):
        os.dup2(fd, target)
    os.closerange(3, 1 << 30)
    os.chdir(spec["cwd"])
    os.environ.clear()
    os.environ.update(spec["env"])
    if os.environ.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True, write_through=True)
    import importlib.util

    # runpy sets sys.argv[0] to kraftpy/__main__.py's path, as `python -m kraftpy` does.
    sys.argv = [importlib.util.find_spec("kraftpy.__main__").origin, *spec["args"]]  # type: ignore[union-attr]


def _server_main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    # The imports make hundreds of thousands of objects that live as long as the process: the cyclic
    # collector is paused meanwhile, and they are frozen out of its reach (nor do its passes write their
    # pages, which every forked process shares).
    import gc
    import importlib

    gc.disable()
    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()
    gc.enable()
    spec = _Server(control).serve()
    if spec is None:
        os._exit(0)
    import runpy

    # The forked child, from here on the interpreter running `python -m kraftpy ARGS`: its exit is the
    # interpreter's (SystemExit's code, atexit handlers, a traceback for anything uncaught).
    runpy.run_module("kraftpy", run_name="__main__", alter_sys=True)


# --- the client -------------------------------------------------------------------------------------


class _Client:
    """A test process's connection to its fork server (started at the first spawn)."""

    _lock = threading.Lock()
    _instance: _Client | None = None

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.forkserver", str(theirs.fileno())], pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=root)
        theirs.close()
        self.control = ours

    @classmethod
    def get(cls) -> _Client:
        with cls._lock:
            if cls._instance is None or cls._instance.process.poll() is not None:
                cls._instance = cls()
            return cls._instance

    def spawn(self, spec: dict[str, Any], stdio: tuple[int, int, int], status: socket.socket) -> None:
        fds = array.array("i", [*stdio, status.fileno()])
        with self._lock:
            self.control.sendmsg([json.dumps(spec).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])


class ForkedProcess:
    """A `python -m kraftpy ARGS` forked by the fork server, with `subprocess.Popen`'s interface."""

    def __init__(self, args: Sequence[object], *, stdin: Any = None, stdout: Any = None, stderr: Any = None,
                 env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                 start_new_session: bool = False, text: bool = False) -> None:
        self.args = kraftpy_argv(args)
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        self._lock = threading.Lock()
        self._buffer = b""
        close: list[int] = []
        ends = []
        for name, how, default in (("stdin", stdin, 0), ("stdout", stdout, 1), ("stderr", stderr, 2)):
            if how == subprocess.PIPE:
                r, w = os.pipe()
                ours, theirs = (w, r) if name == "stdin" else (r, w)
                setattr(self, name, open(ours, "w" if name == "stdin" else "r", encoding="utf-8", errors="replace")
                        if text else open(ours, "wb" if name == "stdin" else "rb", buffering=0 if name == "stdin"
                                          else -1))
                close.append(theirs)
            elif how == subprocess.DEVNULL:
                theirs = os.open(os.devnull, os.O_RDWR)
                close.append(theirs)
            elif how == subprocess.STDOUT:
                theirs = ends[1]
            elif how is None:
                theirs = default
            elif isinstance(how, int):
                theirs = how
            else:
                theirs = how.fileno()
            ends.append(theirs)
        self._status, theirs_status = socket.socketpair()
        spec = {"args": self.args[3:], "env": dict(os.environ if env is None else env),
                "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(), "session": start_new_session}
        try:
            _Client.get().spawn(spec, (ends[0], ends[1], ends[2]), theirs_status)
        finally:
            theirs_status.close()
            for fd in close:
                os.close(fd)
        self.pid = int(self._next()["pid"])

    def _next(self) -> dict[str, Any]:
        """The next message from the fork server about this process (blocking)."""
        while b"\n" not in self._buffer:
            data = self._status.recv(4096)
            if not data:
                raise ChildProcessError("the fork server went away")
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def poll(self) -> int | None:
        if self.returncode is None and self._lock.acquire(blocking=False):
            try:
                if self.returncode is None and _readable(self._status.fileno(), 0):
                    self.returncode = int(self._next()["exit"])
            finally:
                self._lock.release()
        return self.returncode

    def __del__(self) -> None:
        # Not closed at the exit: another thread may be waiting on it then (its end of file is what wakes it).
        with contextlib.suppress(Exception):
            self._status.close()

    def fileno_for_waiting(self) -> int:
        return self._status.fileno()

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            # poll, not select: a test process may hold descriptors numbered beyond select's 1024.
            _readable(self._status.fileno(), 3600.0 if left is None else left)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.wait()


def popen(args: Sequence[object], **kwargs: Any) -> ForkedProcess | subprocess.Popen[Any]:
    """`subprocess.Popen([python, -m, kraftpy, *args], **kwargs)`, forked when the fork server is on."""
    if enabled():
        return ForkedProcess(args, **kwargs)
    return subprocess.Popen(kraftpy_argv(args), **kwargs)


async def run_async(args: Sequence[object], *, input: bytes | None = None,
                    env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """`trio.run_process([python, -m, kraftpy, *args], stdin=input, capture_stdout=True, capture_stderr=True,
    check=False)`: the output as bytes; the process is killed if the calling task is cancelled."""
    import trio

    if not enabled():
        return await trio.run_process(kraftpy_argv(args), stdin=input or b"", capture_stdout=True,
                                      capture_stderr=True, check=False, env=env)
    with contextlib.ExitStack() as files:
        source, stdout, stderr = (files.enter_context(tempfile.TemporaryFile()) for _ in range(3))
        source.write(input or b"")
        source.seek(0)
        process = ForkedProcess(args, stdin=source, stdout=stdout, stderr=stderr, env=env)
        try:
            code = await TrioForkedProcess(process, None).wait()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        out, err = (_read_back(stream, False) for stream in (stdout, stderr))
    return subprocess.CompletedProcess(process.args, code, out, err)


def run(args: Sequence[object], *, input: str | bytes | None = None, capture_output: bool = False,
        text: bool = False, timeout: float | None = None, check: bool = False,
        env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
        stdin: Any = None, stdout: Any = None, stderr: Any = None) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run([python, -m, kraftpy, *args], ...)`, the process forked by the fork server."""
    if not enabled():
        return subprocess.run(kraftpy_argv(args), input=input, capture_output=capture_output, text=text,
                              timeout=timeout, check=check, env=env, cwd=cwd, stdin=stdin, stdout=stdout,
                              stderr=stderr)
    # The output goes to files (read back at the exit): no pipe to drain while the process runs.
    with contextlib.ExitStack() as files:
        if input is not None:
            source = files.enter_context(tempfile.TemporaryFile())
            source.write(input.encode() if isinstance(input, str) else input)
            source.seek(0)
            stdin = source
        if capture_output:
            stdout = files.enter_context(tempfile.TemporaryFile())
            stderr = files.enter_context(tempfile.TemporaryFile())
        process = ForkedProcess(args, stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        out = err = None
        if capture_output:
            out, err = (_read_back(stream, text) for stream in (stdout, stderr))
    done = subprocess.CompletedProcess(process.args, code, out, err)
    if check:
        done.check_returncode()
    return done


def _read_back(stream: IO[bytes], text: bool) -> str | bytes:
    stream.seek(0)
    data = stream.read()
    return data.decode("utf-8", errors="replace") if text else data


class TrioForkedProcess:
    """A forked `python -m kraftpy ARGS` for a trio test: `trio.Process`'s ``stderr``, ``returncode``,
    ``send_signal``, ``kill`` and ``await wait()``."""

    def __init__(self, process: ForkedProcess, stderr: Any, stdout: Any = None) -> None:
        self._process = process
        self.stderr = stderr
        self.stdout = stdout
        self.pid = process.pid
        self.args = process.args

    @property
    def returncode(self) -> int | None:
        return self._process.poll()

    def poll(self) -> int | None:
        return self._process.poll()

    def send_signal(self, signum: int) -> None:
        self._process.send_signal(signum)

    def kill(self) -> None:
        self._process.kill()

    def terminate(self) -> None:
        self._process.terminate()

    async def wait(self) -> int:
        import trio

        while self._process.poll() is None:
            await trio.lowlevel.wait_readable(self._process.fileno_for_waiting())
        return self._process.returncode  # type: ignore[return-value]


async def open_trio_process(args: Sequence[object], *, stdout: int = subprocess.DEVNULL,
                            stderr: int = subprocess.PIPE, env: Mapping[str, str] | None = None) -> Any:
    """`trio.lowlevel.open_process([python, -m, kraftpy, *args], stdout=..., stderr=..., env=env)`, each
    stream DEVNULL or PIPE (a trio stream)."""
    import trio

    if not enabled():
        return await trio.lowlevel.open_process(kraftpy_argv(args), stdout=stdout, stderr=stderr, env=env)
    ours: list[int | None] = [None, None]
    theirs: list[int] = []
    try:
        for i, how in enumerate((stdout, stderr)):
            if how == subprocess.PIPE:
                ours[i], w = os.pipe()
                theirs.append(w)
            else:
                theirs.append(how)
        process = ForkedProcess(args, stdin=subprocess.DEVNULL, stdout=theirs[0], stderr=theirs[1], env=env)
    finally:
        for fd in theirs:
            if fd >= 0:
                os.close(fd)
    out, err = (None if fd is None else trio.lowlevel.FdStream(fd) for fd in ours)
    return TrioForkedProcess(process, err, out)


if __name__ == "__main__":
    _server_main()
