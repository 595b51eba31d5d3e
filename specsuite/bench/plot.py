"""bench.png: decode tokens/s per mode, the median as a bar and the range over the rounds as error bars.

matplotlib is the optional ``plot`` extra and is imported only here, when a chart is drawn: without it the
bench still writes its table and JSON, and says how to get the chart.
"""

from __future__ import annotations

from pathlib import Path

from specsuite.bench.measure import ModeRun
from specsuite.bench.report import off_median, speedup
from specsuite.common import atomic

NO_MATPLOTLIB = "note: no bench.png: matplotlib is not installed (`python3 -m pip install 'specsuite[plot]'`)"
COLORS = {"off": "#8c8c8c", "auto": "#d62728"}  # the baseline grey, auto red, every other mode blue
OTHER = "#1f77b4"


def _label(run: ModeRun) -> str:
    return f"{run.mode}\n(= {run.shares_with})" if run.shares_with else run.mode


def _note(run: ModeRun, base: float | None) -> str:
    """Above each bar: the speedup over off, or why there is no bar."""
    if not run.measurement.ok:
        status = run.measurement.status
        return status if status == "interrupted" else f"{status}:\n{run.measurement.reason}"
    up = speedup(run, base)
    return f"{up:.2f}x" if up is not None else ""


def plot_bench(runs: list[ModeRun], title: str, out: Path) -> Path | None:
    """Draw the chart into ``out`` (written whole or not at all); None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display on a runner
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    meds = [r.measurement.median or 0.0 for r in runs]
    lows = [min(r.measurement.tps) if r.measurement.ok else m for r, m in zip(runs, meds, strict=True)]
    highs = [max(r.measurement.tps) if r.measurement.ok else m for r, m in zip(runs, meds, strict=True)]
    xs = list(range(len(runs)))
    fig, ax = plt.subplots(figsize=(1.6 * len(runs) + 2.0, 4.2))
    errs = [
        [m - lo for m, lo in zip(meds, lows, strict=True)],
        [h - m for m, h in zip(meds, highs, strict=True)],
    ]
    bars = ax.bar(xs, meds, yerr=errs, capsize=6, color=[COLORS.get(r.mode, OTHER) for r in runs])
    for patch, run in zip(bars, runs, strict=True):
        if run.shares_with:  # the same server's numbers drawn twice: hatched, so it reads as a repeat
            patch.set_hatch("//")
            patch.set_alpha(0.55)
    top = max([*highs, 1e-9])
    base = off_median(runs)
    for x, run, h in zip(xs, runs, highs, strict=True):
        ax.text(x, h + 0.02 * top, _note(run, base), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, [_label(r) for r in runs], fontsize=8)
    ax.set_ylim(0, top * 1.2)
    ax.set_ylabel("decode tokens/s (median; bars: min-max of the rounds)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return atomic.save_figure(fig, out)
