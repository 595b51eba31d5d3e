"""summary.md: the verdict and what weakens it, the history line, the binary, and one row per case; and
its copy in ``$GITHUB_STEP_SUMMARY`` (a job summary on Actions)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from specsuite.common import atomic, table
from specsuite.results.document import Run
from specsuite.results.record import CaseRecord, is_finite
from specsuite.results.verdict import Verdict

SUMMARY_COLUMNS = (
    "case", "status", "reason", "accept rate (floor)", "accept len (floor)", "speedup (floor)", "identical",
)  # fmt: skip


def _vs(value: Any, floor: Any, fmt: str = ".4f") -> str:
    if not is_finite(value):
        return "–"
    return f"{value:{fmt}}" + (f" (≥ {floor:{fmt}})" if is_finite(floor) else "")


def _row(r: CaseRecord) -> list[str]:
    fl = r.floors
    return [
        r.name,
        str(r.status),
        r.reason or "",
        _vs(r.accept_rate, fl.get("min_accept_rate")),
        _vs(r.accept_len, fl.get("min_accept_len")),
        _vs(r.speedup, fl.get("min_speedup"), ".3f"),
        _vs(r.identical_fraction, fl.get("min_identical_fraction"), ".2f"),
    ]


def summary_markdown(run: Run, v: Verdict) -> str:
    b = run.binary
    lines = [f"### specsuite {run.tier} run `{run.run_id}`: {v.headline}", ""]
    lines += [f"- **{a}**" for a in v.attention]
    if run.history is not None and run.history.line:
        lines.append(f"- {run.history.line}")
    if run.parts:
        lines.append(f"- merged from {len(run.parts)} shard(s): {', '.join(run.parts)}")
    lines += [
        "",
        f"binary: `{b.path}` commit `{b.commit}` backend `{b.backend}` on {run.device_name}; "
        f"wall {run.wall_s} s",
        "",
        table.render(SUMMARY_COLUMNS, [_row(r) for r in run.cases.values()], markdown=True),
    ]
    return "\n".join(lines) + "\n"


def write_summary(run: Run, v: Verdict, results_dir: Path) -> Path:
    """summary.md (the suite writes it once, when its session ends)."""
    out = Path(results_dir) / "summary.md"
    atomic.write_text(out, summary_markdown(run, v))
    return out


def append_step_summary(summary: Path) -> None:
    """Append a run's summary.md to $GITHUB_STEP_SUMMARY, when set (a job summary on Actions)."""
    if target := os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(summary.read_text(encoding="utf-8") + "\n")
