"""Every ``SPEC_*`` setting (and upstream's ``N_GPU_LAYERS``), declared once and read from the environment
here only (a parent sets a child's by name: run-tier, bisect, replay).

``Settings`` is the one options model: each field names its variable, its type and its bounds; ``load()``
reads the environment at call time (tests and child processes change it), and ``to_env`` is how
``run-tier`` hands its options to the pytest child. A bad value is one line naming the variable, what it
must be, and an example.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from specsuite.common.errors import UserError

_POSITIVE = msgspec.Meta(gt=0, lt=1e9)  # finite and sane: an endless wait or retry is never meant
_COUNT = msgspec.Meta(ge=1, le=1_000_000)
# Speed rounds per case (SPEC_REPEAT, run-tier, bisect and bench --repeat): 4 or more let the history gate
# judge speed; beyond 100 a typo (an extra zero) would hold a GPU runner for days.
MAX_REPEAT = 100
_REPEAT = msgspec.Meta(ge=1, le=MAX_REPEAT)
_LAYERS = msgspec.Meta(ge=0, le=1_000_000)
_FRACTION = msgspec.Meta(gt=0, lt=1)
_WINDOW = msgspec.Meta(ge=3, le=1000)  # a drift is more than one step: at least two runs and this one
_WORKERS = msgspec.Meta(ge=1, le=64)
_FACTOR = msgspec.Meta(ge=0, lt=1e6)  # 0: off
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _var(name: str, default: Any) -> Any:
    return msgspec.field(default=default, name=name)


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """The suite's settings; the field's name in the environment is its ``SPEC_*`` variable."""

    # where things live (None: the default under the per-user cache; see common.paths)
    cache_dir: str | None = _var("SPEC_CACHE_DIR", None)
    model_dir: str | None = _var("SPEC_MODEL_DIR", None)
    method_model_dir: str | None = _var("SPEC_METHOD_MODEL_DIR", None)  # upstream's name for model_dir
    history_path: str | None = _var("SPEC_HISTORY", None)
    results_dir: str | None = _var("SPEC_RESULTS_DIR", None)
    # run-tier's probe of the binary, handed to its pytest child (server.probe.hand_over): probed once a run
    probed: str | None = _var("SPEC_PROBED", None)
    # how a run judges its cases (results.json records these as its `options`)
    methods: str = _var("SPEC_METHODS", "")
    strict: bool = _var("SPEC_STRICT", True)
    # None: each tier's own default (cases.schema.TIER_REPEAT: what its speed gate needs)
    repeat: Annotated[int, _REPEAT] | None = _var("SPEC_REPEAT", None)
    allow_cpu: bool = _var("SPEC_ALLOW_CPU", False)
    no_history: bool = _var("SPEC_NO_HISTORY", False)
    rtol: Annotated[float, _FRACTION] = _var("SPEC_RTOL", 0.05)
    # the relative gate's tolerance for a rise in per-block overhead (history.regress.BLOCK_RTOL)
    block_rtol: Annotated[float, _FRACTION] = _var("SPEC_BLOCK_RTOL", 0.2)
    drift_window: Annotated[int, _WINDOW] = _var("SPEC_DRIFT_WINDOW", 10)
    # how a run spreads over a box and over runners (run-tier --gpus, --workers, --shard, --plan)
    gpus: str | None = _var("SPEC_GPUS", None)  # all | N | 0,2,5 on a CUDA build (None: all)
    workers: Annotated[int, _WORKERS] = _var("SPEC_WORKERS", 1)  # a CPU build: parallel, acceptance only
    shard: str | None = _var("SPEC_SHARD", None)  # K/N: shard K of the plan's N
    plan: str | None = _var("SPEC_PLAN", None)  # a saved `specsuite plan --json` the shard is taken from
    # waits and retries
    start_timeout_s: Annotated[float, _POSITIVE] = _var("SPEC_START_TIMEOUT_S", 1800.0)
    # a case's time budget (measure.budget): min + factor x its tokens / its baseline's measured tokens/s
    budget_factor: Annotated[float, _FACTOR] = _var("SPEC_BUDGET_FACTOR", 10.0)
    budget_min_s: Annotated[float, _POSITIVE] = _var("SPEC_BUDGET_MIN_S", 60.0)
    history_timeout_s: Annotated[float, _POSITIVE] = _var("SPEC_HISTORY_TIMEOUT_S", 30.0)
    fetch_attempts: Annotated[int, _COUNT] = _var("SPEC_FETCH_ATTEMPTS", 10)
    fetch_backoff_s: Annotated[float, _POSITIVE] = _var("SPEC_FETCH_BACKOFF_S", 1.0)
    fetch_stall_s: Annotated[float, _POSITIVE] = _var("SPEC_FETCH_STALL_S", 60.0)
    fetch_connections: Annotated[int, _COUNT] = _var("SPEC_FETCH_CONNECTIONS", 8)
    hf_cache: bool = _var("SPEC_HF_CACHE", False)  # fetch-models also fills the Hugging Face cache
    # the build: more CMake flags, shell-quoted (llamacpp.cmake.extra_flags splits them)
    cmake_args: str = _var("SPEC_CMAKE_ARGS", "")
    # the server's offload on GPU builds: upstream's variable name, kept
    n_gpu_layers: Annotated[int, _LAYERS] = _var("N_GPU_LAYERS", 99)

    def run_options(self) -> dict[str, Any]:
        """How the run judged its cases, as results.json's ``options`` records them."""
        return {
            "strict": self.strict,
            "repeat": self.repeat,
            "allow_cpu": self.allow_cpu,
            "history": not self.no_history,
            "rtol": self.rtol,
            "block_rtol": self.block_rtol,
            "drift_window": self.drift_window,
            "speed": self.workers == 1,
        }

    def to_env(self) -> dict[str, str]:
        """Every set variable, as the environment spells it: a child reads back exactly these settings."""
        out: dict[str, str] = {}
        for field in msgspec.structs.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                out[field.encode_name] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return out


