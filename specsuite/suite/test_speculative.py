"""The speculative-decoding suite: one test per case that SPEC_METHODS selects (see ``plugin``).

The work is ``runner.run_case``; this maps its record onto pytest outcomes and JUnit properties.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from specsuite.cases.schema import Case
from specsuite.measure.engine import Engine
from specsuite.measure.runner import run_case
from specsuite.results.junit import junit_properties
from specsuite.results.record import KNOWN_BUG, NOT_IN_BUILD
from specsuite.suite.progress import KNOWN_BUG_MARK, NOT_IN_BUILD_MARK


def test_speculative(
    spec_case: Case, spec_session: Engine, record_property: Callable[[str, Any], None]
) -> None:
    rec = run_case(spec_case, spec_session)
    for key, value in junit_properties(rec):
        record_property(key, value)
    if rec.status == NOT_IN_BUILD:  # a skip to pytest; its own status everywhere the suite reports it
        pytest.skip(f"[{rec.reason}] {NOT_IN_BUILD_MARK} {rec.message}")
    if rec.status == KNOWN_BUG:  # the upstream bug it reproduces, still there: said, not red
        pytest.skip(f"[{rec.reason}] {KNOWN_BUG_MARK} {rec.message}")
    if rec.status == "skipped":
        pytest.skip(f"[{rec.reason}] {rec.message}")
    if rec.status != "passed":
        pytest.fail(f"[{rec.reason}] {rec.message}", pytrace=False)
    for w in rec.warnings:
        print(f"warning: {w}")
