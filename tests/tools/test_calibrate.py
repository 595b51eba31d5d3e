"""Calibration from recorded results files (no server), and once for real on the smoke tier."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from casetext import HEAD
from testdata import DATA_ROOT

from specsuite.cases.schema import load_cases, parse_cases
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.tools import calibrate

DATA = DATA_ROOT / "results"
CAL_RUNS = [DATA / f"fixture-cal-{i}" for i in (1, 2, 3)]

CASES = (
    HEAD
    + """
# Smoke tier: CPU, Gemma 3 270M.
[[case]]
name = "ngram"
tier = "smoke"
spec_type = "ngram-mod"          # self-speculation from the prompt
target = "fixture-target.gguf"
n_max = 3
min_accept_rate = 0.5            # one-sided floors
min_accept_len = 1.8

[[case]]
name = "simple"
tier = "smoke"
spec_type = "draft-simple"
target = "fixture-target.gguf"
draft = "fixture-target.gguf"
n_max = 3
min_accept_rate = 0.7
min_accept_len = 2.3

# ---- the wobbly one ----
[[case]]
name = "wobbly"
tier = "smoke"
spec_type = "ngram-simple"
target = "fixture-target.gguf"
n_max = 3
min_accept_rate = 0.1
min_accept_len = 1.0

