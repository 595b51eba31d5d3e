"""The cases file (cases.toml): parse, validate and select the suite's cases and their prompt sets.

Validation happens before any server starts, so a typo in the data file is one clear error naming the case
and the key, not a confusing failure half-way through a GPU run. The schema is declared once, as msgspec
Structs: ``CaseTable`` (one ``[[case]]`` table) and ``PromptSet``, with the types and ranges on the fields
and the rules that join fields in ``__post_init__``; ``common.declared`` words what breaks them.
"""

from __future__ import annotations

import difflib
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

from specsuite.cases import kvtypes
from specsuite.cases.kvtypes import KvPair
from specsuite.common import declared, paths, statcache, tomldata
from specsuite.common.errors import UserError
from specsuite.common.serverflags import ALLOWED, SPEC_FLAG_PREFIXES, server_args_problem, speculative_option
from specsuite.common.settings import MAX_REPEAT

LABEL = "cases.toml"
Tier = Literal["smoke", "synthetic", "compact", "nightly"]
CASE_TIERS: tuple[str, ...] = get_args(Tier)
GPU_TIERS = ("compact", "nightly")
# What a selector may name besides case names: every tier, and "all" (the GPU tiers together, as upstream).
TIERS = (*CASE_TIERS, "all")
# The relative gate judges a speed from this many A-B-B-A rounds a side (history.regress: one-sided
# Mann–Whitney at p < 0.05, which 3 rounds a side cannot reach).
GATE_ROUNDS = 4
# Each tier's rounds per case where neither --repeat nor SPEC_REPEAT says (a case's own ``repeat`` raises
# it): what the tier's speed gate needs, from the gate's measured power (benchmarks/bench_gate.py,
# docs/speed.md "Rounds by tier"). GPU tiers: 4, at a GPU-like spread (CV 3 % a round: the fake server) 1
# false alarm in 120 A/A pairs and every 10 % slowdown caught (288 of 288). CPU tiers: 1; the tiny synthetic
# models cannot be gated at any number of rounds (25 % A/A false alarms at 4), so the synthetic tier gates
# speed on its speed cases (their own ``repeat``); the smoke tier's Gemma is not gated (1 round: the run's
# first lines say so).
TIER_REPEAT: dict[str, int] = {"smoke": 1, "synthetic": 1, "compact": GATE_ROUNDS, "nightly": GATE_ROUNDS}
# Canonical --spec-type tokens at the pinned commit (common/speculative.cpp), "none" included.
SpecType = Literal[
    "none",
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
]
# "detect": pass no --spec-type and let the server pick the type from the draft's GGUF metadata.
DETECT = "detect"
Token = Literal[SpecType, "detect"]
# Types without a draft length to set: "none" drafts nothing; ngram-cache drafts up to 8 in the pinned tree
# (common/speculative.cpp create_state_ngram_cache: no flag sets it). A case of only these omits n_max.
NO_DRAFT_LENGTH = ("none", "ngram-cache")
# The front end's user-facing modes (seed: frontend-mtp-handling.txt; its canonical values, ngram-simple
# passed through), resolved at run time.
Mode = Literal["auto", "mtp", "ngram", "mtp+ngram", "off", "ngram-simple"]
MODES: tuple[str, ...] = get_args(Mode)

Name = Annotated[str, Meta(pattern=r"^[a-z0-9_-]+$", description="made of a-z, 0-9, _ and -")]
Unit = Annotated[float, Meta(ge=0, le=1, description="a number in [0, 1]")]
Positive = Annotated[float, Meta(gt=0, description="a number > 0")]
Count = Annotated[int, Meta(ge=1, description="an integer >= 1")]
Text = Annotated[str, Meta(min_length=1, description="a non-empty string")]
# The server's context (--ctx-size): upstream's CI's 1024 unless a case sets ``ctx_size`` (a long input or
# a long output needs more); no request can generate more tokens than it holds.
CTX_SIZE = 1024
MAX_CTX_SIZE = 262144
CtxSize = Annotated[
    int, Meta(ge=64, le=MAX_CTX_SIZE, description=f"an integer from 64 to {MAX_CTX_SIZE} (tokens)")
]
MAX_N_PREDICT = 16384
NPredict = Annotated[
    int, Meta(ge=1, le=MAX_N_PREDICT, description=f"an integer from 1 to {MAX_N_PREDICT} (tokens)")
]
MAX_TEMPERATURE = 2.0
Temperature = Annotated[
    float, Meta(ge=0, le=MAX_TEMPERATURE, description=f"a number in [0, {MAX_TEMPERATURE:g}]")
]
FLOOR_KEYS = ("min_accept_rate", "min_accept_len")
# A sequence's slot steps: save slot 0, restore it (the harness's own slot folder, --slot-save-path)
SAVE, RESTORE = "@save", "@restore"
SLOT_STEPS = (SAVE, RESTORE)
# The concurrency axis: the server's slots (--parallel) and the concurrent streams of requests. --ctx-size
# grows with the slots (llama.cpp divides it among them), so every slot holds CTX_SIZE whatever the slots.
MAX_PARALLEL = 64
Slots = Annotated[int, Meta(ge=1, le=MAX_PARALLEL, description=f"a whole number from 1 to {MAX_PARALLEL}")]
Sweep = Annotated[tuple[Slots, ...], Meta(min_length=1, description="a non-empty list")]
SLOTS_OR_SWEEP = f"a whole number from 1 to {MAX_PARALLEL} (the slots) or a non-empty list of them (a sweep)"
# exact counters are per request set: a sweep's members send streams x prompts requests each
EXACT_COUNT_KEYS = ("expect_drafted", "expect_accepted", "expect_drafts")
# The KV-cache axis: a member's cache types (cases.kvtypes), a list of them with f16 (the reference)
KvType = Annotated[str, Meta(pattern=kvtypes.PATTERN, description=kvtypes.DESCRIPTION)]
KV_LIST = "a list of 2 to 16 KV cache types (q8_0, or TARGET/DRAFT as f16/q8_0), f16 among them"
Fraction = Annotated[float, Meta(gt=0, le=1, description="a fraction in (0, 1]")]


