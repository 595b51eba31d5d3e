"""bench.json: a run's numbers for github-action-benchmark (``tool: customBiggerIsBetter``).

That action reads a JSON list of ``{"name", "unit", "value"}`` entries with optional ``range`` and
``extra`` strings, charts each name over commits and alerts when a value drops. One entry per measured
case and metric (accept_rate, accept_len, speedup), named ``"<case> <metric>"``; a null or NaN value
is left out rather than charted as zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specsuite.common import atomic
from specsuite.llamacpp.identity import short
from specsuite.results.document import Run
from specsuite.results.record import CaseRecord, finite

UNITS = {"accept_rate": "accepted/drafted", "accept_len": "tokens/step", "speedup": "x"}


def _speedup(rec: CaseRecord) -> tuple[float | None, str | None]:
    """(speedup, its range): the median of the repeats where the run repeated, else the single value."""
    samples = [v for v in (finite(x) for x in rec.speed_samples or []) if v is not None]
    median = finite(rec.speed.speedup_median) if rec.speed is not None else None
    if median is not None and samples:
        return median, f"{min(samples):.3f} to {max(samples):.3f} over {len(samples)} repeats"
    return finite(rec.speedup), None


def _extra(run: Run, rec: CaseRecord) -> str:
    where = (run.device.name if run.device else None) or run.binary.backend or "?"
    return f"llama.cpp {short(run.binary.key, 7)} on {where}; {rec.status}"


def entries(run: Run) -> list[dict[str, Any]]:
    """The customBiggerIsBetter entries of one run, in case order."""
    out: list[dict[str, Any]] = []
    for name, rec in run.cases.items():
        if not rec.measured:
            continue
        extra = _extra(run, rec)
        speedup, spread = _speedup(rec)
        values = {"accept_rate": finite(rec.accept_rate), "accept_len": finite(rec.accept_len)}
        for metric, value in [*values.items(), ("speedup", speedup)]:
            if value is None:
                continue
            entry: dict[str, Any] = {"name": f"{name} {metric}", "unit": UNITS[metric], "value": value}
            if metric == "speedup" and spread:
                entry["range"] = spread
            entry["extra"] = extra
            out.append(entry)
    return out


def write_bench_json(run: Run, path: Path) -> Path:
    """Write ``entries(run)`` to ``path`` atomically (readers see the old file or the whole new one)."""
    path = Path(path)
    atomic.write_json(path, entries(run))
    return path
