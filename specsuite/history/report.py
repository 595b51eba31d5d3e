"""``history``: the recorded runs, one table per case over commits, as text, JSON or a trend plot;
``history import``: finished runs into it; ``changes``: its change points."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsuite.common import atomic, table
from specsuite.common.argtypes import CommandParser, positive_int
from specsuite.common.errors import UserError
from specsuite.history import changes, queries, recording, schema
from specsuite.llamacpp.identity import short

HEADER = ("commit", "date", "device", "backend", "status", "accept rate", "accept len", "pos0", "speedup",
          "block x token")  # fmt: skip
PLOT_METRICS = (("accept_rate", "accept rate"), ("accept_len", "accept len"), ("speedup", "speedup"))
MAX_TICKS = 24
LEGEND_ROWS = 30  # cases per legend column


def _num(value: Any, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _cells(row: dict[str, Any]) -> list[str]:
    status = f"{row['status']} ({row['reason']})" if row["reason"] else str(row["status"])
    return [
        row["commit"][:7],
        str(row["started"] or "")[:16].replace("T", " "),
        row["device"],
        row["backend"],
        status,
        _num(row["accept_rate"], ".4f"),
        _num(row["accept_len"], ".4f"),
        _num(row["pos0_rate"], ".4f"),
        _num(row["speedup"], ".3f") + (" IMPLAUSIBLE" if row.get("implausible_speed") else ""),
        _num(row.get("block_ratio"), ".3f"),
    ]


def render_tables(rows: Sequence[dict[str, Any]]) -> str:
    """One titled table per case (rows come grouped by case, oldest first)."""
    groups: dict[str, list[list[str]]] = {}
    for row in rows:
        groups.setdefault(row["case"], []).append(_cells(row))
    return "\n\n".join(f"{name}\n{table.render(HEADER, body)}" for name, body in groups.items())


def as_json_lines(rows: Sequence[dict[str, Any]]) -> str:
    """A JSON list with one row per line: readable, diffable, and twice as fast as indenting each key."""
    return "[\n" + ",\n".join(json.dumps(row) for row in rows) + "\n]"


_DB_HELP = (
    "database (default: SPEC_HISTORY, else ~/.cache/specsuite/history.sqlite; SPEC_CACHE_DIR moves the cache)"
)


def existing_db(text: str) -> Path:
    """``--db`` of a command that reads the history: a file named on purpose must be there (a typo must not
    read as an empty history)."""
    path = Path(text).expanduser()
    if not path.is_file():
        why = "is not a file" if path.exists() else "does not exist"
        raise argparse.ArgumentTypeError(
            f"{text} {why}: name a history database, or leave --db out for the default (SPEC_HISTORY, "
            "else history.sqlite in the per-user cache)"
        )
    return path


def parser() -> CommandParser:
    p = CommandParser(
        "history",
        "Runs recorded in the history database: a table per case over commits, or a plot.\n"
        "`specsuite history import RESULTS.json...` enters finished runs (see its --help).",
    )
    p.add_argument("--case", help="only this case")
    p.add_argument("--device", help="only this device (name or class)")
    p.add_argument("--last", type=positive_int, help="only the last N runs")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="also draw the trend of each case")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--db", type=existing_db, help=_DB_HELP)
    return p


def main(argv: list[str]) -> int:
    if argv[:1] == ["import"]:
        return import_main(argv[1:])
    a = parser().parse_args(argv)
    return history_command(path=a.db, case=a.case, device=a.device, last=a.last, plot=a.plot, as_json=a.json)


def import_parser() -> CommandParser:
    p = CommandParser(
        "history import",
        "Enter finished runs into the history, once each (by run id), checked as strictly as a live run's "
        "record; all or nothing: one refused file (one error line each) enters none of them.",
    )
    p.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="RESULTS.json",
        help="results.json files or results/<run> folders",
    )
    p.add_argument("--db", type=Path, help=_DB_HELP)
    return p


def import_main(argv: list[str]) -> int:
    a = import_parser().parse_args(argv)
    return import_command(a.files, a.db)


def changes_parser() -> CommandParser:
    p = CommandParser(
        "changes",
        "Change points in the history: per case and metric, the commits around each change, the means "
        "before and after, the relative change and its significance.",
    )
    p.add_argument("--case", help="only this case")
    p.add_argument(
        "--metric",
        help="accept_rate, accept_len, pos0_rate, speedup, decode_tps or block_ratio (per-block overhead: "
        "what a verification block costs in plain decode steps) (default: all)",
    )
    p.add_argument("--device", help="only this device (name or class)")
    p.add_argument("--json", action="store_true", help="print the change points as JSON")
    p.add_argument("--db", type=existing_db, help=_DB_HELP)
    p.add_argument(
        "--mirror",
        type=Path,
        help="llama.cpp git mirror that orders commits (default: <cache>/llama.cpp/git)",
    )
    return p


def changes_main(argv: list[str]) -> int:
    a = changes_parser().parse_args(argv)
    return changes_command(
        path=a.db, case=a.case, metric=a.metric, device=a.device, mirror=a.mirror, as_json=a.json
    )


def history_command(
    *,
    path: Path | None,
    case: str | None,
    device: str | None,
    last: int | None,
    plot: Path | None,
    as_json: bool,
) -> int:
    """Print the history (``last``: the newest N runs); ``plot``: also draw the trend PNG there. Exit code.

    An empty or absent history is one line and exit 0 (the file is not created); an unknown case or
    device filter, a bad ``last`` or an unreadable file is a UserError saying what exists or what to do.
    """
    target = Path(path) if path is not None else schema.default_path()
    if last is not None and last < 1:
        raise UserError(f"--last {last}: give a number of runs, 1 or more")
    if plot is not None:
        _pyplot()  # before any output: without matplotlib, the one message and nothing else
    cases, devices = queries.names(target)
    if not devices:  # no file, or no run in it
        if as_json:
            print("[]")  # --json output stays parseable; the explanation goes to stderr
        note = f"no runs recorded yet in {target}: every suite run records itself there when it ends"
        print(note, file=sys.stderr if as_json else sys.stdout)
        return 0
    if case is not None and case not in cases:
        raise UserError(f"no case {case!r} in the history; it has: {', '.join(cases)}")
    if device is not None and device.lower() not in {d.lower() for d in devices}:
        raise UserError(f"no device {device!r} in the history; it has: {', '.join(devices)}")
    rows = queries.case_rows(target, case=case, device=device, last=last)
    if not rows:
        print(f"no runs of case {case!r} on device {device!r} in {target}")
        return 0
    print(as_json_lines(rows) if as_json else render_tables(rows))
    if plot is not None:
        print(f"plot: {plot_trend(rows, Path(plot))}", file=sys.stderr)  # stdout stays pure JSON
    return 0


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend; imported only for a plot (it is the optional extra)."""
    try:
        import matplotlib
    except ImportError:
        raise UserError(
            "--plot needs matplotlib, the optional `plot` extra: pip install -e '.[plot]'"
        ) from None
    matplotlib.use("Agg")  # files only: no display on a runner
    import matplotlib.pyplot as plt

    return plt


