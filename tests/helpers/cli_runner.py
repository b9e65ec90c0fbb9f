"""typer's CliRunner, running `kraftpy ARGS` with the app `kraftpy` itself builds for ARGS.

typer converts the app it is handed into click commands at every invocation; for the whole `kraftpy`
app (every command of every group) that is about a quarter of a second on a slow machine, for a
command that then runs for a few milliseconds. `kraftpy.cli.main.app_for` builds the named command's
group alone, as the installed `kraftpy` does.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner as TyperCliRunner

from kraftpy.cli import main as cli_main


class CliRunner(TyperCliRunner):
    def invoke(self, app: typer.Typer, args: Any = None, *rest: Any, **kwargs: Any):  # type: ignore[override]
        if app is cli_main.app and isinstance(args, (list, tuple)):
            app = cli_main.app_for([str(a) for a in args])
        return super().invoke(app, args, *rest, **kwargs)
