"""Good, bad or skip for one bisect step, from the case's record at that commit. Pure.

bad: the case failed its floor or speed floor, or the metric dropped more than rtol below the good commit's
value (``regress.regressions``, the history gate's rule: a speedup drop must also be significant).
skip: the binary lacks the method (``binary_no_*``), or the case failed or errored for anything that is not
a measurement (a crash, divergence, a timeout): such a commit says nothing about the metric.
good: the case passed and the metric is within rtol of the good commit's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsuite.history import regress
from specsuite.results.record import CaseRecord, decode_record, finite

METRICS = ("accept_rate", "accept_len", "pos0_rate", "speedup", "decode_tps")
SPEED_METRICS = ("speedup", "decode_tps")  # judged over A-B-B-A rounds: 4 or more for the Mann–Whitney rule
EXIT = {"good": 0, "bad": 1, "skip": 125}  # what `git bisect run` reads
_FLOORS = (("accept_rate", "min_accept_rate"), ("accept_len", "min_accept_len"), ("speedup", "min_speedup"))


@dataclass(frozen=True)
class Judgement:
    verdict: str  # good | bad | skip
    rule: str  # what decided: floor, relative, within_rtol, binary_no_*, build, the failure reason, ...
    value: float | None  # the metric at this commit, when measured
    detail: str  # the numbers behind the verdict

    @property
    def exit_code(self) -> int:
        return EXIT[self.verdict]


def metric_value(rec: CaseRecord, metric: str) -> float | None:
    return finite(getattr(rec, metric))


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def floor_detail(rec: CaseRecord) -> str:
    """Which floors the numbers miss, e.g. ``accept_rate 0.3117 < floor 0.8271``."""
    misses = []
    for metric, key in _FLOORS:
        value, floor = finite(getattr(rec, metric)), finite((rec.floors or {}).get(key))
        if value is not None and floor is not None and value < floor:
            misses.append(f"{metric} {value:.4f} < floor {floor:.4f}")
    if misses:
        return "; ".join(misses)
    lines = (rec.message or "").strip().splitlines()
    return lines[0] if lines else f"failed ({rec.reason})"


def judge(
    rec: CaseRecord | None,
    metric: str,
    rtol: float,
    reference: dict[str, Any] | None = None,
    reference_commit: str = "",
) -> Judgement:
    """The verdict on one commit; ``reference``: the good commit's record (None while measuring it)."""
    if rec is None:
        return Judgement("skip", "no_result", None, "the run left no record of the case")
    value = metric_value(rec, metric)
    if rec.reason and rec.reason.startswith("binary_no_"):
        return Judgement("skip", rec.reason, None, f"the binary cannot run the case ({rec.reason})")
    if rec.status == "failed" and rec.reason in ("floor", "speed"):
        return Judgement("bad", rec.reason, value, floor_detail(rec))
    measured = rec.status == "passed" and value is not None
    ref = decode_record(rec.name, reference, "the good commit's record") if reference is not None else None
    if measured and ref is not None:
        found = regress.regressions(rec, ref, rtol=rtol, baseline_commit=reference_commit)
        drop = next((r for r in found if r.metric == metric), None)
        if drop is not None:
            return Judgement("bad", "relative", value, drop.message)
    if measured:
        detail = _good_detail(metric, value, ref, reference_commit, rtol)
        return Judgement("good", "passed" if ref is None else "within_rtol", value, detail)
    first = (rec.message or "").strip().splitlines()[:1]
    why = f"{rec.status} ({rec.reason}){': ' + first[0] if first else ''}"
    return Judgement("skip", rec.reason or rec.status or "unknown", value, f"not a measurement: {why}")


def _good_detail(metric: str, value: float | None, reference: CaseRecord | None, at: str, rtol: float) -> str:
    if reference is None:
        return f"{metric} {_fmt(value)}; the case passed its floors"
    ref = metric_value(reference, metric)
    if ref is None or value is None or ref == 0:
        return f"{metric} {_fmt(value)} vs {_fmt(ref)} at good {at[:7]}"
    change = (value - ref) / ref * 100
    return f"{metric} {value:.4f} vs {ref:.4f} at good {at[:7]} ({change:+.1f} %, rtol {rtol * 100:g} %)"
