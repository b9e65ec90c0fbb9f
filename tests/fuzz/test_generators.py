"""The fuzzer's generators without a target: valid means valid, mutations do what they say, seeds replay."""

from __future__ import annotations

import collections

import attrs
import msgpack
import pytest

from kraftpy.metadata.controller_kafka import SERVED as CONTROLLER_SERVED
from kraftpy.metadata.rpc import CONTROLLER_APIS, WIRE
from kraftpy.protocol.api_keys import API_VERSIONS, ApiKey
from kraftpy.protocol.batch_header import CorruptRecordError, check_batch
from kraftpy.protocol.errors import InvalidRequestError, UnsupportedVersionError
from kraftpy.protocol.frames import encode_request, join_frame, parse_request
from kraftpy.protocol.records import SimpleRecord, build_batch, decode_batch
from kraftpy.raft import codec as raft_codec
from kraftpy.raft.driver import RAFT_API
from tests.fuzz import batches, control_gen, kafka_gen
from tests.fuzz.campaign import make_frame
from tests.fuzz.frames import CONTROLLER_KAFKA, KAFKA, Pools, frame_rng
from tests.fuzz.known_bugs import OPEN

SERVED = {int(k): (r.min_accepted, r.max_version) for k, r in API_VERSIONS.items()}


def pools() -> Pools:
    return Pools(protected={"fuzz-acked-a": 2, "fuzz-acked-b": 3}, scratch={"fuzz-scratch-0": 1},
                 topic_ids={"fuzz-acked-a": b"\x01" * 16, "fuzz-acked-b": b"\x02" * 16, "fuzz-scratch-0": b"\x03" * 16},
                 served=SERVED, cluster_id="cluster", raft_epoch=4, raft_end_offset=30)


def test_a_frame_is_a_function_of_seed_and_index():
    p = pools()
    for index in range(300):
        assert make_frame(7, index, p, 0.2).data == make_frame(7, index, p, 0.2).data
    assert make_frame(7, 1, p, 0.2).data != make_frame(8, 1, p, 0.2).data


@pytest.mark.parametrize("api_key", sorted(SERVED))
def test_valid_requests_of_every_version_parse_and_round_trip(api_key):
    lo, hi = SERVED[api_key]
    for version in range(lo, hi + 1):
        for n in range(20):
            frame = kafka_gen.kafka_frame(frame_rng(n, version), pools(), n, klass="valid", api=(api_key, version))
            assert frame.klass == "valid"
            header, request = parse_request(frame.data[4:])
            assert (header.request_api_key, header.request_api_version) == (api_key, version)
            again = join_frame(encode_request(api_key, version, header.correlation_id, header.client_id, request))
            assert again == frame.data


def test_valid_requests_name_the_pools_topics():
    names = collections.Counter()
    for n in range(200):
        frame = kafka_gen.kafka_frame(frame_rng(1, n), pools(), n, klass="valid", api=(ApiKey.PRODUCE, 9))
        _, request = parse_request(frame.data[4:])
        names.update(t.name for t in request.topic_data)
        for topic in request.topic_data:
            keys = [p.index for p in topic.partition_data]
            assert len(keys) == len(set(keys)), "a valid Produce names each partition once"
            for data in topic.partition_data:
                check_batch(data.records)
    assert names["fuzz-acked-a"] + names["fuzz-acked-b"] > 100


def test_destructive_requests_never_name_protected_topics():
    p = pools()
    for n in range(400):
        for api_key in (ApiKey.DELETE_TOPICS, ApiKey.DELETE_RECORDS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                        ApiKey.ALTER_CONFIGS):
            lo, hi = SERVED[api_key]
            frame = kafka_gen.kafka_frame(frame_rng(n, api_key), p, n, api=(api_key, lo + n % (hi - lo + 1)))
            try:
                _, request = parse_request(frame.data[4:], allow_trailing_bytes=True)
            except (InvalidRequestError, UnsupportedVersionError):
                continue
            if "touches-protected" in frame.tags:
                assert kafka_gen.touches_protected(p, api_key, request)
                continue  # bytes read askew after a blind mutation: the campaign does not send these
            if api_key == ApiKey.DELETE_TOPICS:
                named = set(request.topic_names or ()) | {t.name for t in request.topics or ()}
                assert not named & set(p.protected)
                assert not {t.topic_id.bytes for t in request.topics or ()} & p.protected_ids()
            elif api_key == ApiKey.DELETE_RECORDS:
                assert not {t.name for t in request.topics} & set(p.protected)
            else:
                for resource in request.resources:
                    assert resource.resource_type != 2 or resource.resource_name not in p.protected
                    assert resource.resource_type == 2 or request.validate_only