# Must not draft: no floors to calibrate.
[[case]]
name = "nodraft"
tier = "smoke"
spec_type = "detect"
target = "fixture-target.gguf"
n_max = 3
expect_no_drafts = true
"""
)


@pytest.fixture
def cases_file(tmp_path: Path) -> Path:
    path = tmp_path / "cases.toml"
    path.write_text(CASES, encoding="utf-8")
    return path


def _calibrate(cases: Path, *extra: str, runs: list[Path] = CAL_RUNS) -> int:
    return calibrate.main(["--cases", str(cases), "--from-results", *map(str, runs), *extra])


def _case(path: Path, name: str) -> dict:
    return next(c for c in tomlkit.parse(path.read_text()).unwrap()["case"] if c["name"] == name)


def test_floors_are_min_minus_margin(cases_file: Path) -> None:
    assert _calibrate(cases_file, "--allow-unstable") == 0
    ngram = _case(cases_file, "ngram")
    # rates 0.6210, 0.6350, 0.6290 (run 3 failed only its old floor: still a measurement) -> 0.6210 - 0.03
    assert ngram["min_accept_rate"] == 0.591
    assert ngram["min_accept_len"] == 1.903  # lens 2.1030, 2.1500, 2.1220 -> 2.1030 - 0.2
    simple = _case(cases_file, "simple")
    # run 2 skipped simple: calibrated from runs 1 and 3 only
    assert (simple["min_accept_rate"], simple["min_accept_len"]) == (0.77, 2.4)
    assert simple["calibration"]["runs"] == 2
    assert simple["calibration"]["run_ids"] == ["fixture-cal-1", "fixture-cal-3"]
    assert "min_accept_rate" not in _case(cases_file, "nodraft")
    load_cases(cases_file)  # the suite still accepts the file


def test_comments_and_layout_kept(cases_file: Path) -> None:
    _calibrate(cases_file, "--allow-unstable")
    new = cases_file.read_text()
    for line in CASES.splitlines():
        if "#" in line:
            comment = line[line.index("#") :]
            assert comment in new, comment
    # the comment that introduces a case still sits right above its [[case]] header
    assert '# ---- the wobbly one ----\n[[case]]\nname = "wobbly"' in new
    assert '# Must not draft: no floors to calibrate.\n[[case]]\nname = "nodraft"' in new
    assert new.count("[case.calibration]") == 3


def test_provenance_recorded(cases_file: Path) -> None:
    _calibrate(cases_file, "--allow-unstable")
    cal = _case(cases_file, "ngram")["calibration"]
    assert cal["commit"] == "0c1e570"
    assert cal["device"] == "cpu"
    assert cal["runs"] == 3
    assert cal["run_ids"] == ["fixture-cal-1", "fixture-cal-2", "fixture-cal-3"]
    assert cal["accept_rate"] == {"min": 0.621, "max": 0.635, "spread": 0.014}
    assert cal["accept_len"] == {"min": 2.103, "max": 2.15, "spread": 0.047}
    assert cal["date"].endswith("Z")


def test_recalibration_updates_in_place(cases_file: Path) -> None:
    _calibrate(cases_file, "--allow-unstable")
    first = cases_file.read_text()
    _calibrate(cases_file, "--allow-unstable", runs=CAL_RUNS[:1])
    second = cases_file.read_text()
    assert second.count("[case.calibration]") == 3
    assert _case(cases_file, "ngram")["calibration"]["runs"] == 1
    # same structure, only values changed
    assert len(first.splitlines()) == len(second.splitlines())


def test_dry_run_changes_nothing(cases_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = cases_file.read_bytes()
    assert _calibrate(cases_file, "--dry-run", "--allow-unstable") == 0
    assert cases_file.read_bytes() == before
    out = capsys.readouterr().out
    assert "-min_accept_rate = 0.5 " in out and "+min_accept_rate = 0.5910 " in out
    assert "dry run: nothing written" in out


def test_unstable_case_is_reported_and_fails(cases_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _calibrate(cases_file) == 1
    captured = capsys.readouterr()
    assert "UNSTABLE wobbly: accept rate spread 0.0800 > margin 0.03" in captured.out
    assert "UNSTABLE ngram" not in captured.out and "UNSTABLE simple" not in captured.out
    assert "floors written anyway" in captured.err
    assert _case(cases_file, "wobbly")["min_accept_rate"] == 0.47  # min 0.50 - 0.03, written


def test_skipped_run_is_reported(cases_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _calibrate(cases_file, "--allow-unstable", "--dry-run")
    out = capsys.readouterr().out
    assert "simple: run not used: fixture-cal-2: skipped (binary_no_dspark)" in out


def test_tier_filters_cases(cases_file: Path, tmp_path: Path) -> None:
    # --tier takes whatever select_cases takes: a tier or a comma list of case names
    assert _calibrate(cases_file, "--tier", "ngram") == 0
    assert _case(cases_file, "ngram")["min_accept_rate"] == 0.591
    assert _case(cases_file, "wobbly")["min_accept_rate"] == 0.1
    assert "calibration" not in _case(cases_file, "wobbly")


def test_floor_the_suite_rejects_is_not_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The last guard: new floors the suite's own validation rejects are not written. Checked runs cannot
    give one any more (a measured accept len above n_max + 1 is refused as out of range), so the floors
    here are computed from numbers handed in directly."""
    text = CASES.replace("min_accept_len = 2.3", "min_accept_len = 1.9")
    simple = calibrate.CaseCalibration("simple", rates=[0.75, 0.76], lens=[4.6, 4.7], run_ids=["a", "b"])
    ngram = calibrate.CaseCalibration("ngram", rates=[0.62, 0.63], lens=[2.0, 2.1], run_ids=["a", "b"])
    prov = {"commit": "0c1e570", "device": "cpu"}
    new, rejected = calibrate._validated(
        text, {"simple": simple, "ngram": ngram}, prov, "2026-12-01T00:00:00Z"
    )
    assert rejected == ["simple"]
    assert (
        "NOT WRITTEN simple: cases.toml: [[case]] 'simple': min_accept_len = 4.4 is outside"
        in capsys.readouterr().out
    )
    cases = {c.name: c for c in parse_cases(new)}
    assert cases["simple"].min_accept_len == 1.9 and cases["simple"].calibration == {}
    assert cases["ngram"].min_accept_rate == 0.59  # the others are written


def test_runs_of_different_commits_are_refused(cases_file: Path) -> None:
    runs = [DATA / "fixture-base", DATA / "fixture-regressed"]
    with pytest.raises(UserError, match=r"differ in llama\.cpp commit"):
        _calibrate(cases_file, runs=runs)
    assert cases_file.read_text() == CASES


