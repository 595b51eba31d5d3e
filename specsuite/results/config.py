"""A run's effective configuration, and what changed in it between two commits.

Upstream's worst speculative-decoding regressions of 2025-2026 were changed defaults, not kernels:
``--spec-draft-p-min`` reset to 0.0 (acceptance 0.944 -> 0.298, llama.cpp #25792), the draft length
default (MTP 66 -> 32 tok/s, #22673). The server exposes neither (``/props`` has ``speculative.types``
only), so the configuration a case ran with is assembled from what each side states:

- ``RunConfig.defaults``: every speculative, batching and KV-cache flag's default as the binary's own
  ``--help`` states it (server.probe.parse_defaults), per run (one binary);
- ``RunConfig.build``: the build's options (backend, CUDA architectures, flash-attention quant kernels,
  native, VMM) from build-info.json, the CMake cache, or the binary;
- ``CaseConfig.passed``: the values of those flags on the case server's command line (what the harness
  and the case's server_args passed: a passed value beats the default, llama.cpp takes the last);
- ``CaseConfig.props``: what the server's ``/props`` and its answers report.

A flag the harness passes shows both its value and the binary's default, so a default that moved under a
flag the case pins is visible and, rightly, not blamed for the case's numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from specsuite.common.serverflags import FLAG_SPELLINGS
from specsuite.llamacpp.identity import short

# /props fields a run records (the rest is chat templates and UI settings), and the answer's own
PROPS_KEYS = ("total_slots", "build_info", "model_ftype")
# /props keys that name the build itself: they differ between any two builds, and the summary names both
NAMES_THE_BUILD = frozenset({"build_info"})
SHOWN_CHANGES = 6  # a summary line names this many changes, then how many more
DRAFT_MODEL = FLAG_SPELLINGS["draft_model"][0]


class BuildOptions(msgspec.Struct, kw_only=True):
    """How the binary was built: where that was read, the backend, and the CMake variables that change
    what runs (``GGML_CUDA_FA_QUANTS``: a KV type without a kernel silently runs flash attention on the
    CPU, llama.cpp #28633)."""

    source: str | None = None  # build-info.json, CMakeCache.txt, cmake flags, binary
    backend: str | None = None
    options: dict[str, str] = {}  # CMake variable -> value (llamacpp.buildopts.VARIABLES)


class RunConfig(msgspec.Struct, kw_only=True):
    """The binary's side of the configuration: the same for every case of a run."""

    defaults: dict[str, str | None] = {}  # canonical flag -> its default as --help states it (None: none)
    build: BuildOptions | None = None


class CaseConfig(msgspec.Struct, kw_only=True):
    """One case server's side: the flags it was given and what it reported."""

    passed: dict[str, str] = {}  # canonical flag -> the value on its command line ("on" for a bare switch)
    props: dict[str, Any] = {}


def passed_flags(argv: Sequence[str], spellings: dict[str, str]) -> dict[str, str]:
    """The configuration flags on a command line: canonical key -> value, the last occurrence winning (as
    llama.cpp's parser). ``spellings``: every spelling -> its key. A flag's value is the next argument
    unless that is another option (a negative number is a value); ``--no-X`` / ``-noX`` give ``off``."""
    out: dict[str, str] = {}
    args = list(argv)
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag.startswith(("--no-", "-no")):  # --help lists the negation beside the switch (-cb, -nocb)
            positive = flag.replace("--no-", "--", 1) if flag.startswith("--no-") else "-" + flag[3:]
            if (key := spellings.get(flag) or spellings.get(positive)) is not None:
                out[key] = "off"
            continue
        if (key := spellings.get(flag)) is None:
            continue
        nxt = args[i + 1] if i + 1 < len(args) else None
        if eq:
            out[key] = value
        elif nxt is not None and (not nxt.startswith("-") or _is_number(nxt)):
            out[key] = nxt
        else:
            out[key] = "on"
    return out


def case_config(argv: Sequence[str], flags: dict[str, str], props: dict[str, Any]) -> CaseConfig:
    """The configuration flags on the case server's command line, and what its /props said. A model path
    is kept as its file name: where the model folder lies is no part of the configuration."""
    settings = props.get("default_generation_settings")
    kept = {k: props[k] for k in PROPS_KEYS if k in props}
    if isinstance(settings, dict) and "n_ctx" in settings:
        kept["n_ctx"] = settings["n_ctx"]
    passed = passed_flags(argv[1:], flags)
    if DRAFT_MODEL in passed:
        passed[DRAFT_MODEL] = Path(passed[DRAFT_MODEL]).name
    return CaseConfig(passed=passed, props=kept)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def effective(run: RunConfig | None, case: CaseConfig | None) -> dict[str, tuple[str | None, str]]:
    """Each flag's effective value and where it comes from: (value, "passed" | "default")."""
    out: dict[str, tuple[str | None, str]] = {
        k: (v, "default") for k, v in (run.defaults if run else {}).items()
    }
    out.update({k: (v, "passed") for k, v in (case.passed if case else {}).items()})
    return out


def _differing(before: dict[str, Any], after: dict[str, Any], order: Any = None) -> list[str]:
    """The keys one side lacks or the two sides give different values, in ``order`` (a sort key)."""
    keys = set(before) | set(after)
    return sorted((k for k in keys if (k in before, before.get(k)) != (k in after, after.get(k))), key=order)


def _changed(kind: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for key in _differing(before, after):
        if before.get(key) == after.get(key):  # a key given as null on one side only: no change to name
            continue
        if key not in before:
            out.append(f"{kind}{key}: new ({after[key]})")
        elif key not in after:
            out.append(f"{kind}{key}: gone (was {before[key]})")
        else:
            out.append(f"{kind}{key}: {before[key]} -> {after[key]}")
    return out


def _order(key: str) -> tuple[bool, str]:
    return (not key.startswith("--spec-"), key)  # speculative flags first


def changes(
    before: tuple[RunConfig | None, CaseConfig | None],
    after: tuple[RunConfig | None, CaseConfig | None],
    between: tuple[str, str],
) -> list[str]:
    """What differs between two runs' configurations, as one line each, speculative defaults first:
    ``default of --spec-draft-p-min: 0.75 -> 0.00 between a1a1a1a and b2b2b2b``. A default is named only
    where the case (either side) did not pass the flag: a pinned flag does not run at its default. Empty
    when the two agree, or when either side recorded no configuration (runs from before it was recorded)."""
    (run_a, case_a), (run_b, case_b) = before, after
    if run_a is None or run_b is None:
        return []
    at = f" between {short(between[0])} and {short(between[1])}"
    pinned = set(case_a.passed if case_a else {}) | set(case_b.passed if case_b else {})
    out = []
    a, b = run_a.defaults, run_b.defaults
    for key in _differing(a, b, _order):
        if key in pinned:
            continue
        if key not in a:
            out.append(f"new flag {key} (default {_stated(b[key])}){at}")
        elif key not in b:
            out.append(f"flag {key} gone (default was {_stated(a[key])}){at}")
        else:
            out.append(f"default of {key}: {_stated(a[key])} -> {_stated(b[key])}{at}")
    if case_a is not None and case_b is not None:
        out += [line + at for line in _changed("passed ", case_a.passed, case_b.passed)]
        props_a, props_b = (
            {k: v for k, v in p.items() if k not in NAMES_THE_BUILD} for p in (case_a.props, case_b.props)
        )
        out += [line + at for line in _changed("/props ", props_a, props_b)]
    if run_a.build is not None and run_b.build is not None:
        out += [line + at for line in _build_changes(run_a.build, run_b.build)]
    return out


def _stated(default: str | None) -> str:
    return "none stated" if default is None else default


def _build_changes(a: BuildOptions, b: BuildOptions) -> list[str]:
    """The backend, and the CMake variables both sides know (one read from a full CMake cache and the
    other from the flags alone would otherwise differ in every variable the flags left at its default)."""
    shared = set(a.options) & set(b.options)
    left = {"backend": a.backend, **{k: v for k, v in a.options.items() if k in shared}}
    right = {"backend": b.backend, **{k: v for k, v in b.options.items() if k in shared}}
    return _changed("build ", left, right)


def summary_line(lines: list[str]) -> str:
    """Changes for one line of the summary: the first few, then how many more."""
    shown = "; ".join(lines[:SHOWN_CHANGES])
    more = len(lines) - SHOWN_CHANGES
    return shown + (f"; and {more} more (results.json)" if more > 0 else "")