def test_a_null_where_none_is_allowed_reaches_the_wire_as_a_null():
    """The marker length the encoder writes is replaced by -1 (or -2): the broker's parser refuses it."""
    seen = 0
    for n in range(300):
        frame = kafka_gen.kafka_frame(frame_rng(n, 0), pools(), n, klass="field:null", api=(ApiKey.CREATE_TOPICS, 4))
        if frame.klass != "field:null" or "(not nullable)" not in frame.detail:
            continue
        seen += 1
        with pytest.raises(InvalidRequestError):
            parse_request(frame.data[4:])
    assert seen > 10


def test_a_huge_count_claims_more_than_the_frame_holds():
    seen = 0
    for n in range(200):
        frame = kafka_gen.kafka_frame(frame_rng(n, 1), pools(), n, klass="field:huge-count", api=(ApiKey.METADATA, 12))
        if frame.klass == "field:huge-count":
            seen += 1
            with pytest.raises(InvalidRequestError):
                parse_request(frame.data[4:])
    assert seen > 50


@pytest.mark.parametrize("klass", [k for k, _ in kafka_gen.KAFKA_CLASS_WEIGHTS if k != "valid"])
def test_every_kafka_mutation_class_applies_somewhere(klass):
    applied = 0
    for n in range(60):
        api = kafka_gen.choose_api(frame_rng(n, 99), pools())
        frame = kafka_gen.kafka_frame(frame_rng(n, 3), pools(), n, klass=klass, api=api)
        applied += frame.klass == klass
    assert applied >= 20


def test_byte_mutations_keep_the_size_prefix_honest_unless_they_lie_about_it():
    for n in range(200):
        frame = kafka_gen.kafka_frame(frame_rng(n, 4), pools(), n, klass="bytes:bitflip")
        assert int.from_bytes(frame.data[:4], "big") == len(frame.data) - 4
        frame = kafka_gen.kafka_frame(frame_rng(n, 5), pools(), n, klass="bytes:size-long")
        assert int.from_bytes(frame.data[:4], "big") > len(frame.data) - 4
        assert frame.half_close


# -- record batches ----------------------------------------------------------------------------------


def test_an_unmutated_batch_spec_writes_what_build_batch_writes():
    for n in range(50):
        rng = frame_rng(n, 10)
        spec = batches.BatchSpec(batches.random_records(rng))
        records = [SimpleRecord(r.key, r.value, headers=[(k.decode(), v) for k, v in r.headers],
                                timestamp=spec.base_timestamp + r.timestamp_delta) for r in spec.records]
        assert spec.encode() == build_batch(records, base_timestamp=spec.base_timestamp)


@pytest.mark.parametrize("klass", batches.MUTATION_CLASSES)
def test_batch_mutations_keep_the_crc_right(klass):
    for n in range(30):
        data, got, detail = batches.mutated_batch(frame_rng(n, 11), klass)
        assert got == klass and detail
        if klass in ("batch:magic", "batch:truncated", "batch:batch-length"):
            continue  # the CRC cannot cover what the header no longer frames
        check_batch(data)


@pytest.mark.parametrize("klass", ["batch:codec", "batch:record-count", "batch:varint-lengths",
                                   "batch:compressed-counts"])
def test_batches_that_a_consumer_cannot_read(klass):
    """These mutations always make a batch that does not decode: a broker must refuse every one."""
    for n in range(30):
        data, _, detail = batches.mutated_batch(frame_rng(n, 12), klass)
        with pytest.raises((CorruptRecordError, ValueError)):
            decoded = decode_batch(data)
            if klass == "batch:record-count" and len(decoded.records) == decoded.header.record_count:
                raise AssertionError(f"{detail}: decodes")


def test_a_one_record_batch_can_claim_the_largest_offset_delta():
    for n in range(100):
        data, _, detail = batches.mutated_batch(frame_rng(n, 13), "batch:last-offset-delta")
        header = check_batch(data)
        if header.last_offset_delta == 2**31 - 1:
            assert header.record_count < 100
            return
    raise AssertionError("no batch with last_offset_delta 2^31-1")


# -- control plane -----------------------------------------------------------------------------------


