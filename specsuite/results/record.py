"""A case's record (``CaseRecord``): one case of one run, typed from the runner to results.json and the
history, and the accessors every reader shares (finite numbers, pos0 rate, measured or not, speed samples).

Declared with msgspec: the runner fills a record, results.json is its encoding, and a reader decodes it back
(``decode_record``): tolerant of older schemas (unknown keys dropped; a missing key or a null takes the
field's default; schema 1's spec_type list joined), but a value of the wrong shape is one error naming the
case and the field, never a later traceback.
"""

from __future__ import annotations

import math
import types
from typing import Any, Literal, Union, get_args, get_origin

import msgspec

from specsuite.common import declared
from specsuite.common.errors import UserError
from specsuite.results.config import CaseConfig

# How a case ended: the one enumeration (a results.json holding another status is refused when read).
# not_in_build: the binary predates what the case needs (suite.vintage): no failure of today's suite.
# known_bug: the case reproduces an upstream bug it names (its [case.known_bug]) as the bug shows: counted,
# said, not red; the bug fixed turns it green and named (measure.known).
Status = Literal["passed", "failed", "skipped", "not_in_build", "known_bug", "error", "interrupted"]
STATUSES: tuple[Status, ...] = get_args(Status)
NOT_IN_BUILD: Status = "not_in_build"
KNOWN_BUG: Status = "known_bug"
# A case that failed only on its numbers (a floor, the relative gate, the speed floor) still measured real
# numbers; any other failure (diverged, sanity, a crash) did not measure what the gate compares. tokens_lost:
# the answer lacks tokens the server generated, and the ones it returned equal the plain server's; its
# counters count the whole generation (upstream b9113: measure.judge.lost_tails).
MEASURED_FAIL_REASONS = frozenset(
    {
        "tokens_lost",
        "floor",
        "regressed",
        "drifted",
        "speed",
        "memory_growth",
        "concurrency_collapse",
        "crossover_moved",
        "kv_collapse",
    }
)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite(value: Any) -> float | None:
    """A finite float, or None for null, NaN, infinities, booleans and non-numbers."""
    return float(value) if is_number(value) and math.isfinite(value) else None


def is_finite(value: Any) -> bool:
    """True for a finite int or float (not a bool): a number a floor or a gate may compare."""
    return finite(value) is not None


class Resolved(msgspec.Struct, kw_only=True):
    """What a front end's mode resolved to (a ``mode`` case)."""

    flags: list[str] = []
    spec_type: str | None = None
    why: str | None = None
    fallback_reason: str | None = None


class SpeedSamples(msgspec.Struct, kw_only=True):
    """Decode speed per A-B-B-A round, paired by round, and the per-round speedups."""

    repeat: int | None = None
    spec_tps: list[float | None] = []
    base_tps: list[float | None] = []
    speedups: list[float | None] = []
    speedup_median: float | None = None
    speedup_spread: float | None = None


class BlockCost(msgspec.Struct, kw_only=True):
    """Per verification block, per A-B-B-A round (paired like the speedups): the speculative server's decode
    milliseconds over its drafts (a block: draft plus verify; a step that drafted nothing counts in its
    time), the baseline's decode milliseconds per token, their ratio (what a block costs in plain decode
    steps: the number that moved in llama.cpp issue 25908 while acceptance and the drafter did not), and the
    tokens decoded per block. ``speedup = tokens_per_block / ratio`` where every step drafts."""

    block_ms: list[float | None] = []
    token_ms: list[float | None] = []
    ratios: list[float | None] = []
    tokens_per_block: list[float | None] = []


class PromptCheck(msgspec.Struct, kw_only=True):
    """One prompt's tokens against the speculation-off baseline's."""

    id: str
    n_tokens: int | None = None
    identical: bool | None = None
    first_diff: int | None = None
    prefix_fraction: float | None = None
    stream: int | None = None  # which of several concurrent streams sent the request


class Counters(msgspec.Struct, kw_only=True):
    """The acceptance counters of one speculative round (a ``/metrics`` delta)."""

    drafted: int
    accepted: int
    drafts: int | None  # None: counters from the timings (a build before b10289 counts no drafts)
    per_position: list[int] = []


