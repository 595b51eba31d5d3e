"""specsuite.suite.plan: LPT shards from the history's durations, and ``specsuite plan``'s matrix."""

from __future__ import annotations

import itertools
import json
import random
import textwrap
from pathlib import Path

import pytest

from specsuite import cli
from specsuite.cases.schema import Case, load_cases, parse_case_file, select_cases
from specsuite.common.errors import UserError
from specsuite.history import recording
from specsuite.results.document import Binary, Device, Run
from specsuite.results.record import CaseRecord
from specsuite.suite import plan

DEVICE = "nvidia-h200"


def _cases(groups: dict[str, list[str]]) -> list[Case]:
    """Cases by target: {target: [case names]} (synthetic prompt set, any method)."""
    text = 'version = 1\n[[prompt_set]]\nname = "p"\nprompts = [{ id = "a", text = "x" }]\n'
    for target, names in groups.items():
        for name in names:
            text += textwrap.dedent(f"""
                [[case]]
                name = "{name}"
                tier = "nightly"
                target = "{target}"
                spec_type = "ngram-mod"
                n_max = 3
                prompts = "p"
                min_accept_rate = 0.1
                min_accept_len = 1.0
            """)
    return parse_case_file(text).cases


def _record(path: Path, walls: dict[str, float], *, started: str, device: str = DEVICE) -> None:
    """One recorded run (the history's own insert) whose cases took ``walls`` seconds."""
    cases = {n: CaseRecord(name=n, status="passed", wall_s=w, accept_rate=0.5) for n, w in walls.items()}
    run = Run(
        run_id=f"r-{started}",
        started=started,
        tier="nightly",
        cases_sha256="x",
        cases=cases,
        binary=Binary(commit="abc1234", backend="cuda"),
        device=Device(name=device, device_class=device),
    )
    row, problem = recording.try_record(run, path)
    assert row is not None, problem


def _brute_force(seconds: list[float], n: int) -> float:
    """The best split's longest shard, by trying every assignment."""
    best = float("inf")
    for assign in itertools.product(range(n), repeat=len(seconds)):
        loads = [0.0] * n
        for s, k in zip(seconds, assign, strict=True):
            loads[k] += s
        best = min(best, max(loads))
    return best


def test_lpt_is_within_grahams_bound_of_the_best_split_always() -> None:
    rng = random.Random(18)
    for _ in range(150):
        n = rng.randint(2, 4)
        seconds = [round(rng.uniform(1, 100), 1) for _ in range(rng.randint(n, 7))]
        groups = [plan.Group(f"t{i}", (f"c{i}",), s, 0) for i, s in enumerate(seconds)]
        longest = max(s.seconds for s in plan.lpt(groups, n))
        assert longest <= (4 / 3 - 1 / (3 * n)) * _brute_force(seconds, n) + 1e-9, (seconds, n)


def test_a_realistic_tier_from_recorded_durations_is_within_ten_percent_of_the_ideal(tmp_path: Path) -> None:
    """A nightly tier on an 8-GPU class: 14 targets of 1 to 3 cases, 40 s to 7 min each (GPU-like:
    a 4B target's case takes about a minute, a 70B one several), recorded over three nights."""
    rng = random.Random(1)
    groups = {f"model-{i}.gguf": [f"m{i}-{j}" for j in range(rng.randint(1, 3))] for i in range(14)}
    cases = _cases(groups)
    base = {c.name: rng.uniform(40, 420) for c in cases}
    history = tmp_path / "history.sqlite"
    for night in range(3):  # each night within 5 % of its case's typical time
        _record(
            history,
            {n: s * rng.uniform(0.95, 1.05) for n, s in base.items()},
            started=f"2026-11-0{night + 1}T02:17:00+00:00",
        )
    _record(history, dict.fromkeys(base, 5000.0), started="2026-11-04T02:17:00+00:00", device="nvidia-gb10")
    for shards in (2, 3, 4):
        p = plan.make_plan("nightly", shards, device_class=DEVICE, history=history, cases=cases)
        assert sum(g.estimated for s in p.shards for g in s.groups) == 0  # every case measured
        assert p.ideal < 5000  # the other class's durations were not taken
        assert p.longest <= 1.10 * p.ideal, plan.describe(p)
        for s in p.shards:  # a target's cases stay together
            assert all(set(g.cases) == set(groups[g.target]) for g in s.groups)
        assert sorted(n for s in p.shards for n in s.cases) == sorted(base)


def test_a_case_never_measured_is_estimated_from_its_models_size(tmp_path: Path) -> None:
    """The synthetic tier (its models.lock entries have sizes): two cases measured, the rest at the
    measured seconds per byte; a model the lock gives no size (the GPU tiers' unlocked ones) the minimum."""
    cases = select_cases(load_cases(), "synthetic")
    measured = {"tiny-simple-fixed": 20.0, "tiny-mtp-fixed": 30.0}
    history = tmp_path / "history.sqlite"
    _record(history, measured, started="2026-11-01T02:17:00+00:00")
    seconds = plan.durations(cases, measured)
    sizes = plan._model_bytes(cases)
    rate = (20.0 / sizes["tiny-simple-fixed"] + 30.0 / sizes["tiny-mtp-fixed"]) / 2  # the median of two
    assert seconds["tiny-simple-fixed"] == 20.0 and seconds["tiny-mtp-fixed"] == 30.0
    assert seconds["tiny-dflash-random"] == pytest.approx(
        max(plan.MIN_CASE_S, sizes["tiny-dflash-random"] * rate)
    )
    p = plan.make_plan("synthetic", 2, device_class=DEVICE, history=history)
    assert sum(g.estimated for s in p.shards for g in s.groups) == len(cases) - 2
    assert f"2 measured in the history, {len(cases) - 2} estimated from model size" in plan.describe(p)
    compact = select_cases(load_cases(), "compact")
    assert set(plan.durations(compact, {}).values()) == {plan.MIN_CASE_S}


