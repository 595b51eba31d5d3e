"""What a case observes besides its counters and decode speed: the binary's side of the configuration (its
stated defaults and build; the case server's side is ``results.config.case_config``), the memory of its
server and of the baseline's, and the prefill (time to first token, prompt tokens/s) on both.

The runner calls a ``Watch`` at fixed points (after the cold pass, the warm-up and each round) and asks it
for the record's ``memory`` and ``prefill`` parts; ``memory_failures`` judges the growth.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsuite.common.serverflags import CONFIG_FLAGS, FLAG_SPELLINGS, config_key
from specsuite.llamacpp import buildopts
from specsuite.measure.judge import Failure
from specsuite.measure.outcome import Completion
from specsuite.results.config import BuildOptions, RunConfig
from specsuite.results.record import Memory, Prefill
from specsuite.server.memory import Sampler
from specsuite.server.process import LlamaServer

# Memory growth from the first warmed sample to the last that fails a case (reason memory_growth): more
# than GROWTH_MIB plus GROWTH_SHARE of the server's peak. Measured on the pinned CPU build
# (benchmarks/bench_memory.py, docs/configuration.md): after the warm-up, 87 more requests grew every
# synthetic server (20-41 MiB) by at most 0.04 MiB, one pass of the prompts by at most 0.02 MiB; a leak of
# llama.cpp #23446's kind grows by the size of a context or graph per request (MiBs to GiBs). The share
# scales the allowance with a model's size (a 27B target's buffers are not a 20 MiB synthetic one's).
GROWTH_MIB = 16.0
GROWTH_SHARE = 0.01


def run_config(binary: str, sha256: str | None, backend: str | None, defaults: dict[str, Any]) -> RunConfig:
    """The binary's side of every case's configuration: its --help defaults (the probe's) and build."""
    source, built, options = buildopts.for_binary(Path(binary), sha256 or "")
    return RunConfig(
        defaults={key: value for key, (_, value) in sorted(defaults.items())},
        build=BuildOptions(source=source, backend=built or backend, options=options),
    )


def spellings(defaults: dict[str, tuple[tuple[str, ...], str | None]]) -> dict[str, str]:
    """Every spelling of a configuration flag -> its key: the binary's (from --help) and the known ones."""
    known = [s for s in (*FLAG_SPELLINGS.values(), *CONFIG_FLAGS.values()) if config_key(s) == s[0]]
    out = {name: spelling[0] for spelling in known for name in spelling}
    out.update({name: key for key, (names, _) in defaults.items() for name in names})
    return out


@dataclass
class Watch:
    """One case's memory samples and prompt timings, taken while it runs."""

    spec: LlamaServer
    base: LlamaServer
    gpu: bool
    requests: int = 0
    sampler: Sampler | None = None
    timings: dict[str, list[list[Completion]]] = field(default_factory=lambda: {"spec": [], "base": []})

    def __post_init__(self) -> None:
        if self.spec.pid is not None:
            self.sampler = Sampler(self.spec.pid, self.base.pid, gpu=self.gpu)

    def sample(self, requests: int) -> None:
        """After ``requests`` more requests to the case's server."""
        self.requests += requests
        if self.sampler is not None:
            self.sampler.sample(self.requests)

    def round(self, side: str, completions: list[Completion]) -> None:
        self.timings[side].append(completions)

    def memory(self) -> Memory | None:
        s = self.sampler
        if s is None or not s.samples:
            return None
        growth, between = s.growth("rss_mib", first=1)  # sample 0 is the cold pass: allocations, once
        gpu_growth, _ = s.growth("gpu_mib", first=1)
        gpu = [x.gpu_mib for x in s.samples]
        return Memory(
            peak_rss_mib=s.peak_mib,
            base_peak_rss_mib=s.base_peak_mib,
            rss_mib=[x.rss_mib for x in s.samples],
            requests=[x.requests for x in s.samples],
            growth_mib=growth,
            growth_requests=between,
            gpu_peak_mib=max((g for g in gpu if g is not None), default=None),
            base_gpu_peak_mib=max(s.base_gpu, default=None),
            gpu_mib=gpu if any(g is not None for g in gpu) else [],
            gpu_growth_mib=gpu_growth,
            limit_mib=limit(s.peak_mib),
        )

    def prefill(self) -> Prefill | None:
        spec, base = _tps(self.timings["spec"]), _tps(self.timings["base"])
        if not spec and not base:
            return None
        tps, base_tps = _median(spec), _median(base)
        # round by round, paired as the speedups are: the relative gate's samples (results.metrics)
        pairs = list(zip(self.timings["spec"], self.timings["base"], strict=False))
        ratios = [_ratio(_round_tps(s), _round_tps(b)) for s, b in pairs]
        ttft = _median([c.prompt_ms for r in self.timings["spec"] for c in r if c.prompt_n])
        base_ttft = _median([c.prompt_ms for r in self.timings["base"] for c in r if c.prompt_n])
        return Prefill(
            ttft_ms=ttft,
            base_ttft_ms=base_ttft,
            prompt_tps=tps,
            base_prompt_tps=base_tps,
            ratio=round(tps / base_tps, 4) if tps and base_tps else None,
            prompt_tps_rounds=list(spec),
            base_prompt_tps_rounds=list(base),
            ratio_rounds=ratios,
            ttft_ratio=_ratio(ttft, base_ttft),
            ttft_ratio_rounds=[_ratio(_round_ttft(s), _round_ttft(b)) for s, b in pairs],
        )


def _round_tps(comps: list[Completion]) -> float | None:
    """One round's prompt tokens/s: all its prompts' tokens over all their prompt_ms."""
    ms = sum(c.prompt_ms for c in comps)
    return 1000.0 * sum(c.prompt_n for c in comps) / ms if ms > 0 else None


def _round_ttft(comps: list[Completion]) -> float | None:
    """One round's time to first token: the median prompt_ms of its requests that processed a prompt."""
    got = [c.prompt_ms for c in comps if c.prompt_n]
    return statistics.median(got) if got else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def _tps(rounds: list[list[Completion]]) -> list[float]:
    """Prompt tokens/s of each round that processed a prompt."""
    return [round(tps, 2) for comps in rounds if (tps := _round_tps(comps)) is not None]


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def limit(peak_mib: float | None) -> float:
    return round(GROWTH_MIB + GROWTH_SHARE * (peak_mib or 0.0), 2)


def memory_failures(mem: Memory | None) -> list[Failure]:
    """``memory_growth`` when the server's resident or GPU memory grew past ``limit`` across the
    requests after its warm-up."""
    if mem is None:
        return []
    out = []
    for what, growth, peak in (("resident", mem.growth_mib, mem.peak_rss_mib),
                               ("GPU", mem.gpu_growth_mib, mem.gpu_peak_mib)):  # fmt: skip
        if growth is not None and growth > limit(peak):
            out.append(
                Failure(
                    "memory_growth",
                    f"{what} memory grew {growth:.1f} MiB over {mem.growth_requests} requests after the "
                    f"warm-up (limit {limit(peak):.1f} MiB: {GROWTH_MIB:g} MiB + {GROWTH_SHARE:.0%} of its "
                    f"{peak or 0:.0f} MiB peak); samples {mem.gpu_mib if what == 'GPU' else mem.rss_mib} MiB",
                )
            )
    return out
