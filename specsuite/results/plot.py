"""Per-position acceptance plots: for each case, the rate at which draft position k was accepted.

One panel per case, one bar group per position, one bar per run (A against B, or a single run).
``specsuite plot RESULTS [RESULTS]`` draws one or two runs; ``specsuite compare`` draws A against B.
The PNG goes next to the last run's results.json as ``per_position.png``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from specsuite.common import atomic
from specsuite.common.argtypes import CommandParser
from specsuite.common.errors import UserError
from specsuite.results.document import Run, load_run, results_file
from specsuite.results.record import CaseRecord

COLS = 3
COLORS = ("#8c8c8c", "#1f77b4")  # A grey, B blue: the candidate stands out


def position_rates(rec: CaseRecord) -> list[float]:
    """Per-position acceptance: the record's per_position_rate, else accepted-at-k / drafts."""
    if rec.per_position_rate:
        return [r if r is not None else math.nan for r in rec.per_position_rate]
    if rec.per_position and rec.drafts and rec.drafts > 0:
        return [c / rec.drafts for c in rec.per_position]
    return []


def _panel(ax: Any, name: str, runs: list[tuple[str, dict[str, CaseRecord]]]) -> None:
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    series = [(label, recs.get(name)) for label, recs in runs]
    width = 0.8 / len(series)
    longest, handles = 0, []
    for i, (label, rec) in enumerate(series):
        rates = position_rates(rec) if rec else []
        color = COLORS[-len(series) + i]
        if not rates:  # keep the slot (A stays left of B in every panel) and say why in the legend
            handles.append(Patch(facecolor="none", edgecolor=color, label=f"{label}: {_absent(rec)}"))
            continue
        longest = max(longest, len(rates))
        xs = [k + 1 + (i - (len(series) - 1) / 2) * width for k in range(len(rates))]
        rate = rec.accept_rate if rec else None
        tag = f"{label}: rate {rate:.3f}" if isinstance(rate, (int, float)) else label
        handles.append(ax.bar(xs, rates, width=width, color=color, label=tag))
    ax.set_title(name, fontsize=10)
    ax.set_ylim(0, 1.25)  # headroom above 1.0 for the legend, so it never hides a bar
    ax.set_yticks([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_xlabel("draft position")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=handles, fontsize=7, loc="upper right", ncol=len(handles), frameon=False)
    if longest:
        ax.set_xlim(0.5, longest + 0.5)
        # ngram drafts run to 64 positions: let matplotlib thin the integer ticks
        ax.xaxis.set_major_locator(MaxNLocator(nbins=min(longest, 10), integer=True))
    else:
        ax.text(
            0.5, 0.45, "no per-position data", ha="center", va="center", fontsize=9, transform=ax.transAxes
        )
        ax.set_xticks([])


def _absent(rec: CaseRecord | None) -> str:
    if rec is None:
        return "not in this run"
    return f"{rec.status} ({rec.reason})" if rec.reason else str(rec.status)


def plot_per_position(runs: list[tuple[str, Run]], out: Path) -> Path:
    """Draw every case of the given runs (label, run) into one PNG at ``out``."""
    import matplotlib  # the optional `plot` extra: imported only when a plot is drawn

    matplotlib.use("Agg")  # files only: no display on a runner
    import matplotlib.pyplot as plt

    records = [(label, run.cases) for label, run in runs]
    names = list(dict.fromkeys(n for _, recs in reversed(records) for n in recs))
    cols = min(COLS, max(1, len(names)))
    nrows = max(1, math.ceil(len(names) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        _panel(ax, name, records)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("accepted fraction of drafts")
    title = " vs ".join(f"{label} {run.run_id or '?'}" for label, run in runs)
    fig.suptitle(f"per-position acceptance: {title}", fontsize=10)
    fig.tight_layout()
    return atomic.save_figure(fig, out)


def plot_runs(run_paths: list[str]) -> Path:
    """One run, or A against B: ``per_position.png`` next to the last run's results.json."""
    runs = [load_run(p) for p in run_paths]
    labels = ["A", "B"] if len(runs) == 2 else ["run"]
    return plot_per_position(
        list(zip(labels, runs, strict=True)), results_file(run_paths[-1]).parent / "per_position.png"
    )


def parser() -> CommandParser:
    p = CommandParser(
        "plot", "Per-position acceptance of one run, or of A against B, as a PNG next to the last run."
    )
    p.add_argument(
        "runs", nargs="+", metavar="RESULTS", help="one or two results/<run> folders or results.json"
    )
    return p


def main(argv: list[str]) -> int:
    p = parser()
    a = p.parse_args(argv)
    if len(a.runs) > 2:
        p.error("give one or two runs")
    try:
        print(plot_runs(a.runs))
    except ImportError as exc:
        raise UserError(
            f"plot needs matplotlib ({exc}), the optional `plot` extra: pip install -e '.[plot]'"
        ) from None
    return 0
