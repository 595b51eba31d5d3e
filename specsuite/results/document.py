"""results/<run-id>/results.json: the one place a run's document is written, read and judged.

Writers: ``RunResults`` (rewritten atomically after every case, so an interrupted run still leaves a valid
file with the cases it finished). Readers (compare, calibrate, plot, history, the summary) go through
``load_run`` and the typed ``CaseRecord``. ``verdict`` says whether a run may be called green.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsuite.cases.schema import GPU_TIERS
from specsuite.common import atomic, paths, table
from specsuite.common.errors import UserError
from specsuite.results.record import CaseRecord, is_finite, json_kind

SCHEMA = 2
STATUSES = ("passed", "failed", "skipped", "error", "interrupted")
_MAX_RESULTS_BYTES = 64 << 20


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id(selector: str) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{re.sub(r'[^a-z0-9_-]+', '_', selector.lower()).strip('_') or 'run'}"


def default_results_dir(selector: str) -> Path:
    return paths.RESULTS_DIR / new_run_id(selector)


def make_results_dir(folder: Path) -> None:
    """Create a results folder (and its parents); one UserError when that is impossible."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the results folder {folder}: {exc.strerror or exc}; set SPEC_RESULTS_DIR to a "
            "writable folder"
        ) from None


class RunResults:
    """The document of one run, written to ``<dir>/results.json`` on every change."""

    def __init__(self, results_dir: Path, *, tier: str, selector: str, header: dict[str, Any]) -> None:
        self.dir = Path(results_dir)
        self.logs = self.dir / "logs"
        make_results_dir(self.logs)
        self._t0 = time.monotonic()
        self.doc: dict[str, Any] = {
            "schema": SCHEMA,
            "run_id": self.dir.name,
            "tier": tier,
            "selector": selector,
            "started": utc_now(),
            "finished": None,
            "wall_s": None,
            "host": socket.gethostname(),
            **header,
            "models": {},
            "baselines": {},
            "cases": {},
        }

    @property
    def path(self) -> Path:
        return self.dir / "results.json"

    def rel(self, path: Path) -> str:
        return str(Path(path).relative_to(self.dir)) if Path(path).is_relative_to(self.dir) else str(path)

    def add_model(self, name: str, sha256: str, size: int) -> None:
        self.doc["models"][name] = {"sha256": sha256, "size": size}

    def add_baseline(self, key: str, data: dict[str, Any]) -> None:
        self.doc["baselines"][key] = data
        self.save()

    def add_case(self, record: CaseRecord) -> None:
        self.doc["cases"][record.name] = record.to_dict()
        self.save()

    def records(self) -> list[CaseRecord]:
        return [CaseRecord.from_dict(n, c) for n, c in self.doc["cases"].items()]

    def save(self) -> None:
        self.doc["finished"] = utc_now()
        self.doc["wall_s"] = round(time.monotonic() - self._t0, 2)
        atomic.write_json(self.path, self.doc)


# --- reading -------------------------------------------------------------------------------------------


def results_file(path: str | Path) -> Path:
    """A results/<run> folder or a results.json file -> the results.json path."""
    path = Path(path)
    return path / "results.json" if path.is_dir() else path


def load_run(path: str | Path) -> dict[str, Any]:
    """Read one run's results.json; UserError naming the file when it is missing or not a suite result."""
    file = results_file(path)
    try:
        if file.stat().st_size > _MAX_RESULTS_BYTES:
            raise UserError(f"{file}: {file.stat().st_size} bytes is too big for a results.json")
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(
            f"{path}: no results.json there (give a results/<run> folder or its results.json)"
        ) from None
    except (OSError, ValueError) as exc:  # ValueError: bad JSON and bad UTF-8 alike
        raise UserError(f"{file}: cannot read it as a JSON results file ({exc})") from None
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(cases, dict) or not all(isinstance(c, dict) for c in cases.values()):
        raise UserError(f"{file}: not a specsuite results.json (no 'cases' table of case records)")
    try:
        _check_header(data)
        case_records(data)
    except UserError as exc:
        raise UserError(
            f"{file}: {exc}: not a results.json the suite wrote (give a results/<run> folder)"
        ) from None
    return data