def _on_another_machine(tmp_path: Path, src: Path, rate: float) -> Path:
    """A copy of a run as another machine's build of the same commit gave it, ngram at ``rate``: the same
    accepted tokens of more drafted ones (its counters give the rate; x100, to its 4 decimals)."""
    data = json.loads((src / "results.json").read_text())
    data["binary"]["sha256"] = "f" * 64
    data["device"] = {"name": "AMD EPYC 9654", "class": "cpu-x86-64-avx512"}
    ngram = data["cases"]["ngram"]
    for key in ("accepted", "drafts"):
        ngram[key] *= 100
    ngram["per_position"] = [100 * n for n in ngram["per_position"]]
    ngram.update(drafted=round(ngram["accepted"] / rate), accept_rate=rate)
    run = tmp_path / f"other-{src.name}"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(data))
    return run


def test_runs_of_several_machines_only_across_machines(cases_file: Path, tmp_path: Path, capsys) -> None:
    runs = [*CAL_RUNS, _on_another_machine(tmp_path, CAL_RUNS[0], 0.5800)]
    with pytest.raises(UserError, match="--across-machines"):
        _calibrate(cases_file, runs=runs)
    assert cases_file.read_text() == CASES
    assert _calibrate(cases_file, "--allow-unstable", "--across-machines", runs=runs) == 0
    out = capsys.readouterr().out
    assert "ngram: the machines differ (accept rate spread" in out  # 0.58 elsewhere: not this machine's flake
    ngram = _case(cases_file, "ngram")
    assert ngram["min_accept_rate"] == 0.55  # the other machine's 0.5800 - 0.03: a floor that holds on both
    assert "; " in ngram["calibration"]["device"] and "AMD EPYC 9654" in ngram["calibration"]["device"]
    assert ngram["calibration"]["runs"] == 4


def test_short_and_full_commit_are_the_same(cases_file: Path, tmp_path: Path) -> None:
    data = json.loads((CAL_RUNS[0] / "results.json").read_text())
    data["binary"]["commit"] = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert _calibrate(cases_file, "--allow-unstable", runs=[tmp_path, *CAL_RUNS[1:]]) == 0
    assert _case(cases_file, "ngram")["calibration"]["commit"] == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def test_bad_input(cases_file: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--tier"):
        calibrate.main(["--cases", str(cases_file)])
    with pytest.raises(UserError, match="unknown case or tier 'bogus'"):
        calibrate.main(["--cases", str(cases_file), "--tier", "bogus"])  # before any run starts
    with pytest.raises(UserError, match=r"no results\.json"):
        _calibrate(cases_file, runs=[tmp_path])
    with pytest.raises(UserError, match="cannot read cases file"):
        _calibrate(tmp_path / "missing.toml")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "results.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot read it as a JSON results file"):
        _calibrate(cases_file, runs=[broken])
    assert cases_file.read_text() == CASES


def _server_available() -> bool:
    if paths.server_binary().is_file():
        return True
    if os.environ.get("CI"):
        pytest.fail(f"CI: no llama-server at {paths.server_binary()} (the build must run first)")
    return False


