"""The project as a user installs it: a wheel (not an editable checkout) in a fresh venv runs its own suite
from an empty folder, with the real llama-server, and writes its results there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fakeserver import real_binary

from specsuite.common import paths

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900, **kw)  # type: ignore[call-overload]


def _install(wheel: Path, venv: Path) -> None:
    """A fresh venv at ``venv`` holding ``wheel`` and its dependencies from the package index. uv (a test
    dependency) does in seconds what pip takes a minute of CI's two cores for; the wheel is the same."""
    uv = [sys.executable, "-m", "uv"]
    made = _run([*uv, "venv", "-q", "--seed", str(venv)])
    assert made.returncode == 0, made.stderr
    got = _run([*uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(wheel)])
    assert got.returncode == 0, got.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(paths.REPO_ROOT)]
    )
    assert built.returncode == 0, built.stderr
    [whl] = out.glob("specsuite-*.whl")
    return whl


def test_the_wheel_carries_the_suite_and_its_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("cases.toml", "models.lock", "llama.cpp.pin.toml"):
        assert f"specsuite/data/{data}" in names
    assert {
        "specsuite/suite/plugin.py",
        "specsuite/suite/test_speculative.py",
        "specsuite/suite/pytest.ini",
    } <= names
    report = {f"specsuite/report/templates/{t}.html" for t in ("base", "index", "case", "run")}
    report |= {f"specsuite/report/assets/{a}" for a in ("site.js", "site.css", "vendor/uPlot.iife.min.js")}
    assert report <= names  # `specsuite report` runs from the wheel
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    # the suite's pytest.ini loads the plugin (-p): no entry point puts it into other pytest runs
    assert "pytest11" not in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_an_installed_wheel_runs_synthetic_cases_from_an_empty_folder(wheel: Path, tmp_path: Path) -> None:
    """The wheel's own cases.toml and models.lock, from a folder with neither: three cases of the synthetic
    tier (the whole tier runs in CI's test_synthetic session; here it would only run twice)."""
    binary = real_binary()
    venv = tmp_path / "venv"
    _install(wheel, venv)
    work = tmp_path / "empty"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPEC_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(
        LLAMA_SERVER_BIN_PATH=str(binary),
        SPEC_CACHE_DIR=str(tmp_path / "cache"),
        SPEC_HISTORY=str(tmp_path / "history.sqlite"),
    )
    cases = "tiny-simple-fixed,tiny-mtp-fixed,tiny-ngram-cache-order"
    proc = _run([str(venv / "bin" / "specsuite"), "run-tier", cases], cwd=work, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [run] = (work / "results").iterdir()
    doc = json.loads((run / "results.json").read_text())
    assert doc["verdict"].startswith("PASSED") and list(doc["cases"]) == cases.split(",")
    assert doc["harness"]["commit"] is None and doc["harness"]["version"]  # a wheel: its version, no commit
    assert (run / "summary.md").is_file() and (run / "junit.xml").is_file()
    assert not list(venv.rglob("results.json"))  # nothing written inside the installation
