from __future__ import annotations

import pytest

from tests.helpers.leftovers import close_leftover_logs


@pytest.fixture(autouse=True)
def _close_leftover_logs(monkeypatch):
    """The logs this test opened and left open are closed once it is done (see tests.helpers.leftovers)."""
    yield from close_leftover_logs(monkeypatch)
