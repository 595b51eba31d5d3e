"""What ``specsuite bench`` says: the table (bench.md), every number (bench.json), and the auto verdict.

Pure functions of the measured rows; nothing here starts a server. The PNG is bench_plot's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsuite.bench.measure import INTERRUPTED, ModeRun
from specsuite.common import table
from specsuite.server.resolver import Resolution

DASH = "—"  # a number that was not measured (off not run, nothing drafted, a failed server)
HEADER = (
    "mode",
    "resolved",
    "why",
    "tok/s (median)",
    "spread (max-min)",
    "speedup vs off",
    "accept rate",
    "accept len",
    "note",
)


@dataclass(frozen=True)
class BenchContext:
    """The facts of the run every report repeats: what ran, on what, and how."""

    run_id: str
    model: str
    sha256: str  # the verified model file's
    binary: str
    commit: str | None
    backend: str | None
    gpu: bool
    prompts: str
    n_prompts: int
    n_predict: int
    repeat: int
    drafter: str | None = None  # a separate MTP drafter's lock name
    drafter_sha256: str | None = None  # ... and its verified file's


def resolved_label(res: Resolution) -> str:
    """The spec type a mode resolved to, as a user would name it."""
    if res.spec_type is None:
        return "none"
    return "--spec-default" if res.spec_type == "default" else res.spec_type


def short_flags(res: Resolution) -> str:
    """The resolved flags in short: the spec type, its draft length and ngram-mod's match/min/max."""
    values = {f: v for f, v in zip(res.flags, res.flags[1:], strict=False) if f.startswith("--")}
    parts = [resolved_label(res)]
    if drafter := values.get("--model-draft"):
        parts.append(f"drafter {Path(drafter).name}")
    if n := values.get("--spec-draft-n-max") or values.get("--draft-max"):
        parts.append(f"n_max {n}")
    knobs = [values.get(f"--spec-ngram-mod-n-{k}") for k in ("match", "min", "max")]
    if all(knobs):
        parts.append(f"ngram {'/'.join(str(k) for k in knobs)}")
    return ", ".join(parts)


def off_median(runs: list[ModeRun]) -> float | None:
    off = next((r for r in runs if r.mode == "off"), None)
    return off.measurement.median if off is not None else None


def speedup(run: ModeRun, base: float | None) -> float | None:
    """Median tokens/s over off's median: None when either was not measured."""
    med = run.measurement.median
    return med / base if med is not None and base else None


def _fmt(value: float | None, spec: str) -> str:
    return DASH if value is None else format(value, spec)


def _times(up: float | None) -> str:
    return DASH if up is None else f"{up:.2f}x"


def interrupted_in(runs: list[ModeRun]) -> str | None:
    """The mode Ctrl-C or SIGTERM ended the bench in; None when every mode ran to its end."""
    return next((r.mode for r in runs if r.measurement.status == INTERRUPTED and not r.shares_with), None)


def _note(run: ModeRun) -> str:
    notes = []
    if run.measurement.status == INTERRUPTED:
        notes.append(INTERRUPTED)
    elif run.measurement.reason:
        notes.append(f"failed: {run.measurement.reason}")
    if run.shares_with:
        notes.append(f"same flags as {run.shares_with}: one measurement")
    if run.resolution.fallback_reason:
        notes.append(f"fallback: {run.resolution.fallback_reason}")
    return "; ".join(notes)


def rows(runs: list[ModeRun]) -> list[list[str]]:
    base = off_median(runs)
    return [
        [
            r.mode,
            short_flags(r.resolution),
            r.resolution.why,
            _fmt(r.measurement.median, ".1f"),
            _fmt(r.measurement.spread, ".1f"),
            _times(speedup(r, base)),
            _fmt(r.measurement.accept_rate, ".3f"),
            _fmt(r.measurement.accept_len, ".2f"),
            _note(r),
        ]
        for r in runs
    ]


def auto_verdict(runs: list[ModeRun]) -> str:
    """Whether ``auto`` resolved to the fastest measured mode, in one sentence."""
    auto = next((r for r in runs if r.mode == "auto"), None)
    measured = [r for r in runs if r.measurement.ok]
    if auto is None:
        return "auto was not benchmarked (--modes has no auto)"
    label = resolved_label(auto.resolution)
    if not auto.measurement.ok:
        return f"auto resolved to {label}, but it could not be measured ({auto.measurement.reason})"
    best = max(measured, key=lambda r: r.measurement.median or 0.0)
    a_med, b_med = auto.measurement.median or 0.0, best.measurement.median or 0.0
    if a_med >= b_med:
        return f"auto resolved to {label}: the fastest"
    text = f"auto resolved to {label} ({a_med:.1f} tok/s), but {best.mode} was fastest ({b_med:.1f} tok/s)"
    if max(auto.measurement.tps) >= min(best.measurement.tps):
        text += "; the ranges of the repeats overlap, so the difference is not clear"
    return text


def markdown(ctx: BenchContext, runs: list[ModeRun]) -> str:
    device = "GPU" if ctx.gpu else "CPU"
    lines = [
        f"### specsuite bench `{ctx.run_id}`: {ctx.model}"
        + (f" with the MTP drafter {ctx.drafter}" if ctx.drafter else ""),
        f"- binary: {ctx.binary} (commit {ctx.commit or '?'}, {ctx.backend or '?'} build, {device})",
        f"- {ctx.repeat} round(s) of the `{ctx.prompts}` prompt set ({ctx.n_prompts} prompts, n_predict "
        f"{ctx.n_predict}) per configuration after its cold pass; acceptance from the cold pass's /metrics "
        "delta (the prompts on the fresh server, as the suite's cases count it), tokens/s from the server's "
        "timings over the rounds",
        f"- **{auto_verdict(runs)}**",
        "",
        table.render(HEADER, rows(runs), markdown=True),
    ]
    if stop := interrupted_in(runs):
        lines.insert(
            1,
            f"- **INTERRUPTED (Ctrl-C or SIGTERM) while measuring {stop}: the rows marked "
            "interrupted were not measured**",
        )
    return "\n".join(lines) + "\n"


def document(ctx: BenchContext, runs: list[ModeRun], started: str, finished: str) -> dict[str, Any]:
    """bench.json: every number, the exact commands, the logs."""
    base = off_median(runs)
    return {
        "schema": 1,
        "run_id": ctx.run_id,
        "started": started,
        "finished": finished,
        "interrupted": interrupted_in(runs),  # the mode Ctrl-C or SIGTERM ended the bench in, or null
        "model": {"name": ctx.model, "sha256": ctx.sha256},
        "drafter": {"name": ctx.drafter, "sha256": ctx.drafter_sha256} if ctx.drafter else None,
        "binary": {"path": ctx.binary, "commit": ctx.commit, "backend": ctx.backend},
        "device": "gpu" if ctx.gpu else "cpu",
        "options": {"prompts": ctx.prompts, "n_predict": ctx.n_predict, "repeat": ctx.repeat},
        "auto": auto_verdict(runs),
        "modes": [_mode_doc(r, base) for r in runs],
    }


def _mode_doc(r: ModeRun, base: float | None) -> dict[str, Any]:
    m, res = r.measurement, r.resolution
    return {
        "mode": r.mode,
        "spec_type": res.spec_type,
        "flags": list(res.flags),
        "why": res.why,
        "fallback_reason": res.fallback_reason,
        "shares_with": r.shares_with,
        "status": m.status,
        "reason": m.reason,
        "message": m.message,
        **m.numbers(),
        "speedup": speedup(r, base),
        "command": m.command,
        "log": str(m.log) if m.log else None,
    }
