"""What an encoded control-plane object must look like, checked before the object is built.

`WireCodec` (kraftpy.rpc.wire) turns msgpack values back into attrs objects; this module makes sure
the value has the shape the class declares first, so that a peer's string where an int belongs, a
list where a map belongs, a missing field or a 40-bit epoch is refused as the request it is (one
`WireError` naming the field, answered INVALID_REQUEST) instead of reaching code that trusts it.

The declared type of each attrs field is its annotation, read once per class:

===========================  ====================================================================
annotation                   accepted encoded value
===========================  ====================================================================
``int``                      an int (never a bool), or an encoded int enum member
``Int16``/``Int32``/...      the same, within Kafka's range for that type (`IntRange`)
``bool``, ``str``,           exactly that type (``float`` also takes an int)
``bytes``, ``float``
``X | None``                 None, or what X accepts
``tuple[X, ...]``,           a list whose items X accepts (``tuple[X, Y]``: exactly two items)
``frozenset[X]``
``dict[K, V]``               a map without a type tag, keys and values checked
an attrs class               a map tagged with the class name, its fields checked in turn
an enum                      a map tagged with the enum's name
===========================  ====================================================================

Kafka's wire types say how wide an integer may be; the classes say so with ``Annotated`` aliases
(``Int32`` is ``Annotated[int, IntRange(...)]``), the way Kafka's JSON message definitions say
``int32``. Only the range of the type is checked here: what a value means (an epoch that must not
be negative, an id that must be a voter) is for the receiver to judge.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import attrs

from kraftpy.rpc.wire import TAG_KEY, WireError


@attrs.frozen
class IntRange:
    """The inclusive range of a Kafka integer type, named as in Kafka's message definitions."""

    name: str
    low: int
    high: int

    def __contains__(self, value: int) -> bool:
        return self.low <= value <= self.high


INT8 = IntRange("int8", -(1 << 7), (1 << 7) - 1)
INT16 = IntRange("int16", -(1 << 15), (1 << 15) - 1)
UINT16 = IntRange("uint16", 0, (1 << 16) - 1)
INT32 = IntRange("int32", -(1 << 31), (1 << 31) - 1)
INT64 = IntRange("int64", -(1 << 63), (1 << 63) - 1)
#: An int32 that only a non-negative value can be (a node id, a partition index): Kafka's type, with
#: the sign its meaning rules out checked at the same place.
NON_NEGATIVE_INT32 = IntRange("non-negative int32", 0, INT32.high)

_RANGES = (INT8, INT16, UINT16, INT32, INT64, NON_NEGATIVE_INT32)

Int8 = Annotated[int, INT8]
Int16 = Annotated[int, INT16]
UInt16 = Annotated[int, UINT16]
Int32 = Annotated[int, INT32]
Int64 = Annotated[int, INT64]
NonNegativeInt32 = Annotated[int, NON_NEGATIVE_INT32]

#: Checks one encoded value; raises WireError naming `path`.
_Check = Callable[[Any, str], None]


