"""kraftpy._codecache: attrs' generated methods compiled once and kept, as __pycache__ keeps modules.

Each test runs fresh interpreters (the cache is installed when kraftpy is first imported), with the
cache under a pycache prefix of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json
import kraftpy.metadata.records, kraftpy.raft.messages  # hundreds of attrs classes, hashable ones among them
import attrs
from kraftpy import _codecache
# The protocol's message classes (built by kraftpy.protocol.schema) and a codec compiled on first use.
before = dict(_codecache.stats)
from kraftpy.protocol.messages import ProduceRequest
request = ProduceRequest(acks=-1, timeout_ms=5)
assert ProduceRequest.SCHEMA.decode(9, memoryview(ProduceRequest.SCHEMA.to_bytes(9, request)))[0] == request
protocol = {key: _codecache.stats[key] - before[key] for key in before}

@attrs.frozen
class Point:
    x: int
    label: str

a, b = Point(1, "p"), Point(1, "p")
print(json.dumps({"stats": _codecache.stats, "protocol": protocol, "eq": a == b, "hash": hash(a) == hash(b), "set": len({a, b}),
                  "repr": repr(a), "other": a == Point(2, "p")}))
"""


def probe(prefix: Path, *, seed: int = 0, write: bool = True, extra: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "KRAFTPY_NO_CODE_CACHE")}
    env.update(PYTHONPYCACHEPREFIX=str(prefix), PYTHONHASHSEED=str(seed), **(extra or {}))
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def entries(prefix: Path) -> list[Path]:
    return [p for p in prefix.glob("kraftpy/attrs-*/*") if p.is_file()]


def behaves(answer: dict) -> None:
    assert answer["eq"] and answer["hash"] and answer["set"] == 1 and not answer["other"]
    assert answer["repr"] == "Point(x=1, label='p')"


def test_a_second_process_compiles_nothing_whatever_its_hash_seed(tmp_path):
    first = probe(tmp_path, seed=1)
    assert first["stats"]["written"] > 100 and first["stats"]["compiled"] == 0
    assert len(entries(tmp_path)) == first["stats"]["written"]
    # Another process salts hash() differently: attrs' __hash__ source differs, and is found all the same.
    second = probe(tmp_path, seed=2)
    assert second["stats"] == {"hits": first["stats"]["hits"] + first["stats"]["written"], "written": 0,
                               "compiled": 0}
    behaves(first)
    behaves(second)
    assert len(entries(tmp_path)) == first["stats"]["written"]
    # The protocol's classes and codecs are kept too (one compilation per message and per codec).
    assert first["protocol"]["written"] > 50
    assert second["protocol"] == {"hits": first["protocol"]["written"], "written": 0, "compiled": 0}


def test_nothing_is_written_without_bytecode_writes_or_when_turned_off(tmp_path):
    answer = probe(tmp_path, write=False)
    assert answer["stats"]["written"] == 0 and answer["stats"]["compiled"] > 100
    behaves(answer)
    off = probe(tmp_path, extra={"KRAFTPY_NO_CODE_CACHE": "1"})
    assert off["stats"] == {"hits": 0, "written": 0, "compiled": 0}
    behaves(off)
    assert entries(tmp_path) == []


def test_an_unwritable_place_and_damaged_entries_only_cost_compiling(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache's directory would be\n")
    answer = probe(blocked)
    assert answer["stats"]["written"] == 0 and answer["stats"]["compiled"] > 100
    behaves(answer)

    cache = tmp_path / "cache"
    written = probe(cache)["stats"]["written"]
    for path in entries(cache):
        path.write_bytes(b"\x00not marshal data")
    again = probe(cache)
    assert again["stats"]["written"] == written and again["stats"]["hits"] < written
    behaves(again)
    assert probe(cache)["stats"]["written"] == 0
