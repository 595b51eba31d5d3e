"""Change points over histories built from real synthetic-tier results (tests/histories.py): a 20 % step, a
3 % a commit drift over six commits, and noise only; the ordering by ancestry; the statistics on their own.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import histories
import pytest
from histories import CASES, SHAPES, commit
from sitedata import git_commits

from specsuite import cli
from specsuite.common.errors import UserError
from specsuite.history import changes, queries, recording
from specsuite.history.ancestry import topo_positions
from specsuite.history.changes import ChangePoint, Point, find_changes
from specsuite.results import metrics

ACCEPTANCE = ("accept_rate", "accept_len", "pos0_rate")


def make_db(tmp_path: Path, accept: list[float], speed: list[float] | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "history.sqlite"
    recording.import_runs(histories.write(histories.history_docs(accept, speed), tmp_path / "runs"), db)
    return db


def at(found: list[ChangePoint], case: str, metric: str) -> list[ChangePoint]:
    return [c for c in found if c.case == case and c.metric == metric]


def test_the_real_runs_are_what_the_histories_are_made_of() -> None:
    docs = histories.real_docs()
    assert len(docs) >= 6
    for doc in docs:  # real runs of one commit of the CPU build, four rounds each
        assert doc["binary"]["commit"] == docs[0]["binary"]["commit"] and doc["binary"]["backend"] == "cpu"
        for name in CASES:
            rec = doc["cases"][name]
            assert rec["status"] == "passed" and len(rec["rounds"]) == 4 and not rec["nondeterministic"]
            assert rec["accepted"] == docs[0]["cases"][name]["accepted"]  # deterministic on one machine


def test_a_step_is_one_change_point_at_its_commit_on_every_acceptance_metric(tmp_path: Path) -> None:
    found = find_changes(make_db(tmp_path, SHAPES["step"]))
    for name in CASES:
        for metric in ACCEPTANCE:
            [c] = at(found, name, metric)
            assert (c.before_commit, c.after_commit, c.after_run_id) == (commit(5), commit(6), "h06")
            assert c.p_value is None  # counters: exact
            assert (c.runs_before, c.runs_after) == (6, 6)
            if metric == "accept_rate":
                assert c.change == pytest.approx(-0.2, abs=0.02)
        assert c.device_class.startswith("cpu-") and c.backend == "cpu"


def test_runs_bound_the_series_to_a_window(tmp_path: Path) -> None:
    """The site's window (its last runs): a step before it is no change point, one inside it still is."""
    db = make_db(tmp_path, SHAPES["step"])  # the step at run h06
    ids = {str(row["run_id"]) for row in queries.series(db)}
    assert find_changes(db, metric="accept_rate", runs={i for i in ids if i >= "h06"}) == []
    around = {i for i in ids if i >= "h04"}
    found = find_changes(db, metric="accept_rate", runs=around)
    assert {(c.after_run_id, c.runs_before, c.runs_after) for c in found} == {("h06", 2, 6)}


def test_a_speed_collapse_is_found_at_its_commit_and_a_20_percent_step_is_noise_here(tmp_path: Path) -> None:
    """Speed on this shared 2-core machine: the synthetic tier's tokens/s of one commit spreads by 2x to 8x
    between runs (and its speedup from 0.3 to 400: the tiny random targets stop early), so a 20 % step is
    inside the noise, and nothing is reported, nowhere. A collapse the size of llama.cpp #25908 (draft-simple
    937 -> 165 tokens/s, -82 %) stands out of it: one change point per case, at its commit."""
    quiet = find_changes(make_db(tmp_path / "step", histories.FLAT, SHAPES["step"]))
    assert [c for c in quiet if c.metric in ("decode_tps", "speedup")] == []
    collapse = [1.0] * 6 + [165 / 937] * 6
    found = find_changes(make_db(tmp_path / "collapse", histories.FLAT, collapse))
    assert sorted(c.case for c in found) == sorted(CASES)
    for c in found:
        assert (c.metric, c.after_commit, c.before_commit) == ("decode_tps", commit(6), commit(5))
        assert c.p_value is not None and c.p_value < changes.ALPHA and c.change < -0.7


