"""The gates against history over whole histories of real synthetic-tier runs (tests/histories.py): each run
judged as a live run is (``gate.judge`` on every case, against the history so far), then recorded; its
verdict and summary.md as the session writes them. A drift of 3 % a commit turns the run red that has lost
more than rtol, naming the commit; a 20 % step is the relative gate's (``regressed``) and red once; noise is
green. The acceptance counters are compared with the baseline's exactly.

Speed is left out of these histories (one round per run: the gates judge speed only from 3 rounds on): on
this shared 2-core machine the synthetic tier's speedup of one commit spreads from 0.3 to 400 between runs
(the tiny random targets stop early, so their baseline's tokens/s is a handful of tokens), and the relative
gate's speed false alarms on it would hide what is tested here. Those false alarms are counted for real by
the gate check (tests/tools/test_gatecheck.py) and benchmarks/bench_gate.py."""

from __future__ import annotations

from pathlib import Path

import histories
import pytest
from histories import CASES, SHAPES, commit

from specsuite.history import recording
from specsuite.results.document import Run
from specsuite.results.summary import summary_markdown
from specsuite.results.verdict import verdict
from specsuite.suite import gate


def docs(shape: list[float]) -> list[dict]:
    return histories.history_docs(shape, speed_gated=False)


def judge_in_turn(docs: list[dict], db: Path, monkeypatch: pytest.MonkeyPatch, window: int = 10) -> list[Run]:
    """Every run judged against the history before it, then recorded, as the suite does."""
    monkeypatch.setenv("SPEC_HISTORY", str(db))
    out = []
    for doc in docs:
        run = histories.as_run(doc)
        ctx = gate.context(run, 0.05, window)
        assert not isinstance(ctx, str)
        for rec in run.cases.values():
            rec.status, rec.reason, rec.message, rec.baseline, rec.drift = "passed", None, None, None, None
            if failures := gate.judge(ctx, rec):
                rec.status, rec.reason = "failed", failures[0].reason
                rec.message = "\n".join(f.message for f in failures)
        assert recording.record_run(run, db) is not None
        out.append(run)
    return out


def reasons(runs: list[Run], case: str) -> list[str | None]:
    return [r.cases[case].reason for r in runs]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.sqlite"


def test_a_drift_turns_the_run_red_that_lost_more_than_rtol_naming_the_commit(db, monkeypatch) -> None:
    runs = judge_in_turn(docs(SHAPES["drift"]), db, monkeypatch)
    for name in CASES:
        # every single step (3 %) is below rtol: the relative gate passes them all; the drift gate turns the
        # run red that has lost more than rtol (the third step), and the last one, rtol later again
        assert reasons(runs, name) == [None] * 8 + ["drifted", None, None, "drifted"]
        first, last = runs[8].cases[name], runs[11].cases[name]
        assert first.drift is not None and last.drift is not None
        assert (first.drift.before_commit, first.drift.after_commit) == (commit(5), commit(6))
        assert (first.drift.metric, first.drift.p_value, first.drift.runs) == ("accept_rate", None, 9)
        assert first.drift.change == pytest.approx(-0.059, abs=0.002)
        assert f"first commit after the change point {commit(6)[:12]} (run h06)" in str(first.message)
        # the second window starts at the first red run: the drift since then
        assert (last.drift.after_commit, last.drift.runs) == (commit(10), 4)
    v = verdict(runs[8])
    assert not v.green and v.headline.startswith("FAILED: 4 of 4 case(s): tiny-simple-random (drifted)")
    head = summary_markdown(runs[8], v).splitlines()[:6]
    line = (
        "- **DRIFTED tiny-simple-random: accept_rate -5.9 % over the last 9 runs; first commit after the "
        f"change point `{commit(6)[:12]}` (run h06), last before it `{commit(5)[:12]}`"
    )
    assert any(h.startswith(line) for h in head), head


def test_a_step_is_regressed_once_and_never_drifted(db, monkeypatch) -> None:
    runs = judge_in_turn(docs(SHAPES["step"]), db, monkeypatch)
    for name in CASES:
        got = reasons(runs, name)
        assert got[6] == "regressed" and "drifted" not in got, got
        assert got[7:] == [None] * 5  # the baseline and the drift window move on with the red run
        assert runs[6].cases[name].baseline.commit == commit(5)


def test_noise_alone_stays_green(db, monkeypatch) -> None:
    runs = judge_in_turn(docs(histories.FLAT), db, monkeypatch)
    assert all(verdict(r).green for r in runs)
    for run in runs[1:]:
        for rec in run.cases.values():  # the counters of one commit on one machine: exactly the same
            assert rec.baseline is not None and rec.baseline.counters == "identical"


def test_the_counters_are_compared_exactly_even_within_rtol(db, monkeypatch) -> None:
    made = docs([1.0, 0.97])  # 3 %: within rtol, and still a different token count
    runs = judge_in_turn(made, db, monkeypatch)
    rec = runs[1].cases["tiny-simple-random"]
    assert rec.status == "passed"
    before, after = made[0]["cases"]["tiny-simple-random"], made[1]["cases"]["tiny-simple-random"]
    assert (before["accepted"], after["accepted"]) == (6600, 6402)  # 66 of 77 tokens, magnified
    assert rec.baseline.counters == (
        "accepted 6600 → 6402 (−198); position 0: 2400 → 2328 (−72); position 1: 2300 → 2231 (−69); "
        "position 2: 1900 → 1843 (−57)"
    )
    assert "| tiny-simple-random | passed |" in summary_markdown(runs[1], verdict(runs[1]))


def test_a_shorter_window_judges_fewer_runs(db, monkeypatch) -> None:
    runs = judge_in_turn(docs(SHAPES["drift"]), db, monkeypatch, window=3)
    for name in CASES:
        d = runs[-1].cases[name].drift
        assert d is None or d.runs <= 3
