"""The tests' fork server (tests/helpers/forkserver.py): a forked `python -m kraftpy ARGS` answers as a
fresh interpreter does, exits as one does, and does not outlive the server that forked it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import forkserver
from tests.helpers.processes import DevProcess, free_ports, write_properties

pytestmark = pytest.mark.slow


def fresh(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(forkserver.kraftpy_argv(args), capture_output=True, text=True, timeout=120, **kwargs)


@pytest.mark.parametrize("args", [
    ["topics", "--help"],  # the program's name, as click finds it for `python -m kraftpy`
    ["no-such-command"],  # a usage error: exit 2
    ["topics", "list", "--bootstrap-server", "127.0.0.1:{port}"],  # nobody answers: exit 3, one line
    [],
])
def test_a_forked_command_answers_as_a_fresh_interpreter_does(args):
    [port] = free_ports(1)
    args = [a.format(port=port) for a in args]
    forked = forkserver.run(args, capture_output=True, text=True, timeout=120)
    assert forked.args == [sys.executable, "-m", "kraftpy", *args]
    assert (forked.returncode, forked.stdout, forked.stderr) == (lambda r: (r.returncode, r.stdout, r.stderr))(
        fresh(args))


def test_cwd_env_and_stdin_are_the_callers(tmp_path, monkeypatch):
    """A relative path is read from the given directory; the environment is the given one (or the
    caller's as it is at the call); stdin is what the caller passes."""
    config = write_properties(tmp_path / "c.properties", {
        "process.roles": "controller", "node.id": 1, "controller.quorum.voters": "1@127.0.0.1:9",
        "listeners": "CONTROLLER://127.0.0.1:9", "controller.listener.names": "CONTROLLER", "log.dirs": "data"})
    formatted = forkserver.run(["storage", "format", "-c", config.name, "-t", "MkU3OEVBNTcwNTJENDM2Qg"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert formatted.returncode == 0, formatted.stderr
    assert (tmp_path / "data" / "meta.properties").is_file()

    monkeypatch.setenv("COLUMNS", "40")  # rich draws the help this wide
    narrow = forkserver.run(["topics", "--help"], capture_output=True, text=True, timeout=120)
    assert max(map(len, narrow.stdout.splitlines())) <= 40
    wide = forkserver.run(["topics", "--help"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "150"})
    assert max(map(len, wide.stdout.splitlines())) > 40

    bad = forkserver.run(["storage", "format", "-c", "/dev/stdin", "-t", "x"], input="node.id=zero\n",
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "node.id" in bad.stderr


def test_a_node_stops_on_sigint_and_a_kill_is_its_return_code(tmp_path):
    with DevProcess(tmp_path / "a") as dev:
        assert isinstance(dev.process, forkserver.ForkedProcess)
        assert Path(f"/proc/{dev.process.pid}").exists()
    assert dev.process.returncode == 0  # Ctrl-C: a clean stop

    dev = DevProcess(tmp_path / "b").start()
    dev.process.kill()
    assert dev.process.wait(60) == -signal.SIGKILL


async def test_a_trio_process_streams_its_output_and_is_awaited(tmp_path):
    process = await forkserver.open_trio_process(["storage", "random-uuid"], stdout=subprocess.PIPE,
                                                 stderr=subprocess.DEVNULL)
    out = b""
    async for chunk in process.stdout:
        out += chunk
    assert await process.wait() == 0
    assert len(out.strip()) == 22

    done = await forkserver.run_async(["no-such-command"])
    assert done.returncode == 2 and b"No such command" in done.stderr


def test_the_processes_of_a_server_die_with_it(tmp_path):
    """When the test process goes (its end of the control socket closes), its fork server kills what it
    forked and exits."""
    client = forkserver._Client()
    original = forkserver._Client._instance
    forkserver._Client._instance = client
    try:
        dev = DevProcess(tmp_path / "dev").start()
    finally:
        forkserver._Client._instance = original
    pid = dev.process.pid
    client.control.close()
    assert client.process.wait(60) == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped by the server before it exited


def test_off_starts_fresh_interpreters(monkeypatch):
    monkeypatch.setenv("KRAFTPY_TEST_FORKSERVER", "0")
    process = forkserver.popen(["storage", "random-uuid"], stdout=subprocess.PIPE)
    assert isinstance(process, subprocess.Popen)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0 and len(out.strip()) == 22
    assert forkserver.run(["no-such-command"], capture_output=True).returncode == 2


def test_sigterm_reaches_the_process(tmp_path):
    """Signals go to the forked process itself (its pid is the process's)."""
    process = forkserver.popen(["dev", "--dir", tmp_path / "dev", "--port", free_ports(1)[0],
                                "--controller-port", free_ports(1)[0]], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    for line in process.stdout:
        if b"kraftpy dev is running" in line:
            break
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