class CategoryStats(msgspec.Struct, kw_only=True):
    """One prompt category of a case (or one input-length bucket): its counters, its tokens against the
    baseline's and its decode speed, from the cold pass (``measure.categories``)."""

    prompts: int = 0
    prompt_tokens: int | None = None  # the prompt tokens the server processed for this category
    drafted: int | None = None
    accepted: int | None = None
    drafts: int | None = None  # None with counters from the timings: that build counts no drafts
    # where the counters came from: "metrics" (/metrics' spec_decode_*), "timings" (the responses', on a
    # build before b10289, which exports none); None in records before it was said
    counters_source: str | None = None
    accept_rate: float | None = None
    accept_len: float | None = None
    per_position: list[int] = []
    per_position_rate: list[float | None] = []
    identical_fraction: float | None = None
    decode_tps: float | None = None  # the cold pass's, with speculation
    baseline_decode_tps: float | None = None  # the first baseline round's, the same prompts without


class Spread(msgspec.Struct, kw_only=True):
    """One number over the requests of a concurrent case: its median and its worst."""

    median: float | None = None
    worst: float | None = None


class RequestCounters(msgspec.Struct, kw_only=True):
    """One request's own speculative counters (``timings.draft_n`` and ``draft_n_accepted``)."""

    stream: int | None = None
    prompt: str
    drafted: int
    accepted: int


class Np1(msgspec.Struct, kw_only=True):
    """The np-1 output a concurrent case is compared with: where it came from, its acceptance, and how
    this case's requests compare with it."""

    source: str  # "tiny-mtp-random (this run)" or "measured for this case"
    accept_rate: float | None = None
    accept_len: float | None = None
    identical_fraction: float | None = None  # requests whose tokens equal np 1's for their prompt
    counters: str | None = None  # "identical per request", or the requests whose counters differ


class Concurrency(msgspec.Struct, kw_only=True):
    """A case on the concurrency axis: slots and streams, the speed a client sees (aggregate tokens/s on
    the client's clock per round, per-request decode speed and time to first token), each request's own
    counters, the np-1 comparison, and the crossover of its sweep in this run."""

    parallel: int = 1
    streams: int = 1
    requests: int | None = None  # per pass: streams x prompts
    spec_tps: list[float | None] = []
    base_tps: list[float | None] = []
    speedups: list[float | None] = []
    speedup: float | None = None  # median of the rounds' aggregate speedups
    request_tps: Spread | None = None
    base_request_tps: Spread | None = None
    ttft_ms: Spread | None = None
    base_ttft_ms: Spread | None = None
    per_request: list[RequestCounters] = []
    np1: Np1 | None = None
    crossover_np: int | None = None  # the largest np at which its sweep paid in this run (0: not at 1)


class KvAxis(msgspec.Struct, kw_only=True):
    """A member of a KV-cache axis (measure.kvaxis): its cache types, and how it compares with the f16
    member of its run (none of that on the f16 member itself)."""

    sweep: str  # the axis: its table's name
    target: str  # the target's cache type (K and V)
    draft: str  # the draft's
    reference: str | None = None  # where the f16 output came from: "<its name> (this run)", or measured
    f16_accept_rate: float | None = None
    f16_accept_len: float | None = None
    accept_fraction: float | None = None  # this member's accept rate over the f16 member's
    min_accept_fraction: float | None = None  # what it must reach (cases.toml kv_min_accept_fraction)
    identical_to_f16: float | None = None  # prompts whose tokens equal the f16 member's for the prompt
    tokens_judged: bool = False  # greedy and only the draft's type moved: the tokens must be f16's


class BaselineRef(msgspec.Struct, kw_only=True):
    """The history baseline a case was judged against, what regressed, and how the counters compare."""

    commit: str
    run_id: str | None = None
    started: str | None = None
    rtol: float | None = None
    regressions: list[str] = []
    # the acceptance counters against the baseline's, exactly: "identical", the changes ("accepted 36 -> 33
    # (-3); position 2: 12 -> 9 (-3)"), or why they were not compared (nondeterministic, not recorded)
    counters: str | None = None
    # the case's status at the baseline run: red when it failed here and not there, fixed the other way
    # (suspects.runlines); None in records written before it was kept
    status: str | None = None
    # how this run's configuration differs from the baseline run's (results.config.changes)
    config_changes: list[str] = []
    # what moved, in a few words each, the most specific first (history.regress): what the first lines name,
    # e.g. "block cost 3.27 -> 26.93 ms per block, +720.2 % in plain decode steps, 4 rounds vs 4"
    moved: list[str] = []


class DriftRef(msgspec.Struct, kw_only=True):
    """A change point of more than rtol over the last runs of a case (the drift gate): where and how much."""

    metric: str
    before_commit: str  # the last commit before the change point
    after_commit: str  # the first commit after it
    after_run_id: str
    mean_before: float
    mean_after: float
    change: float  # (mean_after - mean_before) / mean_before
    p_value: float | None  # None: a deterministic counter changed (no statistics needed)
    runs: int  # the runs judged together, this one included
    config_changes: list[str] = []  # the configuration across the change point (results.config.changes)