class CategoryFloors(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One prompt category's floors (``[case.category_floors]``): judged on that category's counters."""

    min_accept_rate: Unit | None = None
    min_accept_len: Annotated[float, Meta(ge=0, description="a number >= 0")] | None = None

    def __post_init__(self) -> None:
        _check_finite(self)


def _check_finite(table: msgspec.Struct) -> None:
    """TOML has inf and nan; no key of a case means either (min_speedup = inf is a case that cannot pass,
    accept_len_tolerance = inf a check that cannot fail), whatever range its type declares."""
    for key in table.__struct_fields__:
        value = getattr(table, key)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{key} = {value}: not a finite number")


Issue = Annotated[int, Meta(ge=1, le=10**7, description="llama.cpp's issue or pull request number")]
Evidence = Annotated[str, Meta(min_length=1, max_length=200, description="1-200 characters")]


class KnownBug(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An upstream bug the case reproduces (``[case.known_bug]``) and how it shows: the failure reason and,
    where one is needed to tell it from another failure of that reason, a text of the case's message or
    server log (an abort's file:line, the counters' words). While it shows so, the case is ``known_bug``;
    when the case passes, the bug is FIXED (measure.known)."""

    title: Annotated[str, Meta(min_length=1, max_length=200, description="a short title (1-200 characters)")]
    reason: Name  # the failure reason it shows as: crashed, order_dependent, spec_disengaged, ...
    # llama.cpp's issue or pull request number; none: not filed upstream yet (the title says what it is)
    issue: Issue | None = None
    # the text it shows; a list: any of them (one bug whose message upstream reworded between builds)
    evidence: Evidence | Annotated[tuple[Evidence, ...], Meta(min_length=1, max_length=4)] | None = None
    # the first upstream build that no longer has it (a bug of builds older than the pin): from that build
    # on the case is judged as any other, a pass says nothing and the bug back is red (measure.known)
    fixed_in: Annotated[int, Meta(ge=1, le=10**7, description="an upstream build number")] | None = None
    # an intermittent bug: seen in ``seen[0]`` of ``seen[1]`` servers where it was measured; FIXED then
    # needs as many clean runs in a row as make a still-present bug's chance of that under 5 %
    seen: Annotated[tuple[Count, Count], Meta(description="[k, n]: seen in k of n")] | None = None

    def __post_init__(self) -> None:
        if self.seen is not None and self.seen[0] > self.seen[1]:
            raise ValueError(f"known_bug.seen = {list(self.seen)}: seen in more servers than were measured")


class CaseTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One ``[[case]]`` table as written: its keys, their types and ranges, and the rules joining them."""

    name: Name
    tier: Tier
    target: str
    # How speculation is configured: exactly one of spec_type (one type or a chain), mode, spec_default.
    spec_type: Annotated[Token | tuple[Token, ...], Meta(description="a type or a list of types")] = ()
    mode: Mode | None = None
    # A mode case: the identifier the front end resolves by (its Hub repo, e.g.
    # "unsloth/Qwen3.5-0.8B-MTP-GGUF": size and -MTP marker come from it); default the target's file name.
    model_id: Text | None = None
    spec_default: bool = False
    # The method as users get it: only --spec-type (and the draft); every other speculative setting is the
    # binary's default, so a default that moves (p_min, n_max: llama.cpp #25792, #22673) moves the case.
    defaults: bool = False
    draft: str | None = None
    n_max: Count | None = None
    min_accept_rate: Unit | None = None
    min_accept_len: float | None = None
    min_identical_fraction: Unit | None = None
    min_speedup: Positive | None = None
    uncalibrated: bool = False  # report-only until `calibrate` writes its floors
    n_min: Annotated[int, Meta(ge=0, description="an integer >= 0")] | None = None
    p_min: Unit | None = None
    synth_rates: Annotated[tuple[Unit, ...], Meta(min_length=1, description="a non-empty list")] | None = None
    synth_len: Annotated[float, Meta(ge=1, description="a mean accept length >= 1")] | None = None
    # The relative gate's tolerance for this case's speedup (else the run's rtol): a speed case whose runs
    # differ by more than rtol allows (docs/speed.md)
    speed_rtol: Annotated[float, Meta(gt=0, lt=1, description="a fraction in (0, 1)")] | None = None
    # ... and for its speculative server's own decode tokens/s (else speed_rtol, else the run's rtol): an
    # absolute speed moves with a shared machine's load, which a ratio to the baseline cancels
    decode_rtol: Annotated[float, Meta(gt=0, lt=1, description="a fraction in (0, 1)")] | None = None
    # ... and for its prefill and time to first token against plain (else the run's rtol): a long prompt's
    # prompt timings spread as their own (docs/speed.md, "Prefill")
    prefill_rtol: Annotated[float, Meta(gt=0, lt=1, description="a fraction in (0, 1)")] | None = None
    # Its speculative server's prompt tokens/s at least this fraction of plain's (the median of the rounds): a
    # product rule like min_speedup, for a long-prompt case (a drafter processing every prompt ubatch)
    min_prefill_ratio: Positive | None = None
    # Both servers of the case (and its baseline) on one CPU, the same one, where speed is measured on a CPU
    # build: a speed case on shared cores (docs/speed.md). Its servers must run one thread (--threads 1).
    pin_cpu: bool = False
    # A-B-B-A rounds at least (run-tier --repeat raises it): a speed case whose spread needs more rounds
    repeat: Annotated[
        int, Meta(ge=1, le=MAX_REPEAT, description=f"a whole number from 1 to {MAX_REPEAT}")
    ] = 1
    server_args: tuple[str, ...] = ()
    n_predict: NPredict = 128
    # The server's --ctx-size (the harness owns the flag): room for the prompt and n_predict tokens.
    ctx_size: CtxSize = CTX_SIZE
    # 0: greedy (top_k 1). Above 0: pure temperature sampling (top_k 0, top_p 1, min_p 0), seeded per request.
    temperature: Temperature = 0.0
    prompts: str = "seed"
    # Per prompt category (a prompt set whose prompts have categories): floors on that category's counters.
    category_floors: dict[str, CategoryFloors] = {}
    # Exact counters over the measured pass (synthetic models make them deterministic).
    expect_drafted: Annotated[int, Meta(ge=0, description="an integer >= 0")] | None = None
    # GPUs the case's servers see (run-tier gives each worker a group of this many; a GPU build only)
    gpus: Annotated[int, Meta(ge=1, le=64, description="a whole number from 1 to 64")] = 1
    expect_accepted: Annotated[int, Meta(ge=0, description="an integer >= 0")] | None = None
    expect_drafts: Annotated[int, Meta(ge=0, description="an integer >= 0")] | None = None
    expect_all_accepted: bool = False
    expect_accept_len: float | None = None
    accept_len_tolerance: Positive | None = None
    expect_no_drafts: bool = False
    expect_full_positions: bool = False
    expect_draft_len: Count | None = None
    expect_log: tuple[str, ...] = ()
    # A mode case: what the resolver must pick ("draft-mtp", "ngram-mod,draft-mtp", "ngram-mod", "default",
    # "ngram-simple", or "none" when it emits no speculation).
    expect_resolved: Text | None = None
    # The concurrency axis (docs/concurrency.md): the server's slots, or a sweep (a list: one case per
    # value), and the concurrent streams of requests (default: one per slot).
    parallel: Annotated[Slots | Sweep, Meta(description=SLOTS_OR_SWEEP)] | None = None
    streams: Slots | None = None
    # The KV-cache axis (docs/configuration.md): one case per value, the target's and the draft's cache types
    # ("q8_0" both, "f16/q8_0" target/draft), each judged against its f16 member of the same run
    # (measure.kvaxis): acceptance at least this fraction of f16's (default kvtypes.MIN_ACCEPT_FRACTION)
    kv_types: Annotated[tuple[KvType, ...], Meta(min_length=2, max_length=16, description=KV_LIST)] = ()
    kv_min_accept_fraction: Fraction | None = None
    calibration: dict[str, Any] = {}
    known_bug: KnownBug | None = None  # the upstream bug the case reproduces (docs/upstream.md)
    # A server's life: prompt ids of the case's set sent in this order to one fresh server after the case's
    # own measurement; each request is compared with itself sent alone to a fresh server, counters and
    # tokens (order_dependent: measure.order). "long then short" is upstream's #27852.
    sequence: Annotated[
        tuple[Text, ...], Meta(min_length=2, max_length=64, description="2 to 64 prompt ids")
    ] = ()

    def __post_init__(self) -> None:
        _check_finite(self)
        self._check_method()
        self._check_defaults()
        self._check_floors()
        self._check_synth()
        self._check_server_args()
        if self.n_predict > self.ctx_size:
            raise ValueError(
                f"n_predict = {self.n_predict} is more than ctx_size = {self.ctx_size}: the server's context "
                "holds the prompt and every generated token (raise ctx_size)"
            )
        self._check_sweep()
        self._check_kv()
        if self.n_max is not None and self.n_max > self.n_predict:
            raise ValueError(
                f"n_max = {self.n_max} is more than n_predict = {self.n_predict}: a draft longer than the "
                "generation it speeds up is never accepted"
            )
        if self.n_min is not None and self.n_max is not None and self.n_min > self.n_max:
            raise ValueError(
                f"n_min = {self.n_min} is more than n_max = {self.n_max}: no draft can be both (lower n_min)"
            )
        if (self.expect_accept_len is None) != (self.accept_len_tolerance is None):
            raise ValueError("expect_accept_len and accept_len_tolerance go together")

    @property
    def chain(self) -> tuple[Token, ...]:
        """``spec_type`` as a tuple, whether the file gives one type or a list."""
        return (self.spec_type,) if isinstance(self.spec_type, str) else self.spec_type

    def _check_method(self) -> None:
        ways = {
            "spec_type": bool(self.chain),
            "mode": self.mode is not None,
            "spec_default": self.spec_default,
        }
        given = [k for k, v in ways.items() if v]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of spec_type, mode, spec_default (got {', '.join(given) or 'none'})"
            )
        types = list(self.chain)
        for alone in (DETECT, "none"):
            if alone in types and types != [alone]:
                raise ValueError(f"spec_type {alone!r} cannot be part of a chain")
        if len(set(types)) != len(types):
            raise ValueError(f"spec_type {types} names a type twice")
        if not set(types) <= set(NO_DRAFT_LENGTH) and self.n_max is None and not self.defaults:
            raise ValueError(
                "missing n_max (the draft length; mode, spec_default, none and ngram-cache cases may omit it)"
            )
        if self.mode is None and (self.model_id is not None or self.expect_resolved is not None):
            raise ValueError(
                "model_id and expect_resolved are about resolving a mode: give them only with mode"
            )

    def _check_defaults(self) -> None:
        if not self.defaults:
            return
        if not self.chain:
            raise ValueError("defaults = true runs a spec_type at the binary's defaults: give spec_type")
        given = [
            k for k in ("n_max", "n_min", "p_min", "synth_rates", "synth_len") if getattr(self, k) is not None
        ]
        given += [
            a
            for a in self.server_args
            if a.split("=", 1)[0].startswith(SPEC_FLAG_PREFIXES)
            or (a in ALLOWED and speculative_option(ALLOWED[a].spellings))
        ]  # -ctkd: --spec-draft-type-k
        if given:
            raise ValueError(
                f"defaults = true leaves every speculative setting at the binary's default; remove "
                f"{', '.join(given)}"
            )

    def _check_floors(self) -> None:
        if not self.expect_no_drafts and not self.uncalibrated:
            for key in FLOOR_KEYS:
                if getattr(self, key) is None:
                    raise ValueError(
                        f"missing floor {key!r} (only expect_no_drafts cases, or uncalibrated = true "
                        "report-only cases, may omit it)"
                    )
        top = self.n_max + 1 if self.n_max is not None and not self.mode else float("inf")
        if self.min_accept_len is not None and not 0.0 <= self.min_accept_len <= top:
            raise ValueError(f"min_accept_len = {self.min_accept_len:g} is outside [0, n_max + 1]")

    def _check_server_args(self) -> None:
        """Only the flags of serverflags.CASE_FLAGS (an allowlist: each there with its reason); a pinned
        case's servers on one thread."""
        if self.pin_cpu and not _one_thread(self.server_args):
            raise ValueError(
                "pin_cpu puts the servers on one CPU: give them one thread "
                '(server_args = ["--threads", "1"]; every thread flag 1, the last of each counting)'
            )
        if (why := server_args_problem(self.server_args, mode_case=self.mode is not None)) is not None:
            raise ValueError(f"server_args: {why}")

    @property
    def sweep(self) -> tuple[int, ...] | None:
        """The slot counts of a sweep (``parallel`` given as a list); None for one case."""
        return self.parallel if isinstance(self.parallel, tuple) else None

    def _check_sweep(self) -> None:
        nps = self.sweep
        if nps is None:
            return
        if list(nps) != sorted(set(nps)) or nps[0] != 1:
            raise ValueError(
                f"parallel = {list(nps)}: a sweep lists distinct slot counts in increasing order from 1 "
                "(its np-1 member is the reference every other member is compared with)"
            )
        given = [k for k in (*EXACT_COUNT_KEYS, "min_speedup") if getattr(self, k) is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)}: not on a sweep (its members send streams x prompts requests each, and "
                "speculation is expected to stop paying at some slot count: the crossover reports that); "
                "give them on a case with one parallel value"
            )

    def _check_kv(self) -> None:
        """A KV axis: f16 among its values (the reference), each once; it owns the cache-type flags, and
        stands alone (no parallel sweep, no mode, no defaults: it sets the draft's cache type)."""
        if not self.kv_types:
            if self.kv_min_accept_fraction is not None:
                raise ValueError("kv_min_accept_fraction judges a kv_types axis's members: give kv_types")
            return
        pairs = [KvPair.parse(v) for v in self.kv_types]
        if twice := sorted({p.spelled for p in pairs if pairs.count(p) > 1}):
            raise ValueError(f"kv_types = {list(self.kv_types)} names {', '.join(twice)} twice")
        if kvtypes.REFERENCE not in pairs:
            raise ValueError(
                f"kv_types = {list(self.kv_types)} lacks f16: the member every other one is judged against"
            )
        why = {
            "parallel": self.sweep is not None,
            "mode": self.mode is not None,
            "defaults": self.defaults,
            **{k: getattr(self, k) is not None for k in EXACT_COUNT_KEYS},
        }
        if given := [k for k, v in why.items() if v]:
            raise ValueError(
                f"{', '.join(given)}: not with kv_types (one axis a table; a mode or the binary's defaults "
                "leave the draft's cache type to the binary; a cache type moves exact counters)"
            )
        owned = kvtypes.TARGET_FLAGS + kvtypes.DRAFT_FLAGS
        spellings = {s for a in owned for s in ALLOWED[a].spellings}
        if flags := [a for a in self.server_args if a in spellings]:  # FLAG=VALUE: refused before
            raise ValueError(f"server_args: {', '.join(flags)}: kv_types sets the cache types (remove it)")

    def _check_synth(self) -> None:
        if self.synth_rates is not None and self.synth_len is not None:
            raise ValueError("synth_rates and synth_len are mutually exclusive (as in llama-server)")
        rates = list(self.synth_rates or ())
        if any(b > a for a, b in itertools.pairwise(rates)):
            raise ValueError(f"synth_rates {rates} must be non-increasing (entry i = P(first i+1 accepted))")


