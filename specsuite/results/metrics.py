"""Every number a case is gated, charted or compared by, declared once: one row each in ``REGISTRY``.

A row says where a case record holds the number (a dotted path, and where its per-round samples are), what
measures it, its unit and which way is better, how it is gated, which options set its tolerance, the
cases.toml key of its one-sided floor, how a line writes it, and where a history older than schema v8 kept
it. Gates:

- ``exact``: counters that are deterministic on one device class, backend and model; a relative drop beyond
  the tolerance is a regression, with no statistics.
- ``rounds``: noisy; a move the wrong way counts when the per-round samples differ significantly (one-sided
  Mann–Whitney, p < 0.05, 4 rounds a side at least) and the median moved beyond the tolerance.
- ``recorded``: stored, shown and floored where it has a floor, never compared with a baseline.

Its readers: the history (each case's ``metrics`` JSON, history.recording and history.queries), the
relative gate (history.regress), drift and change points (history.changes), ``compare``, the site
(report.data), ``calibrate`` and gatecheck. A new gated metric is a row here plus the code that captures it
into the record (docs/DESIGN.md, "A new metric"); a history needs no migration for it. Modelled on
pytest-benchmark, whose one tuple of field names is what ``--benchmark-compare-fail`` may name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from specsuite.common.errors import UserError
from specsuite.results.record import finite

Gate = Literal["exact", "rounds", "recorded"]
Table = Literal["site", "history", "compare"]


@dataclass(frozen=True)
class Metric:
    name: str  # its key: in the history's metrics JSON, `changes --metric`, a Regression
    label: str  # how a line names it
    path: str  # where a case record holds it: attribute names joined by dots; "a|b": a, else b
    source: str  # what measures it
    unit: str = ""  # after its number: "x", "tokens/s" ("x..." is written without a space)
    higher_is_better: bool = True
    gate: Gate = "recorded"
    rounds: str | None = None  # where its per-round samples are (a ``rounds`` gate's samples)
    gaps: bool = False  # a round may have no sample (nothing drafted in it); otherwise a null fails
    # the options that set its tolerance, the first one given wins: a case's cases.toml key, then the
    # run's option (run-tier's, as settings.Settings declares it)
    tolerance: tuple[str, ...] = ("rtol",)
    default_tolerance: float | None = None  # when none of those is given
    floor: str | None = None  # the cases.toml key of its one-sided floor
    digits: int = 4
    plausible: bool = False  # a speed: not compared where either side's was impossible (measure.plausible)
    drift: bool = False  # also judged by the drift gate over a case's last runs
    shown_as: str | None = None  # the metric whose numbers a first line shows for it (with this one's change)
    rank: int = 9  # of a case's regressions the first lines name the one of the lowest rank first
    tables: tuple[Table, ...] = ()  # where it is a column: the site's charts, `history`, `compare`
    short: str = ""  # gatecheck's name for it in a column of counts
    column: str | None = None  # SQL over a history's `cases` row ``c`` before v8 (null from v8 on)
    since: int = 1  # the history schema that added that column

    def of(self, rec: Any) -> float | None:
        """Its value in a case record (a CaseRecord, or anything with the attributes): finite, or None."""
        for path in self.path.split("|"):
            if (found := finite(_walk(rec, path))) is not None:
                return found
        return None

    def raw(self, rec: Any) -> Any:
        """What the record holds there, as it is (a NaN stays NaN): the first path that holds anything."""
        return next((v for p in self.path.split("|") if (v := _walk(rec, p)) is not None), None)

    def samples(self, rec: Any) -> list[float | None] | None:
        """Its per-round samples in a case record, as recorded (None: it has none)."""
        got = _walk(rec, self.rounds) if self.rounds else None
        return list(got) if isinstance(got, (list, tuple)) else None

    def text(self, value: float | None, digits: int | None = None) -> str:
        """The number and its unit, as a line says it: ``0.66x of plain``, ``26.93 ms per block``."""
        if value is None:
            return "–"
        number = f"{value:.{self.digits if digits is None else digits}f}"
        return number + (self.unit if self.unit.startswith("x") or not self.unit else f" {self.unit}")

    def worse(self, change: float) -> float:
        """How much worse a relative change is (positive: worse), whichever way is better."""
        return -change if self.higher_is_better else change

    def tolerance_of(self, given: Mapping[str, float | None]) -> tuple[str, float]:
        """(the option that set it, its tolerance) from ``given`` (option -> value, None: not given)."""
        for key in self.tolerance:
            if given.get(key) is not None:
                return key, float(given[key])  # type: ignore[arg-type]
        if self.default_tolerance is None:
            raise UserError(f"metric {self.name}: none of {', '.join(self.tolerance)} was given")
        return self.tolerance[0], self.default_tolerance


def _walk(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part, None)
    return obj


BLOCK_RTOL = 0.2  # settings.Settings.block_rtol's default (SPEC_BLOCK_RTOL): why 20 %, see docs/speed.md
_COUNTERS = "the cold pass's /metrics counters (measure.outcome)"
_ROUNDS = "the A-B-B-A rounds' decode timings (measure.outcome)"
_BLOCKS = "the rounds' decode timings over the drafts counter (measure.overhead)"
_PREFILL = "the rounds' prompt timings, speculative against plain (measure.observe)"

REGISTRY: tuple[Metric, ...] = (
    Metric("accept_rate", "accept rate", "accept_rate", f"accepted / drafted, {_COUNTERS}", gate="exact",
           floor="min_accept_rate", drift=True, rank=0, tables=("site", "history", "compare"), short="rate",
           column="c.accept_rate"),
    Metric("accept_len", "accept length", "accept_len", f"1 + accepted / drafts, {_COUNTERS}", gate="exact",
           floor="min_accept_len", drift=True, rank=0, tables=("site", "history", "compare"), short="len",
           column="c.accept_len"),
    Metric("pos0_rate", "position-0 rate", "pos0", f"the first draft position's acceptance, {_COUNTERS}",
           gate="exact", drift=True, rank=0, tables=("site", "history"), short="pos0", column="c.pos0_rate"),
    Metric("speedup", "speedup", "speed.speedup_median|speedup", f"speculative / plain tokens/s, {_ROUNDS}",
           unit="x", gate="rounds", rounds="speed.speedups", tolerance=("speed_rtol", "rtol"),
           floor="min_speedup", digits=3, plausible=True, drift=True, rank=3,
           tables=("site", "history", "compare"), short="speedup",
           column="COALESCE(c.speedup_median, c.speedup)"),
    # the speculative server's own tokens/s: a commit that slows both sides alike keeps the speedup
    Metric("decode_tps", "decode", "decode_tps", f"the speculative server's tokens/s, {_ROUNDS}",
           unit="tokens/s", gate="rounds", rounds="speed.spec_tps",
           tolerance=("decode_rtol", "speed_rtol", "rtol"), digits=2, plausible=True, rank=2, short="tps",
           column="c.decode_tps"),
    # what a verification block costs in plain decode steps: the number that moved in llama.cpp #25908
    # while acceptance and the drafter did not
    Metric("block_ratio", "block cost", "block_ratio", f"ms per block / plain ms per token, {_BLOCKS}",
           unit="plain decode steps", higher_is_better=False, gate="rounds", rounds="blocks.ratios",
           gaps=True, tolerance=("block_rtol",), default_tolerance=BLOCK_RTOL, digits=3, plausible=True,
           shown_as="block_ms", rank=1, tables=("site", "history", "compare"), short="block",
           column="c.block_ratio", since=6),
    Metric("tokens_per_block", "tokens per block", "tokens_per_block", f"decoded tokens / drafts, {_BLOCKS}",
           gate="rounds", rounds="blocks.tokens_per_block", gaps=True, digits=2, plausible=True, rank=1,
           short="tokens", column="c.tokens_per_block", since=6),
    # the drafter's share of prompt processing (llama.cpp #27306: a drafter processing every prompt ubatch)
    Metric("prefill_ratio", "prefill", "prefill.ratio", f"speculative / plain prompt tokens/s, {_PREFILL}",
           unit="x of plain", gate="rounds", rounds="prefill.ratio_rounds",
           tolerance=("prefill_rtol", "rtol"), floor="min_prefill_ratio", digits=2, rank=1,
           tables=("site", "history", "compare"), short="prefill"),
    Metric("ttft_ratio", "TTFT", "prefill.ttft_ratio", f"speculative / plain time to first token, {_PREFILL}",
           unit="x of plain", higher_is_better=False, gate="rounds", rounds="prefill.ttft_ratio_rounds",
           tolerance=("prefill_rtol", "rtol"), digits=2, rank=1, short="ttft"),
    Metric("block_ms", "block time", "block_ms", f"ms per block, {_BLOCKS}", unit="ms per block",
           higher_is_better=False, digits=2, column="c.block_ms", since=6),
    Metric("identical_fraction", "identical", "identical_fraction",
           "prompts whose tokens equal plain decoding's (measure.outcome)", floor="min_identical_fraction",
           tables=("compare",), column="c.identical_fraction"),
)  # fmt: skip
BY_NAME = {m.name: m for m in REGISTRY}
GATED = tuple(m for m in REGISTRY if m.gate != "recorded")
DRIFT = tuple(m for m in REGISTRY if m.drift)


def get(name: str) -> Metric:
    """The metric named ``name``; a UserError naming the gated ones otherwise."""
    if name not in BY_NAME:
        raise UserError(f"no metric {name!r}: choose one of {', '.join(m.name for m in GATED)}")
    return BY_NAME[name]


def in_table(table: Table) -> tuple[Metric, ...]:
    """The metrics that are columns of ``table``, in the registry's order."""
    return tuple(m for m in REGISTRY if table in m.tables)


def values(rec: Any) -> dict[str, float]:
    """Every registered metric a case record holds a number for: what the history stores of it."""
    return {m.name: v for m in REGISTRY if (v := m.of(rec)) is not None}
