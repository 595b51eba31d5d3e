"""The cases file (cases.toml): parse, validate and select the suite's cases and their prompt sets.

Validation happens before any server starts, so a typo in the data file is one clear error naming the case
and the key, not a confusing failure half-way through a GPU run. The schema is declared once, on the
``Case`` dataclass: each field's metadata names the TOML types it accepts and whether it is required.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from specsuite.common import paths, tomldata
from specsuite.common.errors import UserError

CASE_TIERS = ("smoke", "synthetic", "compact", "nightly")
GPU_TIERS = ("compact", "nightly")
# What a selector may name besides case names: every tier, and "all" (the GPU tiers together, as upstream).
TIERS = (*CASE_TIERS, "all")
# Canonical --spec-type tokens at the pinned commit (common/speculative.cpp).
SPEC_TYPES = (
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
# "detect": pass no --spec-type and let the server pick the type from the draft's GGUF metadata.
DETECT = "detect"
# The front end's user-facing modes (seed: frontend-mtp-handling.txt), resolved at run time.
MODES = ("auto", "mtp", "ngram", "mtp+ngram", "off")
_NAME_RE = re.compile(r"^[a-z0-9_-]+$")
_NUM = (int, float)


def _key(types: tuple[type, ...], default: Any = None, *, required: bool = False) -> Any:
    meta = {"toml": types, "required": required}
    if isinstance(default, (list, dict, tuple)) and default != ():
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta) if not required else field(metadata=meta)


@dataclass(frozen=True)
class Case:
    name: str = _key((str,), required=True)
    tier: str = _key((str,), required=True)
    target: str = _key((str,), required=True)
    # How speculation is configured: exactly one of spec_type (one type or a chain), mode, spec_default.
    spec_type: tuple[str, ...] = _key((str, list), ())
    mode: str | None = _key((str,))
    spec_default: bool = _key((bool,), False)
    draft: str | None = _key((str,))
    n_max: int | None = _key((int,))
    min_accept_rate: float | None = _key(_NUM)
    min_accept_len: float | None = _key(_NUM)
    min_identical_fraction: float | None = _key(_NUM)
    min_speedup: float | None = _key(_NUM)
    uncalibrated: bool = _key((bool,), False)  # report-only until `calibrate` writes its floors
    n_min: int | None = _key((int,))
    p_min: float | None = _key(_NUM)
    synth_rates: tuple[float, ...] | None = _key((list,))
    synth_len: float | None = _key(_NUM)
    server_args: tuple[str, ...] = _key((list,), ())
    n_predict: int = _key((int,), 128)
    prompts: str = _key((str,), "seed")
    expect_accepted: int | None = _key((int,))
    expect_all_accepted: bool = _key((bool,), False)
    expect_accept_len: float | None = _key(_NUM)
    accept_len_tolerance: float | None = _key(_NUM)
    expect_no_drafts: bool = _key((bool,), False)
    expect_full_positions: bool = _key((bool,), False)
    expect_draft_len: int | None = _key((int,))
    expect_log: tuple[str, ...] = _key((list,), ())
    calibration: dict[str, Any] = field(
        default_factory=dict, compare=False, hash=False, metadata={"toml": (dict,), "required": False}
    )
    # Not a key: the texts of the prompt set, filled in from the file's [[prompt_set]] tables.
    prompt_texts: tuple[tuple[str, str], ...] = field(default=(), compare=False, metadata={"toml": None})

    @property
    def models(self) -> list[str]:
        """Lock names this case needs: the target, then the draft (once, if it drafts for itself)."""
        return list(dict.fromkeys([self.target, *([self.draft] if self.draft else [])]))

    @property
    def gpu(self) -> bool:
        return self.tier in GPU_TIERS

    @property
    def method(self) -> str:
        """What the case runs, for tables: the type chain, ``mode=auto`` or ``spec-default``."""
        if self.mode:
            return f"mode={self.mode}"
        return "spec-default" if self.spec_default else ",".join(self.spec_type)

    @property
    def floors(self) -> dict[str, float | None]:
        return {
            "min_accept_rate": self.min_accept_rate,
            "min_accept_len": self.min_accept_len,
            "min_identical_fraction": self.min_identical_fraction,
            "min_speedup": self.min_speedup,
        }


KEYS = {f.name: f for f in fields(Case) if f.metadata.get("toml")}
FLOOR_KEYS = ("min_accept_rate", "min_accept_len")


@dataclass(frozen=True)
class CaseFile:
    cases: list[Case]
    prompt_sets: dict[str, tuple[tuple[str, str], ...]]


def _bad(case: str, msg: str) -> UserError:
    return UserError(f"cases.toml: case {case!r}: {msg}")


def _check_types(where: str, raw: dict[str, Any]) -> None:
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise _bad(where, f"unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(KEYS)}")
    for key, f in KEYS.items():
        if key not in raw:
            if f.metadata["required"]:
                raise _bad(where, f"missing required key {key!r}")
            continue
        types, value = f.metadata["toml"], raw[key]
        # bool is an int subclass: reject true/false where a number is expected.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            names = " or ".join(t.__name__ for t in types)
            raise _bad(where, f"{key} must be {names}, got {value!r}")


def _check_unit(where: str, key: str, value: float | None) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise _bad(where, f"{key} = {value} is outside [0, 1]")


def _check_method(where: str, raw: dict[str, Any]) -> None:
    given = [k for k in ("spec_type", "mode", "spec_default") if raw.get(k) not in (None, False, [], "")]
    if len(given) != 1:
        raise _bad(
            where, f"give exactly one of spec_type, mode, spec_default (got {', '.join(given) or 'none'})"
        )
    types = raw.get("spec_type", [])
    types = [types] if isinstance(types, str) else types
    if DETECT in types and types != [DETECT]:
        raise _bad(where, f"spec_type {DETECT!r} (let the server detect the type) cannot be part of a chain")
    for t in types:
        if t not in (*SPEC_TYPES, DETECT):
            raise _bad(where, f"spec_type {t!r} is not one of {', '.join(SPEC_TYPES)} (or {DETECT!r})")
    if len(set(types)) != len(types):
        raise _bad(where, f"spec_type {types} names a type twice")
    if "mode" in raw and raw["mode"] not in MODES:
        raise _bad(where, f"mode {raw['mode']!r} is not one of {', '.join(MODES)}")
    if types and "n_max" not in raw:
        raise _bad(where, "missing n_max (the draft length; mode and spec_default cases may omit it)")
    if raw.get("n_max", 1) < 1:
        raise _bad(where, f"n_max must be >= 1, got {raw['n_max']}")


def _check_floors(where: str, raw: dict[str, Any]) -> None:
    for key in ("min_accept_rate", "min_identical_fraction", "p_min"):
        _check_unit(where, key, raw.get(key))
    if not raw.get("expect_no_drafts") and not raw.get("uncalibrated"):
        for key in FLOOR_KEYS:
            if key not in raw:
                raise _bad(
                    where,
                    f"missing floor {key!r} (only expect_no_drafts cases, or uncalibrated = true report-only "
                    "cases, may omit it)",
                )
    top = raw["n_max"] + 1 if "n_max" in raw and not raw.get("mode") else None
    if "min_accept_len" in raw and not 0.0 <= raw["min_accept_len"] <= (top or float("inf")):
        raise _bad(where, f"min_accept_len = {raw['min_accept_len']} is outside [0, n_max + 1]")
    if raw.get("min_speedup", 1.0) <= 0:
        raise _bad(where, f"min_speedup = {raw['min_speedup']} must be > 0")


def _check_values(where: str, raw: dict[str, Any], prompt_sets: dict[str, Any]) -> None:
    if not _NAME_RE.match(raw["name"]):
        raise _bad(where, "name must match [a-z0-9_-]+")
    if raw["tier"] not in CASE_TIERS:
        raise _bad(where, f"tier {raw['tier']!r} is not one of {', '.join(CASE_TIERS)}")
    _check_method(where, raw)
    _check_floors(where, raw)
    _check_synth(where, raw)
    _check_expectations(where, raw)
    for key in ("server_args", "expect_log"):
        if not all(isinstance(v, str) for v in raw.get(key, [])):
            raise _bad(where, f"{key} must be a list of strings")
    if raw.get("prompts", "seed") not in prompt_sets:
        raise _bad(where, f"prompts {raw['prompts']!r} is not one of {', '.join(prompt_sets)}")
    if raw.get("n_predict", 128) < 1:
        raise _bad(where, "n_predict must be >= 1")


def _check_synth(where: str, raw: dict[str, Any]) -> None:
    if "synth_rates" in raw and "synth_len" in raw:
        raise _bad(where, "synth_rates and synth_len are mutually exclusive (as in llama-server)")
    rates = raw.get("synth_rates")
    if rates is not None:
        if not rates or not all(isinstance(r, _NUM) and not isinstance(r, bool) for r in rates):
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


def _to_case(raw: dict[str, Any], prompt_sets: dict[str, tuple[tuple[str, str], ...]]) -> Case:
    kw = dict(raw)
    st = kw.get("spec_type", ())
    kw["spec_type"] = (st,) if isinstance(st, str) else tuple(st)
    for key in ("synth_rates", "server_args", "expect_log"):
        if key in kw:
            kw[key] = tuple(float(v) if key == "synth_rates" else v for v in kw[key])
    for key, f in KEYS.items():
        if key in kw and f.metadata["toml"] == _NUM:
            kw[key] = float(kw[key])
    return Case(**kw, prompt_texts=prompt_sets[kw.get("prompts", "seed")])


def _prompt_sets(doc: dict[str, Any]) -> dict[str, tuple[tuple[str, str], ...]]:
    """``[[prompt_set]]`` tables: a name and a list of {id, text}; texts are sent byte for byte."""
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for i, raw in enumerate(doc.get("prompt_set", [])):
        where = f"cases.toml: [[prompt_set]] #{i + 1}"
        if not isinstance(raw, dict) or set(raw) != {"name", "prompts"} or not isinstance(raw["name"], str):
            raise UserError(
                f"{where}: needs exactly `name` (a string) and `prompts` (a list of {{id, text}})"
            )
        items = raw["prompts"]
        ok = (
            isinstance(items, list)
            and items
            and all(
                isinstance(p, dict)
                and set(p) == {"id", "text"}
                and all(isinstance(v, str) and v for v in p.values())
                for p in items
            )
        )
        if not ok:
            raise UserError(
                f"{where} ({raw['name']}): prompts must be a non-empty list of {{id = ..., text = ...}}"
            )
        ids = [p["id"] for p in items]
        if len(set(ids)) != len(ids) or raw["name"] in out:
            raise UserError(f"{where} ({raw['name']}): duplicate prompt id or prompt set name")
        out[raw["name"]] = tuple((p["id"], p["text"]) for p in items)
    return out


def parse_case_file(text: str, lock_names: set[str] | None = None) -> CaseFile:
    """Parse and validate the text of a cases file: its prompt sets and its cases."""
    doc = tomldata.parse_versioned(text, "cases.toml", "case", "prompt_set").unwrap()
    prompt_sets = _prompt_sets(doc)
    cases: list[Case] = []
    for i, raw in enumerate(doc.get("case", [])):
        where = raw.get("name", f"#{i + 1}") if isinstance(raw, dict) else f"#{i + 1}"
        if not isinstance(raw, dict):
            raise _bad(where, "each [[case]] must be a table")
        _check_types(where, raw)
        _check_values(where, raw, prompt_sets)
        if lock_names is not None:
            for model in filter(None, (raw["target"], raw.get("draft"))):
                if model not in lock_names:
                    raise _bad(where, f"model {model!r} is not in models.lock (add it there or fix the name)")
        cases.append(_to_case(raw, prompt_sets))
    seen: set[str] = set()
    for c in cases:
        if c.name in seen:
            raise _bad(c.name, "duplicate case name")
        seen.add(c.name)
    return CaseFile(cases, prompt_sets)


def parse_cases(text: str, lock_names: set[str] | None = None) -> list[Case]:
    return parse_case_file(text, lock_names).cases


def read_text(path: str | Path = paths.CASES_FILE) -> str:
    return tomldata.read_text(Path(path), "cases file", "--cases PATH")


def load_cases(path: str | Path = paths.CASES_FILE, lock_names: set[str] | None = None) -> list[Case]:
    """Load and validate cases.toml; with ``lock_names`` also check every model name against the lock."""
    return parse_cases(read_text(path), lock_names)


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
                f"unknown case or tier {item!r}; valid tiers: {', '.join(TIERS)}; "
                f"valid cases: {', '.join(by_name) or '(none)'}"
            )
    return list(chosen.values())


def is_gpu_selection(cases: list[Case]) -> bool:
    return any(c.gpu for c in cases)
