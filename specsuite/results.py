"""results/<run-id>/results.json: the one place a run's document is written, read and judged.

Writers: ``RunResults`` (rewritten atomically after every case, so an interrupted run still leaves a valid
file with the cases it finished). Readers (compare, calibrate, plot, history, the summary) go through
``load_run`` and the typed ``CaseRecord``. ``verdict`` says whether a run may be called green.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from . import atomic, paths
from .errors import UserError
from .regress import is_finite as finite
from .regress import is_measured

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


@dataclass
class CaseRecord:
    """One case of one run, as results.json stores it (every number is the server's own)."""

    name: str
    tier: str = ""
    status: str | None = None  # passed, failed, skipped, error, interrupted
    reason: str | None = None
    message: str | None = None
    method: str = ""  # "draft-mtp", "ngram-mod,draft-mtp", "mode=auto", "spec-default"
    spec_type: str | None = None  # what --spec-type got (a mode case: what the resolver chose)
    mode: str | None = None
    resolved: dict[str, Any] | None = None  # a mode case: {flags, spec_type, why, fallback_reason}
    n_max: int | None = None
    target: str = ""
    draft: str | None = None
    floors: dict[str, Any] = field(default_factory=dict)
    uncalibrated: bool = False
    drafted: int | None = None
    accepted: int | None = None
    drafts: int | None = None
    accept_rate: float | None = None
    accept_len: float | None = None
    per_position: list[int] = field(default_factory=list)
    per_position_rate: list[float] = field(default_factory=list)
    pos0_rate: float | None = None
    decode_tps: float | None = None
    baseline_decode_tps: float | None = None
    speedup: float | None = None
    speed: dict[str, Any] | None = None
    identical_fraction: float | None = None
    prompts: list[dict[str, Any]] = field(default_factory=list)
    baseline: dict[str, Any] | None = None  # the history baseline this case was compared with
    command: list[str] | None = None
    log: str | None = None
    wall_s: float | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> CaseRecord:
        """Tolerant of older schemas: unknown keys are dropped, missing ones take their defaults."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known and k != "name"}
        if isinstance(kw.get("spec_type"), list):
            kw["spec_type"] = ",".join(kw["spec_type"])
        if not kw.get("pos0_rate") and kw.get("per_position_rate"):
            kw["pos0_rate"] = kw["per_position_rate"][0]
        return cls(name=name, **kw)

    @property
    def measured(self) -> bool:
        """Numbers a baseline may be taken from (the gate's rule, regress.is_measured)."""
        return is_measured(self.to_dict())


class RunResults:
    """The document of one run, written to ``<dir>/results.json`` on every change."""

    def __init__(self, results_dir: Path, *, tier: str, selector: str, header: dict[str, Any]) -> None:
        self.dir = Path(results_dir)
        self.logs = self.dir / "logs"
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"cannot create the results folder {self.logs}: {exc.strerror}; set SPEC_RESULTS_DIR to a "
                "writable folder"
            ) from None
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
    return data


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
    headline: str  # PASSED / FAILED with counts
    attention: list[str]  # what a green run must still say loudly: skips, report-only cases, warnings


def verdict(doc: dict[str, Any]) -> Verdict:
    """Green only if every selected case ran and none failed; whatever weakens a green is listed."""
    recs = case_records(doc)
    by: dict[str, list[CaseRecord]] = {s: [r for r in recs.values() if r.status == s] for s in STATUSES}
    bad = by["failed"] + by["error"] + by["interrupted"]
    ran = by["passed"] + by["failed"]
    attention = _attention(doc, recs, by)
    if not recs or not ran:
        why = "no case was selected" if not recs else "no selected case ran"
        return Verdict(False, f"FAILED: {why} ({_counts(by)})", attention)
    if bad:
        names = ", ".join(f"{r.name} ({r.reason})" for r in bad)
        return Verdict(False, f"FAILED: {len(bad)} of {len(recs)} case(s): {names}", attention)
    return Verdict(True, f"PASSED: {_counts(by)}", attention)


def _counts(by: dict[str, list[CaseRecord]]) -> str:
    return ", ".join(f"{len(v)} {k}" for k, v in by.items() if v) or "0 cases"


def _attention(
    doc: dict[str, Any], recs: dict[str, CaseRecord], by: dict[str, list[CaseRecord]]
) -> list[str]:
    out = []
    opts = doc.get("options") or {}
    if by["skipped"]:
        skipped = ", ".join(f"{r.name} ({r.reason})" for r in by["skipped"])
        out.append(f"SKIPPED {len(by['skipped'])}: {skipped}")
    if opts.get("strict") is False:
        out.append(
            "STRICT OFF (--allow-missing / SPEC_STRICT=0): a method the binary lacks was skipped, not failed"
        )
    report_only = [r.name for r in recs.values() if r.uncalibrated and r.status == "passed"]
    if report_only:
        out.append(f"UNCALIBRATED (report-only, floors not enforced): {', '.join(report_only)}")
    warned = sorted({w for r in recs.values() for w in r.warnings if "counter" in w})
    out += [f"MISSING COUNTERS: {w}" for w in warned]
    if opts.get("allow_cpu") and doc.get("tier") in ("compact", "nightly", "all"):
        out.append("GPU TIER ON A CPU BUILD OR WITHOUT A GPU (--allow-cpu): floors were measured on GPUs")
    hist = doc.get("history") or {}
    if hist.get("recorded") is False:
        out.append("HISTORY NOT RECORDED: the database could not be written (see the run's log)")
    return out


def _vs(value: Any, floor: Any, fmt: str = ".4f") -> str:
    if not finite(value):
        return "–"
    return f"{value:{fmt}}" + (f" (≥ {floor:{fmt}})" if finite(floor) else "")


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
        "| case | status | reason | accept rate (floor) | accept len (floor) | speedup (floor) | identical |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in case_records(doc).items():
        fl = r.floors or {}
        lines.append(
            f"| {name} | {r.status} | {r.reason or ''} "
            f"| {_vs(r.accept_rate, fl.get('min_accept_rate'))} "
            f"| {_vs(r.accept_len, fl.get('min_accept_len'))} "
            f"| {_vs(r.speedup, fl.get('min_speedup'), '.3f')} "
            f"| {_vs(r.identical_fraction, fl.get('min_identical_fraction'), '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def write_summary(results_dir: Path) -> Path | None:
    """summary.md from results.json (the suite writes it once, when its session ends)."""
    src = Path(results_dir) / "results.json"
    if not src.is_file():
        return None
    out = Path(results_dir) / "summary.md"
    atomic.write_text(out, summary_markdown(load_run(src)))
    return out
