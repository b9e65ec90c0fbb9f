"""What every admin command shares: one flag style, one output style, exit codes scripts can trust.

Flags: ``--bootstrap-server host:port[,host:port]`` (the Kafka protocol, any broker),
``--bootstrap-controller host:port[,...]`` where a command reads the controllers' own view,
``--command-config FILE`` (client settings, `kraftpy.admin.client.CLIENT_CONFIG_KEYS`) and ``--json``.

Output: a rich table on a terminal; tab-separated columns with a header line when piped (``cut``,
``awk`` and ``column -t`` read it); with ``--json``, one JSON document on stdout.

Exit codes (`EXIT_*`): 0 everything asked for was done; 1 a request failed (the message names
Kafka's error code and the resource); 2 the command line itself was wrong; 3 no broker or
controller could be reached; 130 interrupted (Ctrl-C). Messages go to stderr as one line each:
``kraftpy: <what failed>``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import trio
import typer

from kraftpy.admin.client import (
    CLIENT_CONFIG_KEYS,
    AdminClient,
    AdminError,
    ClientConfig,
    KafkaError,
    parse_addresses,
)
from kraftpy.config.properties import PropertiesSyntaxError, load_properties
from kraftpy.protocol.errors import ErrorCode

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130

T = TypeVar("T")

BootstrapServerOption = Annotated[
    str | None, typer.Option("--bootstrap-server", help="Brokers to connect to, host:port[,host:port...].",
                             show_default=False)]
BootstrapControllerOption = Annotated[
    str | None, typer.Option("--bootstrap-controller", help="Controllers to ask, host:port[,host:port...].",
                             show_default=False)]
CommandConfigOption = Annotated[
    Path | None, typer.Option("--command-config", help="A .properties file of client settings "
                              "(client.id, request.timeout.ms, default.api.timeout.ms, security.protocol, "
                              "ssl.*).", show_default=False)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")]


def die(message: str, code: int = EXIT_FAILED) -> NoReturn:
    typer.echo(f"kraftpy: {message}", err=True)
    raise typer.Exit(code)


def read_properties_or_exit(path: Path, flag: str) -> dict[str, str]:
    """A client settings file as a dict; a file that cannot be read or parsed is one line and exit 2."""
    try:
        entries = load_properties(path)
    except PropertiesSyntaxError as exc:
        # A file that cannot be read is reported at line 0: name the flag and the reason only.
        detail = str(exc).removeprefix(f"{exc.source}:0: ") if exc.line == 0 else str(exc)
        die(f"{flag}={path}: {detail}", EXIT_USAGE)
    except OSError as exc:
        die(f"{flag}={path}: {exc.strerror or exc}", EXIT_USAGE)
    except ValueError as exc:
        die(f"{flag}={path}: {exc}", EXIT_USAGE)
    return {e.key: e.value for e in entries}


def client_config(path: Path | None) -> ClientConfig:
    if path is None:
        return ClientConfig()
    props = read_properties_or_exit(path, "--command-config")
    for key in props:
        # As Kafka's clients do, a setting the client does not read is named, then left alone.
        if key not in CLIENT_CONFIG_KEYS and not key.startswith(("ssl.", "sasl.")):
            typer.echo(f"kraftpy: warning: --command-config={path}: {key} is not a setting the admin client "
                       "reads (ignored)", err=True)
    try:
        return ClientConfig.from_properties(props)
    except ValueError as exc:
        die(f"--command-config={path}: {exc}", EXIT_USAGE)


def bootstrap_or_exit(bootstrap_server: str | None) -> list[tuple[str, int]]:
    if not bootstrap_server:
        die("--bootstrap-server is required (host:port of any broker)", EXIT_USAGE)
    try:
        return parse_addresses(bootstrap_server)
    except ValueError as exc:
        die(f"--bootstrap-server={bootstrap_server}: {exc}", EXIT_USAGE)


def _interrupted_now() -> NoReturn:
    """End the process at once, as an interrupted command ends: nothing left to run can hold it (a
    KeyboardInterrupt would wait for the command's shielded clean-up to finish)."""
    sys.stdout.flush()
    typer.echo("kraftpy: interrupted", err=True)
    sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)


