"""Run one case of the suite against a llama-server binary: ``run_case(case, session) -> CaseRecord``.

Per case: the command line (a flag or type the binary lacks ends the case here, with ``binary_no_<what>``),
the models (stamp-verified paths), the GGUF checks, then a server with the case's speculation next to the
speculation-off baseline server (the case's own command without its speculative flags: suite.baseline). The
acceptance numbers come from a cold pass as upstream measures: the prompts on the fresh speculative server
before any other request, counted by ``/metrics``; then a discarded warm-up and the A-B-B-A speed rounds
(their counters are kept, not reported), with the per-block overhead and the physical bound on the speedup
(suite.overhead, suite.plausible). Then the
floors, the sanity relations, divergence from the baseline's tokens, the self-tests, the speed floor, the
usage check and the relative gate against the history baseline. Every outcome, also an interruption,
lands in results.json.
"""

from __future__ import annotations

import functools
import itertools
import operator
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from specsuite.cases.dataset import with_prompts
from specsuite.cases.schema import Case
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.common.settings import Settings
from specsuite.models.gguf import check_models
from specsuite.models.store import locate
from specsuite.results.document import RunResults
from specsuite.results.record import CaseRecord, Resolved
from specsuite.results.verdict import Verdict
from specsuite.server import metrics
from specsuite.server.failure import log_tail
from specsuite.server.probe import Capabilities, MissingFlag
from specsuite.server.process import Command, LlamaServer, ServerFailed, start_server
from specsuite.server.resolver import caps_from_probe, resolve_for_model
from specsuite.suite import budget, categories, concurrency, expect, observe, overhead, plausible
from specsuite.suite.baseline import Baseline, baseline_of
from specsuite.suite.command import runs_on_cpu, server_command
from specsuite.suite.concurrency import Reference
from specsuite.suite.measure import (
    Completion,
    Prompts,
    RequestOutcome,
    Speed,
    abba,
    chat_body,
    divergence,
    interleaved_round,
    spec_result_line,
    usage_problem,
)
from specsuite.suite.slots import Slot
from specsuite.suite.streams import Pass, Throughput, run_streams, warm_up
from specsuite.suite.vintage import NOT_IN_BUILD, Vintage

# The case's server command at a number of slots (its own, or 1 for its np-1 reference).
Slots = Callable[[int], Command]
# What an np-1 reference is the output of: the one-slot command (port 0), the prompt set, n_predict.
Np1Key = tuple[tuple[str, ...], str, int]
# A baseline server: the non-speculative argv (port 0), the GPUs, the pinned CPUs (suite.baseline).
BaselineKey = tuple[tuple[str, ...], int, tuple[int, ...]]


@dataclass
class Measured:
    outcome: RequestOutcome
    log_text: str
    usage: str | None  # what is wrong with /v1/chat/completions' usage, if anything
    throughput: Throughput = field(default_factory=Throughput)  # the rounds as a client sees them
    np1: Reference | None = None  # a case with several slots: the np-1 output it is compared with


