"""A case's record (``CaseRecord``): one case of one run as results.json stores it, and the accessors every
reader shares (finite numbers, pos0_rate, whether a record measured anything, its speed samples)."""

from __future__ import annotations

import json
import math
import types
from dataclasses import asdict, dataclass, field
from typing import Any, get_args, get_origin, get_type_hints

from specsuite.common.errors import UserError

# A case that failed only on its numbers (a floor, the relative gate, the speed floor) still measured real
# numbers; any other failure (diverged, sanity, a crash) did not measure what the gate compares.
MEASURED_FAIL_REASONS = frozenset({"floor", "regressed", "speed"})


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite(value: Any) -> float | None:
    """A finite float, or None for null, NaN, infinities, booleans and non-numbers."""
    return float(value) if is_number(value) and math.isfinite(value) else None


def is_finite(value: Any) -> bool:
    """True for a finite int or float (not a bool): a number a floor or a gate may compare."""
    return finite(value) is not None


def pos0_rate(record: dict[str, Any]) -> Any:
    """pos0_rate, else per_position_rate[0] (schema-1 records have no pos0_rate)."""
    value = record.get("pos0_rate")
    if value is None:
        rates = record.get("per_position_rate")
        value = rates[0] if isinstance(rates, list) and rates else None
    return value


def is_measured(record: dict[str, Any]) -> bool:
    """Whether a case record holds numbers to compare: passed, or failed only for a floor/regression."""
    status, reason = record.get("status"), record.get("reason")
    ok = status == "passed" or (status == "failed" and reason in MEASURED_FAIL_REASONS)
    return ok and finite(record.get("accept_rate")) is not None


def speed_samples(record: dict[str, Any]) -> list[Any] | None:
    speed = record.get("speed")
    samples = speed.get("speedups") if isinstance(speed, dict) else None
    return samples if isinstance(samples, list) else None


@dataclass
class CaseRecord:
    """One case of one run, as results.json stores it (every number is the server's own)."""

    name: str
    tier: str = ""
    status: str | None = None  # passed, failed, skipped, error, interrupted
    reason: str | None = None
    message: str | None = None
    method: str = ""  # "draft-mtp", "ngram-mod,draft-mtp", "mode=auto", "spec-default"
    spec_type: str | None = None  # what --spec-type got (a mode case: what the resolver chose)
    mode: str | None = None
    resolved: dict[str, Any] | None = None  # a mode case: {flags, spec_type, why, fallback_reason}
    n_max: int | None = None
    target: str = ""
    draft: str | None = None
    floors: dict[str, Any] = field(default_factory=dict)
    uncalibrated: bool = False
    drafted: int | None = None
    accepted: int | None = None
    drafts: int | None = None
    accept_rate: float | None = None
    accept_len: float | None = None
    per_position: list[int] = field(default_factory=list)
    per_position_rate: list[float] = field(default_factory=list)
    pos0_rate: float | None = None
    decode_tps: float | None = None
    baseline_decode_tps: float | None = None
    speedup: float | None = None
    speed: dict[str, Any] | None = None
    identical_fraction: float | None = None
    prompts: list[dict[str, Any]] = field(default_factory=list)
    baseline: dict[str, Any] | None = None  # the history baseline this case was compared with
    command: list[str] | None = None
    log: str | None = None
    wall_s: float | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> CaseRecord:
        """Tolerant of older schemas (unknown keys dropped, missing ones and nulls take their defaults), but
        a value of the wrong shape is a UserError naming the case and the field, never a later traceback."""
        if not isinstance(data, dict):
            raise UserError(f"case {name!r}: its record must be an object, not {json_kind(data)}")
        kw = {k: v for k, v in data.items() if k in _FIELD_HINTS and k != "name"}
        spec_type = kw.get("spec_type")
        if isinstance(spec_type, list) and all(isinstance(t, str) for t in spec_type):
            kw["spec_type"] = ",".join(spec_type)  # schema 1 stored a chain as a list
        for key, value in list(kw.items()):
            hint = _FIELD_HINTS[key]
            if value is None and not _fits(hint, None):
                del kw[key]  # a null where the field has a default: the default
            elif not _fits(hint, value):
                raise UserError(
                    f"case {name!r}: field {key!r} must be {_describe(hint)}, not {json_kind(value)} "
                    f"({_short(value)})"
                )
        if not kw.get("pos0_rate") and kw.get("per_position_rate"):
            kw["pos0_rate"] = kw["per_position_rate"][0]
        return cls(name=name, **kw)

    @property
    def measured(self) -> bool:
        """Numbers a baseline may be taken from (the gate's rule, regress.is_measured)."""
        return is_measured(self.to_dict())


_FIELD_HINTS: dict[str, Any] = get_type_hints(CaseRecord)
_KINDS = {str: "a string", int: "a number", float: "a number", bool: "true or false", dict: "an object",
          list: "a list", type(None): "null"}  # fmt: skip


def _fits(hint: Any, value: Any) -> bool:
    """Whether a JSON value fits a CaseRecord annotation (an int fits a float: JSON does not tell)."""
    if hint is Any:
        return True
    if isinstance(hint, types.UnionType):
        return any(_fits(h, value) for h in get_args(hint))
    origin = get_origin(hint) or hint
    if origin is list:
        return isinstance(value, list) and all(_fits(get_args(hint)[0], v) for v in value)
    if origin in (int, float):
        return isinstance(value, (int, float))
    return isinstance(value, origin)


def _describe(hint: Any) -> str:
    if isinstance(hint, types.UnionType):
        return " or ".join(dict.fromkeys(_describe(h) for h in get_args(hint)))
    origin = get_origin(hint) or hint
    if origin is list:
        item = _KINDS.get(get_args(hint)[0], "values").removeprefix("a ").removeprefix("an ")
        return f"a list of {item}s" if item != "values" else "a list"
    return _KINDS.get(origin, "a value")


def json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return next((k for t, k in _KINDS.items() if type(value) is t), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
