"""PersistentMap: reads like the read-only mappings images always had; edits make new maps."""

from __future__ import annotations

import pickle

import pytest

from kraftpy.metadata.persistent import PersistentMap, persistent


def test_reads_and_compares_like_a_mapping():
    m = PersistentMap({"a": 1, "b": 2})
    assert m == {"a": 1, "b": 2} and {"a": 1, "b": 2} == m and m != {"a": 1} and m != {"a": 1, "b": 3}
    assert m == PersistentMap([("b", 2), ("a", 1)]) and PersistentMap() == {}
    assert m["a"] == 1 and m.get("c") is None and m.get("c", 0) == 0 and "b" in m and len(m) == 2
    assert sorted(m.items()) == [("a", 1), ("b", 2)] and sorted(m) == ["a", "b"] and sorted(m.values()) == [1, 2]
    assert dict(m) == {"a": 1, "b": 2}
    with pytest.raises(TypeError):
        m["c"] = 3  # type: ignore[index]


def test_edits_return_new_maps_and_leave_the_old_one():
    m = PersistentMap({"a": 1})
    assert m.set("b", 2) == {"a": 1, "b": 2} and m.delete("a") == {} and m == {"a": 1}
    assert m.update({"b": 2, "a": 5}, removed=["zz"]) == {"a": 5, "b": 2}
    assert m.update({}, removed=["a"]) == {}
    edit = m.mutate()
    edit["c"] = 3
    assert PersistentMap(edit.finish()) == {"a": 1, "c": 3} and m == {"a": 1}


def test_converter_keeps_a_persistent_map_and_pickles():
    m = PersistentMap({1: (1, 2)})
    assert persistent(m) is m and persistent({1: (1, 2)}) == m
    assert pickle.loads(pickle.dumps(m)) == m and hash(m) == hash(PersistentMap({1: (1, 2)}))
