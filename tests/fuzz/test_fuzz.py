"""A short fuzzing campaign against a real ``kraftpy dev``: no crash, no hang, no memory blow-up, every
acknowledged batch read back as sent.

Inputs of open known bugs (tests/fuzz/known_bugs.py) are left out or tolerated, each naming its bug;
removing an entry there once its fix has landed puts its inputs back into this test. The seed and the
number of frames come from KRAFTPY_FUZZ_SEED and KRAFTPY_FUZZ_FRAMES; `make soak` runs far more.
"""

from __future__ import annotations

import os

import pytest

from kraftpy.protocol.api_keys import ApiKey
from tests.fuzz.campaign import CampaignConfig, run_campaign
from tests.fuzz.known_bugs import OPEN

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("KRAFTPY_FUZZ_SEED", "1"))
FRAMES = int(os.environ.get("KRAFTPY_FUZZ_FRAMES", "3000"))


async def test_a_campaign_finds_nothing_but_the_known_bugs(tmp_path):
    out = tmp_path / "fuzz-report.json"
    report = await run_campaign(CampaignConfig(seed=SEED, frames=FRAMES, skip=OPEN, directory=tmp_path / "dev",
                                               out=out, hang_bound=15.0))
    summary = report.summary()
    assert not report.failures(), f"{summary}\n(the JSON report: {out})"
    skipped = sum(report.skipped_by_bug.values())
    assert report.frames_sent >= 0.9 * (FRAMES - skipped), summary
    # The run exercised what it claims: every served api, every port, acknowledged batches read back.
    data = report.to_json()
    served = {ApiKey(k).name.title().replace("_", "") for k in ApiKey if k.name in data["target"]["served_apis"]}
    exercised = {key.split(":", 1)[1] for key in data["per_api"] if key.startswith("kafka:")}
    assert served <= exercised, summary
    assert any(key.startswith("control:raft:") for key in data["per_api"]), summary
    # The Kafka APIs of the controller listener, each sent there.
    controller = {ApiKey(k).name.title().replace("_", "") for k in ApiKey
                  if k.name in data["target"]["controller_served_apis"]}
    assert controller >= {"DescribeConfigs", "IncrementalAlterConfigs", "UpdateFeatures"}, data["target"]
    assert controller <= {key.split(":", 1)[1] for key in data["per_api"] if key.startswith("controller-kafka:")}, \
        summary
    assert report.verification["checked"] > 50, summary
