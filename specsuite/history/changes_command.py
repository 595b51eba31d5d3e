"""``changes``: the history's change points, per case and metric (the commits around each change, the means
before and after, how sure), with the configuration changes across them."""

from __future__ import annotations

import math
from pathlib import Path

from specsuite.common import table
from specsuite.common.argtypes import CommandParser
from specsuite.history import changes, queries, schema
from specsuite.history.command import DB_HELP, as_json_lines, check_names, existing_db
from specsuite.llamacpp.identity import short
from specsuite.results import metrics


def parser() -> CommandParser:
    p = CommandParser(
        "changes",
        "Change points in the history: per case and metric, the commits around each change, the means "
        "before and after, the relative change and its significance.",
    )
    p.add_argument("--case", help="only this case")
    p.add_argument(
        "--metric",
        help=f"a metric the relative gate judges: {', '.join(changes.METRICS)} (default: all)",
    )
    p.add_argument("--device", help="only this device (name or class)")
    p.add_argument("--json", action="store_true", help="print the change points as JSON")
    p.add_argument("--db", type=existing_db, help=DB_HELP)
    p.add_argument(
        "--mirror",
        type=Path,
        help="llama.cpp git mirror that orders commits (default: <cache>/llama.cpp/git)",
    )
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    return changes_command(
        path=a.db, case=a.case, metric=a.metric, device=a.device, mirror=a.mirror, as_json=a.json
    )


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
    fmt = f".{metrics.BY_NAME[c.metric].digits}f"
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
    if devices:
        check_names(case, cases, device, devices)
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