class WireSchema:
    """Checks encoded values against the annotations of a set of attrs classes (and enums)."""

    def __init__(self) -> None:
        self._fields: dict[type, tuple[tuple[str, bool, _Check], ...]] = {}

    def check(self, value: Any, cls: type, path: str | None = None) -> None:
        """Raise WireError unless `value` is an encoded `cls` (see the module doc)."""
        self._check_object(value, cls, path or cls.__name__)

    # -- compiling annotations into checks ---------------------------------------------------------

    def _object_fields(self, cls: type) -> tuple[tuple[str, bool, _Check], ...]:
        fields = self._fields.get(cls)
        if fields is None:
            hints = typing.get_type_hints(cls, include_extras=True)
            fields = tuple(
                (field.name, field.default is attrs.NOTHING, self._compile(hints.get(field.name, Any)))
                for field in attrs.fields(cls)
            )
            self._fields[cls] = fields
        return fields

    def _check_object(self, value: Any, cls: type, path: str) -> None:
        if not isinstance(value, dict) or value.get(TAG_KEY) != cls.__name__:
            raise WireError(f"{path}: expected a {cls.__name__}, got {_describe(value)}")
        for name, required, check in self._object_fields(cls):
            if name in value:
                check(value[name], f"{path}.{name}")
            elif required:
                raise WireError(f"{path}.{name}: missing")
        extra = set(value) - {TAG_KEY} - {name for name, _, _ in self._object_fields(cls)}
        if extra:
            raise WireError(f"{path}: unexpected fields {sorted(map(str, extra))}")

    def _compile(self, annotation: Any) -> _Check:
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if annotation is Any:
            return lambda value, path: None
        if origin is Annotated:
            base, *extras = args
            ranges = [e for e in extras if isinstance(e, IntRange)]
            if base is int and ranges:
                return _int_check(ranges[0])
            return self._compile(base)
        if annotation is type(None) or annotation is None:
            return _exact(type(None), "None")
        if origin in (typing.Union, types.UnionType):
            options = [self._compile(arg) for arg in args]
            allows_none = type(None) in args

            def check_union(value: Any, path: str) -> None:
                if value is None and allows_none:
                    return
                error: WireError | None = None
                for option in options:
                    try:
                        option(value, path)
                        return
                    except WireError as exc:
                        error = error or exc
                assert error is not None
                raise error

            return check_union
        if origin in (tuple, frozenset, list, set):
            return self._sequence_check(origin, args)
        if origin is dict:
            key_check, value_check = (self._compile(a) for a in args) if args else (_any, _any)

            def check_dict(value: Any, path: str) -> None:
                if not isinstance(value, dict) or TAG_KEY in value:
                    raise WireError(f"{path}: expected a map, got {_describe(value)}")
                for key, item in value.items():
                    key_check(key, f"{path} key")
                    value_check(item, f"{path}[{key!r}]")

            return check_dict
        if annotation is int:
            return _int_check(None)
        if annotation is bool:
            return _exact(bool, "bool")
        if annotation is float:
            return _float_check
        if annotation in (str, bytes):
            return _exact(annotation, annotation.__name__)
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return _enum_check(annotation)
        if isinstance(annotation, type) and attrs.has(annotation):
            cls = annotation
            return lambda value, path: self._check_object(value, cls, path)
        raise TypeError(f"no wire check for the annotation {annotation!r}")

    def _sequence_check(self, origin: Any, args: tuple[Any, ...]) -> _Check:
        if origin is tuple and args and args[-1] is not Ellipsis:
            items = [self._compile(a) for a in args]

            def check_fixed(value: Any, path: str) -> None:
                if not isinstance(value, list | tuple) or len(value) != len(items):
                    raise WireError(f"{path}: expected a list of {len(items)}, got {_describe(value)}")
                for i, (check, item) in enumerate(zip(items, value, strict=True)):
                    check(item, f"{path}[{i}]")

            return check_fixed
        item_check = self._compile(args[0]) if args else _any

        def check_sequence(value: Any, path: str) -> None:
            if not isinstance(value, list | tuple):
                raise WireError(f"{path}: expected a list, got {_describe(value)}")
            for i, item in enumerate(value):
                item_check(item, f"{path}[{i}]")

        return check_sequence


def _any(value: Any, path: str) -> None:
    return None


def _describe(value: Any) -> str:
    if isinstance(value, dict) and isinstance(value.get(TAG_KEY), str):
        return f"a {value[TAG_KEY]}"
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "None"
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _exact(cls: type, name: str) -> _Check:
    def check(value: Any, path: str) -> None:
        if type(value) is not cls:
            raise WireError(f"{path}: expected {name}, got {_describe(value)}")

    return check


def _float_check(value: Any, path: str) -> None:
    if type(value) not in (float, int):
        raise WireError(f"{path}: expected a number, got {_describe(value)}")