@pytest.mark.slow
@pytest.mark.integration
def test_real_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs one case twice for real (a fresh server each, the real build) and calibrates a copy of cases.toml.

    A synthetic case (the tiny generated models with a drafting MTP head; the smoke tier's model runs in
    test_smoke and in one runner test only) keeps this inside CI's time; every tier is calibrated the
    same way, e.g. `nox -s calibrate -- --tier smoke`. The cases that were not run must keep their floors.
    """
    if not _server_available():
        pytest.skip(f"no llama-server at {paths.server_binary()} (set LLAMA_SERVER_BIN_PATH or build)")
    monkeypatch.setattr(paths, "RESULTS_DIR", tmp_path / "results")  # not the checkout's results/
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "history.sqlite"))
    name = "tiny-mtp-random"  # about half its drafts accepted: the floors move below what was measured
    cases = tmp_path / "cases.toml"
    shutil.copy(paths.CASES_FILE, cases)
    before = {c.name: c for c in load_cases(cases)}
    argv = ["--cases", str(cases), "--tier", "synthetic", "--runs", "2", "--allow-unstable", "-k", name]
    code = calibrate.main(argv)
    out = capsys.readouterr().out
    assert f"NOT CALIBRATED {name}" not in out, out
    after = {c.name: c for c in load_cases(cases)}
    mtp = after[name]
    assert mtp.calibration["runs"] == 2, out
    rate_min = mtp.calibration["accept_rate"]["min"]
    assert 0 < rate_min < 1, out
    assert mtp.min_accept_rate == pytest.approx(max(0.0, rate_min - 0.03), abs=2e-4)
    assert mtp.min_accept_len == pytest.approx(mtp.calibration["accept_len"]["min"] - 0.2, abs=2e-4)
    assert [c.min_accept_rate for c in after.values() if c.sweep_name == name] == [mtp.min_accept_rate] * 3
    for other, case in after.items():  # its sweep's members (-k selects them too) share its table's floors
        if case.tier == "synthetic" and case.sweep_name != name and not case.expect_no_drafts:  # no floors
            assert f"NOT CALIBRATED {other}" in out, out
            assert (case.min_accept_rate, case.min_accept_len) == (
                before[other].min_accept_rate,
                before[other].min_accept_len,
            )
    assert code == 0, out


def test_speed_floor_written_only_where_the_case_has_one_and_uncalibrated_cleared(tmp_path: Path) -> None:
    from specsuite.tools.calibrate import CaseCalibration, apply

    text = CASES.replace(
        "min_accept_len = 1.8\n", "min_accept_len = 1.8\nmin_speedup = 1.0\nuncalibrated = true\n", 1
    )
    cals = {
        "ngram": CaseCalibration("ngram", [0.8, 0.8], [2.0, 2.0], [2.5, 2.0], ["r1", "r2"]),
        "simple": CaseCalibration("simple", [0.9], [2.5], [3.0], ["r1"]),
    }
    new = apply(text, cals, {"commit": "abc", "device": "cpu"}, "2026-12-01")
    from specsuite.cases.schema import parse_cases

    by = {c.name: c for c in parse_cases(new)}
    assert by["ngram"].min_speedup == 1.6 and not by["ngram"].uncalibrated  # 2.0 - 20 %
    assert by["simple"].min_speedup is None  # no speed floor asked for: none written
    assert "speedup = {min = 2.0, max = 2.5, spread = 0.5}" in new


def test_a_sweeps_floors_are_written_once_into_its_table_holding_at_every_np(tmp_path: Path) -> None:
    """A sweep's members come from one [[case]] table: their runs calibrate it together, so the floors hold
    at np 1 and at every other np (a member that collapsed failed concurrency_collapse: not a usable run)."""
    from specsuite.tools.calibrate import CaseCalibration, apply, by_table

    text = CASES.replace("min_accept_len = 1.8\n", "min_accept_len = 1.8\nparallel = [1, 2, 4]\n", 1)
    members = {
        "ngram": CaseCalibration("ngram", [0.8, 0.8], [2.0, 2.0], [1.5, 1.4], ["r1", "r2"]),
        "ngram-np2": CaseCalibration("ngram-np2", [0.79, 0.8], [2.0, 1.9], [1.1, 1.0], ["r1", "r2"]),
        "ngram-np4": CaseCalibration("ngram-np4", [0.78], [1.95], [0.7], ["r1"], excluded=["r2: crashed"]),
        "simple": CaseCalibration("simple", [0.9], [2.5], [], ["r1"]),
    }
    tables = by_table(members, {"ngram-np2": "ngram", "ngram-np4": "ngram", "ngram": "ngram"})
    assert list(tables) == ["ngram", "simple"]
    assert (tables["ngram"].rates, tables["ngram"].run_ids) == ([0.8, 0.8, 0.79, 0.8, 0.78], ["r1", "r2"])
    assert tables["ngram"].runs == 2  # two runs, each holding the members
    assert tables["ngram"].excluded == ["ngram-np4: r2: crashed"]
    new = apply(text, tables, {"commit": "abc", "device": "cpu"}, "2026-12-01")
    by = {c.name: c for c in parse_cases(new)}
    assert [(n, c.min_accept_rate, c.min_accept_len) for n, c in by.items() if c.sweep_name] == [
        ("ngram", 0.75, 1.7), ("ngram-np2", 0.75, 1.7), ("ngram-np4", 0.75, 1.7)
    ]  # fmt: skip
    assert by["ngram"].min_speedup is None  # a sweep has no speed floor: the crossover is its speed rule


def test_upstreams_observations_are_kept_beside_ours(tmp_path: Path) -> None:
    """A compact case carries upstream's calibration in [case.calibration.upstream]: calibrating it on our
    runner adds our provenance next to it and leaves upstream's numbers as they were written."""
    from specsuite.tools.calibrate import CaseCalibration, apply

    upstream = '[case.calibration.upstream]\ndevice = "DGX Spark"\nruns = 3\naccept_len = 3.1230\n'
    text = CASES.replace("min_accept_len = 1.8\n", "min_accept_len = 1.8\n\n" + upstream, 1)
    new = apply(
        text,
        {"ngram": CaseCalibration("ngram", [0.8], [2.0], [], ["r1"])},
        {"commit": "c", "device": "d"},
        "x",
    )
    assert upstream in new  # byte for byte, 3.1230 included
    cal = _case_text(new, "ngram")["calibration"]
    assert cal["upstream"] == {"device": "DGX Spark", "runs": 3, "accept_len": 3.123}
    assert (cal["runs"], cal["run_ids"], cal["device"]) == (1, ["r1"], "d")
    from specsuite.cases.schema import parse_cases

    assert parse_cases(new)[0].min_accept_len == 1.8  # 2.0 - 0.2