def run_trio(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(fn, *args)``; Ctrl-C ends the command with one line and exit 130, not a traceback.

    Once the command runs, Ctrl-C cancels it: everything it started ends at its next checkpoint, so
    none is cut between two statements (a KeyboardInterrupt raised there left a task created and never
    started, which Python reported with a warning). A second Ctrl-C while that ends (a clean-up waiting
    on a peer that does not answer) ends the process at once, with the same line and status. One before
    trio starts, or that trio delivers inside an exception group, ends it the same way."""
    interrupted = False

    async def main() -> T | None:
        nonlocal interrupted
        result: T | None = None
        failure: BaseException | None = None
        command = trio.CancelScope()
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                async def on_ctrl_c() -> None:
                    nonlocal interrupted
                    async for _ in signals:  # still listening while the command ends
                        if interrupted:
                            _interrupted_now()
                        interrupted = True
                        command.cancel()
                nursery.start_soon(on_ctrl_c)
                with command:
                    try:
                        result = await fn(*args)
                    except trio.Cancelled:
                        raise
                    except BaseException as exc:  # leaves as itself below, not inside the nursery's group
                        failure = exc
                nursery.cancel_scope.cancel()
        if failure is not None and not interrupted:
            raise failure
        return result

    try:
        result = trio.run(main)
    except KeyboardInterrupt:
        pass
    except BaseExceptionGroup as group:
        if group.subgroup(KeyboardInterrupt) is None:
            raise
    else:
        if not interrupted:
            return result  # type: ignore[return-value]
    die("interrupted", EXIT_INTERRUPTED)


def run_admin(bootstrap_server: str | None, command_config: Path | None,
              body: Callable[[AdminClient], Awaitable[T]]) -> T:
    """Connect, run ``body(admin)`` under trio, close; an `AdminError` ends the process with its one
    line and its exit code."""
    addresses = bootstrap_or_exit(bootstrap_server)
    config = client_config(command_config)

    async def main() -> T:
        async with AdminClient(addresses, config) as admin:
            return await body(admin)

    try:
        return run_trio(main)
    except AdminError as exc:
        die(str(exc), exc.exit_code)


def is_terminal() -> bool:
    return sys.stdout.isatty()


def emit_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, sort_keys=False, default=str))


def emit_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> None:
    """A rich table on a terminal, else a header line and tab-separated rows."""
    cells = [["" if v is None else str(v) for v in row] for row in rows]
    if is_terminal():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, show_lines=False)
        for name in columns:
            # Fold long cells (topic ids, config lists) onto more lines: never cut what a user reads.
            table.add_column(name, overflow="fold")
        for row in cells:
            table.add_row(*row)
        Console().print(table)
        return
    if title:
        typer.echo(f"# {title}")
    typer.echo("\t".join(columns))
    for row in cells:
        typer.echo("\t".join(row))


def parse_key_values(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    """Repeated ``k=v`` items to a dict (the value may itself hold ``=`` and ``,``)."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            die(f"{flag} {item}: expected key=value", EXIT_USAGE)
        out[key.strip()] = value.strip()
    return out


async def retrying(admin: AdminClient, what: str, attempt: Callable[[], Any]) -> Any:
    """Run ``attempt()`` until it returns something other than a retriable `KafkaError` (a
    coordinator moving or loading, a leader changing), within default.api.timeout.ms."""
    last: KafkaError | None = None
    with trio.move_on_after(admin.config.api_timeout_s):
        while True:
            try:
                return await attempt()
            except KafkaError as exc:
                if not exc.code.retriable:
                    raise
                last = exc
            await trio.sleep(0.1)
    code = last.code if last is not None else ErrorCode.REQUEST_TIMED_OUT
    raise KafkaError(code, f"{what}: no answer within default.api.timeout.ms="
                     f"{int(admin.config.api_timeout_s * 1000)}", subject=last.subject if last else None)