# The run's own tables, which readers open with .get(): each an object (or null) when present.
_TABLES = ("binary", "device", "options", "history", "harness", "models", "baselines")
_BINARY_TEXT = ("path", "sha256", "commit", "backend", "version_text")


def _check_header(data: dict[str, Any]) -> None:
    for key in _TABLES:
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise UserError(f"field {key!r} must be an object, not {json_kind(data[key])}")
    for key in _BINARY_TEXT:
        value = (data.get("binary") or {}).get(key)
        if value is not None and not isinstance(value, str):
            raise UserError(f"field 'binary.{key}' must be a string, not {json_kind(value)}")


# A case's metrics as JUnit <properties> (junit.xml), for CI tools that chart test properties.
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
        (k, v) for k in JUNIT_METRICS if isinstance(v := getattr(rec, k), (int, float)) and math.isfinite(v)
    ]
    if rec.baseline:
        out.append(("history_baseline", rec.baseline.get("commit")))
    return out


def case_records(run: dict[str, Any]) -> dict[str, CaseRecord]:
    return {name: CaseRecord.from_dict(name, c) for name, c in run["cases"].items()}


def device_name(run: dict[str, Any]) -> str:
    """The device a run used: schema 2's device.name; schema 1's 'gpu' (null, a name or a list), else cpu."""
    dev = run.get("device")
    if isinstance(dev, dict) and dev.get("name"):
        return str(dev["name"])
    gpu = run.get("gpu")
    if isinstance(gpu, list):
        gpu = gpu[0] if gpu else None
    if isinstance(gpu, dict):
        gpu = gpu.get("name")
    return str(gpu) if gpu else "cpu"


# --- verdict and summary ---------------------------------------------------------------------------------


@dataclass
class Verdict:
    green: bool
    headline: str  # PASSED / FAILED with counts; a green one names what weakens it
    attention: list[str]  # what a run must still say loudly: skips, report-only cases, warnings


def verdict(doc: dict[str, Any]) -> Verdict:
    """Green only if every selected case ran and none failed; whatever weakens a green is listed."""
    recs = case_records(doc)
    by: dict[str, list[CaseRecord]] = {s: [r for r in recs.values() if r.status == s] for s in STATUSES}
    bad = by["failed"] + by["error"] + by["interrupted"]
    ran = by["passed"] + by["failed"]
    weakening = _weakening(doc, recs, by)
    attention = [line for _, lines in weakening for line in lines]
    if not recs or not ran:
        why = "no case was selected" if not recs else "no selected case ran"
        return Verdict(False, f"FAILED: {why} ({_counts(by)})", attention)
    if bad:
        names = ", ".join(f"{r.name} ({r.reason})" for r in bad)
        return Verdict(False, f"FAILED: {len(bad)} of {len(recs)} case(s): {names}", attention)
    weak = [tag for tag, _ in weakening if tag]
    flag = f", with warnings ({'; '.join(weak)})" if weak else ""
    return Verdict(True, f"PASSED{flag}: {_counts(by)}", attention)


def _counts(by: dict[str, list[CaseRecord]]) -> str:
    return ", ".join(f"{len(v)} {k}" for k, v in by.items() if v) or "0 cases"


def _counter_warnings(recs: dict[str, CaseRecord]) -> dict[str, list[str]]:
    """Per case, the warnings about counters the binary does not export."""
    found = {r.name: [w for w in r.warnings if "counter" in w] for r in recs.values()}
    return {name: ws for name, ws in found.items() if ws}


def _gpu_tier_without_gpu(doc: dict[str, Any], recs: dict[str, CaseRecord]) -> bool:
    """--allow-cpu let a GPU tier run where the device is not a GPU (or the run does not say which).

    The cases' own tiers count too: a selector of case names records its tiers joined ("compact,smoke"),
    and "all" records GPU-tier cases."""
    opts, dev = doc.get("options") or {}, doc.get("device")
    tiers = {*str(doc.get("tier") or "").split(","), *(r.tier for r in recs.values())}
    on_cpu = not isinstance(dev, dict) or str(dev.get("class") or "cpu").startswith("cpu")
    return bool(opts.get("allow_cpu")) and bool(tiers & set(GPU_TIERS)) and on_cpu


