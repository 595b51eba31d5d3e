"""The gates' error rates from runs of one commit: false alarms, speed spread, the smallest drop caught; and
calibrate printing them."""

from __future__ import annotations

import math
import random

import histories
import pytest

from specsuite.results.document import Run
from specsuite.results.record import BlockCost, CaseRecord, SpeedSamples
from specsuite.tools import gatecheck
from specsuite.tools.calibrate import main as calibrate_main


def test_spread_separates_rounds_from_runs() -> None:
    rng = random.Random(5)
    runs = []
    for _ in range(40):  # run means with CV 4 %, rounds around them with CV 2 %
        mean = 1 + rng.gauss(0, 0.04)
        runs.append([mean * (1 + rng.gauss(0, 0.02)) for _ in range(6)])
    within, between = gatecheck.spread(runs)
    assert within == pytest.approx(0.02, rel=0.15) and between == pytest.approx(0.04, rel=0.25)
    assert gatecheck.spread([[1.0, 1.1]]) is None  # one run says nothing about runs


def test_the_smallest_drop_caught_grows_with_the_noise_and_shrinks_with_the_rounds() -> None:
    quiet = gatecheck.smallest_drop(0.01, 0.0, 4, 0.05, sims=500)
    noisy = gatecheck.smallest_drop(0.05, 0.0, 4, 0.05, sims=500)
    more = gatecheck.smallest_drop(0.05, 0.0, 10, 0.05, sims=500)
    assert quiet is not None and noisy is not None and more is not None
    assert 0.05 < quiet < noisy and more < noisy  # never below rtol: the gate also wants the drop itself
    assert gatecheck.smallest_drop(0.01, 0.0, 2, 0.05) is None  # 2 rounds: speed is not gated at all
    # the goal: CV 3 % per round at --repeat 4 catches a 10 % drop in 95 % of comparisons
    assert gatecheck.power(0.10, 0.03, 0.0, 4, 0.05, 2000) >= 0.95


def test_runs_of_one_commit_raise_no_acceptance_alarm() -> None:
    runs = [histories.as_run(d) for d in histories.history_docs(histories.FLAT)]
    checks = {c.name: c for c in gatecheck.check(runs, list(histories.CASES), 0.05, 10)}
    for name, c in checks.items():
        assert c.pairs == len(runs) * (len(runs) - 1) // 2, name
        assert [c.false_alarms[m] for m in ("accept_rate", "accept_len", "pos0_rate")] == [0, 0, 0]
        assert c.windows == len(runs) - 2 and c.repeat == 4
        assert c.cv_within is not None and c.cv_within > 0 and math.isfinite(c.cv_within)
    text = gatecheck.render(list(checks.values()), 0.05)
    assert text.startswith(f"gate check: {sum(c.pairs for c in checks.values())} comparisons")


def test_an_injected_step_is_counted_as_an_alarm() -> None:
    docs = histories.history_docs([1.0, 1.0, 1.0, 0.8])
    runs = [histories.as_run(d) for d in docs]
    [c] = gatecheck.check(runs, ["tiny-mtp-random"], 0.05, 10)
    assert c.false_alarms["accept_rate"] == 3  # the last run against each of the three before it
    assert c.drift_alarms >= 1


def test_calibrate_reports_the_gate_check(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    files = histories.write(histories.real_docs()[:3], tmp_path / "runs")  # three runs of one commit
    cases = tmp_path / "cases.toml"
    from specsuite.common import paths

    cases.write_text(paths.CASES_FILE.read_text())
    calibrate_main(["--from-results", *map(str, files), "--cases", str(cases), "--dry-run"])
    out = capsys.readouterr().out
    assert "gate check: " in out and " comparisons of runs of one commit" in out
    assert "tiny-mtp-random" in out and "drop caught 95 %" in out


def _run(ratios: list[float]) -> Run:
    rec = CaseRecord(name="wide", status="passed", accept_rate=1.0, accept_len=3.875,
                     blocks=BlockCost(ratios=list(ratios)))  # fmt: skip
    return Run(cases={"wide": rec})


def test_per_block_overhead_alarms_and_spread_are_counted_at_its_own_rtol() -> None:
    """Three runs of one commit, then one whose blocks cost 40 % more: caught against each earlier run at
    the 20 % block rtol, never at 60 %; the spread of the block ratios is reported like the speedup's."""
    runs = [_run([3.4, 3.5, 3.45, 3.42]), _run([3.5, 3.38, 3.44, 3.47]), _run([3.41, 3.46, 3.5, 3.43])]
    [same] = gatecheck.check(runs, ["wide"], 0.05, 10)
    assert same.false_alarms["block_ratio"] == 0 and same.block_cv_within is not None
    assert 0 < same.block_cv_within < 0.02
    dear = [*runs, _run([4.8, 4.85, 4.9, 4.82])]
    [c] = gatecheck.check(dear, ["wide"], 0.05, 10)
    assert c.false_alarms["block_ratio"] == 3 and c.pairs == 6
    assert gatecheck.check(dear, ["wide"], 0.05, 10, block_rtol=0.6)[0].false_alarms["block_ratio"] == 0
    header = "false alarms (rate/len/pos0/speedup/tps/block/tokens/prefill/ttft)"  # the registry's gated ones
    assert header in gatecheck.render([c], 0.05) and list(c.false_alarms) == list(gatecheck.GATED)


def test_a_cases_own_speed_rtol_is_the_tolerance_its_speedup_is_checked_at() -> None:
    """Nine runs, then three whose rounds are 12 % slower: alarms at rtol 5 %, in the relative gate and in
    the drift gate; none at the case's own speed_rtol of 15 % (cases.toml)."""

    def run(scale: float) -> Run:
        ups = [round(x * scale, 4) for x in (1.25, 1.26, 1.24, 1.25)]
        rec = CaseRecord(name="wide", status="passed", accept_rate=1.0, accept_len=3.875, speedup=ups[0],
                         speed=SpeedSamples(repeat=4, speedups=list(ups), speedup_median=ups[0]))  # fmt: skip
        return Run(cases={"wide": rec})

    runs = [run(1.0)] * 9 + [run(0.88)] * 3
    [c] = gatecheck.check(runs, ["wide"], 0.05, 12)
    assert c.false_alarms["speedup"] == 27 and c.drift_alarms >= 1  # each slow run against the nine
    [c] = gatecheck.check(runs, ["wide"], 0.05, 12, speed_rtols={"wide": 0.15})
    assert c.false_alarms["speedup"] == 0 and c.drift_alarms == 0
