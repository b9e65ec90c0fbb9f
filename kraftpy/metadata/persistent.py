"""``PersistentMap``: the read-only mapping inside images, cheap to change by making a new one.

A metadata image holds every topic and every partition; the next image differs from it in a few of
them. Copying a ``dict`` per change costs the size of the image, so the maps that grow with the cluster
(topics by id and by name, a topic's partitions, config resources) are hash array mapped tries from
the ``immutables`` package (the structure behind ``contextvars``): setting or deleting a key returns a
new map in O(log n) that shares every untouched branch with the old one, and the old map never changes.

``PersistentMap`` wraps ``immutables.Map`` to read like the ``Mapping`` the images always exposed:
equal to any mapping with the same items (a ``dict`` included), read-only (item assignment is a
``TypeError``), and sortable through ``items()``. It adds the persistent edits ``set``, ``delete`` and
``update``, each returning a new map.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import immutables

K = TypeVar("K")
V = TypeVar("V")

_EMPTY: immutables.Map = immutables.Map()


class PersistentMap(Mapping[K, V], Generic[K, V]):
    __slots__ = ("_map",)

    _map: immutables.Map

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] | immutables.Map | None = None) -> None:
        if items is None:
            self._map = _EMPTY
        elif isinstance(items, immutables.Map):
            self._map = items
        elif isinstance(items, PersistentMap):
            self._map = items._map
        else:
            self._map = immutables.Map(items)

    # -- reading -----------------------------------------------------------------------------------

    def __getitem__(self, key: K) -> V:
        return self._map[key]

    def get(self, key: K, default: Any = None) -> Any:
        return self._map.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __iter__(self) -> Iterator[K]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def keys(self) -> Any:
        return self._map.keys()

    def values(self) -> Any:
        return self._map.values()

    def items(self) -> Any:
        return self._map.items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PersistentMap):
            return self._map is other._map or self._map == other._map
        if isinstance(other, Mapping):
            if len(self._map) != len(other):
                return False
            missing = object()
            return all(other.get(key, missing) == value for key, value in self._map.items())
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._map)

    def __repr__(self) -> str:
        return f"PersistentMap({dict(self._map.items())!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return PersistentMap, (dict(self._map.items()),)

    # -- persistent edits: each returns a new map, this one is untouched ----------------------------

    def set(self, key: K, value: V) -> PersistentMap[K, V]:
        return PersistentMap(self._map.set(key, value))

    def delete(self, key: K) -> PersistentMap[K, V]:
        """This map without ``key`` (which must be present)."""
        return PersistentMap(self._map.delete(key))

    def update(self, changes: Mapping[K, V], removed: Iterable[K] = ()) -> PersistentMap[K, V]:
        """This map with ``changes`` set and then the keys in ``removed`` dropped (absent ones ignored)."""
        edit = self._map.mutate()
        for key, value in changes.items():
            edit[key] = value
        for key in removed:
            edit.pop(key, None)
        return PersistentMap(edit.finish())

    def mutate(self) -> immutables.MapMutation:
        """A mutable copy for many edits at once; ``PersistentMap(m.finish())`` is the new map."""
        return self._map.mutate()


def persistent(value: Mapping[Any, Any] | Iterable[tuple[Any, Any]] | None) -> PersistentMap[Any, Any]:
    """``value`` as a ``PersistentMap`` (itself when it is one already): the converter of image fields."""
    return value if isinstance(value, PersistentMap) else PersistentMap(value)
