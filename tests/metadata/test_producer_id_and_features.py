"""Producer-id blocks and feature levels."""

from __future__ import annotations

from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import (
    AllocateProducerIdsRequest,
    FeatureUpdateKey,
    FeatureUpgradeType,
    UpdateFeaturesRequest,
)
from kraftpy.metadata.records import BrokerFeature, FeatureLevelRecord, ProducerIdsRecord


def allocate(c, broker_id, epoch=None):
    epoch = c.image.cluster.broker(broker_id).epoch if epoch is None else epoch
    return c.commit(c.controller.handle_allocate_producer_ids(AllocateProducerIdsRequest(broker_id, epoch)))


def test_producer_ids_come_in_consecutive_blocks_of_1000(cluster3):
    c = cluster3
    first, second = allocate(c, 1), allocate(c, 2)
    assert (first.error_code, first.producer_id_start, first.producer_id_len) == (Errors.NONE, 0, 1000)
    assert (second.producer_id_start, second.producer_id_len) == (1000, 1000)
    assert c.log[-1] == ProducerIdsRecord(2, c.image.cluster.broker(2).epoch, 2000)
    assert c.image.producer_ids.next_producer_id == 2000


def test_producer_ids_with_stale_broker_epoch_are_refused(cluster3):
    assert allocate(cluster3, 1, epoch=0).error_code == Errors.STALE_BROKER_EPOCH
    assert cluster3.image.producer_ids.next_producer_id == 0


def update(c, *updates, validate_only=False):
    keys = tuple(FeatureUpdateKey(name, level, kind) for name, level, kind in updates)
    return c.commit(c.controller.handle_update_features(UpdateFeaturesRequest(keys, validate_only)))


TEST_FEATURES = {"metadata.version": (7, 7), "group.version": (0, 3)}
#: A cluster formatted with --release-version 3.3-IV3.
AT_LEVEL_7 = (FeatureLevelRecord("metadata.version", 7),)


def featured_cluster(make_cluster, broker_max=3):
    c = make_cluster(ControllerConfig(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", supported_features=TEST_FEATURES,
                                      bootstrap_records=AT_LEVEL_7))
    for b in (1, 2):
        feats = [BrokerFeature("metadata.version", 7, 7), BrokerFeature("group.version", 0, broker_max if b == 2 else 3)]
        c.register(b, features=feats)
    return c


def test_feature_upgrade_writes_feature_level(make_cluster):
    c = featured_cluster(make_cluster)
    response = update(c, ("group.version", 2, FeatureUpgradeType.UPGRADE))
    assert response.error_code == Errors.NONE and c.log[-1] == FeatureLevelRecord("group.version", 2)
    assert c.image.features.levels["group.version"] == 2


def test_feature_level_beyond_controller_support_is_refused(make_cluster):
    c = featured_cluster(make_cluster)
    assert update(c, ("group.version", 4, FeatureUpgradeType.UPGRADE)).error_code == Errors.INVALID_UPDATE_VERSION
    assert update(c, ("other", 1, FeatureUpgradeType.UPGRADE)).error_code == Errors.INVALID_UPDATE_VERSION


def test_feature_level_a_broker_does_not_support_is_refused(make_cluster):
    c = featured_cluster(make_cluster, broker_max=1)
    response = update(c, ("group.version", 2, FeatureUpgradeType.UPGRADE))
    assert response.error_code == Errors.INVALID_UPDATE_VERSION and "Broker 2" in response.error_message


def test_metadata_version_never_goes_down(make_cluster):
    c = make_cluster(ControllerConfig(cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
                                      supported_features={"metadata.version": (5, 7)}, bootstrap_records=AT_LEVEL_7))
    for kind in FeatureUpgradeType:
        assert update(c, ("metadata.version", 6, kind)).error_code == Errors.INVALID_UPDATE_VERSION
    assert c.image.features.metadata_version == 7


def test_feature_downgrade_needs_a_downgrade_type(make_cluster):
    c = featured_cluster(make_cluster)
    update(c, ("group.version", 3, FeatureUpgradeType.UPGRADE))
    assert update(c, ("group.version", 1, FeatureUpgradeType.UPGRADE)).error_code == Errors.INVALID_UPDATE_VERSION
    assert update(c, ("group.version", 1, FeatureUpgradeType.SAFE_DOWNGRADE)).error_code == Errors.NONE
    assert c.image.features.levels["group.version"] == 1


def test_feature_update_is_all_or_nothing_and_validate_only_writes_nothing(make_cluster):
    c = featured_cluster(make_cluster)
    start = c.next_offset
    response = update(c, ("group.version", 1, 1), ("metadata.version", 9, 1))
    assert response.error_code == Errors.INVALID_UPDATE_VERSION and c.next_offset == start
    assert [r.error_code for r in response.results] == [Errors.NONE, Errors.INVALID_UPDATE_VERSION]
    assert update(c, ("group.version", 1, 1), validate_only=True).error_code == Errors.NONE
    assert c.next_offset == start


def test_a_feature_named_twenty_thousand_times_is_refused_without_quadratic_work(make_cluster):
    """Found by the protocol fuzzer: UpdateFeatures with one update repeated to 20,000 entries counted each
    name's repeats by scanning the list (4e8 steps), blocking the controller until brokers were fenced."""
    c = featured_cluster(make_cluster)
    response = update(c, *[("group.version", 2, FeatureUpgradeType.UPGRADE)] * 20_000)
    assert response.error_code == Errors.INVALID_UPDATE_VERSION
    assert len(response.results) == 20_000 and "more than once" in response.error_message
    assert "group.version" not in c.image.features.levels
