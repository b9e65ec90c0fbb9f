"""docs/testing.md shows the fault examples as tests/testing/test_faults.py runs them, and is linked
from the documentation's lists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "testing.md"


def blocks(text: str, heading: str) -> list[str]:
    """The python blocks of the section that starts at ``heading``."""
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end if end > 0 else None], re.S)


def test_the_fault_examples_are_the_tests_as_they_run():
    tests = (ROOT / "tests" / "testing" / "test_faults.py").read_text()
    imported = {ast.unparse(node) for node in ast.parse(tests).body if isinstance(node, ast.Import | ast.ImportFrom)}
    shown = blocks(PAGE.read_text(), "## Faults on demand")
    functions = []
    for block in shown:
        tree = ast.parse(block)
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                assert ast.unparse(node) in imported, ast.unparse(node)
            else:
                assert isinstance(node, ast.FunctionDef), ast.unparse(node)
                source = ast.get_source_segment(block, node)
                assert source in tests, f"docs/testing.md shows {node.name} otherwise than test_faults.py runs it"
                functions.append(node.name)
    assert {"produce", "consume", "test_kill_the_leader_then_start_it_again", "test_pause_the_leader",
            "test_a_graceful_stop_hands_the_leadership_over", "test_cut_the_leader_off_from_the_other_nodes",
            "test_restore_undoes_every_fault"} <= set(functions)


def test_the_page_is_linked_from_the_documentation_lists():
    assert "(docs/testing.md)" in (ROOT / "README.md").read_text()
    assert "(testing.md)" in (ROOT / "docs" / "README.md").read_text()
