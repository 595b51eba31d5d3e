"""Run one case of the suite against a llama-server binary: ``run_case(case, engine) -> CaseRecord``.

Per case: the command line (a flag or type the binary lacks ends the case here, with ``binary_no_<what>``,
or ``not_in_build`` for an older build: the engine's ``vintage``), the models (stamp-verified paths), the
GGUF checks, then a server with the case's speculation next to the speculation-off server (the case's own
command without its speculative flags: measure.plain). The acceptance numbers come from a cold pass as
upstream measures (measure.cold): the prompts on the fresh speculative server before any other request,
counted by ``/metrics``; then a discarded warm-up and the A-B-B-A speed rounds (their counters are kept,
not reported), with the per-block overhead and the physical bound on the speedup (measure.overhead,
measure.plausible). Then the filled record is judged (measure.judge): the floors, the sanity relations,
divergence from the plain server's tokens, the self-tests, the speed floor, the usage check, and the
harness's gate against the history baseline. Every outcome, also an interruption, lands in results.json.
"""

from __future__ import annotations

import functools
import itertools
import operator
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from specsuite.cases.dataset import with_prompts
from specsuite.cases.kvtypes import REFERENCE
from specsuite.cases.schema import SLOT_STEPS, Case
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.measure import (
    budget,
    categories,
    concurrency,
    engaged,
    judge,
    known,
    kvaxis,
    observe,
    order,
    overhead,
    plausible,
)
from specsuite.measure.argv import server_command
from specsuite.measure.cold import of_case as cold_of_case
from specsuite.measure.concurrency import Reference, Throughput
from specsuite.measure.engine import CaseEnd, Engine, server_end
from specsuite.measure.outcome import (
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
from specsuite.measure.plain import plain_of
from specsuite.measure.streams import Pass, run_streams, warm_up
from specsuite.models.gguf import check_models
from specsuite.results.config import case_config
from specsuite.results.record import NOT_IN_BUILD, CaseRecord, Resolved
from specsuite.server import metrics
from specsuite.server.failure import log_tail
from specsuite.server.probe import MissingFlag
from specsuite.server.process import Command, LlamaServer, ServerFailed
from specsuite.server.resolver import resolve_for_model

FIRST = (
    "baseline_speculated",
    "order_dependent",
    "slot_restore",
    "spec_disengaged",
)  # a server's life's failures, in order

SLOT_SAVE_PATH = "--slot-save-path"  # harness-owned: where a sequence's slot is saved (never a case's flag)

# The case's server command at a number of slots (its own, or 1 for its np-1 reference).
Slots = Callable[[int], Command]


@dataclass
class Measured:
    outcome: RequestOutcome
    log_text: str
    usage: str | None  # what is wrong with /v1/chat/completions' usage, if anything
    throughput: Throughput = field(default_factory=Throughput)  # the rounds as a client sees them
    np1: Reference | None = None  # a case with several slots: the np-1 output it is compared with
    # the servers' life (measure.engaged): the plain server drafted, or speculation stopped after the cold
    # pass; either fails the case first, and its speed is of another configuration: not gated
    life: list[judge.Failure] = field(default_factory=list)
    # a request of the case's sequence that the ones before it changed, one a slot's restore changed
    order: list[judge.Failure] = field(default_factory=list)
    kv: Reference | None = None  # a member of a KV axis: its f16 member's output (measure.kvaxis)


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


def _missing(engine: Engine, case: Case, what: str, reason: str) -> CaseEnd:
    """A method or flag the binary lacks: not in this build yet (an older build than the pin, where no
    lower build measured the case: ``vintage``), else a loss (strict: failed; --allow-missing: skipped)."""
    msg = f"{engine.caps.binary} cannot run this case: it has no {what}"
    fresh, said = engine.vintage(case.name, what) if engine.vintage else (False, "")
    if fresh:
        return CaseEnd(NOT_IN_BUILD, reason, f"{msg}{said}")
    if engine.options.strict:
        return CaseEnd(
            "failed", reason, f"{msg}{said} (strict: a lost method is a regression; --allow-missing skips)"
        )
    return CaseEnd("skipped", reason, f"{msg}{said} (skipped: --allow-missing / SPEC_STRICT=0)")


def _resolve(
    engine: Engine, case: Case, rec: CaseRecord, target: Path, draft: Path | None
) -> tuple[str, ...]:
    """A ``mode`` case: the front end's resolver picks the flags from the probe and the GGUF metadata."""
    res = resolve_for_model(
        case.mode,
        caps=engine.resolver_caps,
        model_path=target,
        gpu=engine.gpu,
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
    if res.fallback_reason:  # the binary lacks what the mode would pick: a missing method, said as such
        what = f"support for {case.mode!r} as resolved ({res.why})"
        raise MissingFlag(engine.caps.binary, what, res.fallback_reason)
    if case.expect_resolved is not None and got != case.expect_resolved:
        msg = f"mode {case.mode!r} resolved to {got}, expected {case.expect_resolved} ({res.why})"
        raise CaseEnd("failed", "self_test", msg)
    return tuple(res.flags)


def _command(engine: Engine, case: Case, rec: CaseRecord, target: Path, draft: Path | None) -> Slots:
    """The case's command at a number of slots. What the binary lacks (the method a mode resolves to, a flag
    or type the command needs: ``MissingFlag``) ends the case here, before any server starts."""
    try:
        resolved = _resolve(engine, case, rec, target, draft) if case.mode else None

        def at(parallel: int) -> Command:
            return lambda port: server_command(
                engine.caps, target, port, case, draft, resolved, parallel=parallel
            )

        at(case.parallel)(0)  # the case's own command: what the binary lacks ends the case before any server
        if _slot_steps(case) and SLOT_SAVE_PATH not in engine.caps.options:  # its sequence's server's flag
            raise MissingFlag(engine.caps.binary, f"option {SLOT_SAVE_PATH}", "binary_no_slot_save_path")
    except MissingFlag as exc:
        raise _missing(engine, case, exc.what, exc.reason) from None
    return at


def _slot_steps(case: Case) -> bool:
    return any(step in SLOT_STEPS for step in case.sequence)


def _types(case: Case, rec: CaseRecord) -> tuple[str, ...]:
    """The spec types a case's server runs: the case's own (a tuple from cases.toml on), or for a mode case
    the chain the resolver chose (its one string, split once); ``default`` (detected) names no type."""
    chosen = case.spec_type if not case.mode else tuple((rec.spec_type or "").split(","))
    return tuple(t for t in chosen if t and t != "default")


def _check_models(
    rec: CaseRecord, types: tuple[str, ...], target: Path, draft: Path | None, ctx: int
) -> None:
    try:
        rec.warnings += check_models(list(types), target, draft, ctx)
    except UserError as exc:
        raise CaseEnd("error", "model_missing_or_invalid", str(exc)) from None


def _round_count(engine: Engine, case: Case) -> int:
    """``--repeat`` rounds, else its tier's (cases.schema.TIER_REPEAT), raised to the case's own ``repeat``
    (one where cases share the cores: no timing means anything there, the round is for tokens and
    counters); with several slots at least two, so that counters that move from run to run at one np are
    seen as nondeterministic (DSpark's do at np 4 and 8: measure.concurrency)."""
    n = case.rounds(engine.options.repeat) if engine.speed else 1
    return max(n, 2) if case.parallel > 1 else n


@dataclass
class Rounds:
    """The rounds after the cold pass: each speculative round's counters (kept to show whether they repeat
    and that speculation stayed engaged, never reported: the cold pass's are) and answers, the plain
    server's first answers (the reference tokens) and its counters over them all (it must draft nothing),
    and the speed."""

    deltas: list[metrics.Delta]
    spec: list[list[Completion]]
    first_base: list[Completion]
    plain: metrics.Delta
    speed: Speed
    seen: Throughput


def _rounds(
    engine: Engine, case: Case, spec: LlamaServer, base: LlamaServer, watch: observe.Watch, rounds: int
) -> Rounds:
    """After the cold pass: a warm-up (the baseline's was done when it started), then ``rounds`` rounds
    (``_round``, ``_round_count``); each side's counters are ``/metrics`` deltas. ``watch`` samples memory
    after each and keeps the timings."""
    engine.phase("warm-up", (spec,), case.streams)
    warm_up(spec.connection, case.prompt_texts, case.streams, case.temperature)
    watch.sample(case.streams)
    snapshots, plain_mark = [spec.metrics()], base.metrics()
    speed, seen, first_base = Speed(), Throughput(), None
    spec_rounds: list[list[Completion]] = []
    plain_done: list[Completion] = []
    for r in range(rounds):
        engine.phase(f"round {r + 1} of {rounds}", (spec, base), 2 * len(case.prompt_texts) * case.streams)
        got = _round(case, spec, base, r)
        spec_rounds.append(got["spec"].completions)
        plain_done += got["base"].completions
        for side in ("spec", "base"):
            watch.round(side, got[side].completions)
        watch.sample(len(got["spec"].completions))
        snapshots.append(spec.metrics())
        first_base = first_base or got["base"].completions
        if engine.speed:
            speed.add(got["spec"].completions, got["base"].completions)
            seen.add("spec", got["spec"])
            seen.add("base", got["base"])
    assert first_base is not None
    deltas = [
        metrics.delta(a, b, done)
        for (a, b), done in zip(itertools.pairwise(snapshots), spec_rounds, strict=True)
    ]
    plain = engaged.plain_counters(plain_mark, base.metrics(), plain_done)
    return Rounds(deltas, spec_rounds, first_base, plain, speed, seen)


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


def _measure(engine: Engine, case: Case, rec: CaseRecord, at: Slots, target: Path) -> Measured:
    rounds = _round_count(engine, case)
    like = plain_of(engine.caps, at(case.parallel), target, case.gpus, engine.cpus(case))
    try:
        base = engine.plain_server(like, case)
    except ServerFailed as exc:  # it starts first (a target the build predates: Engine.start ends the case)
        raise server_end(exc, "plain") from None
    log = engine.results.logs / f"{case.name}.log"
    rec.log = engine.results.rel(log)
    rec.baseline_command = base.command
    rec.cpus = sorted(base.cpus) if base.cpus else None
    limit = budget.Budget.of(case, engine.options, base.log_path, rounds)
    engine.phase("loading the case's server")
    with engine.serving(at(case.parallel), log, case) as spec, budget.armed(limit, log):
        rec.command = spec.command
        watch = observe.Watch(spec, base, engine.gpu)
        try:
            engine.phase("cold pass", (spec,), len(case.prompt_texts) * case.streams)
            cold = cold_of_case(spec, case)  # before any other request to this server
            watch.sample(len(cold.done.completions))
            rec.warnings += cold.warnings
            after = _rounds(engine, case, spec, base, watch, rounds)
            engine.phase("the chat request")
            usage = _usage(spec, case, rec)
            rec.config = case_config(spec.command, engine.flag_keys, spec.props())
        except ServerFailed as exc:
            if not base.running:
                engine.close()
                raise server_end(exc, "plain") from None
            raise server_end(exc, "case") from None
        except metrics.MetricsError as exc:
            raise CaseEnd("failed", "metrics", f"{exc}\n{log_tail(spec.log_text())}") from None
        finally:  # read while the servers still run
            rec.memory, rec.prefill = watch.memory(), watch.prefill()
    ref = engine.plain_tokens(like, case, after.first_base)
    comps = cold.done.completions
    divs = divergence(ref, comps)
    cats = categories.numbers(cold.categories, comps, after.first_base, divs)
    outcome = RequestOutcome(cold.delta, comps, divs, after.speed, rounds=after.deltas, categories=cats)
    np1 = engine.np1_reference(case, at(1), cold.delta, comps)  # after the case's server stopped
    life = [f for f in (engaged.baseline_speculated(after.plain), engaged.disengaged(comps, after.spec)) if f]
    return Measured(outcome, spec.log_text(), usage, after.seen, np1, life, _sequence(engine, case, rec, at))


def _usage(spec: LlamaServer, case: Case, rec: CaseRecord) -> str | None:
    """What is wrong with ``/v1/chat/completions``' usage, if anything. An auxiliary request: the case's
    numbers come from ``/completion``, so a chat request the server refuses while it keeps running (an HTTP
    error: an older build's chat parser rejects the synthetic models' output) is a warning on the case, not
    its end; a server that died or hung on it still ends the case."""
    try:
        return usage_problem(spec.chat(chat_body(case.prompt_texts[0][1])))
    except ServerFailed as exc:
        if exc.reason != "runtime_error" or not spec.running:
            raise
        said = str(exc).split("\n", 1)[0]
        rec.warnings.append(f"usage not checked (an auxiliary request; the measurement stands): {said}")
        return None


def _sequence(engine: Engine, case: Case, rec: CaseRecord, at: Slots) -> list[judge.Failure]:
    """The case's sequence (measure.order), after its own server stopped: one server of a case at a time.
    Slot steps give its server the build's --slot-save-path (the harness's own folder in the run's logs;
    ``_command`` found the flag)."""
    if not case.sequence:
        return []
    slot_flags: list[str] = []
    if _slot_steps(case):
        folder = engine.results.logs / f"{case.name}-slots"
        folder.mkdir(exist_ok=True)
        slot_flags = [SLOT_SAVE_PATH, str(folder)]

    def serve(what: str, extra: Sequence[str]) -> AbstractContextManager[LlamaServer]:
        command = at(1) if not extra else (lambda port: [*at(1)(port), *extra])
        return engine.serving(command, engine.results.logs / f"{case.name}-{what}.log", case)

    engine.phase(f"its sequence of {len(case.sequence)} steps")
    try:
        got = order.run_sequence(case, serve, slot_flags)
    except ServerFailed as exc:
        raise server_end(exc, "sequence") from None
    rec.sequence, rec.sequence_alone = order.counters(got.done), order.counters(list(got.alone.values()))
    return [
        f
        for f in (order.order_dependent(got.done, got.alone, got.after_restore), order.slot_restore(got))
        if f
    ]


def _fill(rec: CaseRecord, outcome: RequestOutcome, case: Case) -> None:
    """The record's numbers: the counters and speed, the per-block overhead (one stream: with several the
    requests' decode times overlap), whether the speed is possible."""
    outcome.fill(rec)
    if case.streams == 1:
        overhead.fill(rec, outcome.speed, outcome.rounds)
    rec.implausible_speed = plausible.check(rec)
    rec.warnings += outcome.delta.warnings() + ([rec.implausible_speed] if rec.implausible_speed else [])
    rec.not_in_build = list(dict.fromkeys([*rec.not_in_build, *outcome.delta.not_in_build()]))


def _judge(engine: Engine, case: Case, rec: CaseRecord, m: Measured) -> None:
    """The filled record judged (the one typed record from measurement to verdict)."""
    if m.life:  # measured against speculation, or after it stopped: no speed to report or gate
        m.outcome.speed = Speed()
    _fill(rec, m.outcome, case)
    line = spec_result_line(rec)
    print(line, flush=True)
    engine.result_lines.append(line)
    sanity = m.outcome.delta.sanity_errors()
    against_np1 = concurrency.check(case, rec, m.outcome, m.throughput, m.np1, engine.options.rtol)
    against_np1 += kvaxis.check(case, rec, m.outcome.delta, m.outcome.completions, m.kv)  # vs its f16 member
    if case.concurrent:
        sanity += concurrency.counter_sum_errors(m.outcome.delta, m.outcome.completions)
    failures = judge.check(case, rec, m.outcome.completions, sanity, m.log_text, against_np1)
    if not engine.speed or rec.implausible_speed or m.life:  # no speed measured, none possible: no floor
        failures = [f for f in failures if f.reason != "speed"]
    # first what the numbers mean: a plain side that speculated, then a request the ones before it changed
    # (the more exact word for a drafter whose state leaked), then speculation that stopped in the rounds
    life = sorted([*m.life, *m.order], key=lambda f: FIRST.index(f.reason))
    failures = [*life, *failures]
    if m.usage:
        failures.append(judge.Failure("usage", m.usage))
    failures += observe.memory_failures(rec.memory)
    if engine.gate is not None:  # also after a failed floor: its baseline is where a bisect starts
        failures += engine.gate(case, rec, bool(failures))
    if failures:
        per_pos = ", ".join(f"{r:.3f}" for r in rec.per_position_rate if r is not None)
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


def _with_dataset(case: Case, folder: Path) -> Case:
    """A dataset-backed prompt set's prompts, read from its verified file (``cases.dataset``)."""
    if case.dataset is None:
        return case

    try:
        return with_prompts(case, folder / case.dataset.file)
    except UserError as exc:
        raise CaseEnd("error", "model_missing_or_invalid", str(exc)) from None


def _gpus(engine: Engine, case: Case) -> None:
    """A case that needs more GPUs than this run gives a worker cannot measure what it says."""
    have = len(engine.place.gpus) if engine.place is not None else 0
    if have and case.gpus > have:
        msg = f"the case needs {case.gpus} GPUs and this run gives each worker {have} (--gpus)"
        if engine.options.strict:
            raise CaseEnd("failed", "too_few_gpus", f"{msg} (strict; --allow-missing skips)")
        raise CaseEnd("skipped", "too_few_gpus", f"{msg} (skipped: --allow-missing / SPEC_STRICT=0)")


def _run(engine: Engine, case: Case, rec: CaseRecord) -> None:
    _gpus(engine, case)
    folder = paths.model_dir()  # the case's files, which ``verify`` checks by their stamps
    target, draft = folder / case.target, folder / case.draft if case.draft else None
    # a flag or type the binary lacks ends the case before models are looked at; a mode case's command is
    # resolved from the GGUF metadata, so after they are verified
    at = None if case.mode else _command(engine, case, rec, target, draft)
    engine.verify(case)
    case = _with_dataset(case, folder)
    at = at or _command(engine, case, rec, target, draft)
    _check_models(rec, _types(case, rec), target, draft, case.ctx_size)
    m = _measure(engine, case, rec, at, target)
    if case.kv is not None:  # a KV axis's member against its f16 member (this run's, else measured now)
        f16 = _command(engine, case.kv_member(REFERENCE), rec, target, draft)(case.parallel)
        m.kv = kvaxis.reference(engine, case, f16, m.outcome.delta, m.outcome.completions)
    _judge(engine, case, rec, m)


def run_case(case: Case, engine: Engine) -> CaseRecord:
    """Run one case; every way it can end is in the returned record (and in results.json)."""
    rec = new_record(case)
    t0 = time.monotonic()
    try:
        _run(engine, case, rec)
        rec.status = "passed"
    except CaseEnd as end:
        rec.status, rec.reason, rec.message = end.status, end.reason, end.message
    except budget.OverBudget as over:  # its servers may be mid-request: the next case starts its own
        engine.close()
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
        if case.known_bug is not None:  # the upstream bug it reproduces: still there, fixed, or another end
            log = engine.results.logs / f"{case.name}.log"
            build = engine.results.run.binary.build  # against a bug of older builds' fixed_in
            known.judge(case.known_bug, rec, log, engine.known_history, engine.older_than_pin, build)
        engine.results.add_case(rec)
    return rec