def _case_text(text: str, name: str) -> dict:
    return next(c for c in tomlkit.parse(text).unwrap()["case"] if c["name"] == name)


def test_upstream_floors_are_upstreams_observations_minus_its_margins() -> None:
    """Each upstream case's floors are its recorded upstream observation minus 0.03 and 0.2, exactly."""
    upstream = [c for c in load_cases() if "upstream" in c.calibration]
    assert sorted(c.name for c in upstream) == ["dflash", "dflash2", "dspark", "eagle3", "lilicorr", "mtp"]
    for c in upstream:
        obs = c.calibration["upstream"]
        assert obs["runs"] == 3 and obs["device"] == "DGX Spark"
        assert obs["observed"].endswith(f"`{obs['accept_rate']:.4f} / {obs['accept_len']:.4f}`")
        assert c.min_accept_rate == round(obs["accept_rate"] - calibrate.RATE_MARGIN, 4), c.name
        assert c.min_accept_len == round(obs["accept_len"] - calibrate.LEN_MARGIN, 4), c.name
        if "drafts" in obs:  # DFlash's counts give its rate and length
            assert round(obs["accepted"] / obs["drafted"], 4) == obs["accept_rate"]
            assert round(1 + obs["accepted"] / obs["drafts"], 4) == obs["accept_len"]


def test_smoke_floors_are_the_recorded_calibration_runs(capsys) -> None:
    """Provenance: the smoke floors in cases.toml are what the three recorded real runs give, exactly."""
    from specsuite.common import paths

    runs = [DATA / f"smoke-real-cal-{i}" for i in (1, 2, 3, 4, 5, 6)]  # two machines, three runs each
    args = ["--tier", "smoke", "--dry-run", "--across-machines", "--cases", str(paths.CASES_FILE)]
    code = calibrate.main(["--from-results", *map(str, runs), *args])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "+min_accept" not in out and "-min_accept" not in out  # the floors would not change
    for line in out.splitlines():
        if line.endswith(")") and " run(s); accept rate " in line:
            assert line.split(":")[1].startswith(" 6 run(s)"), line  # every smoke case: six usable runs
    assert "UNSTABLE" not in out  # each machine's three runs agree exactly; the machines differ


def _runs_with_speedups(tmp_path: Path, name: str, speedups: list[float], tier: str = "smoke") -> list[Path]:
    """Copies of the three calibration fixtures with ``name``'s median speedup replaced, one per run, as
    runs of ``tier``."""
    out = []
    for src, speedup in zip(CAL_RUNS, speedups, strict=True):
        data = json.loads((src / "results.json").read_text())
        data["cases"][name]["speedup"] = speedup
        data["tier"] = data["selector"] = tier
        for rec in data["cases"].values():
            rec["tier"] = tier
        run = tmp_path / src.name
        run.mkdir()
        (run / "results.json").write_text(json.dumps(data))
        out.append(run)
    return out


