"""``history``: the recorded runs, the latest at a glance, then one table per case over commits (its
columns explained), as text, JSON or a trend plot; ``history import``: finished runs into it; ``history
forget``: runs out of it. (``changes``, its change points: history.changes_command.)"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsuite.cases.schema import suggest
from specsuite.common import atomic, table
from specsuite.common.argtypes import CommandParser, positive_int
from specsuite.common.errors import UserError
from specsuite.history import forget, queries, recording, schema
from specsuite.llamacpp.identity import short
from specsuite.results import metrics
from specsuite.results.names import names_phrase

SHOWN = metrics.in_table("history")  # the registry's metrics a row of `history` shows
HEADER = ("commit", "date", "device", "backend", "status", *(m.label for m in SHOWN))
PLOT_METRICS = tuple((m.name, m.label) for m in SHOWN if m.name in ("accept_rate", "accept_len", "speedup"))
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
        *(_num(row.get(m.name), f".{m.digits}f") + _implausible(m, row) for m in SHOWN),
    ]


def _implausible(m: metrics.Metric, row: dict[str, Any]) -> str:
    """A speed of a run whose speed was physically impossible is marked (measure.plausible)."""
    return " IMPLAUSIBLE" if m.plausible and row.get("implausible_speed") else ""


# What each column of the case tables means, by its header (both spellings a header has had); a column
# not here is plain (commit, date, device, backend, status). tests/history/test_report.py checks HEADER.
EXPLAINED = {
    "accept rate": "draft tokens accepted / drafted (the cold pass's counters)",
    "accept len": "tokens per verification step: 1 + accepted / drafts",
    "accept length": "tokens per verification step: 1 + accepted / drafts",
    "pos0": "position 0: the share of drafts whose first token was accepted",
    "position-0 rate": "the share of drafts whose first token was accepted",
    "speedup": "decode tokens/s with speculation / without, median of the rounds (IMPLAUSIBLE: faster than "
    "its accept length allows, not judged)",
    "block x token": "what one verification block (draft + verify) costs, in plain decode steps: ms per "
    "block / the plain server's ms per token",
    "block cost": "what one verification block (draft + verify) costs, in plain decode steps",
    "prefill": "prompt tokens/s with speculation / without (below 1: the drafter slows the prompt down)",
}
PLAIN_COLUMNS = {"commit", "date", "device", "backend", "status"}
LATEST = 5  # runs in the view at a glance
LATEST_HEADER = ("started", "run", "llama.cpp", "device/backend", "tier", "cases")
_FAILED = ("failed", "error", "interrupted")


def legend(header: Sequence[str]) -> str:
    """``columns: pos0 = …`` lines for the columns of ``header`` that need saying."""
    lines = [f"  {name}: {EXPLAINED[name]}" for name in header if name in EXPLAINED]
    return "columns:\n" + "\n".join(lines) if lines else ""


def latest_runs(rows: Sequence[dict[str, Any]], shown: int = LATEST) -> str:
    """The newest ``shown`` runs of ``rows`` at a glance, newest first: when, which llama.cpp on what, and
    how their cases ended (the failing ones named)."""
    runs: dict[str, dict[str, Any]] = {}
    for row in rows:
        run = runs.setdefault(row["run_id"], {"row": row, "ended": {}})
        run["ended"].setdefault(row["status"], []).append(row["case"])
    newest = sorted(runs.items(), key=lambda kv: (str(kv[1]["row"]["started"] or ""), kv[0]), reverse=True)
    body = [_latest_cells(run_id, run["row"], run["ended"]) for run_id, run in newest[:shown]]
    more = f"{len(body)} of {len(runs)} runs" if len(runs) > len(body) else f"all {len(runs)} run(s)"
    return f"latest runs, newest first ({more})\n{table.render(LATEST_HEADER, body)}"


def _latest_cells(run_id: str, row: dict[str, Any], ended: dict[str, list[str]]) -> list[str]:
    """A run's line: ``1 failed (ngram), 7 passed``, the failing statuses first, each naming its cases."""
    order = sorted(ended, key=lambda k: (k not in _FAILED, k != "passed", str(k)))
    counts = ", ".join(
        f"{len(ended[k])} {k}" + (f" ({names_phrase(ended[k])})" if k in _FAILED else "") for k in order
    )
    return [
        str(row["started"] or "")[:16].replace("T", " "),
        run_id,
        short(row["commit"], 7),
        f"{row['device_class']}/{row['backend']}",
        str(row.get("tier") or "—"),
        counts,
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


DB_HELP = (
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
        "Runs recorded in the history database: the latest at a glance, a table per case over commits, or a "
        "plot.\n`specsuite history import RESULTS.json...` enters finished runs, `specsuite history forget "
        "RUN-ID...` takes runs out (see their --help).",
    )
    p.add_argument("--case", help="only this case")
    p.add_argument("--device", help="only this device (name or class)")
    p.add_argument("--last", type=positive_int, help="only the last N runs")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="also draw the trend of each case")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--db", type=existing_db, help=DB_HELP)
    return p