def test_a_drift_is_a_change_point_at_every_commit_of_it(tmp_path: Path) -> None:
    found = find_changes(make_db(tmp_path, SHAPES["drift"]), metric="accept_rate")
    for name in CASES:
        points = at(found, name, "accept_rate")
        assert [c.after_commit for c in points] == [commit(i) for i in range(6, 12)]
        assert all(-0.06 < c.change < 0 for c in points)  # each step below the 5 % gate


def test_noise_alone_has_no_change_point(tmp_path: Path) -> None:
    assert find_changes(make_db(tmp_path, histories.FLAT)) == []


def test_filters_and_a_bad_metric(tmp_path: Path) -> None:
    db = make_db(tmp_path, SHAPES["step"])
    found = find_changes(db, case=CASES[0], metric="accept_len")
    assert [(c.case, c.metric) for c in found] == [(CASES[0], "accept_len")]
    assert find_changes(db, device="no-such-device") == []
    with pytest.raises(UserError, match="--metric 'drafted': choose one of accept_rate"):
        find_changes(db, metric="drafted")
    assert find_changes(tmp_path / "none.sqlite") == [] and not (tmp_path / "none.sqlite").exists()


def test_a_nondeterministic_case_is_judged_with_statistics(tmp_path: Path) -> None:
    docs = histories.history_docs(SHAPES["step"])
    for doc in docs:
        doc["cases"][CASES[0]]["nondeterministic"] = True
    db = tmp_path / "h.sqlite"
    recording.import_runs(histories.write(docs, tmp_path / "runs"), db)
    [c] = find_changes(db, case=CASES[0], metric="accept_rate")
    assert c.after_commit == commit(6) and c.p_value is not None and c.p_value < changes.ALPHA


# --- ordering by ancestry --------------------------------------------------------------------------------


def test_ancestry_orders_what_time_does_not(tmp_path: Path) -> None:
    """Twelve commits run in a shuffled order: with the mirror the step is at its commit, by time not."""
    repo = tmp_path / "llama.cpp"
    shas = git_commits(repo, 12)
    docs = histories.run_out_of_order(histories.history_docs(SHAPES["step"]), shas)
    db = tmp_path / "h.sqlite"
    recording.import_runs(histories.write(docs, tmp_path / "runs"), db)

    [c] = find_changes(db, case=CASES[0], metric="accept_rate", mirror=repo)
    assert (c.before_commit, c.after_commit) == (shas[5], shas[6])
    by_time = find_changes(db, case=CASES[0], metric="accept_rate", mirror=tmp_path / "no-mirror")
    assert len(by_time) > 1  # in time order the two levels interleave

    assert topo_positions(repo, [shas[3][:7], shas[0]]) == {shas[3][:7]: 3, shas[0]: 0}
    assert topo_positions(repo, [shas[0], "0123456789abcdef"]) is None  # one commit it lacks: no order
    assert topo_positions(tmp_path / "nothing", shas) is None


# --- the statistics on their own -------------------------------------------------------------------------


def pts(values: list[float], per_commit: int = 1) -> list[Point]:
    return [Point(f"r{i}", f"{i // per_commit:07x}", "", v) for i, v in enumerate(values)]


def test_a_split_falls_between_commits_never_inside_one() -> None:
    # three runs of each commit; the noisy runs of commit 1 straddle the level of commit 0
    values = [1.0, 1.01, 0.99, 1.0, 0.8, 1.02, 0.8, 0.81, 0.79, 0.8, 0.82, 0.78]
    found = changes.splits(pts(values, 3), "speedup")
    assert all(s.index % 3 == 0 for s in found)


def test_noise_rarely_makes_a_change_point() -> None:
    rng = random.Random(1)
    series = [[1 + rng.gauss(0, 0.03) for _ in range(30)] for _ in range(100)]
    hits = sum(bool(changes.splits(pts(s), "speedup")) for s in series)
    assert hits <= 4  # ALPHA 0.01 per stretch tested: about 1 in 100 noise-only series


def test_one_outlier_run_is_not_a_change_point() -> None:
    values = [1.0 + 0.01 * (i % 3) for i in range(12)]
    values[7] = 0.5  # a run on a machine that was busy
    assert changes.splits(pts(values), "speedup") == []


