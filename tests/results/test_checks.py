"""results.checks: every run document under tests/data/results passes, and its stated rates are bound to its
counters (issue 47, item 4): a rate moved off what its counters give is refused, naming the field."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from testdata import DATA_ROOT

from specsuite.results.checks import run_problems
from specsuite.results.document import load_run

# the real runs and the hand-made fixture-* (tests/data/results/README.md): calibrate, history import and
# merge read both, so a fixture's typed-in rates are those its counters give too
DOCS = sorted((DATA_ROOT / "results").glob("*/results.json"))
MIDDLE = {"accept_rate": 0.5, "accept_len": 1.5, "pos0_rate": 0.5}  # moved toward it: still in range


@pytest.mark.parametrize("doc", DOCS, ids=[p.parent.name for p in DOCS])
def test_a_run_passes_and_a_rate_off_its_counters_does_not(doc: Path) -> None:
    run = load_run(doc)
    assert run_problems(run) == []
    moved = 0
    for name, rec in run.cases.items():
        for key, middle in MIDDLE.items():
            if (value := getattr(rec, key)) is None:
                continue
            off = msgspec.structs.replace(rec, **{key: value + 0.001 if value < middle else value - 0.001})
            problems = run_problems(msgspec.structs.replace(run, cases={name: off}))
            said = f"case {name!r}: {key} {getattr(off, key):g} disagrees with its counters: "
            assert any(p.startswith(said) for p in problems), (name, key, problems)
            moved += 1
    assert moved  # every run measured something
