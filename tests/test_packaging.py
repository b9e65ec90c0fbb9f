"""What kraftpy imports at run time comes with the install a user makes.

Every third-party module a file under ``kraftpy/`` imports must be brought by the base
dependencies, or, for a subpackage with an extra of the same name (``kraftpy/spark`` and
``kraftpy[spark]``), by that extra: never only by the ``dev`` extra that ``make test`` installs.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[ <>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_runtime_import_comes_with_the_install_that_needs_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {_name(r) for r in project["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    distributions = {module: {d.lower().replace("_", "-") for d in dists}
                     for module, dists in md.packages_distributions().items()}
    missing = []
    for path in sorted((ROOT / "kraftpy").rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        allowed = base | extras.get(parts[1] if len(parts) > 2 else "", set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top == "kraftpy" or top in sys.stdlib_module_names or top not in distributions:
                    continue
                if not distributions[top] & allowed:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {module}")
    assert not missing, "imports that a user's install does not bring:\n" + "\n".join(missing)
