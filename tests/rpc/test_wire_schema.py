"""Encoded control-plane objects are checked against their classes' annotations before they are built."""

from __future__ import annotations

import attrs
import pytest

from kraftpy.metadata.rpc import CONTROLLER_APIS, SCHEMA
from kraftpy.metadata.rpc import WIRE as CONTROLLER_WIRE
from kraftpy.raft import codec
from kraftpy.rpc.wire import WireCodec, WireError
from kraftpy.rpc.wire_schema import Int8, Int32, NonNegativeInt32, UInt16, WireSchema, out_of_range


@attrs.frozen
class Inner:
    port: UInt16


@attrs.frozen
class Outer:
    node: NonNegativeInt32
    flags: Int8 = 0
    name: str | None = None
    inner: Inner | None = None
    ids: tuple[Int32, ...] = ()
    pairs: tuple[tuple[int, str], ...] = ()
    table: dict[str, int] = attrs.Factory(dict)
    blob: bytes = b""


WIRE = WireCodec([Outer, Inner])


def check(**fields: object) -> None:
    WireSchema().check({"@": "Outer", "node": 1, **fields}, Outer)


def test_a_well_formed_value_passes_and_decodes() -> None:
    value = WIRE.encode(Outer(3, -2, "n", Inner(65535), (1, -1), ((1, "a"),), {"k": 2}, b"\x00"))
    WireSchema().check(value, Outer)
    assert WIRE.decode(value) == Outer(3, -2, "n", Inner(65535), (1, -1), ((1, "a"),), {"k": 2}, b"\x00")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"node": -1}, "Outer.node: -1 is out of non-negative int32 range"),
        ({"flags": 128}, "Outer.flags: 128 is out of int8 range"),
        ({"name": 3}, "Outer.name: expected str, got int 3"),
        ({"inner": {"@": "Inner", "port": 65536}}, "Outer.inner.port: 65536 is out of uint16 range"),
        ({"inner": {"port": 1}}, "Outer.inner: expected a Inner, got a map"),
        ({"inner": {"@": "Inner"}}, "Outer.inner.port: missing"),
        ({"ids": [1, "2"]}, "Outer.ids[1]: expected an integer, got str '2'"),
        ({"ids": {"1": 1}}, "Outer.ids: expected a list, got a map"),
        ({"pairs": [[1]]}, "Outer.pairs[0]: expected a list of 2, got a list"),
        ({"table": [["k", 1]]}, "Outer.table: expected a map, got a list"),
        ({"table": {"k": "1"}}, "Outer.table['k']: expected an integer, got str '1'"),
        ({"blob": "text"}, "Outer.blob: expected bytes, got str 'text'"),
        ({"extra": 1}, "Outer: unexpected fields ['extra']"),
    ],
)
def test_each_mismatch_is_refused_naming_the_field(fields: dict, says: str) -> None:
    with pytest.raises(WireError) as raised:
        check(**fields)
    assert str(raised.value) == says


def test_an_object_built_in_memory_is_checked_against_the_same_ranges() -> None:
    assert out_of_range(Outer(1, inner=Inner(80), ids=(1, 2))) is None
    assert out_of_range(Outer(-1)) == "Outer.node: -1 is out of non-negative int32 range"
    assert out_of_range(Outer(1, inner=Inner(2**16))) == "Outer.inner.port: 65536 is out of uint16 range"
    assert out_of_range(Outer(1, ids=(1, 2**31))) == "Outer.ids: 2147483648 is out of int32 range"
    assert out_of_range(Outer("1")) == "Outer.node: expected an integer, got str '1'"  # type: ignore[arg-type]
    assert out_of_range(Outer(True)) == "Outer.node: expected an integer, got bool True"
    assert out_of_range(Deep(None)) is None and out_of_range(Deep(((1,), (2, 3)))) is None
    assert out_of_range(Deep(((1,), (2, -1)))) == "Deep.rows: -1 is out of non-negative int32 range"
    assert out_of_range(Deep(((1,), ("x",)))) == "Deep.rows: expected an integer, got str 'x'"


@attrs.frozen
class Deep:
    rows: tuple[tuple[NonNegativeInt32, ...], ...] | None


def test_every_type_the_control_plane_carries_has_a_check() -> None:
    """A field whose annotation the schema cannot check would fail at the first request: find it here."""
    schema = WireSchema()
    for request_type, response_type in CONTROLLER_APIS.values():
        for cls in (request_type, response_type):
            with pytest.raises(WireError):  # compiles every field's check, then refuses the empty map
                schema.check({}, cls)
            schema._object_fields(cls)
    for cls in [*codec.MESSAGE_TYPES.values(), *codec.STRUCT_TYPES.values()]:
        schema._object_fields(cls)
    assert SCHEMA is not None and CONTROLLER_WIRE is not None
