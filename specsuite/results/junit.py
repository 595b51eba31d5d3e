"""A case's metrics as JUnit ``<properties>`` (junit.xml), for CI tools that chart test properties."""

from __future__ import annotations

from typing import Any

from specsuite.results.record import CaseRecord, finite

JUNIT_METRICS = (
    "accept_rate",
    "accept_len",
    "pos0_rate",
    "speedup",
    "identical_fraction",
    "drafted",
    "accepted",
)


def junit_properties(rec: CaseRecord) -> list[tuple[str, Any]]:
    """The measured metrics (NaN and missing left out) and the history baseline's commit."""
    out: list[tuple[str, Any]] = [
        (k, getattr(rec, k)) for k in JUNIT_METRICS if finite(getattr(rec, k)) is not None
    ]
    if rec.baseline is not None:
        out.append(("history_baseline", rec.baseline.commit))
    return out
