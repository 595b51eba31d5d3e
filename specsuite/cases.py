"""The cases file (cases.toml): parse, validate and select the suite's cases.

Validation happens before any server starts, so a typo in the data file is one clear error naming the case
and the key, not a confusing failure half-way through a GPU run.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import paths, tomldata
from .errors import UserError

TIERS = ("smoke", "synthetic", "compact", "nightly", "all")
CASE_TIERS = ("smoke", "synthetic", "compact", "nightly")
GPU_TIERS = ("compact", "nightly")
# Canonical --spec-type tokens at the pinned commit (common/speculative.cpp); "auto" passes no --spec-type.
SPEC_TYPES = (
    "auto",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)
PROMPT_SETS = ("seed", "synthetic")
_NAME_RE = re.compile(r"^[a-z0-9_-]+$")

# key -> (accepted python types, required)
_KEYS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True),
    "tier": ((str,), True),
    "spec_type": ((str,), True),
    "target": ((str,), True),
    "draft": ((str,), False),
    "n_max": ((int,), True),
    "min_accept_rate": ((int, float), False),
    "min_accept_len": ((int, float), False),
    "min_identical_fraction": ((int, float), False),
    "n_min": ((int,), False),
    "p_min": ((int, float), False),
    "synth_rates": ((list,), False),
    "synth_len": ((int, float), False),
    "server_args": ((list,), False),
    "n_predict": ((int,), False),
    "prompts": ((str,), False),
    "expect_accepted": ((int,), False),
    "expect_all_accepted": ((bool,), False),
    "expect_accept_len": ((int, float), False),
    "accept_len_tolerance": ((int, float), False),
    "expect_no_drafts": ((bool,), False),
    "expect_full_positions": ((bool,), False),
    "expect_draft_len": ((int,), False),
    "expect_log": ((list,), False),
    "calibration": ((dict,), False),
}


@dataclass(frozen=True)
class Case:
    name: str
    tier: str
    spec_type: str
    target: str
    n_max: int
    draft: str | None = None
    min_accept_rate: float = 0.0
    min_accept_len: float = 0.0
    min_identical_fraction: float | None = None
    n_min: int | None = None
    p_min: float | None = None
    synth_rates: tuple[float, ...] | None = None
    synth_len: float | None = None
    server_args: tuple[str, ...] = ()
    n_predict: int = 128
    prompts: str = "seed"
    expect_accepted: int | None = None
    expect_all_accepted: bool = False
    expect_accept_len: float | None = None
    accept_len_tolerance: float | None = None
    expect_no_drafts: bool = False
    expect_full_positions: bool = False
    expect_draft_len: int | None = None
    expect_log: tuple[str, ...] = ()
    calibration: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def models(self) -> list[str]:
        """Lock names this case needs: the target, then the draft (once, if it drafts for itself)."""
        return list(dict.fromkeys([self.target, *([self.draft] if self.draft else [])]))

    @property
    def gpu(self) -> bool:
        return self.tier in GPU_TIERS

    @property
    def floors(self) -> dict[str, float | None]:
        return {
            "min_accept_rate": self.min_accept_rate,
            "min_accept_len": self.min_accept_len,
            "min_identical_fraction": self.min_identical_fraction,
        }


def _bad(case: str, msg: str) -> UserError:
    return UserError(f"cases.toml: case {case!r}: {msg}")


def _check_types(where: str, raw: dict[str, Any]) -> None:
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise _bad(where, f"unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(_KEYS)}")
    for key, (types, required) in _KEYS.items():
        if key not in raw:
            if required:
                raise _bad(where, f"missing required key {key!r}")
            continue
        value = raw[key]
        # bool is an int subclass: reject true/false where a number is expected.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            names = " or ".join(t.__name__ for t in types)
            raise _bad(where, f"{key} must be {names}, got {value!r}")


def _check_unit(where: str, key: str, value: float | None) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise _bad(where, f"{key} = {value} is outside [0, 1]")


def _check_values(where: str, raw: dict[str, Any]) -> None:
    if not _NAME_RE.match(raw["name"]):
        raise _bad(where, "name must match [a-z0-9_-]+")
    if raw["tier"] not in CASE_TIERS:
        raise _bad(where, f"tier {raw['tier']!r} is not one of {', '.join(CASE_TIERS)}")
    if raw["spec_type"] not in SPEC_TYPES:
        raise _bad(where, f"spec_type {raw['spec_type']!r} is not one of {', '.join(SPEC_TYPES)}")
    if raw["n_max"] < 1:
        raise _bad(where, f"n_max must be >= 1, got {raw['n_max']}")
    for key in ("min_accept_rate", "min_identical_fraction", "p_min"):
        _check_unit(where, key, raw.get(key))
    if not raw.get("expect_no_drafts"):
        for key in ("min_accept_rate", "min_accept_len"):
            if key not in raw:
                raise _bad(where, f"missing floor {key!r} (only expect_no_drafts cases may omit it)")
    if "min_accept_len" in raw and not 0.0 <= raw["min_accept_len"] <= raw["n_max"] + 1:
        raise _bad(where, f"min_accept_len = {raw['min_accept_len']} is outside [0, n_max + 1]")
    _check_synth(where, raw)
    _check_expectations(where, raw)
    for key in ("server_args", "expect_log"):
        if not all(isinstance(v, str) for v in raw.get(key, [])):
            raise _bad(where, f"{key} must be a list of strings")
    if raw.get("prompts", "seed") not in PROMPT_SETS:
        raise _bad(where, f"prompts {raw['prompts']!r} is not one of {', '.join(PROMPT_SETS)}")
    if raw.get("n_predict", 128) < 1:
        raise _bad(where, "n_predict must be >= 1")


def _check_synth(where: str, raw: dict[str, Any]) -> None:
    if "synth_rates" in raw and "synth_len" in raw:
        raise _bad(where, "synth_rates and synth_len are mutually exclusive (as in llama-server)")
    rates = raw.get("synth_rates")
    if rates is not None:
        if not rates or not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in rates):
            raise _bad(where, "synth_rates must be a non-empty list of numbers")
        for r in rates:
            _check_unit(where, "synth_rates entry", r)
        if any(b > a for a, b in itertools.pairwise(rates)):
            raise _bad(where, f"synth_rates {rates} must be non-increasing (entry i = P(first i+1 accepted))")
    if "synth_len" in raw and raw["synth_len"] < 1.0:
        raise _bad(where, f"synth_len = {raw['synth_len']} must be >= 1 (mean accept length)")


def _check_expectations(where: str, raw: dict[str, Any]) -> None:
    if ("expect_accept_len" in raw) != ("accept_len_tolerance" in raw):
        raise _bad(where, "expect_accept_len and accept_len_tolerance go together")
    if raw.get("accept_len_tolerance", 1.0) <= 0:
        raise _bad(where, "accept_len_tolerance must be > 0")
    if raw.get("expect_accepted", 0) < 0:
        raise _bad(where, "expect_accepted must be >= 0")
    if raw.get("expect_draft_len", 1) < 1:
        raise _bad(where, "expect_draft_len must be >= 1")


def _to_case(raw: dict[str, Any]) -> Case:
    kw = dict(raw)
    for key in ("synth_rates", "server_args", "expect_log"):
        if key in kw:
            kw[key] = tuple(float(v) if key == "synth_rates" else v for v in kw[key])
    for key in ("min_accept_rate", "min_accept_len", "min_identical_fraction", "p_min", "synth_len"):
        if key in kw:
            kw[key] = float(kw[key])
    return Case(**kw)


def parse_cases(text: str, lock_names: set[str] | None = None) -> list[Case]:
    """Parse and validate the text of a cases file."""
    doc = tomldata.parse_versioned(text, "cases.toml", "case").unwrap()
    cases: list[Case] = []
    for i, raw in enumerate(doc.get("case", [])):
        where = raw.get("name", f"#{i + 1}") if isinstance(raw, dict) else f"#{i + 1}"
        if not isinstance(raw, dict):
            raise _bad(where, "each [[case]] must be a table")
        _check_types(where, raw)
        _check_values(where, raw)
        if lock_names is not None:
            for model in filter(None, (raw["target"], raw.get("draft"))):
                if model not in lock_names:
                    raise _bad(where, f"model {model!r} is not in models.lock (add it there or fix the name)")
        cases.append(_to_case(raw))
    seen: set[str] = set()
    for c in cases:
        if c.name in seen:
            raise _bad(c.name, "duplicate case name")
        seen.add(c.name)
    return cases


def load_cases(path: str | Path = paths.CASES_FILE, lock_names: set[str] | None = None) -> list[Case]:
    """Load and validate cases.toml; with ``lock_names`` also check every model name against the lock."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read cases file {path}: {exc.strerror}") from None
    return parse_cases(text, lock_names)


def select_cases(cases: list[Case], selector: str) -> list[Case]:
    """Cases for a tier name or a comma list of case names (tiers may be mixed in); '' selects nothing."""
    by_name = {c.name: c for c in cases}
    chosen: dict[str, Case] = {}
    for item in (s.strip() for s in selector.split(",")):
        if not item:
            continue
        if item in TIERS:
            tiers = GPU_TIERS if item == "all" else (item,)
            chosen.update((c.name, c) for c in cases if c.tier in tiers)
        elif item in by_name:
            chosen[item] = by_name[item]
        else:
            raise UserError(
                f"unknown case or tier {item!r} in SPEC_METHODS; valid tiers: {', '.join(TIERS)}; "
                f"valid cases: {', '.join(by_name) or '(none)'}"
            )
    return list(chosen.values())
