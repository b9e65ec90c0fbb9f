"""`kraftpy features describe`: supported and finalized feature levels (kafka-features.sh describe).

With ``--bootstrap-server``, from a broker's ApiVersions (v3: the ranges it supports, the cluster's
finalized levels and their epoch); with ``--bootstrap-controller``, from the active controller (the
ranges it supports, and the finalized levels in its image as of the offset printed as the epoch).
"""

from __future__ import annotations

from typing import Any

import typer

from kraftpy.admin.client import AdminClient
from kraftpy.cli.admin_common import (
    BootstrapControllerOption,
    BootstrapServerOption,
    CommandConfigOption,
    JsonOption,
    emit_json,
    emit_table,
    run_admin,
)
from kraftpy.cli.cluster import controller_state, one_source
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import ApiVersionsRequest

app = typer.Typer(help="Describe the cluster's feature levels (kafka-features.sh).", no_args_is_help=True)


async def _from_broker(admin: AdminClient) -> list[dict[str, Any]]:
    response = await admin.request(ApiKey.API_VERSIONS, ApiVersionsRequest(
        client_software_name="kraftpy-admin", client_software_version="1"), version=3)
    finalized = {f.name: f.max_version_level for f in response.finalized_features}
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    return _rows(supported, finalized, response.finalized_features_epoch)


def _rows(supported: dict[str, Any], finalized: dict[str, int], epoch: int) -> list[dict[str, Any]]:
    out = []
    for name in sorted(set(supported) | set(finalized)):
        low, high = supported.get(name, (None, None))
        out.append({"feature": name, "supported_min_version": low, "supported_max_version": high,
                    "finalized_version_level": finalized.get(name, 0), "epoch": epoch})
    return out


@app.command("describe")
def describe(
    bootstrap_server: BootstrapServerOption = None,
    bootstrap_controller: BootstrapControllerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print each feature: the versions supported, the finalized level, and the epoch it was read at."""
    one_source(bootstrap_server, bootstrap_controller)
    if bootstrap_controller:
        state = controller_state(bootstrap_controller, command_config)
        rows = _rows({k: tuple(v) for k, v in state["supported_features"].items()}, state["finalized_features"],
                     state["metadata_offset"])
    else:
        rows = run_admin(bootstrap_server, command_config, _from_broker)
    if as_json:
        emit_json(rows)
        return
    emit_table(["Feature", "SupportedMinVersion", "SupportedMaxVersion", "FinalizedVersionLevel", "Epoch"],
               [[r["feature"], "" if r["supported_min_version"] is None else r["supported_min_version"],
                 "" if r["supported_max_version"] is None else r["supported_max_version"],
                 r["finalized_version_level"], r["epoch"]] for r in rows])
