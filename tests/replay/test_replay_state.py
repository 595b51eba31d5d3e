"""A replay.json from outside (hand-edited, copied, damaged): checked when read, as strictly as what the
replay writes; a bad one is one error line naming the file and the entry, exit 2, and nothing is built
or written. No build runs here: each replay is refused before its first build."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import stepenv
from fakeindex import FakeIndex

from specsuite import cli
from specsuite.llamacpp.inplace import BuildFailed

HERE = Path(__file__).resolve().parent  # the replay loads this module as test_replay_state
CASE = stepenv.CASE
BUILDS = [100, 200, 300]


def refusing_build(number: int, log: Path, build_argv: list[str]) -> Path:
    raise BuildFailed(f"b{number} was built: its replay.json should have been refused")


@pytest.fixture
def out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    stepenv.isolate(tmp_path, tmp_path / "models", HERE, monkeypatch)  # nothing runs: no models needed
    return (tmp_path / "out").resolve()


def _state(out: Path) -> dict[str, Any]:
    """A replay.json as the replay writes it, every build done."""
    entries = [
        {"build": b, "status": "done", "binary": str(out / f"b{b}" / "bin" / "llama-server"), "build_s": 1.0,
         "run_s": 2.0, "results": str(out / f"b{b}" / f"b{b}-run-1"), "run_id": f"x-b{b}-run-1",
         "headline": "PASSED", "exit_code": 0, "message": ""}
        for b in BUILDS
    ]  # fmt: skip
    return {"tier": CASE, "builds": BUILDS, "run_argv": [], "build_argv": [], "index": "http://127.0.0.1/simple",
            "started": "2026-12-01T10:00:00Z", "entries": entries}  # fmt: skip


def _entry(i: int, **fields: Any) -> Callable[[dict[str, Any], Path], None]:
    def edit(state: dict[str, Any], out: Path) -> None:
        state["entries"][i].update({k: v(out) if callable(v) else v for k, v in fields.items()})

    return edit


def _missing_entry(state: dict[str, Any], out: Path) -> None:
    del state["entries"][2]


def _misspelt(state: dict[str, Any], out: Path) -> None:
    state["entires"] = state.pop("entries")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _run(out: Path) -> int:
    argv = ["replay", "--tier", CASE, "--builds", "b100,b200,b300", "--out", str(out)]
    with FakeIndex(BUILDS) as index:
        os.environ["PIP_INDEX_URL"] = index.url  # isolate's monkeypatch restores the environment
        return cli.main([*argv, "--builder", "test_replay_state:refusing_build"])


EDITS = {
    "a build not in builds": (
        _entry(1, build=10280, status="pending"),
        "entry b10280: not one of its builds",
    ),
    "two entries for a build": (_entry(2, build=200), "entry b200: a second entry for b200"),
    "a build without entry": (_missing_entry, "b300 has no entry"),
    "an unknown status": (_entry(0, status="finished"), "entry b100: status 'finished' is not one of"),
    "results outside the folder": (_entry(0, results="/etc"), "entry b100: results '/etc' is not"),
    "results climbing out": (
        _entry(0, results=lambda o: f"{o}/b100/../../elsewhere/b100-run-1"),
        "entry b100: results",
    ),
    "results of another build": (_entry(0, results=lambda o: f"{o}/b200/b200-run-1"), "entry b100: results"),
    "done without results": (_entry(1, results=None), "entry b200: status 'done' without its results"),
    "results of a build not done": (_entry(1, status="run_failed"), "entry b200: results of a run"),
    "negative seconds": (_entry(0, build_s=-5.0), "entry b100: build_s -5.0 is not"),
    "a message of two lines": (
        _entry(2, status="build_failed", results=None, message="a\n- **b999**: PASSED"),
        "entry b300: message holds a line break",
    ),
    "unsorted builds": (lambda s, o: s.update(builds=[300, 100, 200]), "builds [300, 100, 200]"),
    "a misspelt field": (_misspelt, "unknown field `entires`"),
}


@pytest.mark.parametrize("what", EDITS)
def test_a_hand_edited_replay_json_is_one_error_line(
    what: str, out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit, said = EDITS[what]
    state = _state(out)
    edit(state, out)
    out.mkdir()
    (out / "replay.json").write_text(json.dumps(state, indent=2))
    before = _files(out)
    assert _run(out) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out / 'replay.json'}: "), err
    assert said in err[0] and "start the replay over" in err[0]
    assert _files(out) == before  # nothing built, nothing written


def test_a_link_in_the_replays_folder_is_refused(
    out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """b200's folder is a link to elsewhere: its build log and runs would be written there."""
    state = _state(out)
    state["entries"][1].update(status="pending", results=None)
    out.mkdir()
    (out / "replay.json").write_text(json.dumps(state))
    (tmp_path / "elsewhere").mkdir()
    (out / "b200").symlink_to(tmp_path / "elsewhere")
    assert _run(out) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"{out} holds a link: {out / 'b200'}" in err[0], err
    assert not any((tmp_path / "elsewhere").iterdir())
