"""The speculative-decoding suite: one test per case selected by SPEC_METHODS (see conftest.py).

The work is specsuite.runner.run_case; this maps its record onto pytest outcomes and JUnit properties.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from specsuite.cases import Case
from specsuite.regress import is_finite as finite
from specsuite.runner import Session, run_case

JUNIT_METRICS = (
    "accept_rate",
    "accept_len",
    "pos0_rate",
    "speedup",
    "identical_fraction",
    "drafted",
    "accepted",
)


def test_speculative(case: Case, session: Session, record_property: Callable[[str, Any], None]) -> None:
    rec = run_case(case, session)
    for key in JUNIT_METRICS:
        if finite(getattr(rec, key)):
            record_property(key, getattr(rec, key))
    if rec.baseline:
        record_property("history_baseline", rec.baseline.get("commit"))
    if rec.status == "skipped":
        pytest.skip(f"[{rec.reason}] {rec.message}")
    if rec.status != "passed":
        pytest.fail(f"[{rec.reason}] {rec.message}", pytrace=False)
    for w in rec.warnings:
        print(f"warning: {w}")
