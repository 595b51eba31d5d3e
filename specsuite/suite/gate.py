"""The history's part in a run: the relative gate against a baseline commit, the drift gate over the last
runs, the counters against the baseline's, and the run's own record.

The baseline of a case is the nearest earlier measured llama.cpp commit on the same device class and backend
with the same cases.toml (baseline.find_baseline): nearest in ancestry when the binary came from a git
checkout (the llama.cpp mirror, or LLAMA_CPP_DIR), else the latest earlier run; always a run that started
before the one judged. A drop beyond ``rtol`` fails the case with reason ``regressed`` naming that commit
(``regress.regressions``). A case that passed that gate fails with reason ``drifted`` when its last
``drift_window`` runs, this one included, hold a change point of more than rtol (``changes.drift``): a
slow loss of a few percent a commit, every step below rtol. The acceptance counters are compared with the
baseline's exactly (``regress.counter_changes``). A history that cannot be read or written never decides a
run: it is one warning, and the summary says so.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsuite.cases.schema import Case
from specsuite.common.errors import UserError
from specsuite.history import baseline, changes, queries, regress
from specsuite.history.ancestry import ancestors
from specsuite.history.recording import try_record
from specsuite.llamacpp.identity import short
from specsuite.measure.engine import Engine
from specsuite.measure.judge import Failure
from specsuite.results import config, metrics
from specsuite.results.config import RunConfig
from specsuite.results.document import HistoryNote, Run
from specsuite.results.record import BaselineRef, CaseRecord, DriftRef
from specsuite.suspects import runlines


@dataclass
class GateContext:
    """What every case's lookup shares: the run's setup, read once from its results document."""

    device_class: str
    backend: str
    cases_sha256: str
    commit: str  # the binary's identity key (llamacpp.identity): a commit, b<N> or tree-<hash>
    ancestors: list[str] | None
    rtol: float
    started: str | None  # the judged run's start: only earlier runs are its baselines
    block_rtol: float = regress.BLOCK_RTOL  # a rise in per-block overhead beyond this fails
    recording: bool = False  # a run that records itself (it may open the history as its writer)
    run_id: str = ""
    drift_window: int = 10  # the runs the drift gate judges together, this one included
    note: HistoryNote = field(default_factory=HistoryNote)  # what the summary's history line says
    config: RunConfig | None = None  # the judged run's configuration (its binary's defaults and build)
    build: int | None = None  # upstream's build number: orders runs where no ancestry does
    # the lookup's usual order (the basis); a baseline another order chose (by time: the same build number)
    # says which beside it
    order: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.order = baseline.usual_order(self.ancestors, self.build)
        self.note.basis = (
            f"{self.order}, {self.device_class}/{self.backend}, rtol {self.rtol:.0%} (per-block overhead "
            f"{self.block_rtol:.0%}), drift over the last "
            f"{self.drift_window} runs"
        )
        self.note.line = self.note.render()


def context(
    run: Run, rtol: float, drift_window: int = 10, block_rtol: float = regress.BLOCK_RTOL
) -> GateContext | str:
    """What the gate needs from the run's header; a string saying why there is no gate."""
    commit, mirror = run.binary.key, run.binary.source.mirror
    if not commit:
        return "the binary names no llama.cpp commit or build: no baseline lookup, no record"
    found = ancestors(Path(mirror), commit) if mirror and run.binary.commit else None
    return GateContext(
        device_class=run.device_class or "unknown",
        backend=run.binary.backend or "unknown",
        cases_sha256=str(run.cases_sha256),
        commit=commit,
        ancestors=found,
        build=run.binary.build,
        rtol=rtol,
        block_rtol=block_rtol,
        started=run.started,
        run_id=run.run_id,
        drift_window=drift_window,
        config=run.config,
    )


def _setup(ctx: GateContext, name: str) -> dict[str, Any]:
    return {
        "case": name,
        "device_class": ctx.device_class,
        "backend": ctx.backend,
        "cases_sha256": ctx.cases_sha256,
        "commit": ctx.commit,
        "ancestors": ctx.ancestors,
        "before": ctx.started,
        "build": ctx.build,
    }


