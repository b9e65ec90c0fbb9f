"""What the fuzzer found, replayed from tests/fuzz/findings/ against a fresh ``kraftpy dev``.

A finding still open is a strict xfail naming its bug and where the fix belongs: once the fix lands
the test passes, the xfail turns red (XPASS), and ``"open": true`` comes out of the file.
"""

from __future__ import annotations

import pytest

from tests.fuzz.replay import all_findings, load, replay_finding

pytestmark = pytest.mark.slow


def _params():
    for path in all_findings():
        finding = load(path)
        marks = []
        if finding.get("open"):
            marks.append(pytest.mark.xfail(strict=True, reason=f"open: {finding['what']} -- fix: {finding['fix']}"))
        yield pytest.param(path, id=finding["name"], marks=marks)


@pytest.mark.parametrize("path", list(_params()))
async def test_a_finding_replayed(path, tmp_path):
    failures = await replay_finding(load(path), tmp_path / "dev")
    assert not failures, "\n".join(failures)
