"""The configuration in the history: recorded per run (schema v4), handed to the gate with its baseline, and
listed beside the change points by `specsuite changes`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import msgspec
import pytest

from specsuite import cli
from specsuite.history import baseline, changes, queries, recording, schema
from specsuite.results import config
from specsuite.results.config import BuildOptions, CaseConfig, RunConfig
from specsuite.results.document import Binary, Device, Run
from specsuite.results.record import CaseRecord

DEVICE = Device(name="cpu", device_class="cpu-x86-64", driver=None, cuda=None)
P_MIN = "--spec-draft-p-min"


def run(commit: str, day: int, p_min: str | None, rate: float, fa: str = "q4_0-q4_0") -> Run:
    config = (
        None
        if p_min is None
        else RunConfig(
            defaults={P_MIN: p_min, "--spec-draft-n-max": "3"},
            build=BuildOptions(source="CMakeCache.txt", backend="cpu", options={"GGML_CUDA_FA_QUANTS": fa}),
        )
    )
    rec = CaseRecord(
        name="tiny-simple-random",
        status="passed",
        accept_rate=rate,
        accept_len=3.0,
        drafted=100,
        accepted=round(100 * rate),
        drafts=30,
        config=CaseConfig(passed={"--spec-draft-n-max": "3"}),
    )
    return Run(
        run_id=f"r{day}-{commit}",
        tier="synthetic",
        started=f"2026-12-0{day}T10:00:00+00:00",
        cases_sha256="c" * 64,
        binary=Binary(commit=commit, backend="cpu"),
        device=DEVICE,
        config=config,
        cases={rec.name: rec},
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "h.sqlite"
    for r in (
        run("a1a1a1a", 1, None, 1.0),
        run("b2b2b2b", 2, "0.75", 1.0),
        run("c3c3c3c", 3, "0.75", 1.0),
        run("d4d4d4d", 4, "0.00", 0.8571),
        run("e5e5e5e", 5, "0.00", 0.8571, fa="all"),
    ):
        assert recording.record_run(r, path) is not None
    return path


def test_a_run_is_recorded_with_its_configuration_and_its_baseline_hands_it_over(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        stored = dict(conn.execute("SELECT run_id, config FROM runs"))
    assert version == len(schema.MIGRATIONS) and stored["r1-a1a1a1a"] is None
    assert json.loads(stored["r2-b2b2b2b"])["defaults"][P_MIN] == "0.75"
    base = baseline.find_baseline(
        db,
        case="tiny-simple-random",
        device_class="cpu-x86-64",
        backend="cpu",
        cases_sha256="c" * 64,
        commit="f6f6f6f",
        ancestors=None,
    )
    assert base is not None and base.run_id == "r5-e5e5e5e" and base.config is not None
    assert base.config.build is not None and base.config.build.options == {"GGML_CUDA_FA_QUANTS": "all"}
    assert queries.run_configs(db, ["r1-a1a1a1a", "r4-d4d4d4d"])["r1-a1a1a1a"] is None
    assert [r["run_id"] for r in queries.config_series(db)] == [
        "r2-b2b2b2b",
        "r3-c3c3c3c",
        "r4-d4d4d4d",
        "r5-e5e5e5e",
    ]
    assert queries.runs(db)[-1]["config"]["defaults"][P_MIN] == "0.00"  # parsed, as models are


def test_config_changes_between_consecutive_runs_and_beside_the_change_point(db: Path) -> None:
    found = changes.config_changes(db)
    assert [(c.before_commit, c.after_commit, c.changes) for c in found] == [
        ("c3c3c3c", "d4d4d4d", ("default of --spec-draft-p-min: 0.75 -> 0.00 between c3c3c3c and d4d4d4d",)),
        ("d4d4d4d", "e5e5e5e", ("build GGML_CUDA_FA_QUANTS: q4_0-q4_0 -> all between d4d4d4d and e5e5e5e",)),
    ]
    [point] = changes.find_changes(db, metric="accept_rate")
    assert point.after_commit == "d4d4d4d"
    assert changes.across(point, found) == [found[0].changes[0]]


def test_the_changes_command_lists_them(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["changes", "--db", str(db), "--metric", "accept_rate"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(out) if line.startswith("accept_rate"))
    assert "d4d4d4d" in out[row] and "-14.3 %" in out[row]
    assert out[row + 1] == (
        "  configuration across it: default of --spec-draft-p-min: 0.75 -> 0.00 between c3c3c3c and d4d4d4d"
    )
    table = out[out.index("configuration changes") + 1 :]
    assert any("d4d4d4d" in line and "default of --spec-draft-p-min: 0.75 -> 0.00" in line for line in table)
    assert any("e5e5e5e" in line and "build GGML_CUDA_FA_QUANTS: q4_0-q4_0 -> all" in line for line in table)
    assert cli.main(["changes", "--db", str(db), "--metric", "accept_rate", "--json"]) == 0
    [cp] = json.loads(capsys.readouterr().out)
    assert cp["config_changes"] == ["default of --spec-draft-p-min: 0.75 -> 0.00 between c3c3c3c and d4d4d4d"]


def test_a_configuration_that_does_not_decode_is_a_warning(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET config = '{\"defaults\": 7}' WHERE run_id = 'r4-d4d4d4d'")
    assert [r["run_id"] for r in queries.config_series(db)] == ["r2-b2b2b2b", "r3-c3c3c3c", "r5-e5e5e5e"]
    assert "history run r4-d4d4d4d: its configuration does not decode" in capsys.readouterr().err


def test_the_run_before_names_a_changed_default_where_no_case_had_a_baseline(tmp_path: Path) -> None:
    """b9113 measured nothing the gate can use (its cases diverged or were not in the build), yet the run
    of b9246 names what its defaults were there: the run before on this setup, by build number (b9702,
    recorded earlier in time, is a higher build and never qualifies)."""
    from specsuite.results import summary
    from specsuite.results.document import HistoryNote

    path = tmp_path / "h.sqlite"

    def built(build: int, day: int, p_min: str, status: str = "passed") -> Run:
        r = run(f"x{build}", day, p_min, 1.0)
        rec = msgspec.structs.replace(r.cases["tiny-simple-random"], status=status, reason="diverged")
        binary = Binary(build=build, backend="cpu")
        return msgspec.structs.replace(r, binary=binary, run_id=f"r-b{build}", cases={rec.name: rec})

    recording.record_run(built(9702, 1, "0.00"), path)
    recording.record_run(built(9113, 2, "0.75", status="failed"), path)
    prior = baseline.previous_config(path, device_class="cpu-x86-64", backend="cpu", commit="b9246",
                                     ancestors=None, build=9246, before=None)  # fmt: skip
    assert prior is not None and (prior.commit, prior.run_id) == ("b9113", "r-b9113")
    later = built(9246, 3, "0.00")
    changes = config.changes((prior.config, None), (later.config, None), (prior.commit, "b9246"))
    assert changes == [f"default of {P_MIN}: 0.75 -> 0.00 between b9113 and b9246"]
    later.history = HistoryNote(config_base="b9113 (run r-b9113)", config_changes=changes)
    assert summary.run_config_line(later) == [
        f"CONFIGURATION CHANGED since b9113 (run r-b9113): default of {P_MIN}: 0.75 -> 0.00"
    ]
