"""What a build older than the pin lacks: not in this build yet (its own status), or vanished (a failure),
by whether a lower build measured the case on this setup; and which llama.cpp a binary is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakellama import fake_llama

from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.history import recording
from specsuite.llamacpp.source import load_pin
from specsuite.results.document import Binary, Device, Run
from specsuite.results.record import CaseRecord
from specsuite.server.probe import probe
from specsuite.suite.session import binary_info
from specsuite.suite.vintage import Vintage

DEVICE = Device(name="cpu", device_class="cpu-x86-64")


def _run(build: int, status: str = "passed", device: Device = DEVICE) -> Run:
    rec = CaseRecord(name="tiny-mtp-random", status=status, accept_rate=0.5, accept_len=2.0, drafted=10,
                     accepted=5, drafts=4)  # fmt: skip
    return Run(run_id=f"run-b{build}", tier="synthetic", started=f"2026-12-0{build // 100}T10:00:00+00:00",
               cases_sha256="c" * 64, binary=Binary(build=build, backend="cpu"), device=device,
               cases={rec.name: rec})  # fmt: skip


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "h.sqlite"
    monkeypatch.setenv("SPEC_HISTORY", str(path))
    return path


def _vintage(build: int | None) -> Vintage:
    return Vintage(build, load_pin().build, "cpu-x86-64", "cpu", history=True)


def test_what_an_older_build_lacks_is_not_in_it_yet(history: Path) -> None:
    assert load_pin().build == 11311
    fresh, said = _vintage(9113).judge("tiny-mtp-random", "spec type draft-mtp")
    assert fresh and said == "; b9113 predates the pin (b11311): not in this build yet"


def test_what_a_lower_build_measured_here_vanished(history: Path) -> None:
    recording.record_run(_run(100), history)
    fresh, said = _vintage(200).judge("tiny-mtp-random", "spec type draft-mtp")
    assert not fresh and said == "; b100 measured it here (run run-b100): it vanished"
    # measured only by a higher build, on another device class, or not measured at all: not yet there
    recording.record_run(_run(300), history)
    assert _vintage(50).judge("tiny-mtp-random", "x")[0]
    other = Device(name="gpu", device_class="nvidia-h200")
    recording.record_run(_run(400, device=other), history)
    assert _vintage(50).judge("tiny-mtp-random", "x")[0]
    recording.record_run(_run(40, status="skipped"), history)
    assert _vintage(50).judge("tiny-mtp-random", "x")[0]


def test_a_build_newer_than_the_pin_or_unnumbered_loses_a_method(history: Path) -> None:
    assert _vintage(11434).judge("tiny-mtp-random", "x") == (False, "")
    assert _vintage(None).judge("tiny-mtp-random", "x") == (False, "")


def _fake(folder: Path, version: str) -> Path:
    return fake_llama(folder, version=version)


def test_a_binary_named_by_its_version_build_info_or_nothing(tmp_path: Path, monkeypatch) -> None:
    """``commit unknown`` with a build number: b<N>; with nothing: its build-info.json beside ``bin/``;
    with neither: refused in one line saying how to name it."""
    monkeypatch.setattr("specsuite.common.paths.BUILD_DIR", tmp_path / "suite-build")
    numbered = binary_info(
        probe(_fake(tmp_path / "a" / "bin", "version: 0.6.0-dev (build 9246, commit unknown)"))
    )
    assert (numbered.key, numbered.build, numbered.commit, numbered.source.origin) == (
        "b9246",
        9246,
        None,
        "--version",
    )
    nameless = _fake(tmp_path / "b" / "bin", "version: 0.6.0-dev (build 0, commit unknown)")
    with pytest.raises(UserError) as refused:
        binary_info(probe(nameless))
    assert "names no commit or build" in str(refused.value) and "LLAMA_CPP_BUILD=N" in str(refused.value)
    assert "\n" not in str(refused.value)
    tree = "e" * 64
    ident = {"commit": None, "build": None, "tree_sha256": tree, "origin": "content"}
    info = {
        "binary_sha256": sha256_file(nameless),
        "backend": "cpu",
        "source": {"kind": "dir"},
        "identity": ident,
    }
    (tmp_path / "b" / "build-info.json").write_text(json.dumps(info))
    named = binary_info(probe(nameless))
    assert (named.key, named.tree_sha256, named.source.origin) == (f"tree-{tree[:12]}", tree, "content")
