"""UpdateFeatures on the Kafka port, forwarded to the controller: what kafka-features.sh sends and how
each version is answered; `kraftpy features upgrade|downgrade|disable`."""

from __future__ import annotations

import json

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.metadata.controller_config import LATEST_METADATA_VERSION
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import UpdateFeaturesRequest
from tests.helpers import forkserver
from tests.helpers.cluster import open_cluster

Key = UpdateFeaturesRequest.FeatureUpdateKey
MV = "metadata.version"


async def test_levels_are_decided_by_the_controller_and_answered_per_version(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            async def update(version: int, *keys, validate_only: bool = False):
                return await admin.request(ApiKey.UPDATE_FEATURES, UpdateFeaturesRequest(
                    feature_updates=list(keys), validate_only=validate_only), version=version)

            same = await update(1, Key(feature=MV, max_version_level=LATEST_METADATA_VERSION, upgrade_type=1))
            assert same.error_code == ErrorCode.NONE
            assert [(r.feature, r.error_code) for r in same.results] == [(MV, ErrorCode.NONE)]

            beyond = await update(1, Key(feature=MV, max_version_level=LATEST_METADATA_VERSION + 1, upgrade_type=1))
            assert beyond.error_code == ErrorCode.INVALID_UPDATE_VERSION
            assert beyond.results[0].error_code == ErrorCode.INVALID_UPDATE_VERSION
            assert "supports" in beyond.results[0].error_message

            # Version 0's allow_downgrade is a safe downgrade, and metadata.version is never lowered.
            lower = await update(0, Key(feature=MV, max_version_level=LATEST_METADATA_VERSION - 1,
                                        allow_downgrade=True))
            assert lower.error_code == ErrorCode.INVALID_UPDATE_VERSION
            assert "downgrading metadata is not supported" in lower.error_message

            # All or nothing: an unknown feature beside a valid update refuses both; version 2 has no results.
            mixed = await update(2, Key(feature=MV, max_version_level=LATEST_METADATA_VERSION, upgrade_type=1),
                                 Key(feature="no.such.feature", max_version_level=1, upgrade_type=1))
            assert mixed.error_code == ErrorCode.INVALID_UPDATE_VERSION and mixed.results == []

            bad_type = await update(1, Key(feature=MV, max_version_level=LATEST_METADATA_VERSION, upgrade_type=9))
            assert bad_type.error_code == ErrorCode.INVALID_REQUEST
        assert cluster.image.features.levels[MV] == LATEST_METADATA_VERSION


async def test_without_alter_on_the_cluster_nothing_is_forwarded(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        before = len(cluster.controller.requests)
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            refused = await admin.request(ApiKey.UPDATE_FEATURES, UpdateFeaturesRequest(feature_updates=[
                Key(feature=MV, max_version_level=LATEST_METADATA_VERSION)]), version=1)
        assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert not [name for name, _ in cluster.controller.requests[before:] if name == "update_features"]


async def test_the_features_commands_report_as_kafka_features_does(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        base = ["features"]
        where = ["--bootstrap-server", cluster.bootstrap]

        async def run(*args: str):
            return await forkserver.run_async([*base, *args, *where])

        ok = await run("upgrade", "--feature", f"{MV}={LATEST_METADATA_VERSION}")
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.decode().strip() == f"{MV} was upgraded to {LATEST_METADATA_VERSION}."
        dry = await run("upgrade", "--feature", f"{MV}={LATEST_METADATA_VERSION}", "--dry-run", "--json")
        assert json.loads(dry.stdout)[0]["message"] == f"{MV} can be upgraded to {LATEST_METADATA_VERSION}."
        refused = await run("downgrade", "--feature", f"{MV}=1")
        assert refused.returncode == 1
        assert f"Could not downgrade {MV} to 1." in refused.stderr.decode()
        assert "INVALID_UPDATE_VERSION" in refused.stderr.decode()
        gone = await run("disable", "--feature", MV)
        assert gone.returncode == 1 and f"Could not disable {MV}." in gone.stderr.decode()
        usage = await run("upgrade", "--feature", "metadata.version")
        assert usage.returncode == 2 and "NAME=LEVEL" in usage.stderr.decode()
