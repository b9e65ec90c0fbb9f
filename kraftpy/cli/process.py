"""Running a server process: storage checks, logging, signals and a clean stop.

SIGINT and SIGTERM ask for a graceful stop (``on_stop`` runs first: a controller resigns, a broker
does a controlled shutdown), then everything is cancelled; a second signal cancels at once.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable

import trio

from kraftpy.cli.common import fail
from kraftpy.config import KraftConfig
from kraftpy.logs import get_logger
from kraftpy.storage.formatter import FormatError, ensure_formatted


def cluster_id_or_exit(config: KraftConfig) -> str:
    try:
        return ensure_formatted(config.all_dirs, config.node_id)
    except FormatError as exc:
        fail(str(exc))


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
