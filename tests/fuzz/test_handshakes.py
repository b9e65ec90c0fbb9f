"""A short handshake campaign against a secured ``kraftpy dev`` (SASL_SSL, SASL_PLAINTEXT, mutual TLS): no
crash, no hang, no legitimate login refused, nothing served after a failed exchange, and legitimate clients
still log in and produce afterwards. `make soak` runs 100,000 attempts; the seed and the number of attempts
come from KRAFTPY_FUZZ_SEED and KRAFTPY_FUZZ_HANDSHAKES.
"""

from __future__ import annotations

import collections
import os

import pytest

from tests.fuzz.handshake_campaign import LOGINS, HandshakeConfig, growth_per, run_handshake_campaign
from tests.fuzz.handshake_gen import make_attempt

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("KRAFTPY_FUZZ_SEED", "1"))
ATTEMPTS = int(os.environ.get("KRAFTPY_FUZZ_HANDSHAKES", "1500"))
FAMILIES = {"valid", "split", "scram", "plain", "oauth", "handshake", "state", "legacy-v0", "frame", "tls"}


async def test_a_handshake_campaign_finds_nothing(tmp_path):
    out = tmp_path / "handshakes.json"
    report = await run_handshake_campaign(HandshakeConfig(seed=SEED, frames=ATTEMPTS, directory=tmp_path / "dev",
                                                          out=out, hang_bound=15.0))
    summary = report.summary()
    assert not report.failures(), f"{summary}\n(the JSON report: {out})"
    assert report.frames_sent == ATTEMPTS, summary
    data = report.to_json()
    # The run did what it claims: every family of attempts, all three outcomes, every listener.
    assert FAMILIES <= {klass.split(":")[0] for klass in data["per_class"]}, summary
    totals: collections.Counter = collections.Counter()
    for outcomes in data["per_class"].values():
        totals.update(outcomes)
    assert totals["served"] and totals["refused"] and totals["closed"], summary
    assert {key.split(":")[0] for key in data["per_api"]} == {"SASL_SSL", "SASL_PLAINTEXT", "MTLS"}, summary
    # A stalled TLS handshake ends closed by the broker's handshake timeout, never as a hang.
    if any(make_attempt(SEED, i).klass == "tls:stall" for i in range(ATTEMPTS)):
        stalls = data["per_class"].get("tls:stall", {})
        assert stalls and set(stalls) == {"closed"}, summary
    # Legitimate clients logged in and produced before and after.
    everything_ok = {name: "ok" for name, _, _ in LOGINS}
    assert data["target"]["logins_before"] == everything_ok == data["target"]["logins_after"], summary
    memory = data["memory"]
    assert memory["baseline_rss_kb"] and memory["peak_rss_kb"] and memory["final_rss_kb"], summary


def test_attempts_are_made_again_alike_from_seed_and_index():
    first, again = make_attempt(7, 4242), make_attempt(7, 4242)
    assert (first.klass, first.port, first.detail, first.expect, first.tls, first.chunk) == (
        again.klass, again.port, again.detail, again.expect, again.tls, again.chunk)
    kinds = {make_attempt(7, i).klass.split(":")[0] for i in range(ATTEMPTS)}
    assert FAMILIES <= kinds


def test_growth_per_step_counts_from_the_baseline():
    samples = [(5_000, 110), (10_000, 120), (15_000, 121), (20_000, 125), (25_000, 126)]
    assert growth_per(samples, 10_000, 100) == [(10_000, 20), (20_000, 5)]