def bug_name(issue: int | None, title: str) -> str:
    """A known bug as every line says it: ``llama.cpp #21815 (title)``, or an unfiled one's title."""
    return f"llama.cpp #{issue} ({title})" if issue is not None else f"not filed upstream yet ({title})"


class KnownBugRef(msgspec.Struct, kw_only=True):
    """The upstream bug a case reproduces, and how this run found it (measure.known): ``present`` (it showed
    as the case says: status known_bug), ``fixed`` (the case passed; an intermittent bug only after enough
    clean runs in a row), ``absent`` (the case passed on a build older than the pin the bug was recorded on:
    not there yet), ``not_seen`` (an intermittent bug that did not show this run, not yet believed fixed),
    ``other`` (the case failed another way: red as usual)."""

    issue: int | None  # llama.cpp's issue or pull request number; None: not filed upstream yet
    title: str
    state: Literal["present", "fixed", "absent", "not_seen", "other"]
    reason: str  # the failure reason it shows as
    seen: list[int] | None = None  # an intermittent bug: seen in [k, n] servers when it was measured
    clean_runs: int | None = None  # an intermittent bug: this and the runs before it in a row without it
    clean_needed: int | None = None  # ... and the clean runs in a row FIXED needs (measure.known)


class Memory(msgspec.Struct, kw_only=True):
    """The case server's memory and, beside it, the baseline server's (server.memory): peaks, a sample
    after each pass of the prompts (the cold pass, the warm-up, each round), and the growth from the
    first warmed sample to the last."""

    peak_rss_mib: float | None = None  # VmHWM of the case's server
    base_peak_rss_mib: float | None = None  # ... of the baseline server (shared by its target's cases)
    rss_mib: list[float | None] = []
    requests: list[int] = []  # the requests the server had answered at each sample
    growth_mib: float | None = None
    growth_requests: int | None = None
    gpu_peak_mib: float | None = None  # the largest nvidia-smi sample (no GPU: None)
    base_gpu_peak_mib: float | None = None
    gpu_mib: list[float | None] = []
    gpu_growth_mib: float | None = None
    limit_mib: float | None = None  # growth above this failed the case (memory_growth)


class Prefill(msgspec.Struct, kw_only=True):
    """Prompt processing, from the servers' own timings (prompt_n, prompt_ms), speculative against the
    baseline: the time to first token of a non-streamed request is its prompt_ms."""

    ttft_ms: float | None = None  # median prompt_ms of the rounds' requests
    base_ttft_ms: float | None = None
    prompt_tps: float | None = None  # median over rounds of sum(prompt_n) / sum(prompt_ms)
    base_prompt_tps: float | None = None
    ratio: float | None = None  # prompt_tps / base_prompt_tps (below 1: speculation slows the prefill)
    prompt_tps_rounds: list[float | None] = []
    base_prompt_tps_rounds: list[float | None] = []
    # per round, paired as the speedups are: the two sides' prompt tokens/s, and their time to first token
    # (the median prompt_ms of the round's requests); ttft_ratio: ttft_ms / base_ttft_ms (above 1: slower)
    ratio_rounds: list[float | None] = []
    ttft_ratio: float | None = None
    ttft_ratio_rounds: list[float | None] = []


