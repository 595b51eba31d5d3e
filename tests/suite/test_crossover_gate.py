"""The crossover gate (``crossover_moved``) over a recorded history: a sweep that paid up to np 4 at one
commit and only up to np 2 at the next fails its np-4 member, where speculation stopped paying, when that
member's aggregate speedups are significantly below the baseline's; a move within the noise, or with too
few rounds to tell, is a warning. Records are real synthetic-tier records (tests/histories.py) made into a
sweep's members, their aggregate speedups set by hand."""

from __future__ import annotations

import copy
import statistics
from pathlib import Path

import histories
import pytest

from specsuite.history import recording
from specsuite.results.crossover import annotate
from specsuite.results.document import Run
from specsuite.results.record import Concurrency
from specsuite.suite import gate

SWEEP = "tiny-mtp-random"


def sweep_run(i: int, speedups: dict[int, list[float]]) -> Run:
    """Commit ``i``'s run of the sweep: a real record per member, with these aggregate speedups per round."""
    (doc,) = histories.history_docs([1.0] * (i + 1), speed_gated=False)[i:]
    real = doc["cases"][SWEEP]
    doc["cases"] = {}
    for np in speedups:
        name = SWEEP if np == 1 else f"{SWEEP}-np{np}"
        doc["cases"][name] = {
            **copy.deepcopy(real),
            "name": name,
            "parallel": np,
            "streams": np,
            "sweep": SWEEP,
        }
    run = histories.as_run(doc)
    for rec in run.cases.values():
        ups = speedups[rec.parallel]
        rec.concurrency = Concurrency(parallel=rec.parallel, speedups=ups, speedup=statistics.median(ups))
    return run


def judged(run: Run) -> dict[str, tuple[str | None, str | None, list[str]]]:
    """Each member judged in turn, as the session does (earlier members of this run at hand)."""
    ctx = gate.context(run, 0.05)
    assert not isinstance(ctx, str)
    out, done = {}, []
    for rec in run.cases.values():
        failures = gate.judge(ctx, rec, False, done)
        done.append(rec)
        out[rec.name] = (failures[0].reason if failures else None, failures[0].message if failures else None,
                         rec.warnings)  # fmt: skip
    return out


PAYS_TO_4 = {1: [1.5, 1.45, 1.52, 1.48], 2: [1.3, 1.28, 1.31, 1.33], 4: [1.1, 1.12, 1.09, 1.11]}


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "history.sqlite"
    monkeypatch.setenv("SPEC_HISTORY", str(path))
    base = sweep_run(0, PAYS_TO_4)
    assert [c.pays_up_to for c in annotate(base.cases.values())] == [4]  # as finish_run writes it
    assert recording.record_run(base, path) is not None
    return path


def test_a_crossover_that_moves_down_fails_the_member_where_it_stopped_paying(db) -> None:
    now = judged(sweep_run(1, {**PAYS_TO_4, 4: [0.74, 0.78, 0.76, 0.75]}))
    assert now[SWEEP][0] is None and now[f"{SWEEP}-np2"][0] is None
    reason, message, _ = now[f"{SWEEP}-np4"]
    assert reason == "crossover_moved"
    assert message.startswith(
        f"{SWEEP}: speculation paid up to np 4 at baseline {histories.commit(0)[:7]}, now up to np 2: at "
        "np 4 0.76x against 1.10x (aggregate speedup per round [0.74, 0.78, 0.76, 0.75] against "
        "[1.1, 1.12, 1.09, 1.11], Mann–Whitney p = 0.0143)"
    )


def test_a_move_within_the_noise_or_without_rounds_enough_is_a_warning(db) -> None:
    noisy = judged(sweep_run(1, {**PAYS_TO_4, 4: [0.99, 1.2, 0.98, 1.15]}))  # median 1.065 > 1: still pays
    assert noisy[f"{SWEEP}-np4"] == (None, None, [])
    close = judged(sweep_run(1, {**PAYS_TO_4, 4: [0.98, 1.13, 0.99, 0.97]}))  # below 1, not below 1.10
    reason, _, warnings = close[f"{SWEEP}-np4"]
    assert reason is None and warnings[-1].startswith(
        f"crossover moved: {SWEEP}: speculation paid up to np 4"
    )
    assert "not significant" in warnings[-1]
    few = judged(sweep_run(1, {1: [1.5, 1.5], 2: [1.3, 1.3], 4: [0.7, 0.7]}))
    reason, _, warnings = few[f"{SWEEP}-np4"]
    assert reason is None and warnings[-1].endswith("not gated: 2/4 rounds (the gate needs 4 a side)")


def test_a_crossover_that_moved_at_a_smaller_np_is_judged_there_once(db) -> None:
    now = judged(sweep_run(1, {1: PAYS_TO_4[1], 2: [0.8, 0.79, 0.81, 0.8], 4: [0.7, 0.71, 0.69, 0.7]}))
    assert now[f"{SWEEP}-np2"][0] == "crossover_moved"
    assert now[f"{SWEEP}-np4"][0] is None  # np 4 stopped paying because np 2 did: one failure, at np 2
