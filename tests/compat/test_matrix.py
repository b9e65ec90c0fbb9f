"""docs/compatibility.md's API table says what kraftpy advertises (always checked) and matches a fresh
rendering from Kafka 3.9's definitions (when they are beside the repository)."""

from __future__ import annotations

import pytest

from kraftpy.protocol.api_keys import API_VERSIONS
from tests.compat.matrix import (
    DOC,
    NOTES,
    REFERENCE,
    documented_versions,
    kafka_broker_apis,
    render,
    replace_table,
)


def _range(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def test_the_page_lists_what_api_versions_advertises():
    documented = documented_versions(DOC.read_text())
    advertised = {int(k): _range(r.min_version, r.max_version) for k, r in API_VERSIONS.items()}
    assert {k: v for k, v in documented.items() if v != "—"} == advertised


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="Kafka's message definitions not present")
def test_the_table_is_current_and_every_difference_is_explained():
    doc = DOC.read_text()
    assert replace_table(doc, render()) == doc, "docs/compatibility.md is stale: run `make docs`"
    kafka = kafka_broker_apis()
    for key, (name, versions) in kafka.items():
        served = API_VERSIONS.get(key)
        lo, _, hi = versions.partition("-")
        same = served is not None and (served.min_version, served.max_version) == (int(lo), int(hi or lo))
        assert same or NOTES.get(name), f"{name}: kraftpy differs from Kafka 3.9 and the table does not say why"