# Every flag that sets a thread count of a server (its first spelling in CASE_FLAGS): on one pinned CPU, each
# must be 1 (the batch and draft threads default to --threads).
_THREAD_FLAGS = ("-t", "-tb", "--spec-draft-threads", "--spec-draft-threads-batch")


def _one_thread(args: tuple[str, ...]) -> bool:
    """Whether ``server_args`` leave the servers one thread: ``--threads 1`` (or ``-t 1``), the last of each
    thread flag 1 (llama.cpp takes the last: ``--threads 1 --threads 2`` runs two)."""
    last = {ALLOWED[flag].spellings[0]: value for flag, value in itertools.pairwise(args) if flag in ALLOWED}
    threads = {k: v for k, v in last.items() if k in _THREAD_FLAGS}
    return threads.get("-t") == "1" and all(v == "1" for v in threads.values())


class Case(CaseTable, frozen=True):
    """A case ready to run: ``spec_type`` always a tuple, ``parallel`` and ``streams`` numbers, and the
    texts of its prompt set. A sweep's table is one Case per slot count (``sweep_members``), a KV axis's
    one per cache type (``kv_members``)."""

    spec_type: tuple[Token, ...] = ()
    parallel: int = 1  # a number here: a sweep is one Case per value
    streams: int = 1
    # Not keys of the file: the texts of the prompt set named by ``prompts`` (from its [[prompt_set]]; a
    # dataset-backed set's are read from its file when the case runs: ``cases.dataset.with_prompts``), each
    # prompt's category ("" for none), and the set's dataset, if any; for a sweep's member, the sweep's name
    # (its table's) and every slot count of the sweep.
    prompt_texts: tuple[tuple[str, str], ...] = ()
    prompt_categories: tuple[str, ...] = ()
    dataset: DatasetSource | None = None
    sweep_name: str | None = None
    sweep_nps: tuple[int, ...] = ()
    # A member of a KV axis (``kv_members``): its cache types, its table's name, the fraction of its f16
    # member's acceptance it must reach. Its ``server_args`` end with the types' flags (``KvPair.flags``),
    # and its ``kv_types`` are empty: a member is one case, as a sweep's member is.
    kv: KvPair | None = None
    kv_sweep: str | None = None
    kv_fraction: float | None = None

    @property
    def table(self) -> str:
        """The name of the cases.toml table it comes from (a sweep's or a KV axis's, else its own)."""
        return self.sweep_name or self.kv_sweep or self.name

    def kv_member(self, pair: KvPair) -> Case:
        """The member of its KV axis at ``pair`` (the f16 reference of a member: ``REFERENCE``): its own
        server_args with the types' flags in place of its own."""
        assert self.kv is not None and self.kv_sweep is not None
        own = self.server_args[: len(self.server_args) - len(self.kv.flags)]
        return msgspec.structs.replace(
            self, name=kvtypes.member_name(self.kv_sweep, pair), server_args=(*own, *pair.flags), kv=pair
        )

    @property
    def concurrent(self) -> bool:
        """On the concurrency axis: several slots or streams, or a member of a sweep."""
        return self.sweep_name is not None or self.parallel > 1 or self.streams > 1

    @property
    def models(self) -> list[str]:
        """Lock names this case needs: the target, then the draft (once, if it drafts for itself), then the
        prompt set's dataset file."""
        files = [
            self.target,
            *([self.draft] if self.draft else []),
            *([self.dataset.file] if self.dataset else []),
        ]
        return list(dict.fromkeys(files))

    @property
    def gpu(self) -> bool:
        return self.tier in GPU_TIERS

    def rounds(self, given: int | None) -> int:
        """Its A-B-B-A rounds: ``given`` (--repeat, SPEC_REPEAT), else its tier's default (TIER_REPEAT),
        raised to its own ``repeat``."""
        return max(TIER_REPEAT[self.tier] if given is None else given, self.repeat)

    @property
    def method(self) -> str:
        """What the case runs, for tables: the type chain, ``mode=auto`` or ``spec-default``."""
        if self.mode:
            return f"mode={self.mode}"
        return "spec-default" if self.spec_default else ",".join(self.spec_type)

    @property
    def floors(self) -> dict[str, float | None]:
        """Its one-sided floors by key: every ``min_*`` key (results.metrics.Metric.floor names them)."""
        return {key: getattr(self, key) for key in self.__struct_fields__ if key.startswith("min_")}

    @property
    def rtols(self) -> dict[str, float | None]:
        """Its own tolerances of the relative gate, by key (results.metrics.Metric.tolerance names them)."""
        return {key: getattr(self, key) for key in self.__struct_fields__ if key.endswith("_rtol")}


