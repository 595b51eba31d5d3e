"""The crossover of a sweep (results.crossover) and its line in summary.md, on hand-made records."""

from __future__ import annotations

import pytest

from specsuite.results.crossover import Point, annotate, crossovers, pays_up_to
from specsuite.results.record import CaseRecord, Concurrency


def member(np: int, speedup: float | None, sweep: str = "dflash") -> CaseRecord:
    return CaseRecord(
        name=sweep if np == 1 else f"{sweep}-np{np}",
        method="draft-dflash",
        parallel=np,
        streams=np,
        sweep=sweep,
        concurrency=Concurrency(parallel=np, streams=np, speedup=speedup),
    )


@pytest.mark.parametrize(
    ("speedups", "up"),
    [
        ({1: 1.4, 2: 1.1, 4: 0.74}, 2),
        ({1: 1.4, 2: 1.1, 4: 1.02, 8: 1.01}, 8),  # pays at every np measured
        ({1: 0.9, 2: 1.2}, 0),  # not at np 1: what pays later does not count
        ({1: 1.3, 2: 0.9, 4: 1.1}, 1),  # a dip at np 2 ends it
        ({1: 1.3, 2: None, 4: 1.1}, 1),  # np 2 measured nothing: no claim beyond np 1
        ({1: 1.0, 2: 1.5}, 0),  # equal is not beating
        ({2: 1.5, 4: 1.2}, None),  # no np-1 member: nothing to start from
        ({1: None, 2: 1.5}, None),  # acceptance only
    ],
)
def test_pays_up_to_is_the_largest_np_with_every_smaller_one_paying(speedups: dict, up: int | None) -> None:
    assert pays_up_to([Point(n, s) for n, s in speedups.items()]) == up


@pytest.mark.parametrize(
    ("speedups", "line"),
    [
        (
            {1: 1.42, 2: 1.1, 4: 0.74},
            "dflash: pays up to np 2; at np 4 0.74x (np 1 1.42x · np 2 1.10x · np 4 0.74x)",
        ),
        ({1: 0.62, 2: 0.5}, "dflash: does not pay at np 1 (0.62x) (np 1 0.62x · np 2 0.50x)"),
        ({1: 1.5, 2: 1.2}, "dflash: pays up to np 2, the largest measured (np 1 1.50x · np 2 1.20x)"),
        ({1: 1.5, 2: None}, "dflash: pays up to np 1; np 2 not measured (np 1 1.50x · np 2 n/a)"),
        ({1: None}, "dflash: no crossover (no speed measured at np 1 in this run) (np 1 n/a)"),
    ],
)
def test_the_summary_line_says_where_speculation_stops_paying(speedups: dict, line: str) -> None:
    (found,) = crossovers(member(n, s) for n, s in speedups.items())
    assert found.line() == line


def test_sweeps_are_kept_apart_in_the_order_they_appear_and_annotated() -> None:
    recs = [
        member(1, 1.2, "mtp"),
        member(1, 1.5),
        member(2, 0.8, "mtp"),
        member(2, 1.1),
        CaseRecord(name="plain", concurrency=Concurrency(speedup=3.0)),  # no sweep: no crossover
    ]
    found = annotate(recs)
    assert [(c.sweep, c.pays_up_to) for c in found] == [("mtp", 1), ("dflash", 2)]
    assert [r.concurrency.crossover_np for r in recs if r.concurrency] == [1, 2, 1, 2, None]


@pytest.mark.parametrize("speed", [True, False])
def test_summary_md_prints_each_sweeps_crossover_or_why_not(speed: bool) -> None:
    from specsuite.results.document import Run, RunOptions
    from specsuite.results.summary import summary_markdown
    from specsuite.results.verdict import verdict

    recs = [member(1, 1.42), member(2, 1.1), member(4, 0.74)]
    for r in recs:
        r.status = "passed"
    run = Run(run_id="r", tier="synthetic", options=RunOptions(speed=speed), cases={r.name: r for r in recs})
    text = summary_markdown(run, verdict(run))
    line = (
        "- crossover dflash: pays up to np 2; at np 4 0.74x (np 1 1.42x · np 2 1.10x · np 4 0.74x)"
        if speed
        else "- crossover: not measured (acceptance only: cases shared the cores)"
    )
    assert line in text.splitlines()