def _weakening(
    doc: dict[str, Any], recs: dict[str, CaseRecord], by: dict[str, list[CaseRecord]]
) -> list[tuple[str | None, list[str]]]:
    """What weakens the run, each as (its tag in a green headline or None, its attention lines)."""
    out: list[tuple[str | None, list[str]]] = []
    opts = doc.get("options") or {}
    strict_off, skipped = opts.get("strict") is False, by["skipped"]
    if skipped:
        names = ", ".join(f"{r.name} ({r.reason})" for r in skipped)
        out.append((None if strict_off else f"{len(skipped)} SKIPPED", [f"SKIPPED {len(skipped)}: {names}"]))
    if strict_off:
        line = (
            "STRICT OFF (--allow-missing / SPEC_STRICT=0): a case whose method or flag the binary lacks is "
        )
        out.append((f"STRICT OFF: {len(skipped)} skipped", [line + "skipped, not failed"]))
    if report_only := [r.name for r in recs.values() if r.uncalibrated and r.status == "passed"]:
        line = f"UNCALIBRATED (acceptance floors not enforced; a min_speedup is): {', '.join(report_only)}"
        out.append((f"{len(report_only)} UNCALIBRATED", [line]))
    if counters := _counter_warnings(recs):
        warned = sorted({w for ws in counters.values() for w in ws})
        out.append(
            (f"MISSING COUNTERS in {len(counters)} case(s)", [f"MISSING COUNTERS: {w}" for w in warned])
        )
    if _gpu_tier_without_gpu(doc, recs):
        line = "GPU TIER ON A CPU BUILD OR WITHOUT A GPU (--allow-cpu): floors were measured on GPUs"
        out.append(("GPU TIER WITHOUT A GPU", [line]))
    if opts.get("history") is False:  # floors only: a drop that clears them is not caught
        line = "RELATIVE GATE OFF (--no-history / SPEC_NO_HISTORY=1): no case was compared with its history "
        out.append(("RELATIVE GATE OFF", [line + "baseline, and the run was not recorded"]))
    if (doc.get("history") or {}).get("recorded") is False:
        out.append((None, ["HISTORY NOT RECORDED: the database could not be written (see the run's log)"]))
    return out


def _vs(value: Any, floor: Any, fmt: str = ".4f") -> str:
    if not is_finite(value):
        return "–"
    return f"{value:{fmt}}" + (f" (≥ {floor:{fmt}})" if is_finite(floor) else "")


SUMMARY_COLUMNS = (
    "case", "status", "reason", "accept rate (floor)", "accept len (floor)", "speedup (floor)", "identical",
)  # fmt: skip


def _summary_row(r: CaseRecord) -> list[str]:
    fl = r.floors or {}
    return [
        r.name,
        str(r.status),
        r.reason or "",
        _vs(r.accept_rate, fl.get("min_accept_rate")),
        _vs(r.accept_len, fl.get("min_accept_len")),
        _vs(r.speedup, fl.get("min_speedup"), ".3f"),
        _vs(r.identical_fraction, fl.get("min_identical_fraction"), ".2f"),
    ]


def summary_markdown(doc: dict[str, Any]) -> str:
    v = verdict(doc)
    b = doc.get("binary") or {}
    lines = [f"### specsuite {doc.get('tier')} run `{doc.get('run_id')}`: {v.headline}", ""]
    lines += [f"- **{a}**" for a in v.attention]
    if (doc.get("history") or {}).get("line"):
        lines.append(f"- {doc['history']['line']}")
    lines += [
        "",
        f"binary: `{b.get('path')}` commit `{b.get('commit')}` backend `{b.get('backend')}` on "
        f"{device_name(doc)}; wall {doc.get('wall_s')} s",
        "",
        table.render(SUMMARY_COLUMNS, [_summary_row(r) for r in case_records(doc).values()], markdown=True),
    ]
    return "\n".join(lines) + "\n"


def write_summary(results_dir: Path) -> Path | None:
    """summary.md from results.json (the suite writes it once, when its session ends)."""
    src = Path(results_dir) / "results.json"
    if not src.is_file():
        return None
    out = Path(results_dir) / "summary.md"
    atomic.write_text(out, summary_markdown(load_run(src)))
    return out