def _int_check(bounds: IntRange | None) -> _Check:
    def check(value: Any, path: str) -> None:
        if isinstance(value, dict) and isinstance(value.get(TAG_KEY), str):
            value = value.get("v")  # an encoded int enum member (an error code); the codec checks its tag
        if type(value) is not int:
            raise WireError(f"{path}: expected an integer, got {_describe(value)}")
        if bounds is not None and value not in bounds:
            raise WireError(f"{path}: {value} is out of {bounds.name} range")

    return check


def _enum_check(cls: type[enum.Enum]) -> _Check:
    def check(value: Any, path: str) -> None:
        if not isinstance(value, dict) or value.get(TAG_KEY) != cls.__name__:
            raise WireError(f"{path}: expected a {cls.__name__}, got {_describe(value)}")

    return check


# -- objects already built -------------------------------------------------------------------------

#: Per class: its plain ranged int fields (name, low, high), then its other fields that hold ranged
#: ints or attrs objects (name, range or None, may nest).
_RANGED: dict[type, tuple[tuple[tuple[str, int, int], ...], tuple[tuple[str, IntRange | None, bool], ...]]] = {}


def _ranged_fields(
    cls: type,
) -> tuple[tuple[tuple[str, int, int], ...], tuple[tuple[str, IntRange | None, bool], ...]]:
    fields = _RANGED.get(cls)
    if fields is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        plain: list[tuple[str, int, int]] = []
        other: list[tuple[str, IntRange | None, bool]] = []
        for field in attrs.fields(cls):
            annotation = hints.get(field.name, Any)
            ranges = [extra for arg in _flatten(annotation) for extra in _extras(arg) if isinstance(extra, IntRange)]
            nested = any(isinstance(arg, type) and attrs.has(arg) for arg in _flatten(annotation))
            if typing.get_origin(annotation) is Annotated and ranges and not nested:
                plain.append((field.name, ranges[0].low, ranges[0].high))
            elif ranges or nested:
                other.append((field.name, ranges[0] if ranges else None, nested))
        fields = _RANGED[cls] = (tuple(plain), tuple(other))
    return fields


def _flatten(annotation: Any) -> list[Any]:
    """`annotation` and every type inside it (union members, sequence items)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return [annotation]
    out = [annotation]
    for arg in typing.get_args(annotation):
        if arg is not Ellipsis:
            out += _flatten(arg)
    return out


def _extras(annotation: Any) -> tuple[Any, ...]:
    return typing.get_args(annotation)[1:] if typing.get_origin(annotation) is Annotated else ()


def out_of_range(obj: Any, path: str | None = None) -> str | None:
    """The first integer field of the attrs object `obj` (or of one nested in it) that is not an
    integer within the range its annotation declares, described in a few words; None if none is.

    For objects built in memory rather than decoded (the codec already checked those). It runs on
    every Raft message, so the plain fields take one comparison each."""
    plain, other = _ranged_fields(type(obj))
    for name, low, high in plain:
        value = getattr(obj, name)
        try:
            if low <= value <= high and type(value) is not bool:
                continue
        except TypeError:
            pass
        return _range_problem(path or type(obj).__name__, name, value, IntRange("", low, high))
    for name, bounds, nested in other:
        for item in _items(getattr(obj, name)):
            if nested and attrs.has(type(item)):
                error = out_of_range(item, f"{path or type(obj).__name__}.{name}")
                if error is not None:
                    return error
            elif bounds is not None and (type(item) is bool or not isinstance(item, int) or item not in bounds):
                return _range_problem(path or type(obj).__name__, name, item, bounds)
    return None


def _items(value: Any) -> Iterator[Any]:
    """The values inside `value`, however deep in sequences; nothing for None."""
    if isinstance(value, tuple | list | frozenset):
        for item in value:
            yield from _items(item)
    elif value is not None:
        yield value


def _range_problem(path: str, name: str, value: Any, bounds: IntRange) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        kind = bounds.name or next(r.name for r in _RANGES if (r.low, r.high) == (bounds.low, bounds.high))
        return f"{path}.{name}: {value} is out of {kind} range"
    return f"{path}.{name}: expected an integer, got {_describe(value)}"