def test_valid_control_requests_decode_with_the_projects_codecs():
    kinds = collections.Counter()
    for n in range(400):
        frame = control_gen.control_frame(frame_rng(n, 20), pools(), n, klass="ctl:valid")
        request = msgpack.unpackb(frame.data[4:], raw=False, strict_map_key=False)
        assert int.from_bytes(frame.data[:4], "big") == len(frame.data) - 4
        if request["api"] == RAFT_API:
            message = raft_codec.decode(request["body"]["message"])
            kinds[type(message).__name__] += 1
        elif request["api"] in CONTROLLER_APIS:
            request_type, _ = CONTROLLER_APIS[request["api"]]
            WIRE.decode_as(request["body"]["request"], request_type)
            kinds[request["api"]] += 1
    assert {cls.__name__ for cls in control_gen.RAFT_REQUESTS} <= set(kinds)
    assert set(CONTROLLER_APIS) <= set(kinds)
    assert any(cls.__name__ in kinds for cls in control_gen.RAFT_RESPONSES)


def test_control_frames_never_fence_unregister_or_shut_down_the_live_broker():
    p = pools()
    for n in range(2000):
        frame = control_gen.control_frame(frame_rng(n, 21), p, n, klass="ctl:valid")
        request = msgpack.unpackb(frame.data[4:], raw=False, strict_map_key=False)
        if request["api"] not in CONTROLLER_APIS:
            continue
        decoded = WIRE.decode(request["body"]["request"])
        if request["api"] == "UnregisterBroker":
            assert decoded.broker_id != p.broker_id
        elif request["api"] == "BrokerHeartbeat" and decoded.broker_id == p.broker_id:
            assert not decoded.want_fence and not decoded.want_shut_down
        elif request["api"] == "UpdateFeatures":
            assert decoded.validate_only


@pytest.mark.parametrize("klass", control_gen.CONTROL_CLASSES)
def test_every_control_mutation_class_applies(klass):
    applied = sum(control_gen.control_frame(frame_rng(n, 22), pools(), n, klass=klass).klass == klass
                  for n in range(40))
    assert applied >= 10  # epochs only in Raft messages


def test_huge_epochs_are_tagged_for_the_known_bug_that_matches_them():
    for n in range(50):
        frame = control_gen.control_frame(frame_rng(n, 23), pools(), n, klass="ctl:huge-epoch")
        if frame.klass == "ctl:huge-epoch":
            assert "raft-epoch-out-of-range" in frame.tags


def test_every_open_known_bug_matches_frames_the_generators_make():
    """A known bug whose tags no frame carries would skip nothing: its entry would be dead."""
    p = pools()
    tags = collections.Counter()
    for n in range(4000):
        tags.update(make_frame(5, n, p, 0.2).tags)
    for bug in OPEN:
        assert sum(tags[t] for t in bug.tags) > 0, bug.name


def test_kafka_share_of_frames():
    ports = collections.Counter(make_frame(6, n, pools(), 0.2).port for n in range(1000))
    assert 700 < ports[KAFKA] < 900


def test_a_share_of_kafka_frames_goes_to_the_controller_listener_with_the_apis_it_serves():
    p = pools()
    p.controller_served = {int(k): (r.min_version, r.max_version) for k, r in CONTROLLER_SERVED.items()}
    frames = [make_frame(6, n, p, 0.2, 0.1) for n in range(2000)]
    to_controller = [f for f in frames if f.port == CONTROLLER_KAFKA]
    assert 100 < len(to_controller) < 300
    served = {ApiKey(k).name.title().replace("_", "") for k in CONTROLLER_SERVED}
    assert {f.api.split(" v")[0] for f in to_controller} == served
    # The frames for the broker are the ones a run without the share makes.
    for n, frame in enumerate(frames):
        if frame.port == KAFKA:
            assert frame.data == make_frame(6, n, p, 0.2).data


def test_the_campaigns_walks_reach_into_protocol_messages_and_attrs_objects():
    """The campaign reads a request's longest wait and an answer's UNKNOWN_SERVER_ERROR codes by walking
    the decoded objects: generated protocol messages (`Struct`) as well as attrs classes."""
    from kraftpy.protocol.messages import FetchRequest, ProduceResponse
    from tests.fuzz.campaign import _error_codes, _wait_ms

    assert _wait_ms(FetchRequest(max_wait_ms=750), ["max_wait_ms"]) == 750
    answer = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
        name="t", partition_responses=[ProduceResponse.PartitionProduceResponse(index=0, error_code=-1)])])
    found: list[int] = []
    _error_codes(answer, found)
    assert found == [-1]

    @attrs.define
    class Answer:
        error_code: int
        inner: list

    found.clear()
    _error_codes(Answer(0, [Answer(-1, [])]), found)
    assert found == [-1]
