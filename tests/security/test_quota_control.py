"""Client quotas in the metadata log: AlterClientQuotas validation and records, replay into the image,
snapshots, and DescribeClientQuotas' filter semantics."""

from __future__ import annotations

import random

import pytest

from kraftpy.metadata.controller import QuorumController
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.delta import MetadataDelta, replay_records
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataProvenance
from kraftpy.metadata.quota_control import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    AlterClientQuotasRequest,
    ClientQuotaAlteration,
    ClientQuotaOp,
    QuotaFilterComponent,
    QuotaRequestError,
    describe_client_quotas,
)
from kraftpy.metadata.records import ClientQuotaEntityData as E
from kraftpy.metadata.records import ClientQuotaRecord, decode_record, encode_record
from kraftpy.metadata.snapshot import image_to_records, load_snapshot


def controller() -> QuorumController:
    c = QuorumController(ControllerConfig(cluster_id="q"), rng=random.Random(1))
    c.replay(c.activate(0.0).records)
    return c


def alter(c: QuorumController, *entries: ClientQuotaAlteration, validate_only: bool = False):
    result = c.handle_alter_client_quotas(AlterClientQuotasRequest(entries, validate_only=validate_only))
    c.replay(result.records)
    return result


def test_set_then_remove_a_quota_through_records():
    c = controller()
    result = alter(c, ClientQuotaAlteration((E("user", "alice"), E("client-id", None)),
                                            (ClientQuotaOp("producer_byte_rate", 1024),
                                             ClientQuotaOp("request_percentage", 12.5))))
    assert [e.error_code for e in result.response.entries] == [Errors.NONE]
    assert all(isinstance(r, ClientQuotaRecord) for r in result.records) and len(result.records) == 2
    entity = (("client-id", None), ("user", "alice"))
    assert dict(c.image.client_quotas.quotas(entity)) == {"producer_byte_rate": 1024.0, "request_percentage": 12.5}
    # Removing one key leaves the other; removing the last drops the entity.
    alter(c, ClientQuotaAlteration((E("client-id", None), E("user", "alice")),
                                   (ClientQuotaOp("producer_byte_rate", remove=True),)))
    assert dict(c.image.client_quotas.quotas(entity)) == {"request_percentage": 12.5}
    alter(c, ClientQuotaAlteration((E("user", "alice"), E("client-id", None)),
                                   (ClientQuotaOp("request_percentage", remove=True),)))
    assert entity not in c.image.client_quotas.entities


def test_validate_only_writes_nothing_and_unchanged_values_write_no_record():
    c = controller()
    entry = ClientQuotaAlteration((E("client-id", "app"),), (ClientQuotaOp("consumer_byte_rate", 4096),))
    assert not alter(c, entry, validate_only=True).records
    assert not c.image.client_quotas.entities
    assert len(alter(c, entry).records) == 1
    assert not alter(c, entry).records


@pytest.mark.parametrize(("entity", "op", "message"), [
    ((), ClientQuotaOp("producer_byte_rate", 1), "Invalid empty client quota entity"),
    ((E("user", "a"), E("user", "b")), ClientQuotaOp("producer_byte_rate", 1), "duplicate entity entry user"),
    ((E("group", "a"),), ClientQuotaOp("producer_byte_rate", 1), "Unhandled client quota entity type: group"),
    ((E("user", ""),), ClientQuotaOp("producer_byte_rate", 1), "Empty user not supported"),
    ((E("ip", "1.2.3.4"),), ClientQuotaOp("connection_creation_rate", 1), "ip quotas are not supported"),
    ((E("user", "a"),), ClientQuotaOp("fetch_rate", 1), "Invalid configuration key fetch_rate"),
    ((E("user", "a"),), ClientQuotaOp("producer_byte_rate", 10.5), "producer_byte_rate is not an integer"),
    ((E("user", "a"),), ClientQuotaOp("consumer_byte_rate", 2.0**64), "too large for a LONG"),
])
def test_alter_refuses_what_kafka_refuses(entity, op, message):
    c = controller()
    good = ClientQuotaAlteration((E("user", "ok"),), (ClientQuotaOp("producer_byte_rate", 100),))
    result = alter(c, ClientQuotaAlteration(entity, (op,)), good)
    bad, ok = result.response.entries
    assert bad.error_code == Errors.INVALID_REQUEST and message in bad.error_message
    assert ok.error_code == Errors.NONE
    # Only the valid entity was written.
    assert list(c.image.client_quotas.entities) == [(("user", "ok"),)]


def test_a_double_key_takes_fractions_and_records_round_trip():
    record = ClientQuotaRecord((E("user", None), E("client-id", "c")), "controller_mutation_rate", 0.5)
    assert decode_record(encode_record(record)) == record
    c = controller()
    result = alter(c, ClientQuotaAlteration((E("user", None),), (ClientQuotaOp("controller_mutation_rate", 0.5),)))
    assert result.response.entries[0].error_code == Errors.NONE


