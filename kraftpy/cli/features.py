"""`kraftpy features describe|upgrade|downgrade|disable`: feature levels (kafka-features.sh).

With ``--bootstrap-server``, from a broker's ApiVersions (v3: the ranges it supports, the cluster's
finalized levels and their epoch); with ``--bootstrap-controller``, from the active controller (the
ranges it supports, and the finalized levels in its image as of the offset printed as the epoch).

``upgrade --feature NAME=LEVEL`` (or ``--release-version 3.9``: metadata.version at that release's level),
``downgrade --feature NAME=LEVEL`` and ``disable --feature NAME`` send
UpdateFeatures to ``--bootstrap-server`` (the broker forwards it to the controller), or with
``--bootstrap-controller`` straight to the active controller (KIP-919): each feature is
reported as Kafka's tool reports it ("metadata.version was upgraded to 7."), ``--dry-run`` only
validates ("... can be upgraded to ..."), ``--unsafe`` makes a downgrade or disable one that may lose
metadata. The update is all or nothing; a refused one exits 1 with the controller's reason.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kraftpy.admin.client import AdminClient, KafkaError
from kraftpy.cli.admin_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    BootstrapControllerOption,
    BootstrapServerOption,
    CommandConfigOption,
    JsonOption,
    die,
    emit_json,
    emit_table,
    run_admin,
)
from kraftpy.cli.cluster import controller_call, controller_state, one_source
from kraftpy.metadata import messages as control
from kraftpy.metadata import metadata_version
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import ApiVersionsRequest, UpdateFeaturesRequest

METADATA_VERSION = "metadata.version"
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
    def level(row: dict[str, Any], value: int | None) -> Any:
        # metadata.version by its release name, as kafka-features.sh prints it (3.9-IV0).
        if value is None:
            return ""
        return metadata_version.name(value) if row["feature"] == METADATA_VERSION and value else value

    emit_table(["Feature", "SupportedMinVersion", "SupportedMaxVersion", "FinalizedVersionLevel", "Epoch"],
               [[r["feature"], level(r, r["supported_min_version"]), level(r, r["supported_max_version"]),
                 level(r, r["finalized_version_level"]), r["epoch"]] for r in rows])


UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
FeatureOption = Annotated[list[str], typer.Option("--feature", help="NAME=LEVEL (repeatable).", show_default=False)]
DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Only validate: change nothing.")]
UnsafeOption = Annotated[bool, typer.Option("--unsafe", help="A downgrade that may lose metadata.")]


def _levels(features: list[str], *, with_level: bool = True) -> list[tuple[str, int]]:
    out = []
    for item in features:
        name, sep, level = item.partition("=")
        if not with_level:
            if sep or not name:
                die(f"--feature {item}: expected a feature name", EXIT_USAGE)
            out.append((name, 0))
            continue
        if not sep or not name or not level.lstrip("-").isdigit():
            die(f"--feature {item}: expected NAME=LEVEL, for example metadata.version=7", EXIT_USAGE)
        out.append((name, int(level)))
    if not out:
        die("name a feature: --feature", EXIT_USAGE)
    return out


def _update(levels: list[tuple[str, int]], upgrade_type: int, dry_run: bool, verb: str,
            bootstrap_server: str | None, bootstrap_controller: str | None, command_config: Any,
            as_json: bool) -> None:
    one_source(bootstrap_server, bootstrap_controller)
    if bootstrap_controller:
        # The control plane's UpdateFeatures, which brokers forward this request to: the same answer.
        response = controller_call(bootstrap_controller, command_config, control.UpdateFeaturesRequest(
            tuple(control.FeatureUpdateKey(name, level, control.FeatureUpgradeType(upgrade_type))
                  for name, level in levels), validate_only=dry_run))
    else:
        Key = UpdateFeaturesRequest.FeatureUpdateKey
        request = UpdateFeaturesRequest(timeout_ms=30000, validate_only=dry_run, feature_updates=[
            Key(feature=name, max_version_level=level, upgrade_type=upgrade_type) for name, level in levels])

        async def body(admin: AdminClient) -> Any:
            return await admin.request(ApiKey.UPDATE_FEATURES, request, version=1)

        response = run_admin(bootstrap_server, command_config, body)
    results = {r.feature: r for r in response.results}
    rows = []
    for name, level in levels:
        result = results.get(name)
        code = result.error_code if result is not None else response.error_code
        message = (result.error_message if result is not None else None) or response.error_message
        target = "disabled" if level == 0 else f"{verb}d to {level}"
        if code == ErrorCode.NONE and response.error_code == ErrorCode.NONE:
            line = f"{name} {'can be' if dry_run else 'was'} {target}."
            rows.append({"feature": name, "level": level, "error": None, "message": line})
        else:
            code = code or response.error_code
            error = ErrorCode.for_code(code).name
            line = f"Could not {'disable' if level == 0 else verb} {name}{'' if level == 0 else f' to {level}'}. " \
                   f"{KafkaError(code, message)}"
            rows.append({"feature": name, "level": level, "error": error, "message": line})
    if as_json:
        emit_json(rows)
    else:
        for row in rows:
            typer.echo(row["message"], err=row["error"] is not None)
    if any(row["error"] for row in rows):
        raise typer.Exit(EXIT_FAILED)


@app.command("upgrade")
def upgrade(feature: Annotated[list[str] | None, typer.Option(
                "--feature", help="NAME=LEVEL (repeatable).", show_default=False)] = None,
            release_version: Annotated[str | None, typer.Option(
                "--release-version", "--metadata", help="Raise metadata.version to this Kafka release's level "
                "(3.9 or 3.9-IV0; 3.7 means 3.7-IV4).", show_default=False)] = None,
            dry_run: DryRunOption = False, bootstrap_server: BootstrapServerOption = None,
            bootstrap_controller: BootstrapControllerOption = None,
            command_config: CommandConfigOption = None, as_json: JsonOption = False) -> None:
    """Raise finalized feature levels; metadata.version rises online, without a restart."""
    levels = _levels(feature) if feature else []
    if release_version is not None:
        try:
            levels.append((METADATA_VERSION, metadata_version.parse_release_version(release_version)))
        except metadata_version.ReleaseVersionError as exc:
            die(f"--release-version: {exc}", EXIT_USAGE)
    if not levels:
        die("name a feature (--feature NAME=LEVEL) or a release (--release-version 3.9)", EXIT_USAGE)
    _update(levels, UPGRADE, dry_run, "upgrade", bootstrap_server, bootstrap_controller, command_config, as_json)


@app.command("downgrade")
def downgrade(feature: FeatureOption, unsafe: UnsafeOption = False, dry_run: DryRunOption = False,
              bootstrap_server: BootstrapServerOption = None, bootstrap_controller: BootstrapControllerOption = None,
              command_config: CommandConfigOption = None, as_json: JsonOption = False) -> None:
    """Lower finalized feature levels (metadata.version never goes down)."""
    _update(_levels(feature), UNSAFE_DOWNGRADE if unsafe else SAFE_DOWNGRADE, dry_run, "downgrade",
            bootstrap_server, bootstrap_controller, command_config, as_json)


@app.command("disable")
def disable(feature: FeatureOption, unsafe: UnsafeOption = False, dry_run: DryRunOption = False,
            bootstrap_server: BootstrapServerOption = None, bootstrap_controller: BootstrapControllerOption = None,
            command_config: CommandConfigOption = None, as_json: JsonOption = False) -> None:
    """Remove finalized features (level 0)."""
    _update(_levels(feature, with_level=False), UNSAFE_DOWNGRADE if unsafe else SAFE_DOWNGRADE, dry_run,
            "downgrade", bootstrap_server, bootstrap_controller, command_config, as_json)
