"""ACLs in the metadata log: records, replay into the image, snapshots, and the controller's CreateAcls / DeleteAcls."""

from __future__ import annotations

import random

import pytest

from kraftpy.ids import Uuid
from kraftpy.metadata.acl_control import create_acls, delete_acls
from kraftpy.metadata.controller import QuorumController
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.delta import MetadataDelta, replay_records
from kraftpy.metadata.errors import MetadataReplayError
from kraftpy.metadata.image import EMPTY_IMAGE
from kraftpy.metadata.messages import AclCreation, CreateAclsRequest, DeleteAclsFilter, DeleteAclsRequest
from kraftpy.metadata.records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    decode_record,
    encode_record,
)
from kraftpy.metadata.snapshot import decode_snapshot, encode_snapshot
from kraftpy.protocol.errors import ErrorCode
from kraftpy.security.authorizer import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

ALICE_READ = AclCreation(int(ResourceType.TOPIC), "orders", int(PatternType.LITERAL), "User:alice", "*",
                         int(AclOperation.READ), int(AclPermissionType.ALLOW))
BOB_WRITE_PREFIX = AclCreation(int(ResourceType.TOPIC), "logs-", int(PatternType.PREFIXED), "User:bob", "*",
                               int(AclOperation.WRITE), int(AclPermissionType.ALLOW))


def _id(n: int) -> Uuid:
    return Uuid(bytes([n]) + bytes(15))


def test_acl_records_round_trip():
    record = AccessControlEntryRecord(_id(1), 2, "orders", 3, "User:alice", "*", 3, 3)
    assert decode_record(encode_record(record)) == record
    assert decode_record(encode_record(RemoveAccessControlEntryRecord(_id(1)))) == RemoveAccessControlEntryRecord(_id(1))


def test_replay_adds_and_removes_acls_and_reports_changes():
    add = AccessControlEntryRecord(_id(1), 2, "orders", 3, "User:alice", "*", 3, 3)
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(add)
    image = delta.apply()
    binding = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    assert dict(image.acls.by_id) == {_id(1): binding}
    assert delta.changed_acls == {_id(1): binding}

    delta = MetadataDelta(image)
    delta.replay(RemoveAccessControlEntryRecord(_id(1)))
    assert delta.changed_acls == {_id(1): None}
    assert dict(delta.apply().acls.by_id) == {}
    # Added and removed within one delta: nothing changed.
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(add)
    delta.replay(RemoveAccessControlEntryRecord(_id(1)))
    assert delta.changed_acls == {}
    assert delta.apply().acls == EMPTY_IMAGE.acls


def test_replay_refuses_a_duplicate_id_and_an_unknown_removal():
    add = AccessControlEntryRecord(_id(1), 2, "orders", 3, "User:alice", "*", 3, 3)
    image = replay_records(EMPTY_IMAGE, [add])
    with pytest.raises(MetadataReplayError):
        replay_records(image, [add])
    with pytest.raises(MetadataReplayError):
        replay_records(image, [RemoveAccessControlEntryRecord(_id(2))])


def test_snapshot_keeps_acls_and_between_reports_them():
    image = replay_records(EMPTY_IMAGE, [
        AccessControlEntryRecord(_id(1), 2, "orders", 3, "User:alice", "*", 3, 3),
        AccessControlEntryRecord(_id(2), 3, "grp-", 4, "User:*", "10.0.0.1", 2, 2),
    ], last_offset=1, last_epoch=1)
    loaded = decode_snapshot(encode_snapshot(image), image.provenance)
    assert loaded == image
    assert set(MetadataDelta.between(EMPTY_IMAGE, loaded).changed_acls) == {_id(1), _id(2)}


def test_create_acls_gives_ids_writes_new_ones_once_and_refuses_invalid_ones():
    bad = AclCreation(int(ResourceType.CLUSTER), "other", int(PatternType.LITERAL), "User:alice", "*",
                      int(AclOperation.ALTER), int(AclPermissionType.ALLOW))
    no_colon = AclCreation(int(ResourceType.TOPIC), "t", int(PatternType.LITERAL), "alice", "*",
                           int(AclOperation.READ), int(AclPermissionType.ALLOW))
    match_pattern = AclCreation(int(ResourceType.TOPIC), "t", int(PatternType.MATCH), "User:a", "*",
                                int(AclOperation.READ), int(AclPermissionType.ALLOW))
    result = create_acls(EMPTY_IMAGE, CreateAclsRequest((ALICE_READ, bad, ALICE_READ, no_colon, match_pattern,
                                                         BOB_WRITE_PREFIX)), random.Random(1))
    codes = [r.error_code for r in result.response.results]
    assert codes == [0, ErrorCode.INVALID_REQUEST, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST, 0]
    assert "kafka-cluster" in result.response.results[1].error_message
    assert len(result.records) == 2  # the duplicate is written once
    assert len({r.id for r in result.records}) == 2
    image = replay_records(EMPTY_IMAGE, result.records)
    again = create_acls(image, CreateAclsRequest((ALICE_READ,)), random.Random(2))
    assert again.records == () and again.response.results[0].error_code == 0