def test_a_change_from_zero() -> None:
    assert changes.relative(0.0, 0.5) == math.inf and changes.relative(0.0, 0.0) == 0.0
    [s] = changes.splits(pts([0.0] * 4 + [0.5] * 4), "accept_rate")
    assert s.change == math.inf
    c = ChangePoint("c", "accept_rate", "d", "b", "a", "b", "r", 0.0, 0.5, s.change, None)
    assert c.as_dict()["change"] is None  # JSON has no infinity


# --- the command -----------------------------------------------------------------------------------------


def test_changes_command_prints_a_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = make_db(tmp_path, SHAPES["step"])
    assert cli.main(["changes", "--db", str(db), "--case", CASES[0]]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{CASES[0]}\n") and commit(6)[:10] in out
    assert re.search(r"accept_rate .* 0\.8571 +0\.6857 +-20\.0 % +exact", out), out  # 6600 -> 5280 of 7700
    assert cli.main(["changes", "--db", str(db), "--json", "--metric", "accept_rate"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["case"] for r in rows} == set(CASES) and {r["after_commit"] for r in rows} == {commit(6)}
    assert cli.main(["changes", "--db", str(db), "--case", "nope"]) == 2
    assert "no case 'nope' in the history" in capsys.readouterr().err


def test_changes_on_no_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "h.sqlite"))  # the default, not recorded yet
    assert cli.main(["changes"]) == 0
    assert "no runs recorded yet" in capsys.readouterr().out
    assert not (tmp_path / "h.sqlite").exists()


@pytest.mark.parametrize("command", ["changes", "history", "report"])
def test_an_explicit_db_that_does_not_exist_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A --db named on purpose and mistyped must not read as an empty history (or build an empty site)."""
    missing = tmp_path / "h.sqllite"
    assert cli.main([command, "--db", str(missing)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"specsuite {command}: error: argument --db: {missing} does not exist: name a history database, or "
        "leave --db out for the default (SPEC_HISTORY, else history.sqlite in the per-user cache)"
    )
    assert not missing.exists()


def test_the_real_tier_run_counts_every_round(tmp_path: Path) -> None:
    """The synthetic tier once, for real: every case's rounds recorded; the n-gram cache learns in round 1."""
    from testdata import DATA_ROOT

    from specsuite.results.document import load_run

    run = load_run(DATA_ROOT / "results" / "synthetic-tier-real")
    assert len(run.cases) == 26 and all(len(r.rounds) == 4 for r in run.cases.values())
    learning = {
        n for n, r in run.cases.items() if len({(c.accepted, tuple(c.per_position)) for c in r.rounds}) > 1
    }
    assert learning == {
        "tiny-auto-mtp",
        "tiny-mtp-ngram",
        "tiny-chain-mtp",
        "tiny-auto-plain",
        "tiny-auto-drafter",
    }
    for name in learning:
        rec = run.cases[name]
        assert not rec.nondeterministic and rec.spec_type in (
            "ngram-mod,draft-mtp",
            "default",
        )  # default: ngram-mod
        assert rec.rounds[1] == rec.rounds[2] == rec.rounds[3] != rec.rounds[0]
        assert rec.accepted == rec.rounds[0].accepted  # the first round is the one reported
    db = tmp_path / "h.sqlite"
    assert recording.import_runs([DATA_ROOT / "results" / "synthetic-tier-real"], db) == ["syn-2"]
    assert find_changes(db) == []  # one run: nothing to compare


def test_a_step_in_per_block_overhead_is_a_change_point_and_an_impossible_speed_no_point() -> None:
    """block_ratio is a noisy series like the speedup: judged by permutation; a run whose speed was
    physically impossible (implausible_speed) gives no point to any speed series, its acceptance still."""
    rows = [{"run_id": f"r{i}", "commit": f"{i:07x}", "started": f"2026-12-0{1 + i // 9}T{i % 9:02d}",
             "speed_repeat": 4, "accept_rate": 0.6, "speedup": 1.0, "nondeterministic": False,
             "block_ratio": (3.4 if i < 8 else 6.8) + 0.01 * (i % 3), "implausible_speed": i == 3}
            for i in range(16)]  # fmt: skip
    assert "block_ratio" in changes.METRICS and "block_ratio" not in changes.DETERMINISTIC
    assert [p.run_id for p in changes.points_of(rows, "block_ratio")] == [
        f"r{i}" for i in range(16) if i != 3
    ]
    assert len(changes.points_of(rows, "accept_rate")) == 16
    [split] = changes.splits(changes.points_of(rows, "block_ratio"), "block_ratio")
    assert split.index == 7 and split.p_value is not None and split.p_value < changes.ALPHA  # r8, r3 left out
    assert split.change == pytest.approx(1.0, abs=0.01)


