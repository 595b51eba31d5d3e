"""The history's part in a run: the relative gate against a baseline commit, and the run's own record.

The baseline of a case is the nearest earlier measured llama.cpp commit on the same device class and backend
with the same cases.toml (history.find_baseline): nearest in ancestry when the binary came from a git
checkout (the llama.cpp mirror, or LLAMA_CPP_DIR), else the latest earlier run; always a run that started
before the one judged. A drop beyond ``rtol`` fails the case with reason ``regressed`` naming that commit
(``regress.regressions``). A history that cannot be read or written never decides a run: it is one
warning, and the summary says so.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from specsuite.cases.schema import Case
from specsuite.common.errors import UserError
from specsuite.history import db as history
from specsuite.history import regress
from specsuite.history.ancestry import ancestors
from specsuite.results.document import HistoryNote, Run
from specsuite.results.record import BaselineRef, CaseRecord
from specsuite.suite.expect import Failure
from specsuite.suite.runner import Session


@dataclass
class GateContext:
    """What every case's lookup shares: the run's setup, read once from its results document."""

    device_class: str
    backend: str
    cases_sha256: str
    commit: str
    ancestors: list[str] | None
    rtol: float
    started: str | None  # the judged run's start: only earlier runs are its baselines
    recording: bool = False  # a run that records itself (it may open the history as its writer)
    used: dict[str, list[str]] = field(default_factory=dict)  # baseline "commit (run)" -> case names
    missing: list[str] = field(default_factory=list)
    problem: str | None = None


def _context(run: Run, rtol: float) -> GateContext | str:
    commit, mirror = run.binary.commit, run.binary.source.mirror
    if not commit:
        return "the binary names no llama.cpp commit: no baseline lookup, no record"
    return GateContext(
        device_class=run.device_class or "unknown",
        backend=run.binary.backend or "unknown",
        cases_sha256=str(run.cases_sha256),
        commit=commit,
        ancestors=ancestors(Path(mirror), commit) if mirror else None,
        rtol=rtol,
        started=run.started,
    )


def _lookup(ctx: GateContext, name: str) -> history.Baseline | None:
    return history.find_baseline(
        None,
        case=name,
        device_class=ctx.device_class,
        backend=ctx.backend,
        cases_sha256=ctx.cases_sha256,
        commit=ctx.commit,
        ancestors=ctx.ancestors,
        before=ctx.started,
        recording=ctx.recording,
    )


def _gate(ctx: GateContext, case: Case, rec: CaseRecord) -> list[Failure]:
    try:
        base = _lookup(ctx, case.name)
    except UserError as exc:
        ctx.problem = str(exc)
        return []
    if base is None:
        ctx.missing.append(case.name)
        return []
    regs = regress.regressions(rec, base.record, rtol=ctx.rtol, baseline_commit=base.commit[:12])
    rec.baseline = BaselineRef(
        commit=base.commit,
        run_id=base.run_id,
        started=base.started,
        rtol=ctx.rtol,
        regressions=[r.message for r in regs],
    )
    ctx.used.setdefault(f"{base.commit[:12]} (run {base.run_id})", []).append(case.name)
    return [Failure("regressed", r.message) for r in regs]


def install(session: Session) -> None:
    """Give the session its relative gate; the summary line is written as cases use it."""
    run = session.results.run
    ctx = _context(run, session.options.rtol)
    if isinstance(ctx, str):
        run.history = HistoryNote(line=f"no relative gate: {ctx}")
        return
    ctx.recording = True
    note = run.history = HistoryNote(line=_line(ctx))

    def gate(case: Case, rec: CaseRecord) -> list[Failure]:
        failures = _gate(ctx, case, rec)
        note.line = _line(ctx)
        return failures

    session.gate = gate


def _line(ctx: GateContext) -> str:
    if ctx.problem:
        return f"history unreadable, no relative gate: {ctx.problem}"
    parts = [f"{base} for {', '.join(names)}" for base, names in ctx.used.items()]
    if ctx.missing and ctx.used:
        parts.append(f"no earlier commit measured for {', '.join(ctx.missing)}")
    how = "nearest ancestor" if ctx.ancestors is not None else "latest earlier run"
    body = "; ".join(parts) if parts else "none yet: no other llama.cpp commit measured on this setup"
    return f"baseline ({how}, {ctx.device_class}/{ctx.backend}, rtol {ctx.rtol:.0%}): {body}"


def record(session: Session) -> None:
    """Append the finished run to the history; a failure is a warning in the summary, never a verdict.

    The reason goes into the document (history.warning, and the summary's history line) as well as to
    stderr: pytest keeps a passing session's teardown output to itself, so stderr alone would lose it."""
    run = session.results.run
    note = run.history = run.history or HistoryNote()
    row, problem = history.try_record(session.results.run)
    note.recorded = row is not None
    if problem:
        print(f"warning: history not recorded: {problem}", file=sys.stderr)
        note.warning = problem
        note.line = f"{note.line or 'history'} (this run was NOT recorded: {problem})"


def baselines_for(run: Run, rtol: float = 0.05) -> dict[str, history.Baseline]:
    """``compare --against auto``: each case's baseline by the gate's rule, for a finished run."""
    ctx = _context(run, rtol)
    if isinstance(ctx, str):
        raise UserError(f"{run.run_id}: {ctx}")
    found = {}
    for name in run.cases:
        try:
            base = _lookup(ctx, name)
        except UserError as exc:
            print(f"warning: {exc}", file=sys.stderr)
            return {}
        if base is not None:
            found[name] = base
    return found