class CaseRecord(msgspec.Struct, kw_only=True):
    """One case of one run, as results.json stores it (every number is the server's own)."""

    name: str
    tier: str = ""
    status: Status | None = None
    reason: str | None = None
    message: str | None = None
    method: str = ""  # "draft-mtp", "ngram-mod,draft-mtp", "mode=auto", "spec-default"
    spec_type: str | None = None  # what --spec-type got (a mode case: what the resolver chose)
    mode: str | None = None
    resolved: Resolved | None = None
    n_max: int | None = None
    target: str = ""
    draft: str | None = None
    parallel: int = 1  # the server's slots
    streams: int = 1  # concurrent streams of requests
    sweep: str | None = None  # the sweep (its table's name) this case is a member of
    floors: dict[str, float | None] = {}
    uncalibrated: bool = False
    drafted: int | None = None
    accepted: int | None = None
    drafts: int | None = None  # None with counters from the timings: that build counts no drafts
    # where the counters came from: "metrics" (/metrics' spec_decode_*), "timings" (the responses', on a
    # build before b10289, which exports none); None in records before it was said
    counters_source: str | None = None
    # what this build could not give or check, each said once: a metric or counter it has not yet, a
    # method, flag or check (a case that could not run at all is status not_in_build)
    not_in_build: list[str] = []
    accept_rate: float | None = None
    accept_len: float | None = None
    per_position: list[int] = []
    per_position_rate: list[float | None] = []
    pos0_rate: float | None = None
    decode_tps: float | None = None
    baseline_decode_tps: float | None = None
    speedup: float | None = None
    speed: SpeedSamples | None = None
    # per-block overhead: the medians over the rounds (None where nothing was drafted), the rounds in blocks
    block_ms: float | None = None
    token_ms: float | None = None
    block_ratio: float | None = None
    tokens_per_block: float | None = None
    blocks: BlockCost | None = None
    # why the speed is physically impossible (a speedup above the rounds' accept length plus the margin):
    # the measurement is wrong, not the method; such a speed is not gated (measure.plausible)
    implausible_speed: str | None = None
    identical_fraction: float | None = None
    prompts: list[PromptCheck] = []
    # per prompt category (a categorised prompt set; empty otherwise), in the order they ran
    categories: dict[str, CategoryStats] = {}
    temperature: float = 0.0  # 0: greedy; above: sampled from the request's seed
    concurrency: Concurrency | None = None
    kv: KvAxis | None = None  # a member of a KV-cache axis against its f16 member
    baseline: BaselineRef | None = None
    drift: DriftRef | None = None
    # each warmed speculative round's counters (the reported ones are the cold pass's, before the rounds;
    # records before it was added reported the first round's)
    rounds: list[Counters] = []
    # two warmed rounds of this run disagree (from 3 rounds on: two after the first, which a method with an
    # n-gram cache may change by learning; the cold pass is not compared): no exact comparison for it
    nondeterministic: bool = False
    command: list[str] | None = None
    # the speculation-off baseline's command: the case's own without its speculative flags (like for like)
    baseline_command: list[str] | None = None
    cpus: list[int] | None = None  # the CPU both servers were pinned to (pin_cpu); null: any
    log: str | None = None
    wall_s: float | None = None
    warnings: list[str] = []
    config: CaseConfig | None = None  # the flags the case's server was given, what /props said
    memory: Memory | None = None
    prefill: Prefill | None = None
    known_bug: KnownBugRef | None = None  # the upstream bug the case reproduces, and its state this run
    # a case's sequence (measure.order): each request's own counters on one server, in order, and each of
    # its prompts sent alone to a fresh server
    sequence: list[RequestCounters] = []
    sequence_alone: list[RequestCounters] = []

    @property
    def pos0(self) -> float | None:
        """pos0_rate, else per_position_rate[0] (schema-1 records have no pos0_rate)."""
        if self.pos0_rate is not None:
            return self.pos0_rate
        return self.per_position_rate[0] if self.per_position_rate else None

    @property
    def measured(self) -> bool:
        """Whether it holds numbers to compare: passed, or failed only for a floor or a regression."""
        ok = self.status == "passed" or (self.status == "failed" and self.reason in MEASURED_FAIL_REASONS)
        return ok and finite(self.accept_rate) is not None

    @property
    def speed_samples(self) -> list[float | None] | None:
        return self.speed.speedups if self.speed is not None else None

    @property
    def block_samples(self) -> list[float | None] | None:
        """The per-round block ratios (the relative gate's samples of per-block overhead)."""
        return self.blocks.ratios if self.blocks is not None else None

    def metric(self, name: str) -> Any:
        """A metric by name (``pos0_rate`` with its schema-1 fallback)."""
        return self.pos0 if name == "pos0_rate" else getattr(self, name)


_FIELDS = {f.name: f.type for f in msgspec.structs.fields(CaseRecord)}


def _admits_none(hint: Any) -> bool:
    return hint is Any or (get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint))


def _case_entry(path: Any, data: Any) -> tuple[str, int]:
    return "", 0


def decode_record(name: str, data: Any, label: str = "") -> CaseRecord:
    """A stored case record (results.json, a history row) as a ``CaseRecord``; UserError naming the case
    and the field when a value has the wrong shape."""
    where = ": ".join(p for p in (label, f"case {name!r}") if p)
    if not isinstance(data, dict):
        raise UserError(f"{where}: its record must be an object, not {type(data).__name__}")
    if "name" in data and data["name"] != name:  # one case's record filed under another's name
        raise UserError(
            f"{where}: its record names another case ({str(data['name'])[:60]!r}); a case key is its name"
        )
    raw = {k: v for k, v in data.items() if k in _FIELDS and not (v is None and not _admits_none(_FIELDS[k]))}
    if isinstance(raw.get("spec_type"), list) and all(isinstance(t, str) for t in raw["spec_type"]):
        raw["spec_type"] = ",".join(raw["spec_type"])  # schema 1 stored a chain as a list
    raw["name"] = name
    return declared.convert(raw, CaseRecord, where, entry=_case_entry)