def test_a_sweeps_members_are_planned_like_cases_in_one_shard_in_order(tmp_path: Path) -> None:
    """A sweep expands into its np values (one case each), which share their target's group: one shard,
    the np-1 member first (the reference of the others)."""
    p = plan.make_plan("synthetic", 3, history=tmp_path / "none.sqlite")
    members = ["tiny-mtp-random", "tiny-mtp-random-np2", "tiny-mtp-random-np4"]
    (shard,) = [s for s in p.shards if set(members) & set(s.cases)]
    assert [c for c in shard.cases if c in members] == members
    planned = sorted(c for s in p.shards for c in s.cases)
    assert planned == sorted(c.name for c in select_cases(load_cases(), "synthetic"))


def test_more_shards_than_targets_gives_one_shard_per_target(tmp_path: Path) -> None:
    p = plan.make_plan("compact", 5, history=tmp_path / "none.sqlite")
    assert len(p.shards) == 2 and p.asked == 5 and "5 shards asked" in plan.describe(p)


def test_an_equal_history_gives_the_same_plan_on_every_machine(tmp_path: Path) -> None:
    groups = {f"t{i}": [f"c{i}"] for i in range(6)}
    first = plan.lpt([plan.Group(t, (c[0],), 10.0, 0) for t, c in groups.items()], 3)
    again = plan.lpt([plan.Group(t, (c[0],), 10.0, 0) for t, c in reversed(groups.items())], 3)
    assert [s.cases for s in first] == [s.cases for s in again]


def test_shard_entries_of_a_saved_plan(tmp_path: Path) -> None:
    found = [
        {"class": "nvidia-h200", "shard": "1/2", "tier": "compact", "cases": "a"},
        {"class": "nvidia-h200", "shard": "2/2", "tier": "compact", "cases": "b"},
        {"class": "nvidia-gb10", "shard": "1/2", "tier": "compact", "cases": "c"},
        {"class": "", "shard": "2/2", "tier": "compact", "cases": "d"},
    ]
    assert plan.shard_entry(found, "compact", "1/2", "nvidia-gb10")["cases"] == "c"
    assert plan.shard_entry(found, "compact", " 2 / 2 ", "nvidia-h200")["cases"] == "b"
    assert plan.shard_entry(found, "compact", "2/2", "nvidia-a100")["cases"] == "d"  # no class: any
    with pytest.raises(UserError, match="the plan has no shard 1/2 of compact for device class nvidia-a100"):
        plan.shard_entry(found, "compact", "1/2", "nvidia-a100")
    for bad in ("3/2", "0/2", "2", "a/b", ""):
        with pytest.raises(UserError, match="give K/N with 1 <= K <= N"):
            plan.parse_shard(bad)
    (tmp_path / "p.json").write_text('{"matrix": []}')
    with pytest.raises(UserError, match="not a plan"):
        plan.read_plan(tmp_path / "p.json")


def test_plan_json_is_a_strategy_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "none.sqlite"))
    assert (
        cli.main(["plan", "synthetic", "--shards", "2", "--json", "--runs-on", '["self-hosted", "gpu"]']) == 0
    )
    out = capsys.readouterr()
    matrix = json.loads(out.out)
    assert list(matrix) == ["include"] and [e["shard"] for e in matrix["include"]] == ["1/2", "2/2"]
    assert all(
        e["labels"] == ["self-hosted", "gpu"] and e["name"] == f"any-{i}of2"
        for i, e in enumerate(matrix["include"], 1)
    )
    planned = [n for e in matrix["include"] for n in e["cases"].split(",")]
    assert sorted(planned) == sorted(c.name for c in select_cases(load_cases(), "synthetic"))
    assert "ideal (total" in out.err  # the human part goes to stderr with --json


def test_plan_for_several_device_classes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "none.sqlite"))
    runners = json.dumps(
        [
            {"class": "nvidia-h200", "runs-on": ["h200"], "shards": 2},
            {"class": "nvidia-gb10", "runs-on": ["spark"]},
        ]
    )
    assert (
        cli.main(["plan", "synthetic", "--json", "--runners", runners, "--out", str(tmp_path / "p.json")])
        == 0
    )
    include = json.loads(capsys.readouterr().out)["include"]
    assert [(e["class"], e["shard"], e["labels"]) for e in include] == [
        ("nvidia-h200", "1/2", ["h200"]),
        ("nvidia-h200", "2/2", ["h200"]),
        ("nvidia-gb10", "1/1", ["spark"]),
    ]
    assert plan.read_plan(tmp_path / "p.json") == include


@pytest.mark.parametrize(
    ("runners", "says"),
    [
        ("[{", "--runners: not JSON"),
        ("{}", "--runners: give a JSON list"),
        ('[{"class": "../x", "runs-on": ["a"]}]', "class '../x' is not a device class"),
        ('[{"class": "a", "runs-on": "gpu"}]', "class a: runs-on: give the runner labels as a JSON list"),
        ('[{"class": "a", "runs-on": ["x"], "shards": 0}]', "shards 0 is not a number from 1 to 256"),
        (
            '[{"class": "a", "runs-on": ["x"]}, {"class": "a", "runs-on": ["y"]}]',
            "a device class is named twice",
        ),
    ],
)
def test_bad_runners_are_one_line(runners: str, says: str, capsys) -> None:
    assert cli.main(["plan", "synthetic", "--runners", runners]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
