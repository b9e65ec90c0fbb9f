"""In-process kraftpy nodes for tests: a combined node's configuration, as `kraftpy dev` writes it."""

from __future__ import annotations

from pathlib import Path

from kraftpy.cli.dev import dev_properties
from kraftpy.config import KraftConfig, load_config
from kraftpy.config.properties import format_properties
from kraftpy.ids import random_uuid_str
from kraftpy.storage.formatter import format_dirs


def formatted_node_config(tmp_path: Path, port: int, controller_port: int, extra: dict[str, str] | None = None
                          ) -> tuple[KraftConfig, str]:
    """The configuration of a combined node as `kraftpy dev` writes it (plus ``extra``), its storage
    formatted; returns it and the cluster id."""
    values = {**dev_properties(tmp_path, port, controller_port), **(extra or {})}
    (tmp_path / "server.properties").write_text(format_properties(values))
    config = load_config(tmp_path / "server.properties")
    cluster_id = random_uuid_str()
    format_dirs(config.all_dirs, cluster_id, config.node_id)
    return config, cluster_id
