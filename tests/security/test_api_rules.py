"""Every API the broker serves has its authorization rule written down, once in the code
(kraftpy.broker.authorization.API_RULES) and once in docs/security.md's table."""

from __future__ import annotations

import re
from pathlib import Path

from kraftpy.broker.authorization import API_RULES
from kraftpy.protocol.api_keys import API_VERSIONS, ApiKey

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def camel(key: ApiKey) -> str:
    return "".join(part.capitalize() for part in key.name.split("_"))


def test_every_served_api_has_a_rule_and_a_documented_row():
    assert set(API_VERSIONS) <= set(API_RULES), sorted(k.name for k in set(API_VERSIONS) - set(API_RULES))
    rows = {name: rule for names, rule in re.findall(r"^\| ([\w, ]+) \| (.+) \|$", DOC.read_text(), flags=re.MULTILINE)
            for name in names.split(", ")}
    undocumented = [camel(k) for k in API_VERSIONS if camel(k) not in rows]
    assert not undocumented