def test_snapshot_and_delta_between_keep_client_quotas():
    c = controller()
    alter(c,
          ClientQuotaAlteration((E("user", "u"),), (ClientQuotaOp("producer_byte_rate", 10),)),
          ClientQuotaAlteration((E("user", None), E("client-id", None)), (ClientQuotaOp("consumer_byte_rate", 20),)),
          ClientQuotaAlteration((E("client-id", "c"),), (ClientQuotaOp("request_percentage", 30),)))
    image = c.image
    records = image_to_records(image)
    loaded = load_snapshot([decode_record(encode_record(r)) for r in records], image.provenance)
    assert loaded.client_quotas == image.client_quotas
    delta = MetadataDelta.between(EMPTY_IMAGE, image)
    assert delta.changed_client_quotas and delta.apply().client_quotas == image.client_quotas
    again = replay_records(EMPTY_IMAGE, records)
    assert again.client_quotas == image.client_quotas
    assert load_snapshot([], MetadataProvenance()).client_quotas == EMPTY_IMAGE.client_quotas


# -- DescribeClientQuotas ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def described_image():
    c = controller()
    op = (ClientQuotaOp("producer_byte_rate", 1),)
    alter(c,
          ClientQuotaAlteration((E("user", "alice"),), op),
          ClientQuotaAlteration((E("user", None),), op),
          ClientQuotaAlteration((E("user", "alice"), E("client-id", "app")), op),
          ClientQuotaAlteration((E("user", "bob"), E("client-id", None)), op),
          ClientQuotaAlteration((E("client-id", "app"),), op),
          ClientQuotaAlteration((E("client-id", None),), op))
    return c.image


def names(found) -> set[str]:
    def label(entity) -> str:
        return "/".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)
    return {label(entity) for entity, _ in found}


@pytest.mark.parametrize(("components", "strict", "expected"), [
    ([], False, {"user=alice", "user=<default>", "client-id=app/user=alice", "client-id=<default>/user=bob",
                 "client-id=app", "client-id=<default>"}),
    ([("user", MATCH_EXACT, "alice")], False, {"user=alice", "client-id=app/user=alice"}),
    ([("user", MATCH_EXACT, "alice")], True, {"user=alice"}),
    ([("user", MATCH_DEFAULT, None)], True, {"user=<default>"}),
    ([("user", MATCH_SPECIFIED, None)], False,
     {"user=alice", "user=<default>", "client-id=app/user=alice", "client-id=<default>/user=bob"}),
    ([("user", MATCH_SPECIFIED, None), ("client-id", MATCH_SPECIFIED, None)], True,
     {"client-id=app/user=alice", "client-id=<default>/user=bob"}),
    ([("client-id", MATCH_DEFAULT, None)], False, {"client-id=<default>/user=bob", "client-id=<default>"}),
    ([("client-id", MATCH_EXACT, "app")], True, {"client-id=app"}),
    ([("user", MATCH_EXACT, "nobody")], False, set()),
])
def test_describe_filters(described_image, components, strict, expected):
    filters = [QuotaFilterComponent(t, m, v) for t, m, v in components]
    assert names(describe_client_quotas(described_image, filters, strict)) == expected


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("user", MATCH_EXACT, None)], Errors.INVALID_REQUEST, "MATCH_TYPE_EXACT, but set match string to null"),
    ([("user", MATCH_DEFAULT, "x")], Errors.INVALID_REQUEST, "MATCH_TYPE_DEFAULT, but also specified"),
    ([("user", MATCH_SPECIFIED, "x")], Errors.INVALID_REQUEST, "MATCH_TYPE_SPECIFIED, but also specified"),
    ([("user", MATCH_DEFAULT, None), ("user", MATCH_EXACT, "a")], Errors.INVALID_REQUEST, "more than once"),
    ([("", MATCH_DEFAULT, None)], Errors.INVALID_REQUEST, "Invalid empty entity type"),
    ([("group", MATCH_DEFAULT, None)], Errors.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", 7, None)], Errors.UNSUPPORTED_VERSION, "Unknown match type 7"),
    ([("ip", MATCH_DEFAULT, None), ("user", MATCH_DEFAULT, None)], Errors.INVALID_REQUEST, "IP filter component"),
])
def test_describe_refuses_malformed_filters(described_image, components, code, message):
    with pytest.raises(QuotaRequestError) as info:
        describe_client_quotas(described_image, [QuotaFilterComponent(*c) for c in components], False)
    assert info.value.code == code and message in str(info.value)


def test_metadata_show_lists_client_quotas(tmp_path):
    from kraftpy.cli.main import app
    from kraftpy.metadata.records import encode_record
    from kraftpy.raft.file_log import FileRaftLog
    from tests.helpers.cli_runner import CliRunner

    c = controller()
    records = list(c.activate(0.0).records)
    result = alter(c, ClientQuotaAlteration((E("user", "alice"), E("client-id", None)),
                                            (ClientQuotaOp("producer_byte_rate", 1024),)),
                   ClientQuotaAlteration((E("client-id", "app"),), (ClientQuotaOp("request_percentage", 5),)))
    records += result.records
    log = FileRaftLog.open(tmp_path)
    log.append_as_leader([encode_record(r) for r in records], 1)
    log.flush(log.end_offset)
    log.close()
    shown = CliRunner().invoke(app, ["metadata", "show", "--log", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[-3:] == [
        "client quotas:",
        "  /clients/app: {'request_percentage': 5.0}",
        "  /users/alice/clients/<default>: {'producer_byte_rate': 1024.0}",
    ]
