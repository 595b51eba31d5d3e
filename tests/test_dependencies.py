"""Every runtime dependency in pyproject.toml is one the product uses: a package installed into every user's
venv that no module imports (scipy was one, while docstrings said it did the statistics) is weight and a
false claim about where the code comes from."""

from __future__ import annotations

import ast
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import tomlkit
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from specsuite.common import paths

# Used without an import by a product module, each for its reason.
NOT_IMPORTED = {
    "pip": "run as `python -m pip` (common/pip.py): a venv made by uv has none of its own",
    "pytest-timeout": "a pytest plugin loaded by its entry point: the suite's `timeout` (suite/pytest.ini)",
}


def imported_distributions(files: list[Path]) -> set[str]:
    """The distributions (canonical names) that provide the top-level modules ``files`` import."""
    owners = packages_distributions()
    tops: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops.add(node.module.partition(".")[0])
    third_party = tops - set(sys.stdlib_module_names)
    # a module no installed distribution claims (tomli on Python 3.11+) is named as its distribution
    return {canonicalize_name(d) for top in third_party for d in owners.get(top, [top])}


def test_every_runtime_dependency_is_used() -> None:
    project = tomlkit.parse((paths.REPO_ROOT / "pyproject.toml").read_text()).unwrap()["project"]
    declared = {canonicalize_name(Requirement(spec).name) for spec in project["dependencies"]}
    files = list((paths.REPO_ROOT / "specsuite").rglob("*.py"))
    unused = declared - imported_distributions(files) - set(NOT_IMPORTED)
    assert unused == set(), f"runtime dependencies no product module imports: {sorted(unused)}"


def test_invoke_is_an_extra_for_tasks_py_not_a_runtime_dependency() -> None:
    """The wheel does not ship tasks.py, so invoke is the ``tasks`` extra of a checkout, not a dependency of
    every install; tasks.py imports nothing else the runtime dependencies lack."""
    project = tomlkit.parse((paths.REPO_ROOT / "pyproject.toml").read_text()).unwrap()["project"]
    declared = {canonicalize_name(Requirement(spec).name) for spec in project["dependencies"]}
    extras = {canonicalize_name(Requirement(s).name) for s in project["optional-dependencies"]["tasks"]}
    assert "invoke" not in declared and extras == {"invoke"}
    needed = imported_distributions([paths.REPO_ROOT / "tasks.py"]) - {"specsuite"}
    assert needed - declared == {"invoke"}, needed - declared


def test_an_unused_dependency_is_found(tmp_path: Path) -> None:
    """The scan sees imports in every form, and nothing that is not imported."""
    (tmp_path / "a.py").write_text(
        "import os\nimport numpy as np\nfrom requests.adapters import HTTPAdapter\n\n\n"
        "def f():\n    import tomlkit\n    from . import b\n"
    )
    found = imported_distributions([tmp_path / "a.py"])
    assert {"numpy", "requests", "tomlkit"} <= found
    assert "scipy" not in found and "os" not in found
