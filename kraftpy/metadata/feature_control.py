"""Finalized feature levels, metadata.version first of all.

A new cluster's log starts with ``bootstrap_records``: the FeatureLevelRecord of its metadata.version.
An UpdateFeatures request raises (or, when the feature allows it, lowers) finalized levels; each level
must be within what this controller supports and what every registered broker declared at
registration. metadata.version never goes down: records written at a higher level may not be readable at
a lower one. The update is all or nothing: one refused feature means no record is written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from kraftpy.metadata.controller_config import LATEST_METADATA_VERSION, ControllerConfig
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import METADATA_VERSION, MetadataImage
from kraftpy.metadata.messages import (
    FeatureUpdateKey,
    FeatureUpgradeType,
    UpdatableFeatureResult,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from kraftpy.metadata.records import FeatureLevelRecord, MetadataRecord
from kraftpy.metadata.result import ControllerResult


def bootstrap_records(bootstrap: Sequence[MetadataRecord] = ()) -> list[MetadataRecord]:
    """The records a freshly formatted cluster's metadata log starts with: its metadata.version (the one
    `storage format --release-version` put in the bootstrap records, else the newest this build runs at),
    then the rest of the bootstrap records (`storage format --add-scram`)."""
    level = next((r.feature_level for r in bootstrap
                  if isinstance(r, FeatureLevelRecord) and r.name == METADATA_VERSION), LATEST_METADATA_VERSION)
    rest = [r for r in bootstrap if not (isinstance(r, FeatureLevelRecord) and r.name == METADATA_VERSION)]
    return [FeatureLevelRecord(METADATA_VERSION, level), *rest]


def _update_error(image: MetadataImage, update: FeatureUpdateKey, config: ControllerConfig) -> str | None:
    name, level = update.feature, update.max_version_level
    current = image.features.levels.get(name, 0)
    supported = config.supported_features.get(name)
    if supported is None:
        return f"The controller does not support the feature {name}."
    if level < 0:
        return f"Invalid level {level} for {name}."
    if level < current:
        if name == METADATA_VERSION:
            return f"Refusing to lower {name} from {current} to {level}: downgrading metadata is not supported."
        if update.upgrade_type is FeatureUpgradeType.UPGRADE:
            return f"Can't downgrade the level of {name} from {current} to {level} without a downgrade type."
    if level == 0:
        if name == METADATA_VERSION:
            return f"{name} cannot be removed."
        return None
    low, high = supported
    if not low <= level <= high:
        return f"The controller only supports {name} levels {low} to {high}, not {level}."
    for broker_id, reg in sorted(image.cluster.brokers.items()):
        rng = reg.supported_range(name)
        if rng is None or not rng[0] <= level <= rng[1]:
            return f"Broker {broker_id} does not support level {level} of {name}."
    return None


def update_features(
    image: MetadataImage, request: UpdateFeaturesRequest, config: ControllerConfig
) -> ControllerResult[UpdateFeaturesResponse]:
    results = []
    records: list[MetadataRecord] = []
    failed: str | None = None
    named = Counter(u.feature for u in request.feature_updates)
    for update in request.feature_updates:
        if named[update.feature] > 1:
            reason: str | None = f"The feature {update.feature} is named more than once."
        else:
            reason = _update_error(image, update, config)
        if reason is None:
            results.append(UpdatableFeatureResult(update.feature, Errors.NONE))
            if image.features.levels.get(update.feature, 0) != update.max_version_level:
                records.append(FeatureLevelRecord(update.feature, update.max_version_level))
        else:
            failed = failed or reason
            results.append(UpdatableFeatureResult(update.feature, Errors.INVALID_UPDATE_VERSION, reason))
    if failed is not None:
        return ControllerResult([], UpdateFeaturesResponse(Errors.INVALID_UPDATE_VERSION, failed, tuple(results)))
    return ControllerResult(
        [] if request.validate_only else records, UpdateFeaturesResponse(Errors.NONE, None, tuple(results))
    )


def feature_upgrade_type(update: Any, version: int) -> FeatureUpgradeType | None:
    """The upgrade type of one entry of a Kafka UpdateFeatures request of ``version`` (v0 has only
    AllowDowngrade), or None for a type Kafka does not define."""
    if version == 0:
        return FeatureUpgradeType.SAFE_DOWNGRADE if update.allow_downgrade else FeatureUpgradeType.UPGRADE
    try:
        return FeatureUpgradeType(update.upgrade_type)
    except ValueError:
        return None
