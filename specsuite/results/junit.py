"""junit.xml: a case's metrics as JUnit ``<properties>`` (for CI tools that chart test properties), and a
whole run's junit.xml from its records (a merged run's)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from specsuite.results.document import Run
from specsuite.results.record import KNOWN_BUG, NOT_IN_BUILD, CaseRecord, finite

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


def junit_xml(run: Run) -> bytes:
    """A run's junit.xml as pytest writes it for the suite (xunit1: one testcase per case, its metrics as
    properties), from the run's records: what `merge` writes, where no one pytest session saw every case."""
    recs = list(run.cases.values())
    failed = [r for r in recs if r.status not in ("passed", "skipped", NOT_IN_BUILD, KNOWN_BUG)]
    suite = ET.Element(
        "testsuite",
        name=run.tier or "specsuite",  # the tier, as run-tier names its own junit.xml
        errors="0",
        failures=str(len(failed)),
        skipped=str(sum(r.status in ("skipped", NOT_IN_BUILD, KNOWN_BUG) for r in recs)),
        tests=str(len(recs)),
        time=f"{run.wall_s or 0:.3f}",
        timestamp=run.started or "",
        hostname=run.host or "",
    )
    for rec in recs:
        case = ET.SubElement(
            suite,
            "testcase",
            classname="test_speculative",
            name=f"test_speculative[{rec.name}]",
            time=f"{rec.wall_s or 0:.3f}",
        )
        props = junit_properties(rec)
        if props:
            group = ET.SubElement(case, "properties")
            for key, value in props:
                ET.SubElement(group, "property", name=key, value=str(value))
        if rec.status != "passed":
            tag = "skipped" if rec.status in ("skipped", NOT_IN_BUILD, KNOWN_BUG) else "failure"
            message = f"[{rec.reason}] {(rec.message or '').splitlines()[0] if rec.message else ''}".strip()
            ET.SubElement(case, tag, message=message).text = rec.message or ""
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