def test_delete_acls_answers_matches_per_filter_and_removes_each_once():
    image = replay_records(EMPTY_IMAGE, create_acls(
        EMPTY_IMAGE, CreateAclsRequest((ALICE_READ, BOB_WRITE_PREFIX)), random.Random(1)).records)
    by_alice = DeleteAclsFilter(int(ResourceType.ANY), None, int(PatternType.ANY), "User:alice", None,
                                int(AclOperation.ANY), int(AclPermissionType.ANY))
    match_logs = DeleteAclsFilter(int(ResourceType.TOPIC), "logs-app", int(PatternType.MATCH), None, None,
                                  int(AclOperation.ANY), int(AclPermissionType.ANY))
    everything = DeleteAclsFilter(int(ResourceType.ANY), None, int(PatternType.ANY), None, None,
                                  int(AclOperation.ANY), int(AclPermissionType.ANY))
    unknown = DeleteAclsFilter(int(ResourceType.UNKNOWN), None, int(PatternType.ANY), None, None,
                               int(AclOperation.ANY), int(AclPermissionType.ANY))
    result = delete_acls(image, DeleteAclsRequest((by_alice, match_logs, everything, unknown)))
    answers = result.response.filter_results
    assert [a.error_code for a in answers] == [0, 0, 0, ErrorCode.INVALID_REQUEST]
    assert [m.principal for m in answers[0].matching_acls] == ["User:alice"]
    assert [(m.resource_name, m.pattern_type) for m in answers[1].matching_acls] == [("logs-", PatternType.PREFIXED)]
    assert len(answers[2].matching_acls) == 2
    assert len(result.records) == 2
    assert dict(replay_records(image, result.records).acls.by_id) == {}


def test_quorum_controller_serves_acl_writes():
    controller = QuorumController(ControllerConfig(cluster_id="c"), rng=random.Random(3))
    created = controller.handle_create_acls(CreateAclsRequest((ALICE_READ,)))
    controller.replay(created.records)
    assert len(controller.image.acls.by_id) == 1
    everything = DeleteAclsFilter(int(ResourceType.ANY), None, int(PatternType.ANY), None, None,
                                  int(AclOperation.ANY), int(AclPermissionType.ANY))
    deleted = controller.handle_delete_acls(DeleteAclsRequest((everything,)))
    controller.replay(deleted.records)
    assert len(controller.image.acls.by_id) == 0


BROKER_CONFIG = """process.roles=broker
node.id=4
controller.quorum.voters=1@127.0.0.1:9093
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:9092
log.dirs=/var/lib/kraftpy
"""


def test_authorizer_settings_come_from_kafkas_keys():
    from kraftpy.broker.authorization import STANDARD_AUTHORIZER, BrokerAuthorizer
    from kraftpy.broker.settings import BrokerSettings
    from kraftpy.config import load_config

    off = BrokerAuthorizer.from_settings(BrokerSettings.from_config(load_config(text=BROKER_CONFIG), cluster_id="c"))
    assert not off.enabled and not off.index.super_users and not off.index.allow_everyone_if_no_acl_found
    config = load_config(text=BROKER_CONFIG + f"authorizer.class.name={STANDARD_AUTHORIZER}\n"
                         "super.users=User:admin; User:broker\nallow.everyone.if.no.acl.found=true\n")
    on = BrokerAuthorizer.from_settings(BrokerSettings.from_config(config, cluster_id="c"))
    assert on.enabled and on.index.super_users == {"User:admin", "User:broker"}
    assert on.index.allow_everyone_if_no_acl_found


def test_an_unknown_authorizer_stops_with_key_value_and_line():
    from kraftpy.config import load_config
    from kraftpy.config.loader import ConfigError

    with pytest.raises(ConfigError) as failed:
        load_config(text=BROKER_CONFIG + "authorizer.class.name=kafka.security.authorizer.AclAuthorizer\n")
    assert "7: authorizer.class.name=kafka.security.authorizer.AclAuthorizer" in str(failed.value)