def _lookup(ctx: GateContext, name: str) -> baseline.Baseline | None:
    skipped: list[str] = []
    found = baseline.find_baseline(None, **_setup(ctx, name), recording=ctx.recording, skipped=skipped)
    ctx.note.broken += [
        f"{name} at run {run_id}" for run_id in skipped
    ]  # said in the summary, not only stderr
    return found


def _why_none(ctx: GateContext, name: str) -> str:
    """Why the case has no baseline (history.baseline.why_none); a history that cannot say is said once,
    as the lookup's own problem is."""
    try:
        return baseline.why_none(None, **_setup(ctx, name), recording=ctx.recording)
    except UserError as exc:
        ctx.note.problem = str(exc)
        return "the history could not say why"


def judge(
    ctx: GateContext,
    rec: CaseRecord,
    failed: bool = False,
    earlier: Sequence[CaseRecord] = (),
    speed_rtol: float | None = None,
    decode_rtol: float | None = None,
    rtols: Mapping[str, float | None] | None = None,
) -> list[Failure]:
    """One case against its history: the relative gate (also after a failed floor: the baseline is where
    a bisect of it starts), a sweep's crossover (``earlier``: this run's cases before it), the counters
    against the baseline's, and, when nothing else failed, the drift gate. ``rtols``: the case's own
    tolerances by cases.toml key (``Case.rtols``: speed_rtol, decode_rtol, prefill_rtol; else the run's
    rtol); ``speed_rtol``, ``decode_rtol``: two of them given alone. Fills ``rec.baseline`` (with what
    moved: the first lines' words) and ``rec.drift``."""
    rtols = {"speed_rtol": speed_rtol, "decode_rtol": decode_rtol, **(rtols or {})}
    try:
        base = _lookup(ctx, rec.name)
    except UserError as exc:
        ctx.note.problem = str(exc)
        return []
    if base is None:
        ctx.note.missing.append(rec.name)
        ctx.note.missing_why.setdefault(_why_none(ctx, rec.name), []).append(rec.name)
        return []
    regs = regress.regressions(
        rec,
        base.record,
        rtol=ctx.rtol,
        block_rtol=ctx.block_rtol,
        tolerances=rtols,
        baseline_commit=short(base.commit, 12),
    )
    rec.baseline = BaselineRef(
        commit=base.commit,
        run_id=base.run_id,
        started=base.started,
        rtol=ctx.rtol,
        regressions=[r.message for r in regs],
        moved=regress.first_lines(regs),
        counters=regress.counter_changes(rec, base.record),
        status=base.record.status,
        config_changes=config.changes(
            (base.config, base.record.config), (ctx.config, rec.config), (base.commit, ctx.commit)
        ),
    )
    order = "" if base.order == ctx.order else f"; {base.order}"
    ctx.note.used.setdefault(f"{short(base.commit, 12)} (run {base.run_id}{order})", []).append(rec.name)
    found = [Failure("regressed", r.message) for r in regs]
    moved = regress.crossover_moved(rec, base.record, earlier, baseline_commit=base.commit)
    if moved is not None and moved.gated:  # first: it says what the speed drop at this np means
        found.insert(0, Failure("crossover_moved", moved.message))
    elif moved is not None:
        rec.warnings.append(f"crossover moved: {moved.message}")
    if found:
        return found
    return [] if failed else _drift(ctx, rec, rtols)


def _drift(ctx: GateContext, rec: CaseRecord, rtols: Mapping[str, float | None]) -> list[Failure]:
    try:
        rows = baseline.earlier_runs(
            None, **_setup(ctx, rec.name), limit=ctx.drift_window, recording=ctx.recording
        )
    except UserError as exc:
        ctx.note.problem = str(exc)
        return []
    current = changes.record_row(rec, ctx.run_id, ctx.commit, ctx.started)
    window = [*changes.drift_window(rows, ctx.drift_window), current]
    for m in metrics.DRIFT:
        metric, (_, rtol) = m.name, m.tolerance_of({"rtol": ctx.rtol, "block_rtol": ctx.block_rtol, **rtols})
        points = changes.points_of(window, metric)
        found = changes.drift(points, metric, rtol=rtol)
        if found is None:
            continue
        before, after = points[found.index - 1], points[found.index]
        rec.drift = DriftRef(
            config_changes=_config_across(
                ctx, rec, before.run_id, after.run_id, (before.commit, after.commit)
            ),
            metric=metric,
            before_commit=before.commit,
            after_commit=after.commit,
            after_run_id=after.run_id,
            mean_before=found.mean_before,
            mean_after=found.mean_after,
            change=found.change,
            p_value=found.p_value,
            runs=len(points),
        )
        return [Failure("drifted", drift_message(rec.drift, rtol))]
    return []


