"""docs/compatibility.md's Clients table is the rendering of the last matrix run (tests/compat/clients.json),
that run tried every feature with every client and version of CLIENTS, and the clients of this venv (and
kcat) still get the results their rows say, against a new `kraftpy dev` (no venv is made here: the full
set of versions runs in `make docs`)."""

from __future__ import annotations

import shutil

import pytest

from tests.compat.clients import (
    CLIENTS,
    DOC,
    documented_table,
    installed_clients,
    load,
    render,
    run,
)
from tests.compat.probe import FEATURES


def results(row: dict) -> dict[str, str]:
    return {feature: outcome["result"] for feature, outcome in row["features"].items()}


def test_the_clients_table_is_the_rendering_of_the_last_run():
    assert documented_table(DOC.read_text()) == render(load()), \
        "docs/compatibility.md's clients table is stale: run `make docs`"


def test_every_client_and_version_was_exercised():
    rows = load()
    listed = {(c.name, c.version) for c in CLIENTS if c.version is not None}
    ran = {(r["client"], r["version"]) for r in rows if r["client"] != "kcat"}
    assert ran == listed, "tests/compat/clients.json is not a run of CLIENTS: run `make docs`"
    assert [r["client"] for r in rows].count("kcat") == 1
    for row in rows:
        assert set(row["features"]) == set(FEATURES), f"{row['client']} {row['version']}: features not all tried"
        assert set(results(row).values()) <= {"pass", "fail", "unsupported"}
        # A client that could not even produce was not exercised against a broker at all.
        assert row["features"]["produce"]["result"] == "pass", row


@pytest.mark.slow
def test_the_clients_of_this_venv_still_get_their_rows():
    clients = installed_clients()
    assert clients, "no Kafka client in this venv"
    assert shutil.which("kcat") is None or any(c.name == "kcat" for c, _ in clients)
    recorded = {(r["client"], r["version"]): r for r in load()}
    for client, _ in clients:
        if client.name != "kcat":
            assert (client.name, client.version) in recorded, \
                f"{client.key} is installed here but has no row in docs/compatibility.md: add it to CLIENTS, " \
                "run `make docs`"
    for row in run(clients, log=lambda line: None):
        want = recorded[(row["client"], row["version"])] if row["client"] != "kcat" else \
            next(r for r in recorded.values() if r["client"] == "kcat")
        assert row["version"] == want["version"] and row["librdkafka"] == want["librdkafka"]
        assert results(row) == results(want), (
            f"{row['client']} {row['version']}: "
            + "; ".join(f"{f}: {want['features'][f]['result']} -> {o['result']} {o['detail']}"
                        for f, o in row["features"].items() if o["result"] != want["features"][f]["result"]))
