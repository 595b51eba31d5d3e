"""What a case must satisfy: drafting happened, the sanity relations, the one-sided floors, and the case's
own self-test expectations. Every failure message carries the measured number next to the bound it missed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specsuite.cases.schema import Case
from specsuite.measure.outcome import Completion
from specsuite.results import metrics
from specsuite.results.record import CaseRecord, finite
from specsuite.server.failure import spec_inactive_reason
from specsuite.server.metrics import TIMINGS

# Rounding in the report must never turn a pass into a fail: compare the exact ratios with this slack.
EPS = 1e-9


@dataclass(frozen=True)
class Failure:
    reason: str  # results.json reason: spec_inactive, spec_init_failed, sanity, floor, diverged, self_test, …
    message: str


def _drafting(case: Case, rec: CaseRecord, log_text: str) -> list[Failure]:
    if case.expect_no_drafts:
        if rec.drafted != 0:
            return [Failure("self_test", f"expected no drafts, got drafted={rec.drafted}")]
        return []
    if (rec.drafted or 0) <= 0 or (rec.drafts is not None and rec.drafts <= 0):  # None: no count of drafts
        return [
            Failure(
                spec_inactive_reason(log_text),
                f"speculation did not run: drafted={rec.drafted} steps={rec.drafts} (need > 0)",
            )
        ]
    return []


def _floors(case: Case, rec: CaseRecord) -> list[Failure]:
    if case.uncalibrated:  # report-only until `calibrate` writes floors measured on the runner
        return []
    out = []
    rate, alen = rec.accept_rate, rec.accept_len
    accepted, drafted, drafts = rec.accepted or 0, rec.drafted or 0, rec.drafts or 0  # rates: counted
    if (
        rate is not None
        and case.min_accept_rate is not None
        and accepted / drafted < case.min_accept_rate - EPS
    ):
        out.append(
            Failure(
                "floor",
                f"accept_rate {rate:.4f} < floor {case.min_accept_rate:.4f} "
                f"(accepted={rec.accepted} / drafted={rec.drafted})",
            )
        )
    if (
        alen is not None
        and case.min_accept_len is not None
        and 1 + accepted / drafts < case.min_accept_len - EPS
    ):
        out.append(
            Failure(
                "floor",
                f"accept_len {alen:.4f} < floor {case.min_accept_len:.4f} "
                f"(1 + accepted={rec.accepted} / steps={rec.drafts})",
            )
        )
    return out


Lost = dict[tuple[int | None, str], int]  # (stream, prompt) -> tokens generated and not returned


def lost_tails(completions: Sequence[Completion]) -> Lost:
    """The requests whose answer holds fewer tokens than the server says it generated
    (``timings.predicted_n``), by (stream, prompt): how many it counted and did not return. Upstream b9113
    did so at the end of a speculative generation: the accepted batch that reached ``n_predict`` was counted
    whole (``n_decoded += ids.size()``) before its tokens were sent, so the limit stopped the send after its
    first token and the rest never reached the client."""
    return {
        c.key: c.predicted_n - len(c.tokens)
        for c in completions
        if c.tokens and c.predicted_n > len(c.tokens)
    }


def _tokens_lost(completions: Sequence[Completion], rec: CaseRecord, lost: Lost) -> list[Failure]:
    """The answer lost tokens the server generated: its own failure (the case's reason unless its tokens
    diverged as well: its counters still count the whole generation, results.record). What it returned
    is still compared with the plain server's tokens; a request whose only difference is the missing tail
    is said here, not again as a divergence (``_identical``)."""
    if not lost:
        return []
    sent = {c.key: c for c in completions}
    per = ", ".join(
        f"{pid}{'' if stream is None else f' (stream {stream})'}: {len(sent[(stream, pid)].tokens)} of "
        f"{sent[(stream, pid)].predicted_n}"
        for (stream, pid) in lost
    )
    same = "the tokens it returned equal the plain server's"
    if _unexplained(rec, lost):
        same = "some of the tokens it returned differ from the plain server's (diverged, above)"
    return [
        Failure(
            "tokens_lost",
            f"the speculative server returned fewer tokens than it generated (timings.predicted_n) for "
            f"{len(lost)} of {len(completions)} request(s): {per}; {same}",
        )
    ]


def _unexplained(rec: CaseRecord, lost: Lost) -> list[str]:
    """The prompts that differ from the plain server's tokens other than by a lost tail: a difference
    inside the tokens returned, or a short answer whose server did not count more."""
    out = []
    for p in rec.prompts:
        if p.identical:
            continue
        tail = (p.stream, p.id) in lost and p.first_diff is not None and p.first_diff == p.n_tokens
        if not tail:
            out.append(f"{p.id}@{p.first_diff}")
    return out


def _identical(case: Case, rec: CaseRecord, lost: Lost | None = None) -> list[Failure]:
    """Greedy decoding must give the speculation-off server's tokens: a product rule, not a measured floor,
    so it holds for uncalibrated cases too (as a ``min_speedup`` does). A request whose tokens equal the
    plain server's up to where its answer lost the tail (``lost``: ``_tokens_lost`` says it) is no
    divergence of the decoding."""
    ident = rec.identical_fraction
    if case.min_identical_fraction is None or (ident or 0.0) >= case.min_identical_fraction - EPS:
        return []
    if lost and not _unexplained(rec, lost):
        return []
    diffs = ", ".join(_unexplained(rec, lost or {}))
    return [
        Failure(
            "diverged",
            f"identical_fraction {ident} < floor {case.min_identical_fraction} "
            f"(first differing token per prompt: {diffs})",
        )
    ]


def _category_floors(case: Case, rec: CaseRecord) -> list[Failure]:
    """Each category's floors on that category's own counters (report-only while uncalibrated)."""
    if case.uncalibrated:
        return []
    out = []
    for name, floors in case.category_floors.items():
        c = rec.categories.get(name)
        if c is None:
            out.append(
                Failure("floor", f"category {name!r} has floors but the run measured no such category")
            )
            continue
        for key, value, floor in (("accept_rate", c.accept_rate, floors.min_accept_rate),
                                  ("accept_len", c.accept_len, floors.min_accept_len)):  # fmt: skip
            if floor is not None and (value is None or value < floor - EPS):
                counts = f"accepted={c.accepted} drafted={c.drafted} steps={c.drafts}"
                out.append(
                    Failure("floor", f"category {name!r}: {key} {value} < floor {floor:.4f} ({counts})")
                )
    return out


def _speed(case: Case, rec: CaseRecord) -> list[Failure]:
    """One-sided: speculation must not be slower than ``min_speedup`` x plain decoding (median of rounds).

    A product rule, not a measured floor: it holds for uncalibrated cases too when they name one."""
    if case.min_speedup is None:
        return []
    up, rounds = rec.speedup, (rec.speed.speedups if rec.speed else [])
    if up is None or not math.isfinite(up):
        return [Failure("speed", f"no speedup measured, but the case requires >= {case.min_speedup:.3f}")]
    if up < case.min_speedup - EPS:
        per_round = ", ".join(f"{x:.3f}" for x in rounds if x is not None)
        return [
            Failure(
                "speed",
                f"speedup {up:.3f} < floor {case.min_speedup:.3f} (median of {len(rounds)} round(s): "
                f"[{per_round}]; decode {rec.decode_tps} vs {rec.baseline_decode_tps} tokens/s "
                "without speculation)",
            )
        ]
    return []


# The floors judged by their own checks above; every other floor a registered metric names (results.metrics:
# min_prefill_ratio) is judged by ``_registered_floors``, a product rule like min_speedup.
_OWN_FLOORS = frozenset({"min_accept_rate", "min_accept_len", "min_identical_fraction", "min_speedup"})


def _registered_floors(case: Case, rec: CaseRecord) -> list[Failure]:
    """One-sided: each other registered metric with a floor in the case (the median of its rounds), reason
    ``speed`` (what a run that measured no speed does not judge); uncalibrated cases too, as min_speedup."""
    out = []
    for m in metrics.REGISTRY:
        floor = case.floors.get(m.floor) if m.floor and m.floor not in _OWN_FLOORS else None
        if floor is None:
            continue
        value, rounds = m.of(rec), [x for x in m.samples(rec) or [] if x is not None]
        if value is None:
            out.append(Failure("speed", f"no {m.label} measured, but the case requires {m.floor} {floor:g}"))
        elif (value < floor - EPS) if m.higher_is_better else (value > floor + EPS):
            per_round = ", ".join(f"{x:.{m.digits}f}" for x in rounds)
            bound = "floor" if m.higher_is_better else "ceiling"
            out.append(Failure("speed", f"{m.label} {m.text(value)} {'<' if m.higher_is_better else '>'} "
                                        f"{bound} {floor:.{m.digits}f} (median of {len(rounds)} round(s): "
                                        f"[{per_round}]; {m.floor})"))  # fmt: skip
    return out


def _self_tests(case: Case, rec: CaseRecord) -> list[Failure]:
    out = []
    acc, drafted, drafts, pos = rec.accepted or 0, rec.drafted or 0, rec.drafts, rec.per_position
    exact = {"drafted": case.expect_drafted, "accepted": case.expect_accepted, "steps": case.expect_drafts}
    for (key, want), got in zip(exact.items(), (drafted, acc, drafts), strict=True):
        if want is not None and got is None:  # counters from the timings: that build counts no drafts
            continue  # (the record's not_in_build says so)
        if want is not None and got != want:
            out.append(f"{key}={got}, expected exactly {want}")
    if case.expect_all_accepted and acc != drafted:
        out.append(f"accepted={acc} != drafted={drafted} (synthetic rates all 1 accept every draft token)")
    if case.expect_accept_len is not None and case.accept_len_tolerance is not None and drafts:
        alen = 1 + acc / drafts
        if abs(alen - case.expect_accept_len) > case.accept_len_tolerance + EPS:
            out.append(
                f"accept_len {alen:.4f} not within {case.expect_accept_len} ± {case.accept_len_tolerance}"
            )
    # [] with drafts: not exported (a warning); drafts None: counters from the timings, no positions at all
    positions = drafts is not None and (rec.per_position_rate != [] or not drafts)
    if case.expect_full_positions and positions and (not pos or pos[0] != drafts or sum(pos) != drafted):
        out.append(
            f"per_position {pos}: expected position 0 == steps={drafts} and sum == drafted={drafted} "
            "(every drafted token accepted)"
        )
    if case.expect_draft_len is not None and positions:
        longest = sum(1 for c in pos if c > 0)
        if longest != case.expect_draft_len:
            out.append(
                f"longest accepted draft = {longest} positions (per_position {pos}), "
                f"expected {case.expect_draft_len}"
            )
    return [Failure("self_test", m) for m in out]


def _log(case: Case, log_text: str) -> list[Failure]:
    return [Failure("log", f"server log lacks {s!r}") for s in case.expect_log if s not in log_text]


def check(
    case: Case,
    rec: CaseRecord,
    completions: list[Completion],
    sanity: list[str],
    log_text: str,
    concurrency: Sequence[Failure] = (),
) -> list[Failure]:
    """All failures of one case (empty = pass); the first one's reason is the case's reason.

    ``concurrency``: a case with several slots against its np-1 output (measure.concurrency), before the
    floors: a floor missed at np 4 because acceptance collapsed there is said as the collapse."""
    empty = list(dict.fromkeys(c.id for c in completions if not c.tokens))
    out = [Failure("no_tokens", f"no tokens returned for prompt(s) {', '.join(empty)}")] if empty else []
    out += _drafting(case, rec, log_text)
    out += [Failure("sanity", f"counter sanity: {s}") for s in sanity]
    out += concurrency
    out += _floors(case, rec)
    lost = lost_tails(completions)
    out += _identical(case, rec, lost)  # first: a divergence as well is no measurement
    out += _tokens_lost(completions, rec, lost)
    out += _category_floors(case, rec)
    out += _speed(case, rec)
    out += _registered_floors(case, rec)
    out += _self_tests(case, rec)
    out += _log(case, log_text)
    return out


def recheck(case: Case, rec: CaseRecord, speed: bool = True) -> list[Failure]:
    """A passed record from elsewhere (a shard) judged again by ``case`` as cases.toml has it: counters
    recorded, drafting, the floors (a rate that is null, NaN or below its floor fails) and each category's,
    the speed floor (``speed``: the run measured speed) and the self-tests, from the record's own numbers
    (its rates are its counters': ``results.checks`` refused the shard otherwise). The checks on what the
    record does not hold (the tokens, the server log) stay the shard's."""
    counted = ("drafted", "accepted") if rec.counters_source == TIMINGS else ("drafted", "accepted", "drafts")
    if any(not _is_count(getattr(rec, k)) for k in counted):
        return [Failure("metrics", "the record holds no acceptance counters: nothing to judge it by")]
    if out := _drafting(case, rec, ""):
        return out
    floors = not case.expect_no_drafts and not case.uncalibrated
    rates = ("accept_rate",) if rec.counters_source == TIMINGS else ("accept_rate", "accept_len")
    missing = [k for k in rates if floors and finite(getattr(rec, k)) is None]
    out = [
        Failure("floor", f"{k} is {getattr(rec, k)}, not a number: no floor can pass on it") for k in missing
    ]
    out += _floors(case, rec) if not missing else []
    out += _category_floors(case, rec)  # a case's total may hold while one of its categories does not
    out += _identical(case, rec)
    out += [*_speed(case, rec), *_registered_floors(case, rec)] if speed else []
    return out + _self_tests(case, rec)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
