"""Structured logging, configured once per process.

Lines are readable key=value text on a terminal and JSON objects otherwise (``--log-format``
``auto | console | json``). Every line carries ``node_id`` and ``role``: the process binds them once
at start with `bind_process`; a component that runs under another role in the same process (the
controller and the broker of ``kraftpy dev``) binds its own with `component_logger`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("auto", "console", "json")

_process: dict[str, Any] = {"node_id": None, "role": None}


def _add_process(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    for key, value in _process.items():
        event.setdefault(key, value)
    return event


def configure_logging(level: str = "info", fmt: str = "auto", stream=None) -> None:
    """Set up structlog for the whole process; call once, before the first log line."""
    if level not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    stream = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if getattr(stream, "isatty", lambda: False)() else "json"
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty() if hasattr(stream, "isatty") else False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            _add_process,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


def bind_process(node_id: int | None, role: str | None) -> None:
    """Name the process's node id and role; every line that does not bind its own carries them."""
    _process["node_id"] = node_id
    _process["role"] = role


def get_logger(name: str | None = None, **bound: Any) -> Any:
    log = structlog.get_logger()
    if name is not None:
        bound["logger"] = name
    return log.bind(**bound) if bound else log


def component_logger(name: str, node_id: int, role: str, **bound: Any) -> Any:
    """A logger for one component, carrying its own node id and role."""
    return get_logger(name, node_id=node_id, role=role, **bound)