class Prompt(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: Text
    text: Text  # sent byte for byte
    category: Name | None = None  # acceptance is recorded (and may be gated) per category


class DatasetSource(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where a dataset-backed prompt set's prompts come from: a pinned file (a models.lock entry of
    ``source = "hf-dataset"``) and the fixed subset taken from it (``cases.dataset`` reads it)."""

    file: Text  # the models.lock name of the file
    format: Literal["jsonl", "parquet"]
    text: Text = "text"  # the field holding the prompt: a string, or a list of turns (the first is sent)
    id: Text = "id"
    category: Text = "category"
    # Which categories, in this order; empty: every category, in the order of its first row.
    categories: tuple[Text, ...] = ()
    per_category: Count = 10  # the first rows of each category, in the file's order


class PromptSet(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One ``[[prompt_set]]`` table: a name and its prompts, given inline or taken from a dataset file."""

    name: str
    prompts: tuple[Prompt, ...] = ()
    dataset: DatasetSource | None = None

    def __post_init__(self) -> None:
        if bool(self.prompts) == (self.dataset is not None):
            raise ValueError("give exactly one of prompts (a non-empty list of {id, text}) and dataset")
        ids = [p.id for p in self.prompts]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"duplicate prompt id(s) {', '.join(map(repr, twice))}")
        categorised = {p.category is not None for p in self.prompts}
        if len(categorised) > 1:
            raise ValueError("give every prompt a category, or none")
        if self.dataset is not None and len(set(self.dataset.categories)) != len(self.dataset.categories):
            raise ValueError(f"dataset.categories {list(self.dataset.categories)} names a category twice")

    @property
    def categories(self) -> tuple[str, ...] | None:
        """The set's categories in order; None when its file decides (a dataset without a list)."""
        if self.dataset is not None:
            return self.dataset.categories or None
        return tuple(dict.fromkeys(p.category for p in self.prompts if p.category is not None))


