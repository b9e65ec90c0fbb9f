"""attrs objects to and from msgpack-able values, for the control plane.

A `WireCodec` knows a set of attrs classes (and enums) by tag, their class name. An object becomes a
dict whose key ``"@"`` holds its tag and whose other keys are its attrs field names; an enum member
becomes ``{"@": tag, "v": value}``; tuples, lists and frozensets become lists (decoded as tuples);
dict keys and values are encoded recursively; bytes stay bytes (pack with msgpack's bin type).
Decoding is strict: an unknown tag, or a missing or unexpected field, raises `WireError`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

import attrs

TAG_KEY = "@"
_SCALARS = (int, str, bytes, bool, float)


class WireError(ValueError):
    """The value does not decode to a known object."""


class WireCodec:
    def __init__(self, types: Iterable[type] = ()) -> None:
        self._types: dict[str, type] = {}
        self._fields: dict[type, tuple[str, ...]] = {}
        self.register(*types)

    def register(self, *types: type) -> None:
        for cls in types:
            tag = cls.__name__
            if self._types.get(tag, cls) is not cls:
                raise ValueError(f"two types are called {tag}")
            self._types[tag] = cls
            if not issubclass(cls, enum.Enum):
                self._fields[cls] = tuple(f.name for f in attrs.fields(cls))

    def knows(self, cls: type) -> bool:
        return cls.__name__ in self._types and self._types[cls.__name__] is cls

    def encode(self, value: Any) -> Any:
        cls = type(value)
        names = self._fields.get(cls)
        if names is not None:
            out: dict[str, Any] = {TAG_KEY: cls.__name__}
            for name in names:
                out[name] = self.encode(getattr(value, name))
            return out
        if isinstance(value, enum.Enum):
            if self._types.get(cls.__name__) is not cls:
                raise WireError(f"cannot encode unregistered enum {cls.__name__}")
            return {TAG_KEY: cls.__name__, "v": value.value}
        if value is None or cls in _SCALARS:
            return value
        if cls in (tuple, list, frozenset, set):
            return [self.encode(v) for v in value]
        if isinstance(value, dict) or hasattr(value, "items"):
            return {k: self.encode(v) for k, v in value.items()}  # keys are scalars
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise WireError(f"cannot encode {cls.__name__}")

    def decode(self, value: Any) -> Any:
        if isinstance(value, dict):
            tag = value.get(TAG_KEY)
            if tag is None:
                return {k: self.decode(v) for k, v in value.items()}
            cls = self._types.get(tag) if isinstance(tag, str) else None
            if cls is None:
                raise WireError(f"unknown type tag {tag!r}")
            if issubclass(cls, enum.Enum):
                try:
                    return cls(value.get("v"))
                except ValueError as exc:
                    raise WireError(f"{tag}: {exc}") from None
            names = self._fields[cls]
            extra = set(value) - set(names) - {TAG_KEY}
            if extra:
                raise WireError(f"{tag}: unexpected fields {sorted(extra)}")
            try:
                return cls(**{name: self.decode(value[name]) for name in names if name in value})
            except (TypeError, ValueError) as exc:
                raise WireError(f"{tag}: {exc}") from exc
        if isinstance(value, list):
            return tuple(self.decode(v) for v in value)
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        return value

    def decode_as(self, value: Any, *expected: type) -> Any:
        """Decode and check the result is one of ``expected``."""
        obj = self.decode(value)
        if not isinstance(obj, expected):
            raise WireError(f"expected {' or '.join(t.__name__ for t in expected)}, got {type(obj).__name__}")
        return obj


def wire_types(module: Any) -> list[type]:
    """The attrs classes and enums defined in ``module`` (not imported into it)."""
    out = []
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == module.__name__:
            if attrs.has(value) or issubclass(value, enum.Enum):
                out.append(value)
    return out
