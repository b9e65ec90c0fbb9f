"""Running a server process: storage checks, logging, signals, a clean stop, and faults in one line.

SIGINT and SIGTERM ask for a graceful stop (``on_stop`` runs first: a controller resigns, a broker
does a controlled shutdown), then everything is cancelled; a second signal cancels at once.

A fault the process cannot go on after (`kraftpy.fatal`: a listener's port taken, the metadata log
not writable, a full disk at start) ends it with one line on stderr — ``kraftpy: <what failed>`` —
and exit code 1, not with the traceback of every task the fault cancelled.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable

import trio

from kraftpy.config import KraftConfig
from kraftpy.fatal import fatal_message
from kraftpy.logs import get_logger
from kraftpy.storage.dir_lock import hold_for_process
from kraftpy.storage.formatter import FormatError, ensure_formatted


def cluster_id_or_exit(config: KraftConfig) -> str:
    """The cluster id of the node's formatted directories, which this process then holds (`hold_for_process`);
    one line and exit status 1 when they are not formatted or another process holds one."""
    try:
        cluster_id = ensure_formatted(config.all_dirs, config.node_id)
        hold_for_process(config.all_dirs)
        return cluster_id
    except FormatError as exc:
        from kraftpy.cli.common import fail

        fail(str(exc))


def run_or_exit(main: Callable[[], Awaitable[None]]) -> None:
    """``trio.run(main)``; a fatal fault ends the process with its one line and exit code 1."""
    try:
        trio.run(main)
    except BaseException as exc:  # only fatal faults are caught: the rest is raised again
        message = fatal_message(exc)
        if message is None:
            raise
        from kraftpy.cli.common import fail

        fail(message)


async def serve_until_signal(
    serve: Callable[..., Awaitable[None]],
    on_stop: Callable[[], Awaitable[None]] | None = None,
    *,
    stop_grace: float = 30.0,
) -> None:
    """Run ``serve(task_status=...)`` until SIGINT/SIGTERM, then ``on_stop()`` and cancel."""
    log = get_logger("process")
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            await nursery.start(serve)
            async for signum in signals:
                log.info("stopping", signal=signal.Signals(signum).name)
                if on_stop is not None:
                    async with trio.open_nursery() as stopping:
                        stopping.start_soon(_cancel_on_next_signal, signals, stopping.cancel_scope)
                        with trio.move_on_after(stop_grace):
                            await on_stop()
                        stopping.cancel_scope.cancel()
                nursery.cancel_scope.cancel()
                break


async def _cancel_on_next_signal(signals, scope: trio.CancelScope) -> None:
    async for _ in signals:
        scope.cancel()
        return