def main(argv: list[str]) -> int:
    if argv[:1] == ["import"]:
        return import_main(argv[1:])
    if argv[:1] == ["forget"]:
        return forget_main(argv[1:])
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
    p.add_argument("--db", type=Path, help=DB_HELP)
    return p


def import_main(argv: list[str]) -> int:
    a = import_parser().parse_args(argv)
    return import_command(a.files, a.db)


def forget_parser() -> CommandParser:
    p = CommandParser(
        "history forget",
        "Take runs out of the history by run id (a fake binary's run, a misconfigured machine's), all or "
        "nothing; says what each was. `specsuite report` then builds the site without them.",
    )
    p.add_argument("run_ids", nargs="+", metavar="RUN-ID", help="run ids, as `specsuite history` lists them")
    p.add_argument("--dry-run", action="store_true", help="say what would go, take nothing out")
    p.add_argument("--db", type=existing_db, help=DB_HELP)
    return p


def forget_main(argv: list[str]) -> int:
    a = forget_parser().parse_args(argv)
    return forget_command(a.run_ids, a.db, dry_run=a.dry_run)


def forget_command(run_ids: Sequence[str], path: Path | None, *, dry_run: bool = False) -> int:
    """``history forget``: one line per run taken out (or that would be), then the total and what next."""
    target = Path(path) if path is not None else schema.default_path()
    gone = forget.forget_runs(run_ids, target, dry_run=dry_run)
    verb = "would forget" if dry_run else "forgot"
    for run in gone:
        print(f"{verb} {run.line()}")
    if dry_run:
        print(f"{len(gone)} run(s) would be taken out of {target}; nothing was (--dry-run)")
        return 0
    left = len(queries.runs(target))
    site = "`specsuite report` builds the site without them"
    print(f"{len(gone)} run(s) taken out of {target}, {left} left; {site}")
    return 0


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
    check_names(case, cases, device, devices)
    rows = queries.case_rows(target, case=case, device=device, last=last)
    if not rows:
        print(f"no runs of case {case!r} on device {device!r} in {target}")
        return 0
    if as_json:
        print(as_json_lines(rows))
    else:
        glance = [] if case is not None else [latest_runs(rows)]  # one case: its table is the glance
        print("\n\n".join([*glance, legend(HEADER), render_tables(rows)]))
    if plot is not None:
        print(f"plot: {plot_trend(rows, Path(plot))}", file=sys.stderr)  # stdout stays pure JSON
    return 0


def check_names(case: str | None, cases: list[str], device: str | None, devices: list[str]) -> None:
    """A case or device filter the history does not hold: one line, the nearest name when one is close."""
    if case is not None and case not in cases:
        raise UserError(f"no case {case!r} in the history{suggest(case, cases)}")
    if device is not None and device.lower() not in {d.lower() for d in devices}:
        raise UserError(f"no device {device!r} in the history{suggest(device, devices)}")


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
