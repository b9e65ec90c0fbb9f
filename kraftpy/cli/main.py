"""The `kraftpy` command: one typer app, with each command group in its own module."""

from __future__ import annotations

import typer

from kraftpy.cli import config_cmd, dev, metadata_cmd, perf, quorum, servers, storage
from kraftpy.cli.acls import app as acls_app
from kraftpy.cli.cluster import app as cluster_app
from kraftpy.cli.configs import app as configs_app
from kraftpy.cli.console import app as console_app
from kraftpy.cli.dump_log import dump_log
from kraftpy.cli.features import app as features_app
from kraftpy.cli.groups import app as groups_app
from kraftpy.cli.leaders import app as leaders_app
from kraftpy.cli.log_dirs import app as log_dirs_app
from kraftpy.cli.reassign import app as reassign_app
from kraftpy.cli.topics import app as topics_app
from kraftpy.cli.transactions import app as transactions_app

app = typer.Typer(
    name="kraftpy",
    help="kraftpy: a Kafka-compatible, self-managed distributed commit log.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.add_typer(storage.app, name="storage")
app.add_typer(config_cmd.app, name="config")
app.add_typer(quorum.app, name="quorum")
app.add_typer(metadata_cmd.app, name="metadata")
app.add_typer(perf.app, name="perf")
app.add_typer(topics_app, name="topics")
app.add_typer(configs_app, name="configs")
app.add_typer(cluster_app, name="cluster")
app.add_typer(features_app, name="features")
app.add_typer(groups_app, name="groups")
app.add_typer(console_app, name="console")
app.add_typer(reassign_app, name="reassign")
app.add_typer(leaders_app, name="leaders")
app.add_typer(transactions_app, name="transactions")
app.add_typer(acls_app, name="acls")
app.add_typer(log_dirs_app, name="log-dirs")
servers.register(app)
app.command("dev")(dev.dev)
app.command("dump-log")(dump_log)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
