"""Every test written under tests/ is collected by a plain ``pytest tests``.

pytest's default ``norecursedirs`` skips any folder named ``build`` (and ``dist``, ``venv``, dotted ones,
...): when the package's build concern had its tests in ``tests/build``, none of its 104 tests ran in any
session and nothing said so. This test compares the functions the files define (read with ``ast``) with
the tests pytest collects from ``tests/`` (a subprocess: the session running this test may have been given
only part of the tree), so a folder, a file or a class that drops out of collection fails here by name.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def written(root: Path = ROOT) -> set[str]:
    """``path::function`` and ``path::Class::method`` of every test function defined under tests/."""
    found: set[str] = set()
    for path in sorted((root / "tests").rglob("*.py")):
        if not (path.name.startswith("test_") or path.name.endswith("_test.py")):
            continue
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                found.add(f"{rel}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith(
                        "test"
                    ):
                        found.add(f"{rel}::{node.name}::{item.name}")
    return found


def collected(root: Path = ROOT) -> set[str]:
    """What ``pytest --collect-only tests`` finds, parameters stripped (one entry per function)."""
    env = {**os.environ, "PYTEST_ADDOPTS": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"collection failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
    ids = {line.split("[", 1)[0] for line in proc.stdout.splitlines() if "::" in line}
    return ids


def whole_tree(config: pytest.Config) -> bool:
    """Whether this session was asked for all of tests/ (as `nox -s tests` and CI ask): then what it
    collected is the answer, and a second collection in a subprocess (about 30 s on two cores) is not
    needed."""
    return [Path(config.rootpath, a.split("::")[0]).resolve() for a in config.args] == [TESTS]


def test_every_written_test_is_collected(request):
    # Every item this session collected, before -m/-k deselected any (tests/conftest.py records them)
    seen = request.config.pluginmanager.get_plugin("specsuite-collected")
    found = seen.ids if seen is not None and whole_tree(request.config) else collected()
    missing = written() - found
    assert not missing, f"{len(missing)} test(s) under tests/ never collected: {sorted(missing)[:20]}"


def test_the_check_finds_tests_in_a_folder_named_build(tmp_path):
    # The failure this guards against, on a small tree of its own: a test in tests/build is written and
    # not collected; one in tests/llamacpp is both.
    for folder in ("build", "llamacpp"):
        (tmp_path / "tests" / folder).mkdir(parents=True)
        (tmp_path / "tests" / folder / "test_one.py").write_text(
            "import pytest\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_a(x):\n    assert x\n\n"
            "class TestB:\n    def test_b(self):\n        pass\n"
        )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    assert written(tmp_path) - collected(tmp_path) == {
        "tests/build/test_one.py::test_a",
        "tests/build/test_one.py::TestB::test_b",
    }
