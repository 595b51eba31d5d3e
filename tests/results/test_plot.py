"""Per-position acceptance plots: one run and A against B, read back as images."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib import image
from testdata import DATA_ROOT

from specsuite.common.errors import UserError
from specsuite.results.document import load_run
from specsuite.results.plot import plot_per_position, plot_runs, position_rates
from specsuite.results.record import decode_record

DATA = DATA_ROOT / "results"


def test_position_rates_from_counts_when_rates_absent() -> None:
    def rates(data: dict) -> list[float]:
        return position_rates(decode_record("c", data))

    assert rates({"per_position": [40, 15, 5], "drafts": 40}) == [1.0, 0.375, 0.125]
    assert rates({"per_position_rate": [0.5, 0.25]}) == [0.5, 0.25]
    assert rates({"per_position": [], "drafts": 0}) == []
    assert rates({"per_position": [3], "drafts": None}) == []
    assert rates({}) == []


def test_two_runs(tmp_path: Path) -> None:
    runs = [("A", load_run(DATA / "fixture-base")), ("B", load_run(DATA / "fixture-regressed"))]
    out = plot_per_position(runs, tmp_path / "per_position.png")
    img = image.imread(out)
    # 4 cases (B's three, then "dropped" from A) -> 2 rows of 3 panels at 110 dpi
    assert img.shape[0] == round(3.2 * 2 * 110) and img.shape[1] == round(4.2 * 3 * 110)
    assert not list(tmp_path.glob(".*tmp*"))


def test_single_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "fixture-cal-2", run)  # "simple" was skipped: a panel saying why
    assert plot_runs([str(run)]) == run / "per_position.png"
    assert image.imread(run / "per_position.png").shape[1] == round(4.2 * 3 * 110)


def test_bad_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"no results\.json"):
        plot_runs([str(tmp_path / "nope")])