_FIELDS = {f.encode_name: f for f in msgspec.structs.fields(Settings)}
_KINDS = {
    id(_COUNT): "a whole number from 1 to 1000000",
    id(_REPEAT): f"a whole number from 1 to {MAX_REPEAT}",
    id(_FRACTION): "a number between 0 and 1 (0.05 = 5 %)",
    id(_POSITIVE): "a finite number > 0 (below 1e9)",
    id(_LAYERS): "a whole number from 0 to 1000000",
    id(_WINDOW): "a whole number of runs from 3 to 1000",
    id(_WORKERS): "a whole number from 1 to 64",
    id(_FACTOR): "a number >= 0 (0: off)",
}
_WHOLE = re.compile(r"\+?[0-9]+")


def _declared(field: msgspec.structs.FieldInfo) -> Any:
    """The field's type without ``| None`` (a setting whose default is None: unset)."""
    args = typing.get_args(field.type)
    if type(None) in args and len(args) == 2 and typing.get_origin(field.type) is not Annotated:
        return next(a for a in args if a is not type(None))
    return field.type


def _kind(field: msgspec.structs.FieldInfo) -> str:
    tp = _declared(field)
    meta = typing.get_args(tp)[1:] if typing.get_origin(tp) is Annotated else ()
    return next((_KINDS[id(m)] for m in meta if id(m) in _KINDS), "text")


def _parse(name: str, field: msgspec.structs.FieldInfo, value: str) -> Any:
    """One variable's text as its field's type (the spellings people use: yes/on/off for flags)."""
    tp = _declared(field)
    base = typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp
    if base is bool:
        if value.lower() not in _TRUE | _FALSE:
            raise UserError(f"{name}={value!r}: use 1 or 0 (or unset it)")
        return value.lower() in _TRUE
    if base is int:
        return int(value) if _WHOLE.fullmatch(value) else _bad(name, field, value)
    if base is float:
        try:
            return float(value)
        except ValueError:
            return _bad(name, field, value)
    return value


# an example for a setting whose default is unset (None)
_EXAMPLES = {"SPEC_REPEAT": "4"}


def _bad(name: str, field: msgspec.structs.FieldInfo, value: str) -> Any:
    example = f"{field.default:g}" if isinstance(field.default, (int, float)) else repr(field.default)
    example = _EXAMPLES.get(name, example)
    raise UserError(f"{name}={value!r} must be {_kind(field)}; set it to, e.g., {example} or unset it")


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from ``environ`` (default: this process's environment); UserError naming a bad one."""
    env = os.environ if environ is None else environ
    given = {n: v.strip() for n in _FIELDS if (v := env.get(n, "")).strip()}
    raw = {n: _parse(n, _FIELDS[n], v) for n, v in given.items()}
    try:
        return msgspec.convert(raw, Settings)
    except msgspec.ValidationError as exc:
        name = str(exc).rpartition("$.")[2].strip("`'\" ")
        if name not in _FIELDS:
            raise UserError(f"a SPEC_* setting is invalid: {exc}") from None
        return _bad(name, _FIELDS[name], given[name])


def documented() -> list[str]:
    """Every variable this model reads (the README's table must name each)."""
    return list(_FIELDS)