class CaseEnd(Exception):
    """How a case ended when not passed: status (failed, skipped, error), reason, message."""

    def __init__(self, status: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


# The gate against history: (case, record, whether the case already failed) -> failures; the session
# installs it when it has one.
Gate = Callable[[Case, CaseRecord, bool], list[expect.Failure]]


@dataclass
class Session:
    """What every case of one run shares: the binary, the results document, the baseline server."""

    caps: Capabilities
    results: RunResults
    options: Settings = field(default_factory=Settings)  # how the run judges (strict, repeat, rtol, ...)
    gate: Gate | None = None
    result_lines: list[str] = field(default_factory=list)
    verdict: Verdict | None = None  # set once, when the run ends
    slot: Slot | None = None  # a parallel run: this worker's GPUs and ports
    part: str | None = None  # a worker of a parallel run: its results are a part of the run's
    _base: tuple[BaselineKey, LlamaServer] | None = None
    _base_tokens: dict[tuple[BaselineKey, str, int, float, int], list[Completion]] = field(
        default_factory=dict
    )
    np1: dict[Np1Key, Reference] = field(default_factory=dict)  # the np-1 cold passes of this run
    vintage: Vintage | None = None  # the binary against the pin: what it lacks may not exist yet

    @property
    def flag_keys(self) -> dict[str, str]:
        """Every spelling of a configuration flag -> its key (a case's config.passed)."""
        return observe.spellings(self.caps.defaults)

    @property
    def gpu(self) -> bool:
        return self.caps.backend != "cpu" and bool(self.caps.gpus)

    @property
    def speed(self) -> bool:
        """Whether speed is measured: not when cases run side by side on shared cores (--workers)."""
        return self.options.workers == 1

    def server_env(self, case: Case) -> dict[str, str]:
        """What a case's servers see: the first ``case.gpus`` GPUs of this worker's slot."""
        return self.slot.env(case.gpus) if self.slot is not None else {}

    def start(self, command: Command, log: Path, case: Case) -> LlamaServer:
        """A server of ``case`` on this worker's GPUs and ports (and on its one CPU: ``pin_cpu``)."""
        ports = self.slot.ports if self.slot is not None else None
        return start_server(command, log, env=self.server_env(case), ports=ports, cpus=self.cpus(case))

    def cpus(self, case: Case) -> frozenset[int] | None:
        """The one CPU both servers of a ``pin_cpu`` case run on, where speed is measured on the CPU: the
        last this process may use. Measured on the loaded 2-core machine (docs/speed.md): with both servers
        on one CPU the speed case's run medians varied by CV 8 %, free 21 % (one server of a run kept on
        the busier core); None: any CPU."""
        if not (case.pin_cpu and self.speed and runs_on_cpu(self.caps)):
            return None
        return frozenset({max(os.sched_getaffinity(0))})

    def locate(self, case: Case) -> dict[str, Path]:
        """Verified local paths of the case's models from their stamps (no hashing, no network)."""
        try:
            found = locate(case.models)
        except UserError as exc:  # its message ends with the command that fixes it
            raise CaseEnd("error", "model_missing_or_invalid", str(exc)) from None
        for m in found.values():
            self.results.add_model(m.name, m.sha256, m.size)
        return {name: m.path for name, m in found.items()}

    def baseline_server(self, base: Baseline, case: Case) -> LlamaServer:
        """The speculation-off server of ``base`` (the case's command without its speculative flags, slots
        and context included, on as many GPUs as the case): started once, kept while consecutive cases
        share it.

        Warmed up once when started, like every case's server, so that no round measures a cold baseline
        (with one round the baseline goes first: a cold one would inflate the speedup)."""
        if self._base is not None and self._base[0] == base.key:
            return self._base[1]
        self.close()
        srv = self.start(base.command, self.results.logs / f"baseline-{base.label}.log", case)
        self._base = (base.key, srv)
        self.results.add_baseline(base.label, srv.command, self.results.rel(srv.log_path))
        try:
            warm_up(srv.connection, case.prompt_texts, case.streams)
        except BaseException:  # a baseline that fails its warm-up is not kept for the next case
            self.close()
            raise
        return srv

    def baseline_tokens(self, base: Baseline, case: Case, got: list[Completion]) -> list[Completion]:
        """The reference tokens of (baseline, prompt set, n_predict, temperature, streams): the first
        baseline round that ran."""
        key = (base.key, case.prompts, case.n_predict, case.temperature, case.streams)
        return self._base_tokens.setdefault(key, got)

    def close(self) -> None:
        if self._base is not None:
            self._base[1].stop()
            self._base = None


def new_record(case: Case) -> CaseRecord:
    return CaseRecord(
        name=case.name,
        tier=case.tier,
        method=case.method,
        spec_type=",".join(case.spec_type) or None,
        mode=case.mode,
        n_max=case.n_max,
        target=case.target,
        draft=case.draft,
        parallel=case.parallel,
        streams=case.streams,
        sweep=case.sweep_name,
        floors=case.floors,
        uncalibrated=case.uncalibrated,
        temperature=case.temperature,
    )


# --- the steps of a case ---------------------------------------------------------------------------------


def _missing(session: Session, case: Case, what: str, reason: str) -> CaseEnd:
    """A method or flag the binary lacks: not in this build yet (an older build than the pin, where no
    lower build measured the case: ``vintage``), else a loss (strict: failed; --allow-missing: skipped)."""
    msg = f"{session.caps.binary} cannot run this case: it has no {what}"
    fresh, said = session.vintage.judge(case.name, what) if session.vintage else (False, "")
    if fresh:
        return CaseEnd(NOT_IN_BUILD, reason, f"{msg}{said}")
    if session.options.strict:
        return CaseEnd(
            "failed", reason, f"{msg}{said} (strict: a lost method is a regression; --allow-missing skips)"
        )
    return CaseEnd("skipped", reason, f"{msg}{said} (skipped: --allow-missing / SPEC_STRICT=0)")


def _resolve(
    session: Session, case: Case, rec: CaseRecord, target: Path, draft: Path | None
) -> tuple[str, ...]:
    """A ``mode`` case: the front end's resolver picks the flags from the probe and the GGUF metadata."""
    res = resolve_for_model(
        case.mode,
        caps=caps_from_probe(session.caps),
        model_path=target,
        gpu=session.gpu,
        mtp_draft_path=str(draft) if draft else None,
        spec_draft_n_max=case.n_max,
        extra_args=list(case.server_args),  # the user's extra args: a --spec-type there owns speculation
        model_id=case.model_id,
    )
    rec.resolved = Resolved(
        flags=list(res.flags), spec_type=res.spec_type, why=res.why, fallback_reason=res.fallback_reason
    )
    rec.spec_type = res.spec_type
    got = res.spec_type or "none"
    if case.expect_resolved is not None and got != case.expect_resolved:
        msg = f"mode {case.mode!r} resolved to {got}, expected {case.expect_resolved} ({res.why})"
        raise CaseEnd("failed", "self_test", msg)
    if res.fallback_reason:
        what = f"support for {case.mode!r} as resolved ({res.why})"
        raise _missing(session, case, what, res.fallback_reason)
    return tuple(res.flags)


def _command(session: Session, case: Case, rec: CaseRecord, target: Path, draft: Path | None) -> Slots:
    resolved = _resolve(session, case, rec, target, draft) if case.mode else None
    try:
        server_command(session.caps, target, 0, case, draft, resolved)  # raises MissingFlag before any server
    except MissingFlag as exc:
        raise _missing(session, case, exc.what, exc.reason) from None

    def at(parallel: int) -> Command:
        return lambda port: server_command(
            session.caps, target, port, case, draft, resolved, parallel=parallel
        )

    return at


def _check_models(rec: CaseRecord, target: Path, draft: Path | None, ctx_size: int) -> None:
    types = [t for t in (rec.spec_type or "").split(",") if t and t != "default"]
    try:
        rec.warnings += check_models(types, target, draft, ctx_size)
    except UserError as exc:
        raise CaseEnd("error", "model_missing_or_invalid", str(exc)) from None


@contextmanager
def _serving(session: Session, command: Command, log: Path, case: Case) -> Iterator[LlamaServer]:
    try:
        srv = session.start(command, log, case)
    except ServerFailed as exc:
        raise CaseEnd("failed", exc.reason, str(exc)) from None
    try:
        yield srv
    finally:
        srv.stop()


def _cold_pass(
    spec: LlamaServer, case: Case, streams: int | None = None
) -> tuple[metrics.Delta, Pass, list[str], list[categories.CategoryPass]]:
    """Upstream's measurement: the prompts on the fresh server, its first requests, and the counters after.

    A delta from a snapshot taken when the server is ready, not the raw cumulative counters: equal to
    upstream's numbers when the server counted nothing before its first request (the pinned build
    counts nothing at startup: the snapshot is zero), and ``metrics.delta`` catches a restart mid-pass,
    which a cumulative read cannot. A non-zero ready snapshot is named in a warning (upstream's numbers
    would include it). A drafter that keeps state across requests (ngram-mod) is measured from the same
    empty state as upstream's, which no warm-up before it may change. A categorised prompt set is sent one
    category after another, with a snapshot after each: each category's counters are exact too.
    ``streams``: the case's unless given (its np-1 reference's: 1); each category is one pass of them."""
    ready = spec.metrics()
    done = Pass([], 0.0)
    marks, passes = [ready], []
    for cat, prompts in categories.groups(case):
        got = run_streams(spec.connection, prompts, case.n_predict, streams or case.streams, case.temperature)
        done += got
        marks.append(spec.metrics())
        if cat:
            delta = metrics.delta(marks[-2], marks[-1], got.completions)
            passes.append(categories.CategoryPass(cat, tuple(i for i, _ in prompts), delta))
    warn = []
    if ready.drafted or ready.accepted or ready.drafts:
        warn.append(
            f"the server counted drafted={ready.drafted} accepted={ready.accepted} drafts={ready.drafts} "
            "before its first request: upstream's cumulative counters would include them, ours do not"
        )
    return metrics.delta(ready, marks[-1], done.completions), done, warn, passes


def _round_count(session: Session, case: Case) -> int:
    """``--repeat`` rounds, or the case's own ``repeat`` (one where cases share the cores: no timing means
    anything there, the round is for tokens and counters); with several slots at least two, so that
    counters that move from run to run at one np are seen as nondeterministic (DSpark's do at np 4 and 8:
    suite.concurrency)."""
    n = max(session.options.repeat, case.repeat) if session.speed else 1  # a case's own repeat raises it
    return max(n, 2) if case.parallel > 1 else n


def _rounds(
    session: Session, case: Case, spec: LlamaServer, base: LlamaServer, watch: observe.Watch
) -> tuple[list[metrics.Delta], list[Completion], Speed, Throughput]:
    """After the cold pass: a warm-up (the baseline's was done when it started), then the rounds
    (``_round``); each speculative round's counters are the ``/metrics`` delta over it (kept to show whether
    they repeat, never reported: the cold pass's are). ``watch`` samples memory after each and keeps the
    timings."""
    warm_up(spec.connection, case.prompt_texts, case.streams, case.temperature)
    watch.sample(case.streams)
    snapshots = [spec.metrics()]
    speed, seen, first_base = Speed(), Throughput(), None
    spec_rounds: list[list[Completion]] = []
    for r in range(_round_count(session, case)):
        got = _round(case, spec, base, r)
        spec_rounds.append(got["spec"].completions)
        for side in ("spec", "base"):
            watch.round(side, got[side].completions)
        watch.sample(len(got["spec"].completions))
        snapshots.append(spec.metrics())
        first_base = first_base or got["base"].completions
        if session.speed:
            speed.add(got["spec"].completions, got["base"].completions)
            seen.add("spec", got["spec"])
            seen.add("base", got["base"])
    assert first_base is not None
    deltas = [
        metrics.delta(a, b, done)
        for (a, b), done in zip(itertools.pairwise(snapshots), spec_rounds, strict=True)
    ]
    return deltas, first_base, speed, seen


def _round(case: Case, spec: LlamaServer, base: LlamaServer, r: int) -> dict[str, Pass]:
    """Round ``r``: the prompt set on both servers. One stream: the two requests of a prompt back to back,
    A-B, B-A, … (measure.interleaved_round: another process's burst on shared cores lands on both sides
    of a pair); several streams: each side's pass in A-B-B-A order."""

    def side(srv: LlamaServer, prompts: Prompts) -> Pass:
        return run_streams(srv.connection, prompts, case.n_predict, case.streams, case.temperature)

    if case.streams > 1:
        return {s: side(spec if s == "spec" else base, case.prompt_texts) for s in abba(r + 1)[-1]}
    got = interleaved_round(
        lambda pid, text: side(spec, ((pid, text),)),
        lambda pid, text: side(base, ((pid, text),)),
        case.prompt_texts,
        r * len(case.prompt_texts),
    )
    return {k: functools.reduce(operator.add, v) for k, v in got.items()}


def _np1(
    session: Session, case: Case, at: Slots, cold: metrics.Delta, comps: list[Completion]
) -> Reference | None:
    """A case with several slots: the np-1 output of its command (this run's, else measured now). A case
    with one slot is such an output: kept for the cases after it."""
    key: Np1Key = (tuple(at(1)(0)), case.prompts, case.n_predict)
    if case.parallel == 1:
        session.np1.setdefault(key, Reference(f"{case.name} (this run)", comps, cold))
        return None
    if key not in session.np1:
        session.np1[key] = _measure_np1(session, case, at(1))
    return session.np1[key]


def _measure_np1(session: Session, case: Case, command: Command) -> Reference:
    """The cold pass of the case's command with one slot and one stream, on a fresh server."""
    log = session.results.logs / f"{case.name}-np1.log"
    with _serving(session, command, log, case) as srv:
        try:
            cold, done, _, _ = _cold_pass(srv, case, streams=1)
        except ServerFailed as exc:
            raise CaseEnd("failed", exc.reason, f"the np-1 reference server failed: {exc}") from None
    return Reference(f"measured for {case.name}: {session.results.rel(log)}", done.completions, cold)


def _measure(session: Session, case: Case, rec: CaseRecord, at: Slots, target: Path) -> Measured:
    like = baseline_of(session.caps, at(case.parallel), target, case.gpus, session.cpus(case))
    try:
        base = session.baseline_server(like, case)
    except ServerFailed as exc:
        raise CaseEnd("error", exc.reason, f"baseline server (speculation off) failed: {exc}") from None
    log = session.results.logs / f"{case.name}.log"
    rec.log = session.results.rel(log)
    rec.baseline_command = base.command
    rec.cpus = sorted(base.cpus) if base.cpus else None
    limit = budget.Budget.of(case, session.options, base.log_path, _round_count(session, case))
    with _serving(session, at(case.parallel), log, case) as spec, budget.armed(limit, log):
        rec.command = spec.command
        watch = observe.Watch(spec, base, session.gpu)
        try:
            cold, done, warned, passes = _cold_pass(spec, case)  # before any other request to this server
            watch.sample(len(done.completions))
            rec.warnings += warned
            deltas, base_comps, speed, seen = _rounds(session, case, spec, base, watch)
            usage = usage_problem(spec.chat(chat_body(case.prompt_texts[0][1])))
            rec.config = observe.case_config(spec.command, session.flag_keys, spec.props())
        except ServerFailed as exc:
            if not base.running:
                session.close()
                raise CaseEnd(
                    "error", exc.reason, f"baseline server (speculation off) failed: {exc}"
                ) from None
            raise CaseEnd("failed", exc.reason, str(exc)) from None
        except metrics.MetricsError as exc:
            raise CaseEnd("failed", "metrics", f"{exc}\n{log_tail(spec.log_text())}") from None
        finally:  # read while the servers still run
            rec.memory, rec.prefill = watch.memory(), watch.prefill()
    ref = session.baseline_tokens(like, case, base_comps)
    comps = done.completions
    divs = divergence(ref, comps)
    outcome = RequestOutcome(cold, comps, divs, speed, rounds=deltas,
                             categories=categories.numbers(passes, comps, base_comps, divs))  # fmt: skip
    np1 = _np1(session, case, at, cold, comps)  # after the case's server stopped: one at a time
    return Measured(outcome, spec.log_text(), usage, seen, np1)


def _fill(rec: CaseRecord, outcome: RequestOutcome, case: Case) -> None:
    """The record's numbers: the counters and speed, the per-block overhead (one stream: with several the
    requests' decode times overlap), whether the speed is possible."""
    outcome.fill(rec)
    if case.streams == 1:
        overhead.fill(rec, outcome.speed, outcome.rounds)
    rec.implausible_speed = plausible.check(rec)
    rec.warnings += outcome.delta.warnings() + ([rec.implausible_speed] if rec.implausible_speed else [])
    rec.not_in_build = list(dict.fromkeys([*rec.not_in_build, *outcome.delta.not_in_build()]))


def _judge(session: Session, case: Case, rec: CaseRecord, m: Measured) -> None:
    n = m.outcome.numbers()
    _fill(rec, m.outcome, case)
    line = spec_result_line(case.name, n)
    print(line, flush=True)
    session.result_lines.append(line)
    sanity, against_np1 = m.outcome.delta.sanity_errors(), _concurrency(session, case, rec, m)
    if case.concurrent:
        sanity += concurrency.counter_sum_errors(m.outcome.delta, m.outcome.completions)
    failures = expect.check(case, n, m.outcome.completions, sanity, m.log_text, against_np1)
    if not session.speed or rec.implausible_speed:  # no speed measured, or none possible: no speed floor
        failures = [f for f in failures if f.reason != "speed"]
    if m.usage:
        failures.append(expect.Failure("usage", m.usage))
    failures += observe.memory_failures(rec.memory)
    if session.gate is not None:  # also after a failed floor: its baseline is where a bisect starts
        failures += session.gate(case, rec, bool(failures))
    if failures:
        per_pos = ", ".join(f"{r:.3f}" for r in n["per_position_rate"])
        body = "\n".join(f"- [{f.reason}] {f.message}" for f in failures)
        if changed := [*(rec.baseline.config_changes if rec.baseline else []),
                       *(rec.drift.config_changes if rec.drift else [])]:  # fmt: skip
            body = f"configuration changed since the baseline: {'; '.join(changed)}\n{body}"
        raise CaseEnd(
            "failed",
            failures[0].reason,
            f"{case.name}: {len(failures)} check(s) failed\n{body}\n{line}\n"
            f"per-position rates: [{per_pos}]\n--- last server log lines ---\n{log_tail(m.log_text)}",
        )


def _concurrency(session: Session, case: Case, rec: CaseRecord, m: Measured) -> list[expect.Failure]:
    """A case on the concurrency axis: its record's block; with several slots, its requests against the
    np-1 output (tokens exactly, acceptance within rtol)."""
    if not case.concurrent:
        return []
    delta, comps, ref = m.outcome.delta, m.outcome.completions, m.np1
    np1 = concurrency.np1_block(ref, delta, comps) if ref is not None else None
    rec.concurrency = concurrency.block(case.parallel, case.streams, comps, m.throughput, np1)
    if ref is None:
        return []
    rtol = session.options.rtol
    return concurrency.batch_variant(ref, comps, case.parallel) + concurrency.collapse(
        ref, delta, case.parallel, rtol
    )


def _with_dataset(case: Case, found: dict[str, Path]) -> Case:
    """A dataset-backed prompt set's prompts, read from its verified file (``cases.dataset``)."""
    if case.dataset is None:
        return case

    try:
        return with_prompts(case, found[case.dataset.file])
    except UserError as exc:
        raise CaseEnd("error", "model_missing_or_invalid", str(exc)) from None


def _gpus(session: Session, case: Case) -> None:
    """A case that needs more GPUs than this run gives a worker cannot measure what it says."""
    have = len(session.slot.gpus) if session.slot is not None else 0
    if have and case.gpus > have:
        msg = f"the case needs {case.gpus} GPUs and this run gives each worker {have} (--gpus)"
        if session.options.strict:
            raise CaseEnd("failed", "too_few_gpus", f"{msg} (strict; --allow-missing skips)")
        raise CaseEnd("skipped", "too_few_gpus", f"{msg} (skipped: --allow-missing / SPEC_STRICT=0)")


def _run(session: Session, case: Case, rec: CaseRecord) -> None:
    _gpus(session, case)
    folder = paths.model_dir()
    if not case.mode:  # a flag or type the binary lacks ends the case before models are looked at
        _command(session, case, rec, folder / case.target, folder / case.draft if case.draft else None)
    found = session.locate(case)
    case = _with_dataset(case, found)
    target, draft = found[case.target], found[case.draft] if case.draft else None
    at = _command(session, case, rec, target, draft)  # a mode case: resolved from the GGUF metadata
    _check_models(rec, target, draft, case.ctx_size)
    _judge(session, case, rec, _measure(session, case, rec, at, target))


def run_case(case: Case, session: Session) -> CaseRecord:
    """Run one case; every way it can end is in the returned record (and in results.json)."""
    rec = new_record(case)
    t0 = time.monotonic()
    try:
        _run(session, case, rec)
        rec.status = "passed"
    except CaseEnd as end:
        rec.status, rec.reason, rec.message = end.status, end.reason, end.message
    except budget.OverBudget as over:  # its servers may be mid-request: the next case starts its own
        session.close()
        rec.status, rec.reason, rec.message = "failed", "over_budget", str(over)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM turned into one: recorded, then passed on
        rec.status, rec.reason, rec.message = (
            "interrupted",
            "interrupted",
            "the run was interrupted in this case",
        )
        raise
    except BaseException as exc:  # a harness bug or pytest-timeout: recorded, then passed on
        rec.status, rec.reason, rec.message = "error", "harness_error", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        rec.wall_s = round(time.monotonic() - t0, 2)
        session.results.add_case(rec)
    return rec