def _config_across(
    ctx: GateContext, rec: CaseRecord, before: str, after: str, commits: tuple[str, str]
) -> list[str]:
    """The configuration changes across a drift's change point (the judged run's own when it is the run
    after it). A history that cannot be read leaves them out: the drift itself was read from it."""
    try:
        stored = queries.run_configs(None, [before, after], recording=ctx.recording)
    except UserError:
        return []
    cfg_after = ctx.config if after == ctx.run_id else stored.get(after)
    case_after = rec.config if after == ctx.run_id else None
    return config.changes((stored.get(before), None), (cfg_after, case_after), commits)


def drift_message(d: DriftRef, rtol: float) -> str:
    """One line: the metric, how much, since which commit, over how many runs, and how sure."""
    sure = "counters changed exactly" if d.p_value is None else f"permutation p = {d.p_value:.3g}"
    return (
        f"{d.metric} drifted {d.change * 100:+.1f} % over the last {d.runs} runs: first commit after the "
        f"change point {short(d.after_commit, 12)} (run {d.after_run_id}), mean {d.mean_before:.4f} up to "
        f"{short(d.before_commit, 12)}, {d.mean_after:.4f} from there on; no single step was caught at rtol "
        f"{rtol * 100:g} % ({sure})"
    )


def install(session: Engine) -> None:
    """Give the session its gate against history; the summary line is written as cases use it."""
    run = session.results.run
    opts = session.options
    ctx = context(run, opts.rtol, opts.drift_window, opts.block_rtol)
    if isinstance(ctx, str):
        run.history = HistoryNote(line=f"no relative gate: {ctx}")
        return
    ctx.recording = True
    run.history = ctx.note
    _run_config(ctx, run)

    def gate(case: Case, rec: CaseRecord, failed: bool) -> list[Failure]:
        failures = judge(ctx, rec, failed, list(run.cases.values()), rtols=case.rtols)
        ctx.note.line = ctx.note.render()
        return failures

    session.gate = gate
    session.known_history = lambda name: queries.case_statuses(
        name, ctx.device_class, ctx.backend, ctx.started
    )  # an intermittent known bug's clean streak (measure.known)


def _run_config(ctx: GateContext, run: Run) -> None:
    """The binary's defaults and build against the run before on this setup, into the note."""
    try:
        prior = baseline.previous_config(None, device_class=ctx.device_class, backend=ctx.backend,
                                         commit=ctx.commit, ancestors=ctx.ancestors, build=ctx.build,
                                         before=ctx.started)  # fmt: skip
    except UserError as exc:
        ctx.note.problem = str(exc)
        return
    if prior is None:
        return
    ctx.note.config_base = f"{short(prior.commit, 12)} (run {prior.run_id})"
    ctx.note.config_changes = config.changes(
        (prior.config, None), (run.config, None), (prior.commit, ctx.commit)
    )


def name_suspects(run: Run) -> None:
    """The upstream changes behind each red, fixed or moved case, for the summary's first lines
    (suspects.runlines); what stops it is one line there, never the verdict."""
    if run.history is not None:
        run.history.suspects = runlines.safe_for_run(run)


def record(run: Run) -> None:
    """Append the finished run to the history; a failure is a warning in the summary, never a verdict.

    The reason goes into the document (history.warning, and the summary's history line) as well as to
    stderr: pytest keeps a passing session's teardown output to itself, so stderr alone would lose it."""
    note = run.history = run.history or HistoryNote()
    row, problem = try_record(run)
    note.recorded = row is not None
    if problem:
        print(f"warning: history not recorded: {problem}", file=sys.stderr)
        note.warning = problem
        note.line = f"{note.line or 'history'} (this run was NOT recorded: {problem})"


def baselines_for(run: Run, rtol: float = 0.05) -> dict[str, baseline.Baseline]:
    """``compare --against auto``: each case's baseline by the gate's rule, for a finished run."""
    ctx = context(run, rtol)
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
