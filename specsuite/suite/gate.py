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
    note: HistoryNote = field(default_factory=HistoryNote)  # what the summary's history line says

    def __post_init__(self) -> None:
        how = "nearest ancestor" if self.ancestors is not None else "latest earlier run"
        self.note.basis = f"{how}, {self.device_class}/{self.backend}, rtol {self.rtol:.0%}"
        self.note.line = self.note.render()


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
    )


def _gate(ctx: GateContext, case: Case, rec: CaseRecord) -> list[Failure]:
    try:
        base = _lookup(ctx, case.name)
    except UserError as exc:
        ctx.note.problem = str(exc)
        return []
    if base is None:
        ctx.note.missing.append(case.name)
        return []
    regs = regress.regressions(rec, base.record, rtol=ctx.rtol, baseline_commit=base.commit[:12])
    rec.baseline = BaselineRef(
        commit=base.commit,
        run_id=base.run_id,
        started=base.started,
        rtol=ctx.rtol,
        regressions=[r.message for r in regs],
    )
    ctx.note.used.setdefault(f"{base.commit[:12]} (run {base.run_id})", []).append(case.name)
    return [Failure("regressed", r.message) for r in regs]


def install(session: Session) -> None:
    """Give the session its relative gate; the summary line is written as cases use it."""
    run = session.results.run
    ctx = _context(run, session.options.rtol)
    if isinstance(ctx, str):
        run.history = HistoryNote(line=f"no relative gate: {ctx}")
        return
    run.history = ctx.note

    def gate(case: Case, rec: CaseRecord) -> list[Failure]:
        failures = _gate(ctx, case, rec)
        ctx.note.line = ctx.note.render()
        return failures

    session.gate = gate


def record(run: Run) -> None:
    """Append the finished run to the history; a failure is a warning in the summary, never a verdict.

    The reason goes into the document (history.warning, and the summary's history line) as well as to
    stderr: pytest keeps a passing session's teardown output to itself, so stderr alone would lose it."""
    note = run.history = run.history or HistoryNote()
    row, problem = history.try_record(run)
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