def plot_trend(rows: Sequence[dict[str, Any]], out: Path) -> Path:
    """Accept rate, accept length and speedup over runs in time order, one line per case, into a PNG."""
    plt = _pyplot()
    order = sorted({(r["started"] or "", r["run_id"], r["commit"]) for r in rows})
    x_of = {(t, run): i for i, (t, run, _) in enumerate(order)}
    fig, axes = plt.subplots(
        len(PLOT_METRICS), 1, figsize=(min(30.0, max(8.0, len(order) * 0.12)), 9), sharex=True
    )
    for ax, (key, label) in zip(axes, PLOT_METRICS, strict=True):
        for name in dict.fromkeys(r["case"] for r in rows):
            pts = [(x_of[(r["started"] or "", r["run_id"])], r[key]) for r in rows if r["case"] == name]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker=".", label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    step = max(1, len(order) // MAX_TICKS)
    ticks = list(range(0, len(order), step))
    axes[-1].set_xticks(ticks, [order[i][2][:7] for i in ticks], rotation=60, fontsize=7)
    axes[-1].set_xlabel("llama.cpp commit (runs in time order)")
    fig.suptitle("specsuite history", fontsize=10)
    fig.tight_layout()
    # One legend for the figure, beside the axes: a tier has dozens of cases, and a legend inside the first
    # axes would squeeze the plots to strips. Columns of at most LEGEND_ROWS; saved with a tight box.
    handles, labels = axes[0].get_legend_handles_labels()
    ncol = max(1, -(-len(labels) // LEGEND_ROWS))
    fig.legend(
        handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), ncol=ncol, frameon=False
    )
    return _save(fig, out)


def _save(fig: Any, out: Path) -> Path:
    try:
        return atomic.save_figure(fig, out, bbox_inches="tight")  # the legend beside the axes is kept
    except OSError as exc:
        raise UserError(f"cannot write the plot to {out} ({exc}); give a writable .png path") from None


# --- change points ---------------------------------------------------------------------------------------

CHANGE_HEADER = (
    "metric",
    "device",
    "before",
    "after (first run)",
    "mean before",
    "mean after",
    "change",
    "p",
)


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _change_cells(c: changes.ChangePoint) -> list[str]:
    fmt = ".3f" if c.metric in ("speedup", "decode_tps", "block_ratio") else ".4f"
    change = f"{c.change * 100:+.1f} %" if math.isfinite(c.change) else ("new" if c.change > 0 else "—")
    return [
        c.metric,
        f"{c.device_class}/{c.backend}",
        f"{short(c.before_commit, 10)} ({_runs(c.runs_before)})",
        f"{short(c.after_commit, 10)} ({c.after_run_id}, {_runs(c.runs_after)})",
        format(c.mean_before, fmt),
        format(c.mean_after, fmt),
        change,
        "exact" if c.p_value is None else f"{c.p_value:.3g}",
    ]


def changes_command(
    *,
    path: Path | None,
    case: str | None,
    metric: str | None,
    device: str | None,
    mirror: Path | None,
    as_json: bool,
) -> int:
    """Print every change point (one table per case, or JSON); exit 0, also when there is none."""
    target = Path(path) if path is not None else schema.default_path()
    changes.check_metric(metric)
    cases, devices = queries.names(target)
    if case is not None and cases and case not in cases:
        raise UserError(f"no case {case!r} in the history; it has: {', '.join(cases)}")
    if device is not None and devices and device.lower() not in {d.lower() for d in devices}:
        raise UserError(f"no device {device!r} in the history; it has: {', '.join(devices)}")
    found = changes.find_changes(target, case=case, metric=metric, device=device, mirror=mirror)
    configs = changes.config_changes(target, device=device, mirror=mirror)
    if as_json:
        rows = [{**c.as_dict(), "config_changes": changes.across(c, configs)} for c in found]
        print(as_json_lines(rows) if rows else "[]")
        return 0
    if not devices:
        print(f"no runs recorded yet in {target}: every suite run records itself there when it ends")
    elif not found:
        print(f"no change point in {target}" + (f" for case {case!r}" if case else ""))
    groups: dict[str, list[changes.ChangePoint]] = {}
    for c in found:
        groups.setdefault(c.case, []).append(c)
    if groups:
        print("\n\n".join(f"{name}\n{_change_table(points, configs)}" for name, points in groups.items()))
    if configs:
        print(f"\nconfiguration changes\n{table.render(CONFIG_HEADER, [_config_cells(c) for c in configs])}")
    return 0


CONFIG_HEADER = ("device", "before", "after (first run)", "what changed")


def _config_cells(c: changes.ConfigChange) -> list[str]:
    between = f" between {short(c.before_commit, 7)} and {short(c.after_commit, 7)}"
    what = "; ".join(line.removesuffix(between) for line in c.changes)
    return [
        f"{c.device_class}/{c.backend}",
        short(c.before_commit, 10),
        f"{short(c.after_commit, 10)} ({c.after_run_id})",
        what,
    ]


def _change_table(points: list[changes.ChangePoint], configs: list[changes.ConfigChange]) -> str:
    """The change points of one case; under a row, the configuration changes across it (beside it)."""
    lines = table.render(CHANGE_HEADER, [_change_cells(c) for c in points]).splitlines()
    out = lines[:2]
    for line, point in zip(lines[2:], points, strict=True):
        out.append(line)
        out += [f"  configuration across it: {what}" for what in changes.across(point, configs)]
    return "\n".join(out)


def import_command(files: Sequence[Path], path: Path | None) -> int:
    """``history import``: enter finished runs; one line per run entered, one for the total."""
    target = Path(path) if path is not None else schema.default_path()
    try:
        entered = recording.import_runs(files, target)
    except recording.Refused as exc:  # one error line for each refused file, the last one raised
        for line in exc.lines[:-1]:
            print(f"error: {line}", file=sys.stderr)
        raise UserError(exc.lines[-1]) from None
    for run_id in entered:
        print(f"entered {run_id}")
    left = len(files) - len(entered)
    tail = f"; {left} already there (a run is entered once, by its run id)" if left else ""
    print(f"{len(entered)} of {len(files)} run(s) entered into {target}{tail}")
    return 0