# --- the permutation test: stopped once its decision is settled ------------------------------------------


def _series(rng: random.Random, n: int, shift: float) -> list[float]:
    return [(1.0 - shift if i >= n // 2 else 1.0) * rng.uniform(0.9, 1.1) for i in range(n)]


def test_ranks_are_scipys() -> None:
    from scipy import stats

    rng = random.Random(5)
    for n in (1, 2, 7, 200):
        values = [float(rng.randint(0, 5)) for _ in range(n)]  # many ties
        assert list(changes.ranks_of(values)) == list(stats.rankdata(values))


def test_the_early_stop_keeps_every_decision_and_every_p_below_alpha() -> None:
    """The same seeded reshuffles counted to the end (alpha 1.0 never settles early) and stopped early: the
    same decision at alpha in every series, the same p wherever it is below alpha; a stopped p is >= alpha."""
    import numpy as np

    rng, decided = random.Random(7), []
    for i in range(60):
        values = _series(rng, 30 + i, shift=[0.0, 0.04, 0.08, 0.3][i % 4])
        ranks, ks = changes.ranks_of(values), np.arange(1, len(values))
        full = changes.permutation_p(ranks, ks, 1.0)
        early = changes.permutation_p(ranks, ks, changes.ALPHA)
        assert (early < changes.ALPHA) == (full < changes.ALPHA)
        assert early == full if full < changes.ALPHA else early >= changes.ALPHA
        decided.append(full < changes.ALPHA)
    assert 10 < sum(decided) < 50  # both decisions were tested


def test_the_p_value_is_scipys_permutation_test() -> None:
    """The statistic and its counting as scipy.stats.permutation_test has them (other reshuffles: the two
    estimates of one p agree within their Monte Carlo error)."""
    import numpy as np
    from scipy import stats

    rng = random.Random(11)
    for shift in (0.0, 0.03, 0.06):
        values = _series(rng, 40, shift)
        ranks, ks = changes.ranks_of(values), np.arange(1, 40)
        ours = changes.permutation_p(ranks, ks, 1.0)
        theirs = stats.permutation_test(
            (np.zeros(40), ranks),
            lambda _, r, axis=-1, ks=ks: changes._scan(r, ks),
            permutation_type="pairings",
            vectorized=True,
            n_resamples=changes.RESAMPLES,
            alternative="greater",
            rng=np.random.default_rng(1),
        ).pvalue
        assert abs(ours - theirs) < 0.05, (shift, ours, theirs)


@pytest.mark.parametrize(("column", "value"), [("block_ratio", "fast"), ("speed_repeat", "lots")])
def test_text_in_a_number_column_skips_the_row_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: str
) -> None:
    """A hand-edited history (round five): a text where the change points read a number was a TypeError,
    exit 3, in `changes`, `report` and a live run's drift gate."""
    import sqlite3

    db = make_db(tmp_path, SHAPES["step"])
    with sqlite3.connect(db) as conn:  # a registered metric is a key of the case's metrics JSON (schema v8)
        if column in metrics.BY_NAME:
            conn.execute(
                f"UPDATE cases SET metrics = json_set(metrics, '$.{column}', ?) WHERE run = 1", (value,)
            )
        else:
            conn.execute(f"UPDATE cases SET {column} = ? WHERE run = 1", (value,))
    assert cli.main(["changes", "--db", str(db), "--case", CASES[0]]) == 0
    err = capsys.readouterr().err
    assert f"warning: skipping a broken history row of {CASES[0]!r} in run h00: {column} is {value!r}" in err
    rows = queries.series(db, case=CASES[0])
    assert "h00" not in {r["run_id"] for r in rows} and len(rows) == 11