class _CasesFile(msgspec.Struct, forbid_unknown_fields=True):
    version: int
    case: list[CaseTable] = []
    prompt_set: list[PromptSet] = []


@dataclass(frozen=True)
class CaseFile:
    cases: list[Case]
    prompt_sets: dict[str, PromptSet]


def _bad(table: str, index: int, name: str, msg: str) -> UserError:
    return UserError(f"{LABEL}: {declared.entry_name(table, index, name)}: {msg}")


def _prompt_sets(sets: list[PromptSet]) -> dict[str, PromptSet]:
    out: dict[str, PromptSet] = {}
    for i, s in enumerate(sets):
        if s.name in out:
            raise _bad("prompt_set", i, s.name, "duplicate prompt set name")
        out[s.name] = s
    return out


def _check_category_floors(index: int, table: CaseTable, pset: PromptSet) -> None:
    known = pset.categories
    if table.category_floors and known is not None:
        unknown = [c for c in table.category_floors if c not in known]
        if unknown:
            names = ", ".join(map(repr, unknown))
            msg = f"category_floors: prompt set {pset.name!r} has no category {names}"
            raise _bad("case", index, table.name, f"{msg} (its categories: {', '.join(known) or 'none'})")


def _check_sequence(index: int, table: CaseTable, pset: PromptSet) -> None:
    """A sequence names prompts of the case's own inline set, on one slot (each request alone on its
    server, as the reference it is compared with is)."""
    if not table.sequence:
        return
    if pset.dataset is not None:
        raise _bad(
            "case", index, table.name, "sequence: give it with an inline prompt set (its ids are known)"
        )
    if table.parallel not in (None, 1) or (table.streams or 1) != 1:
        raise _bad("case", index, table.name, "sequence: give it on a case of one slot and one stream")
    ids = [p.id for p in pset.prompts]
    if (why := _slot_steps_problem(table.sequence)) is not None:
        raise _bad("case", index, table.name, f"sequence: {why}")
    if unknown := [s for s in table.sequence if s not in ids and s not in SLOT_STEPS]:
        raise _bad("case", index, table.name,
                   f"sequence: prompt set {pset.name!r} has no prompt {', '.join(map(repr, unknown))} "
                   f"(its ids: {', '.join(ids)})")  # fmt: skip


