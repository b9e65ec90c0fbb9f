from pathlib import Path

from kraftpy.config.docgen import render
from kraftpy.config.keys import KEYS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_configuration_reference_is_current():
    assert DOC.read_text() == render(), (
        "docs/configuration.md is stale: regenerate it with `make docs` (kraftpy config docs)")


def test_reference_lists_every_key():
    text = render()
    for key in KEYS:
        assert f"`{key.name}`" in text
