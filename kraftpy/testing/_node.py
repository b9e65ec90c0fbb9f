"""One node of a test cluster, in a process the zygote forked: what `kraftpy server` runs, plus a lifeline.

The node connects to the supervisor's lifeline port first and says who it is (the spawn's token and
its pid), says ``ready`` once it serves (a broker: once the controller has unfenced it), and exits as
soon as that connection ends: the supervisor is gone, nobody is left to stop it. On Linux the kernel
also kills it when the zygote that forked it dies (``PR_SET_PDEATHSIG``), which reaches a node that
is paused (SIGSTOP) and cannot read its lifeline.

SIGTERM is a graceful stop, as for `kraftpy server`: a broker's controlled shutdown first.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import traceback
from typing import Any

import trio

from kraftpy.cli.process import serve_until_signal
from kraftpy.config import ConfigError, load_config
from kraftpy.fatal import fatal_message
from kraftpy.logs import bind_process, configure_logging
from kraftpy.node import KraftNode
from kraftpy.storage.dir_lock import hold_for_process
from kraftpy.storage.formatter import FormatError, ensure_formatted

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """SIGKILL when ``parent`` (the zygote) dies (Linux); if it is gone already, exit now."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def redirect_output(log_path: str) -> None:
    """stdin from /dev/null; stdout and stderr (and so the JSON log lines) appended to the node's log."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def run(spec: dict[str, Any]) -> int:
    """Run the node of ``spec`` (``config``, ``log_level``, ``lifeline``: the supervisor's port, ``token``)
    until it is stopped; the process's exit code."""
    try:
        config = load_config(spec["config"])
        configure_logging(spec["log_level"], "json", sys.stderr)
        bind_process(config.node_id, config.role_name)
        cluster_id = ensure_formatted(config.all_dirs, config.node_id)
        hold_for_process(config.all_dirs)
    except (ConfigError, FormatError) as exc:
        print(f"kraftpy: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        trio.run(_main, config, cluster_id, spec)
    except BaseException as exc:  # one line for a fatal fault, the traceback for anything else
        message = fatal_message(exc)
        if message is None:
            traceback.print_exc()
            return 1
        print(f"kraftpy: {message}", file=sys.stderr, flush=True)
        return 1
    return 0


async def _main(config, cluster_id: str, spec: dict[str, Any]) -> None:
    lifeline = await trio.open_tcp_stream("127.0.0.1", spec["lifeline"])
    await lifeline.send_all(json.dumps({"token": spec["token"], "pid": os.getpid()}).encode() + b"\n")
    node = KraftNode(config, cluster_id, freeze_gc_when_ready=True)

    async def serve(task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)
            task_status.started()
            await node.ready.wait()
            await lifeline.send_all(b'{"ready": true}\n')

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_exit_when_cut, lifeline, nursery.cancel_scope)
        await serve_until_signal(serve, node.stop_gracefully)
        nursery.cancel_scope.cancel()


async def _exit_when_cut(lifeline: trio.SocketStream, scope: trio.CancelScope) -> None:
    """The supervisor never writes: the end of the stream (or an error) means it is gone."""
    try:
        while await lifeline.receive_some(1024):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    scope.cancel()