def _slot_steps_problem(steps: tuple[str, ...]) -> str | None:
    """A restore needs a save before it, and the prompt after it must be the one after that save (the warm
    slot's answer it is compared with); the sequence starts with a prompt."""
    if steps[0].startswith("@"):
        return f"{steps[0]!r}: the first step is a prompt"
    after_save = None
    for i, step in enumerate(steps):
        if step.startswith("@") and step not in SLOT_STEPS:
            return f"{step!r} is not a step ({SAVE!r} or {RESTORE!r}; a prompt id does not start with '@')"
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        if step == SAVE:
            after_save = nxt
        if step == RESTORE and (after_save is None or nxt != after_save):
            return (
                f"{RESTORE!r} at step {i + 1} must follow a {SAVE!r} and be followed by the prompt that "
                f"followed it ({after_save!r}): the warm slot's answer is compared with it"
            )
    return None


def _ready(
    index: int,
    table: CaseTable,
    prompt_sets: dict[str, PromptSet],
    lock_names: set[str] | None,
) -> list[Case]:
    """The table as its Cases (one, or a sweep's members), once what it names exists: its prompt set and
    (given ``lock_names``) models."""
    if table.prompts not in prompt_sets:
        raise _bad(
            "case", index, table.name, f"prompts {table.prompts!r} is not one of {', '.join(prompt_sets)}"
        )
    pset = prompt_sets[table.prompts]
    _check_category_floors(index, table, pset)
    _check_sequence(index, table, pset)
    files = (table.target, table.draft, pset.dataset.file if pset.dataset else None)
    for model in filter(None, files):
        if lock_names is not None and model not in lock_names:
            raise _bad(
                "case",
                index,
                table.name,
                f"model {model!r} is not in models.lock (add it there or fix the name)",
            )
    keys = msgspec.structs.asdict(table)
    order = pset.categories or ()
    # a categorised set runs category by category (each one's counters are a /metrics delta of its own)
    prompts = sorted(pset.prompts, key=lambda p: order.index(p.category) if p.category in order else 0)
    texts = tuple((p.id, p.text) for p in prompts)
    cats = tuple(p.category or "" for p in prompts)
    base = Case(**{**keys, "spec_type": table.chain, "prompt_texts": texts, "prompt_categories": cats,
                   "dataset": pset.dataset, "parallel": 1, "streams": table.streams or 1})  # fmt: skip
    return kv_members(sweep_members(base, table), table)


