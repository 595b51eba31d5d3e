"""A member of a KV-cache axis against the f16 member of its run: acceptance at least the case's fraction
of f16's (``kv_collapse``), and, greedy with only the draft's cache type moved, f16's tokens for every
prompt (``kv_diverged``); the record's ``kv`` block either way.

The reference is the f16 member's cold pass, for the same prompts, ``n_predict`` and slots: that of this
run (the axis's f16 member runs first, in one group of its target), else measured for the member on a
fresh server with the f16 flags in place of its own (a member run alone, or on another shard).

Why only where the draft alone moved: a quantised target cache changes the target's own output (measured
on the pinned CPU build: tiny-simple-kv's q4_0 target gave other tokens than f16, and so did its plain
server at q4_0), so its tokens are judged against its own plain server at its own types, as every case's
are (``min_identical_fraction``), and against f16 only reported. A draft's cache decides what is drafted,
never what is kept: greedy verification keeps the target's argmax, so f16's tokens are the rule. Upstream's
#25725 is the acceptance half: DFlash at 0.99 with an f16 draft cache, 0.00-0.02 with q8_0.
"""

from __future__ import annotations

from specsuite.cases.kvtypes import REFERENCE
from specsuite.cases.schema import Case
from specsuite.measure.cold import of_case as cold_of_case
from specsuite.measure.concurrency import Reference, differing
from specsuite.measure.engine import CaseEnd, Engine
from specsuite.measure.judge import EPS, Failure
from specsuite.measure.outcome import Completion, first_diff
from specsuite.results.record import CaseRecord, KvAxis
from specsuite.server.metrics import Delta
from specsuite.server.process import Command, ServerFailed

# What an f16 reference is the output of: its command (port 0), the prompt set, n_predict, the streams.
Key = tuple[tuple[str, ...], str, int, int]


def reference(
    engine: Engine, case: Case, f16: Command, cold: Delta, comps: list[Completion]
) -> Reference | None:
    """A member's f16 output (``f16``: its f16 member's command): this run's, else measured now, after
    the member's own server stopped (one server of a case at a time). The f16 member's own cold pass is
    kept for the members after it; it has nothing to be compared with."""
    if case.kv is None:
        return None
    key: Key = (tuple(f16(0)), case.prompts, case.n_predict, case.streams)
    if case.kv == REFERENCE:
        engine.kv_refs.setdefault(key, Reference(f"{case.name} (this run)", comps, cold))
        return None
    if key not in engine.kv_refs:
        engine.kv_refs[key] = _measure(engine, case, f16)
    return engine.kv_refs[key]


def _measure(engine: Engine, case: Case, command: Command) -> Reference:
    """The cold pass of the member's command at f16 on a fresh server (after the member's own stopped)."""
    log = engine.results.logs / f"{case.name}-f16.log"
    with engine.serving(command, log, case) as srv:
        try:
            got = cold_of_case(srv, case.kv_member(REFERENCE))
        except ServerFailed as exc:
            raise CaseEnd("failed", exc.reason, f"the f16 reference server failed: {exc}") from None
    return Reference(f"measured for {case.name}: {engine.results.rel(log)}", got.done.completions, got.delta)


def check(
    case: Case, rec: CaseRecord, delta: Delta, comps: list[Completion], ref: Reference | None
) -> list[Failure]:
    """A member of a KV axis: its record's ``kv`` block, and against ``ref`` (its f16 output) the
    acceptance and, where judged, the tokens. The f16 member itself, and any other case: nothing."""
    if case.kv is None or case.kv_sweep is None:
        return []
    rec.kv = KvAxis(sweep=case.kv_sweep, target=case.kv.target, draft=case.kv.draft)
    if ref is None:
        return []
    kv = rec.kv
    kv.reference, kv.min_accept_fraction = ref.source, case.kv_fraction
    kv.f16_accept_rate, kv.f16_accept_len = _r(ref.delta.accept_rate), _r(ref.delta.accept_len)
    was, now = ref.delta.accept_rate, delta.accept_rate
    kv.accept_fraction = _r(now / was) if now is not None and was else None
    kv.identical_to_f16 = _r(sum(_same(ref, c) for c in comps) / len(comps)) if comps else None
    kv.tokens_judged = case.kv.target == REFERENCE.target and case.temperature == 0
    return _collapse(case, delta, ref) + (_diverged(case, comps, ref) if kv.tokens_judged else [])


def _same(ref: Reference, c: Completion) -> bool:
    return first_diff(ref.answer(c.id).tokens, c.tokens) is None


def _collapse(case: Case, delta: Delta, ref: Reference) -> list[Failure]:
    """The accept rate below the case's fraction of f16's (from the counters: no rounded rate decides)."""
    was, fraction = ref.delta.accept_rate, case.kv_fraction
    assert case.kv is not None and fraction is not None
    if not was or delta.accept_rate is None or delta.accepted / delta.drafted >= fraction * was - EPS:
        return []
    return [
        Failure(
            "kv_collapse",
            f"accept rate {delta.accept_rate:.4f} < {fraction:g} x f16's {was:.4f} (kv {case.kv.spelled}; "
            f"f16: {ref.source}): accepted={delta.accepted} drafted={delta.drafted} steps={delta.drafts} "
            f"against {ref.delta.accepted}/{ref.delta.drafted}/{ref.delta.drafts}",
        )
    ]


def _diverged(case: Case, comps: list[Completion], ref: Reference) -> list[Failure]:
    """Every prompt whose tokens differ from the f16 member's: only the draft's cache type moved, and a
    draft decides what is drafted, never what greedy verification keeps."""
    assert case.kv is not None
    moved = f"kv {case.kv.spelled}; f16: {ref.source}"
    what = f"the f16 member's tokens with only the draft's cache type moved ({moved})"
    return differing(ref, comps, ("f16", "here"), "kv_diverged", what)


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)
