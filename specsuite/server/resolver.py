"""The speculative-mode resolver front ends ship: a user-facing mode -> llama-server flags, and why.

Reproduces a desktop front end's MTP handling (Unsloth Studio's llama-server backend and its tests, commit
a5d6e6928d, llama.cpp #22673): modes ``auto``, ``mtp``, ``ngram``, ``mtp+ngram``, ``off`` (plus legacy
aliases and ``ngram-simple``) resolve, per model size, MTP heads, separate drafter, GPU/CPU and the binary's
own tokens and flag spellings, to the flags such a front end appends to its server command. The suite
runs these configurations to see what users get after each llama.cpp commit. Everything here is pure
except ``resolve_for_model`` and ``main`` (``specsuite resolve``: probe the binary, print the resolution).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from specsuite.common import paths
from specsuite.common.argtypes import CommandParser, positive_int
from specsuite.common.errors import UserError
from specsuite.models.gguf import has_mtp_marker, read_info
from specsuite.server.probe import Capabilities, probe

# Below 3B, auto drops an embedded MTP head. The seed's reason, in its words: "tiny dense models regress
# with the MTP draft head" and "Clean-bench shows 2B regresses with draft-mtp"; it gives no figures for it.
# A separate drafter is exempt ("B200 Q4_K_XL: gemma-4-E2B draft-mtp n=2 = 1.21x vs OFF", the seed's only
# speed figure).
MTP_MIN_SIZE_B = 3.0
# The draft lengths the seed's resolver emits for MTP: 2 on a GPU ("B200 default, n=2"), 3 on the CPU (its
# resolver matrix); the seed does not say how they were chosen.
GPU_DRAFT_N_MAX = 2
CPU_DRAFT_N_MAX = 3
# ngram-mod knobs: lookup length, draft range.
NGRAM_N_MATCH, NGRAM_N_MIN, NGRAM_N_MAX = 24, 48, 64
BINARY_NO_MTP = "binary_no_mtp"  # fallback reason: the binary has no MTP spec type

_CANONICAL_MODES = frozenset({"auto", "mtp", "ngram", "mtp+ngram", "off", "ngram-simple"})
_LEGACY_MODES = {"default": "auto", "draft-mtp": "mtp", "ngram-mod": "ngram"}
# The knob sets ngram_mod_flags emits, per flavour; a flavour counts only if every flag is live.
_NEW_NGRAM_FLAGS = ("--spec-ngram-mod-n-match", "--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max")
_LEGACY_NGRAM_FLAGS = ("--spec-ngram-size-n", "--draft-min", "--draft-max")
_USER_SPEC_FLAGS = frozenset({"--spec-type", "--spec-default"})
# Size in a name, first pattern that matches wins: active (A3B) > effective (E2B) > total (27B, 270M).
# The seed's boundaries, plus "." after the size so file names ("Qwen3-4B.gguf") parse too.
_SIZE_PATTERNS = tuple(
    re.compile(rf"(?:^|[-_/]){prefix}(\d+\.?\d*)\s*([bm])(?=$|[-_/.])", re.IGNORECASE)
    for prefix in ("a", "e", "")
)


@dataclass(frozen=True)
class ResolverCaps:
    """What the resolver needs from a binary (the seed's probe result)."""

    found: bool  # a binary was probed
    mtp_token: str | None  # the binary's own MTP spec type: "draft-mtp", the other spelling "mtp", or None
    ngram_mod_flavor: str | None  # "new", "legacy" or None: which ngram-mod knob set is live
    spec_draft_n_max_flag: str | None  # "--spec-draft-n-max", legacy "--draft-max", or None


@dataclass(frozen=True)
class Resolution:
    """What a front end appends for one mode, and the rule that decided it."""

    flags: tuple[str, ...]  # exactly what to append to the server command
    spec_type: str | None  # "draft-mtp", "ngram-mod,draft-mtp", "ngram-mod", "default", "ngram-simple"
    requested_mode: str | None  # canonical mode; None when the user's extra args own --spec-type
    fallback_reason: str | None  # why MTP was dropped when the mode asked for it ("binary_no_mtp")
    why: str  # the rule that decided, in one sentence


@dataclass(frozen=True)
class _Model:
    """The resolver's view of the target: MTP signals, size, drafter, and where it runs."""

    is_mtp: bool
    size_b: float | None
    drafter: str | None
    gpu: bool

    @property
    def label(self) -> str:
        size = f"{self.size_b:g}B" if self.size_b is not None else "unknown-size"
        kind = "MTP model" if self.is_mtp else "non-MTP model"
        drafter = " with a separate drafter" if self.drafter else ""
        article = "an" if size.startswith(("8", "11", "18", "u")) else "a"  # an 8B, an 11B, an unknown-size
        return f"{article} {size} {kind}{drafter} on {'GPU' if self.gpu else 'CPU'}"


# --- small pure helpers -------------------------------------------------------------------------------------


def canonicalize_spec_mode(value: object) -> str | None:
    """Any accepted mode -> ``auto``/``mtp``/``ngram``/``mtp+ngram``/``off``/``ngram-simple``, or None.

    None, '' and non-strings give None (callers treat it as ``auto``); an unknown string gives ``auto``,
    so a stale value or typo falls back to the safe platform-aware path."""
    if not isinstance(value, str) or not value.strip():
        return None
    mode = value.strip().lower()
    if mode in _CANONICAL_MODES:
        return mode
    if mode in _LEGACY_MODES:
        return _LEGACY_MODES[mode]
    pieces = {p.strip() for p in mode.split(",")}  # persisted llama.cpp chains: "ngram-mod,draft-mtp"
    has_mtp, has_ngram = bool(pieces & {"mtp", "draft-mtp"}), bool(pieces & {"ngram", "ngram-mod"})
    if has_mtp and has_ngram:
        return "mtp+ngram"
    return "mtp" if has_mtp else "ngram" if has_ngram else "auto"


def extract_model_size_b(name: str) -> float | None:
    """Parameters in billions from a model name: active > effective > total (``M`` counts as 1/1000)."""
    for pattern in _SIZE_PATTERNS:
        m = pattern.search(name or "")
        if m:
            value = float(m.group(1))
            return value / 1000.0 if m.group(2).lower() == "m" else value
    return None


def auto_mode_drops_mtp(mode: str, size_b: float | None, has_separate_drafter: bool = False) -> bool:
    """Auto drops an embedded MTP head below 3B; a separate drafter is cheap and never drops; forced
    ``mtp``/``mtp+ngram`` engage at any size."""
    if has_separate_drafter:
        return False
    return mode == "auto" and size_b is not None and size_b < MTP_MIN_SIZE_B


def ngram_mod_flags(
    flavor: str | None, n_match: int = NGRAM_N_MATCH, n_min: int = NGRAM_N_MIN, n_max: int = NGRAM_N_MAX
) -> list[str]:
    """The ngram-mod knobs in the binary's flavour; [] when it has neither set."""
    names = {"new": _NEW_NGRAM_FLAGS, "legacy": _LEGACY_NGRAM_FLAGS}.get(flavor or "")
    if names is None:
        return []
    return [
        tok for name, value in zip(names, (n_match, n_min, n_max), strict=True) for tok in (name, str(value))
    ]


def extra_args_set_spec_type(extra_args: Iterable[str] | None) -> bool:
    """True when the user's extra args carry ``--spec-type`` (``=`` form too) or ``--spec-default``."""
    return any(str(arg).split("=", 1)[0] in _USER_SPEC_FLAGS for arg in extra_args or ())


# --- capabilities -------------------------------------------------------------------------------------------


def _ngram_flavor(caps: Capabilities) -> str | None:
    # Removal stubs are not in caps.options, so a newer binary's dead --draft-max never reads as legacy.
    if all(flag in caps.options for flag in _NEW_NGRAM_FLAGS):
        return "new"
    if all(flag in caps.options for flag in _LEGACY_NGRAM_FLAGS):
        return "legacy"
    return None


def caps_from_probe(caps: Capabilities | None) -> ResolverCaps:
    """The resolver's view of a probed binary; None (no binary) resolves as one without MTP or ngram-mod."""
    if caps is None:
        return ResolverCaps(found=False, mtp_token=None, ngram_mod_flavor=None, spec_draft_n_max_flag=None)
    token = caps.spec_token("draft-mtp") if caps.flag("spec_type") else None
    return ResolverCaps(
        found=True,
        mtp_token=token,
        ngram_mod_flavor=_ngram_flavor(caps),
        spec_draft_n_max_flag=caps.flag("draft_n_max"),
    )


# --- the resolver -------------------------------------------------------------------------------------------


def _emit_ngram_mod(caps: ResolverCaps, mode: str, why: str) -> Resolution:
    knobs = ngram_mod_flags(caps.ngram_mod_flavor)
    note = "" if knobs else " (the binary has no ngram-mod knobs: its defaults apply)"
    return Resolution(("--spec-type", "ngram-mod", *knobs), "ngram-mod", mode, None, why + note)


def _emit_mtp(
    caps: ResolverCaps, mode: str, model: _Model, chain_ngram: bool, n_max: int | None, why: str
) -> Resolution:
    if not caps.mtp_token:  # degrade to no speculation rather than emit a type the binary rejects
        why = f"{why}, but the binary has no MTP spec type: speculative decoding off ({BINARY_NO_MTP})"
        return Resolution((), None, mode, BINARY_NO_MTP, why)
    n = n_max if n_max is not None else (GPU_DRAFT_N_MAX if model.gpu else CPU_DRAFT_N_MAX)
    knobs = ngram_mod_flags(caps.ngram_mod_flavor) if chain_ngram else []
    value, spec = (
        (f"ngram-mod,{caps.mtp_token}", "ngram-mod,draft-mtp") if knobs else (caps.mtp_token, "draft-mtp")
    )
    drafter = ("--model-draft", model.drafter) if model.drafter else ()
    n_flag = caps.spec_draft_n_max_flag or "--spec-draft-n-max"
    flags = (*drafter, "--spec-type", value, n_flag, str(n), *knobs)
    note = " (chain dropped: the binary has no ngram-mod knobs)" if chain_ngram and not knobs else ""
    if n_flag in knobs:  # legacy binaries share --draft-max between MTP and ngram-mod; the last one wins
        note = f" (the legacy ngram-mod knobs repeat {n_flag}: llama-server keeps the last, {flags[-1]})"
    return Resolution(flags, spec, mode, None, f"{why}: {spec}, n_max {n}{note}")


def _resolve_forced(caps: ResolverCaps, mode: str, model: _Model, n_max: int | None) -> Resolution:
    """``mtp`` and ``mtp+ngram``: engage at any size; without head or drafter, default back."""
    chain = mode == "mtp+ngram"
    if not model.is_mtp and chain:
        return _emit_ngram_mod(caps, mode, f"mtp+ngram on {model.label}: the ngram half only, ngram-mod")
    if not model.is_mtp:
        why = (
            f"mtp forced on {model.label}: --spec-default "
            "(llama-server aborts on draft-mtp without a head: 'failed to measure MTP context memory')"
        )
        return Resolution(("--spec-default",), "default", mode, None, why)
    small = (
        " (below 3B: engaged anyway, the user forced it)"
        if auto_mode_drops_mtp("auto", model.size_b, bool(model.drafter))
        else ""
    )
    return _emit_mtp(caps, mode, model, chain, n_max, f"{mode} forced on {model.label}{small}")


def _resolve_auto(caps: ResolverCaps, model: _Model, n_max: int | None) -> Resolution:
    """``auto``: MTP on MTP models of 3B+ (GPU alone, CPU chained), ngram-mod below, llama's default else."""
    if not model.is_mtp:
        why = f"auto on {model.label}: --spec-default (llama-server picks its own default)"
        return Resolution(("--spec-default",), "default", "auto", None, why)
    if not auto_mode_drops_mtp("auto", model.size_b, bool(model.drafter)):
        return _emit_mtp(caps, "auto", model, not model.gpu, n_max, f"auto on {model.label}")
    why = f"auto on {model.label}: below 3B an embedded MTP head is slower"
    if caps.ngram_mod_flavor is None:
        return Resolution((), None, "auto", None, why + ", and the binary has no ngram-mod: speculation off")
    return _emit_ngram_mod(caps, "auto", why + ", so ngram-mod")


def _check_n_max(spec_draft_n_max: int | None) -> None:
    n = spec_draft_n_max
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise UserError(f"spec_draft_n_max must be a positive integer, got {n!r}; pass e.g. 2, or None")


def resolve(
    mode: object,
    *,
    caps: ResolverCaps,
    model_name: str,
    nextn_predict_layers: int | None = None,
    gpu: bool,
    mtp_draft_path: str | None = None,
    spec_draft_n_max: int | None = None,
    extra_args: list[str] | None = None,
) -> Resolution:
    """The flags a front end appends for ``mode`` on this model, binary and device, and why."""
    _check_n_max(spec_draft_n_max)
    if extra_args_set_spec_type(extra_args):
        return Resolution((), None, None, None, "the extra args set --spec-type themselves: nothing emitted")
    requested = canonicalize_spec_mode(mode) or "auto"
    is_mtp = has_mtp_marker(model_name) or (nextn_predict_layers or 0) > 0 or bool(mtp_draft_path)
    model = _Model(is_mtp, extract_model_size_b(model_name), mtp_draft_path or None, gpu)
    if requested == "off":
        return Resolution((), None, "off", None, "off: speculative decoding disabled, nothing emitted")
    if requested == "ngram-simple":
        return Resolution(
            ("--spec-type", "ngram-simple"), "ngram-simple", requested, None, "ngram-simple: passed through"
        )
    if requested == "ngram":
        return _emit_ngram_mod(caps, "ngram", f"ngram forced on {model.label}: ngram-mod alone")
    if requested in ("mtp", "mtp+ngram"):
        return _resolve_forced(caps, requested, model, spec_draft_n_max)
    return _resolve_auto(caps, model, spec_draft_n_max)


def resolve_for_model(
    mode: object,
    *,
    caps: ResolverCaps,
    model_path: Path,
    gpu: bool,
    mtp_draft_path: str | Path | None = None,
    spec_draft_n_max: int | None = None,
    extra_args: list[str] | None = None,
    model_id: str | None = None,
) -> Resolution:
    """``resolve`` for a GGUF file: MTP heads from its metadata (cached); the name (size, -MTP marker) from
    ``model_id``, the identifier a front end loaded it by (a Hub repo), else from the file name."""
    model_path = Path(model_path)
    info = read_info(model_path)  # UserError when missing or not GGUF
    if mtp_draft_path is not None and not Path(mtp_draft_path).is_file():
        raise UserError(f"MTP drafter not found: {mtp_draft_path}; fetch it or pass no drafter")
    return resolve(
        mode,
        caps=caps,
        model_name=model_id or model_path.name,
        nextn_predict_layers=info.nextn_predict_layers,
        gpu=gpu,
        mtp_draft_path=str(mtp_draft_path) if mtp_draft_path is not None else None,
        spec_draft_n_max=spec_draft_n_max,
        extra_args=extra_args,
    )


def explain(res: Resolution) -> str:
    """A few terminal lines: mode -> emission, the flags (shell-quoted), why, and any fallback."""
    mode = res.requested_mode or "(set by the extra args)"
    lines = [
        f"speculative mode: {mode} -> {res.spec_type or 'none'}",
        f"flags: {shlex.join(res.flags) if res.flags else '(none)'}",
        f"why: {res.why}",
    ]
    if res.fallback_reason:
        lines.append(f"fallback: {res.fallback_reason}")
    return "\n".join(lines)


def parser() -> CommandParser:
    p = CommandParser(
        "resolve", "The server flags a front end's speculative mode resolves to for a model, and why."
    )
    p.add_argument("--model", type=Path, required=True, help="the target GGUF")
    p.add_argument("--mode", default="auto", help="auto, mtp, ngram, mtp+ngram, off (or a legacy alias)")
    p.add_argument("--device", choices=["gpu", "cpu"], help="default: what the binary sees (--list-devices)")
    p.add_argument("--binary", help="llama-server to probe (default: LLAMA_SERVER_BIN_PATH, else build/bin)")
    p.add_argument("--mtp-drafter", type=Path, help="a separate MTP drafter GGUF")
    p.add_argument(
        "--model-id",
        help="the identifier the front end loaded the model by, e.g. a Hub repo (default: file name)",
    )
    p.add_argument(
        "--spec-draft-n-max",
        type=positive_int,
        help="the user's MTP draft length (the front end's override; default: 2 on a GPU, 3 on the CPU)",
    )
    p.add_argument(
        "--extra-args",
        type=shlex.split,
        default=[],
        metavar="'ARGS'",
        help="the user's extra server arguments, shell-quoted (--extra-args='--spec-type ngram-mod'): "
        "a --spec-type or --spec-default there owns speculation, and nothing is emitted",
    )
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    caps = probe(Path(a.binary) if a.binary else paths.server_binary())
    gpu = (a.device == "gpu") if a.device else caps.backend != "cpu" and bool(caps.gpus)
    res = resolve_for_model(
        a.mode,
        caps=caps_from_probe(caps),
        model_path=a.model,
        gpu=gpu,
        mtp_draft_path=a.mtp_drafter,
        spec_draft_n_max=a.spec_draft_n_max,
        extra_args=a.extra_args,
        model_id=a.model_id,
    )
    print(f"binary: {caps.binary} ({caps.commit}, {caps.backend}); device: {'gpu' if gpu else 'cpu'}")
    print(explain(res))
    return 0