def kv_members(cases: list[Case], table: CaseTable) -> list[Case]:
    """A KV axis's table as one case per value, its f16 member first (the reference the others are judged
    against runs before them, in one group of its target); any other table's cases as they are."""
    if not table.kv_types:
        return cases
    (base,) = cases  # the table's one case: a parallel sweep is not an axis with kv_types
    pairs = sorted(map(KvPair.parse, table.kv_types), key=lambda p: p != kvtypes.REFERENCE)
    fraction = table.kv_min_accept_fraction or kvtypes.MIN_ACCEPT_FRACTION
    return [
        msgspec.structs.replace(
            base,
            name=kvtypes.member_name(table.name, p),
            server_args=(*table.server_args, *p.flags),
            kv_types=(),
            kv_min_accept_fraction=None,
            kv=p,
            kv_sweep=table.name,
            kv_fraction=fraction,
        )
        for p in pairs
    ]


def member_name(name: str, parallel: int) -> str:
    """A sweep member's name: the table's for its np-1 member (the single-stream case any other case is),
    ``<name>-np<N>`` for the others."""
    return name if parallel == 1 else f"{name}-np{parallel}"


def sweep_members(base: Case, table: CaseTable) -> list[Case]:
    """The cases of one table: itself, or one per slot count of its sweep; streams default to the slots."""
    if table.parallel is None:
        return [base]
    nps: tuple[int, ...] = table.parallel if isinstance(table.parallel, tuple) else (table.parallel,)
    return [
        msgspec.structs.replace(
            base,
            name=member_name(table.name, n) if table.sweep else table.name,
            parallel=n,
            streams=table.streams or n,
            sweep_name=table.name if table.sweep else None,
            sweep_nps=tuple(nps) if table.sweep else (),
        )
        for n in nps
    ]