@pytest.mark.parametrize(("tier", "floor", "clamped"), [("compact", 1.0, True), ("nightly", 1.0, True),
                                                         ("smoke", 0.88, False)])  # fmt: skip
def test_gpu_tier_speed_floor_never_goes_below_plain_decoding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tier: str, floor: float, clamped: bool
) -> None:
    text = CASES.replace('name = "ngram"\ntier = "smoke"', f'name = "ngram"\ntier = "{tier}"', 1)
    text = text.replace("min_accept_len = 1.8\n", "min_accept_len = 1.8\nmin_speedup = 1.2\n", 1)
    cases = tmp_path / "cases.toml"
    cases.write_text(text)
    runs = _runs_with_speedups(tmp_path, "ngram", [1.2, 1.1, 1.15], tier)  # slowest 1.1 - 20 % = 0.88
    assert _calibrate(cases, "--allow-unstable", "--tier", "ngram", runs=runs) == 0
    assert _case(cases, "ngram")["min_speedup"] == floor
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("  ngram: speedup 1.1000..1.2000 -> floor"))
    assert (f"CLAMPED to 1.0000 from 0.8800: on the {tier} tier" in line) is clamped, line
    load_cases(cases)


def test_calibrate_usage_names_the_console_script(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        calibrate.main(["--help"])
    assert capsys.readouterr().out.startswith("usage: specsuite calibrate ")


# --- --from-results trusts nothing (issue 19) ---------------------------------------------------------------


def _edited(tmp_path: Path, src: Path, name: str, edit: Any) -> Path:
    """A copy of a recorded run, changed by ``edit`` (a function of the parsed results.json)."""
    data = json.loads((src / "results.json").read_text())
    edit(data)
    run = tmp_path / name
    run.mkdir()
    (run / "results.json").write_text(json.dumps(data))
    return run


def _refused(cases: Path, runs: list[Path], needle: str, *extra: str) -> None:
    with pytest.raises(UserError) as exc:
        _calibrate(cases, "--allow-unstable", *extra, runs=runs)
    assert needle in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
    assert cases.read_text() == CASES  # nothing written


def test_the_same_run_twice_is_refused(cases_file: Path, tmp_path: Path) -> None:
    """Three copies of one run have spread 0: the instability check could never fire."""
    _refused(cases_file, [CAL_RUNS[0], CAL_RUNS[0], CAL_RUNS[1]], "run fixture-cal-1 is given twice")
    renamed = _edited(tmp_path, CAL_RUNS[0], "copy", lambda d: d.update(run_id="another-name"))
    _refused(cases_file, [CAL_RUNS[0], renamed, CAL_RUNS[1]], "another-name holds the same case records as")


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("accept_rate", -5.0, "accept_rate -5 is outside [0, 1]"),
        ("accept_rate", 1.5, "accept_rate 1.5 is outside [0, 1]"),
        ("accept_len", 0.5, "accept_len 0.5 is outside [1, n_max + 1 = 4]"),
        ("accept_len", 99.0, "accept_len 99 is outside [1, n_max + 1 = 4]"),
        ("speedup", -1.0, "speedup -1 is not a speed ratio > 0"),
    ],
)
def test_a_number_out_of_range_is_refused(
    cases_file: Path, tmp_path: Path, field: str, value: float, needle: str
) -> None:
    bad = _edited(tmp_path, CAL_RUNS[2], "bad", lambda d: d["cases"]["ngram"].update({field: value}))
    _refused(cases_file, [*CAL_RUNS[:2], bad], f"run fixture-cal-3: case 'ngram': {needle}")