def parse_case_file(text: str, lock_names: set[str] | None = None) -> CaseFile:
    """Parse and validate the text of a cases file: its prompt sets and its cases."""
    raw = tomldata.load_versioned(text, LABEL, "case", "prompt_set")
    doc = declared.convert(raw, _CasesFile, LABEL)
    prompt_sets = _prompt_sets(doc.prompt_set)
    cases: list[Case] = []
    seen: set[str] = set()
    for i, table in enumerate(doc.case):
        for c in _ready(i, table, prompt_sets, lock_names):
            if c.name in seen:
                what = f" (a member of the sweep {c.table!r})" if c.table != c.name else ""
                raise _bad("case", i, table.name, f"duplicate case name {c.name!r}{what}")
            seen.add(c.name)
            cases.append(c)
    return CaseFile(cases, prompt_sets)


def parse_cases(text: str, lock_names: set[str] | None = None) -> list[Case]:
    return parse_case_file(text, lock_names).cases


def read_text(path: str | Path = paths.CASES_FILE) -> str:
    return tomldata.read_text(Path(path), "cases file", "--cases PATH")


# cases.toml parsed once per process: what one run asks of it (run-tier, the plan, the plugin, a fetch) is
# the file's cases while the file is the same file (statcache.identity: a rewrite shows); Case is frozen.
_LOADED: dict[tuple[str, tuple[int, ...], frozenset[str] | None], list[Case]] = {}


def load_cases(path: str | Path = paths.CASES_FILE, lock_names: set[str] | None = None) -> list[Case]:
    """Load and validate cases.toml; with ``lock_names`` also check every model name against the lock."""
    try:
        resolved = Path(path).resolve()
        key = (str(resolved), tuple(statcache.identity(resolved).values()),
               frozenset(lock_names) if lock_names is not None else None)  # fmt: skip
    except OSError:
        return parse_cases(read_text(path), lock_names)  # read_text says what is wrong with the file
    if key not in _LOADED:
        _LOADED[key] = parse_cases(read_text(path), lock_names)
    return list(_LOADED[key])


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
            raise UserError(unknown_name(item, list(by_name)))
    return list(chosen.values())


LISTED = 8  # names a miss lists when none is close


def suggest(item: str, names: list[str]) -> str:
    """The end of a line saying ``item`` is not one of ``names``: ``: did you mean 'x'?`` for the nearest
    name when one is close (a typo, difflib), else ``; choose from N: a, b, … and M more``. Every command that
    takes a case name (a run id, a device) words a miss with it."""
    nearest = difflib.get_close_matches(item, names, n=1)
    if nearest:
        return f": did you mean {nearest[0]!r}?"
    if not names:
        return "; there is none"
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return f"; choose from {len(names)}: {', '.join(names[:LISTED])}{more}"


def unknown_name(item: str, names: list[str]) -> str:
    """The message for a selector naming no tier or case: the nearest name when one is close (a typo),
    else every case."""
    nearest = difflib.get_close_matches(item, [*TIERS, *names], n=1)
    if nearest:
        tiers = ", ".join(TIERS)
        return f"unknown case or tier {item!r}: did you mean {nearest[0]!r}? (valid tiers: {tiers})"
    return (
        f"unknown case or tier {item!r}; valid tiers: {', '.join(TIERS)}; "
        f"valid cases: {', '.join(names) or '(none)'}"
    )


def is_gpu_selection(cases: list[Case]) -> bool:
    return any(c.gpu for c in cases)