def test_a_rate_its_counters_do_not_give_is_refused(
    cases_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stated rate in range but off the record's own counters is no measurement: calibrate refuses the
    run in one line (exit 2), as ``history import`` and ``merge`` do, before a floor comes from it."""
    from specsuite import cli
    from specsuite.common import errors

    bad = _edited(tmp_path, CAL_RUNS[2], "bad", lambda d: d["cases"]["ngram"].update(accept_rate=0.7))
    runs = [*CAL_RUNS[:2], bad]
    argv = ["calibrate", "--cases", str(cases_file), "--allow-unstable", "--from-results", *map(str, runs)]
    assert cli.main(argv) == errors.BAD_INPUT
    assert capsys.readouterr().err == (
        "error: calibrate: run fixture-cal-3: case 'ngram': accept_rate 0.7 disagrees with its counters: "
        "accepted 607 / drafted 965 = 0.629; not a measurement\n"
    )
    assert cases_file.read_text() == CASES  # nothing written


def test_runs_of_another_tier_are_refused(cases_file: Path, tmp_path: Path) -> None:
    synthetic = [
        _edited(tmp_path, r, f"s{i}", lambda d: d.update(tier="synthetic")) for i, r in enumerate(CAL_RUNS)
    ]
    _refused(
        cases_file, synthetic, "run fixture-cal-1 is of the synthetic tier, not smoke", "--tier", "smoke"
    )
    _refused(cases_file, [*CAL_RUNS[:2], synthetic[2]], "the runs are of several tiers (smoke, synthetic)")
    moved = _edited(tmp_path, CAL_RUNS[2], "moved", lambda d: d["cases"]["ngram"].update(tier="synthetic"))
    _refused(
        cases_file,
        [*CAL_RUNS[:2], moved],
        "case 'ngram' ran in the synthetic tier; cases.toml has it in smoke",
    )


def test_runs_of_another_cases_file_are_refused(cases_file: Path, tmp_path: Path) -> None:
    """A run measured a case otherwise than cases.toml says (its n_max, draft or target): another file's.
    (A cases file whose floors changed since is the same measurement: the sha256 alone does not refuse.)"""

    def n_max_4(d: dict) -> None:
        d["cases"]["ngram"]["n_max"] = 4

    runs = [*CAL_RUNS[:2], _edited(tmp_path, CAL_RUNS[2], "n4", n_max_4)]
    _refused(cases_file, runs, "case 'ngram' was measured with n_max 4; cases.toml has 3: a run of another")
    other = _edited(tmp_path, CAL_RUNS[2], "sum", lambda d: d.update(cases_sha256="1" * 64))
    assert _calibrate(cases_file, "--allow-unstable", runs=[*CAL_RUNS[:2], other]) == 0


def test_runs_of_another_binary_commit_are_refused(cases_file: Path, tmp_path: Path) -> None:
    other = _edited(tmp_path, CAL_RUNS[2], "o", lambda d: d["binary"].update(commit="1111111"))
    _refused(cases_file, [*CAL_RUNS[:2], other], "differ in llama.cpp commit")


def test_category_floors_are_written_by_the_same_rule() -> None:
    """A categorised case's floors per category: min over the runs minus the margins, for every category
    each run measured; the case then judges each category on its own counters."""
    from specsuite.results.record import CaseRecord, CategoryStats
    from specsuite.tools.calibrate import CaseCalibration, _collect_categories, apply

    cal = CaseCalibration("ngram", [0.8, 0.8], [2.0, 2.0], [], ["r1", "r2"])
    for rate, length in ((0.75, 3.3), (0.7, 3.25)):
        cats = {
            "words": CategoryStats(accept_rate=rate, accept_len=length),
            "digits": CategoryStats(accept_rate=1.0, accept_len=3.875),
            "empty": CategoryStats(),
        }  # fmt: skip  (drafted nothing: no floor)
        _collect_categories(cal, CaseRecord(name="ngram", categories=cats))
    prompts = '[{ id = "a", text = "x", category = "words" }, { id = "b", text = "y", category = "digits" }]'
    categorised = (
        f'[[prompt_set]]\nname = "c"\nprompts = {prompts}\n\n[[case]]\nname = "ngram"\nprompts = "c"'
    )
    text = CASES.replace('[[case]]\nname = "ngram"', categorised, 1)
    new = apply(text, {"ngram": cal}, {"commit": "abc", "device": "cpu"}, "2026-12-01")
    assert ("category_floors = {words = {min_accept_rate = 0.6700, min_accept_len = 3.0500}, "
            "digits = {min_accept_rate = 0.9700, min_accept_len = 3.6750}}") in new  # fmt: skip
    (case,) = [c for c in parse_cases(new) if c.name == "ngram"]
    assert case.category_floors["words"].min_accept_rate == 0.67
