"""results/<run-id>/: results.json (DESIGN schema 1), summary.md, and the GitHub step summary.

results.json is rewritten atomically after every case, so an interrupted run still leaves a valid file with
the cases it finished.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from . import atomic, paths

SCHEMA = 1


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id(selector: str) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{re.sub(r'[^a-z0-9_-]+', '_', selector.lower()).strip('_') or 'run'}"


def default_results_dir(selector: str) -> Path:
    return paths.RESULTS_DIR / new_run_id(selector)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gpu_name() -> str | None:
    """GPU name(s) from nvidia-smi where it exists; None on a machine without one."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return "; ".join(line.strip() for line in out.splitlines() if line.strip()) or None


class RunResults:
    """The document of one run, written to ``<dir>/results.json`` on every change."""

    def __init__(self, results_dir: Path, *, tier: str, selector: str) -> None:
        self.dir = Path(results_dir)
        self.logs = self.dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self._t0 = time.monotonic()
        self.doc: dict[str, Any] = {
            "schema": SCHEMA,
            "run_id": self.dir.name,
            "tier": tier,
            "selector": selector,
            "started": utc_now(),
            "finished": None,
            "wall_s": None,
            "binary": None,
            "gpu": gpu_name(),
            "host": socket.gethostname(),
            "models": {},
            "baselines": {},
            "cases": {},
        }

    @property
    def path(self) -> Path:
        return self.dir / "results.json"

    def rel(self, path: Path) -> str:
        return str(Path(path).relative_to(self.dir)) if Path(path).is_relative_to(self.dir) else str(path)

    def set_binary(self, info: dict[str, Any]) -> None:
        self.doc["binary"] = info
        self.save()

    def add_model(self, name: str, sha256: str | None, size: int) -> None:
        self.doc["models"][name] = {"sha256": sha256, "size": size}

    def add_baseline(self, key: str, data: dict[str, Any]) -> None:
        self.doc["baselines"][key] = data
        self.save()

    def add_case(self, name: str, record: dict[str, Any]) -> None:
        self.doc["cases"][name] = record
        self.save()

    def save(self) -> None:
        self.doc["finished"] = utc_now()
        self.doc["wall_s"] = round(time.monotonic() - self._t0, 2)
        atomic.write_json(self.path, self.doc)


# --- summary -------------------------------------------------------------------------------------------


def _vs(value: Any, floor: Any, fmt: str = ".4f") -> str:
    if value is None:
        return "–"
    return f"{value:{fmt}}" + (f" (≥ {floor:{fmt}})" if floor is not None else "")


def summary_markdown(doc: dict[str, Any]) -> str:
    b = doc.get("binary") or {}
    lines = [
        f"### specsuite {doc.get('tier')} run `{doc.get('run_id')}`",
        "",
        f"binary: `{b.get('path')}` commit `{b.get('commit')}` backend `{b.get('backend')}`"
        + (f" GPU {doc['gpu']}" if doc.get("gpu") else "")
        + f"; wall {doc.get('wall_s')} s",
        "",
        "| case | status | reason | accept rate (floor) | accept len (floor) | speedup | identical |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, c in doc.get("cases", {}).items():
        fl = c.get("floors") or {}
        lines.append(
            f"| {name} | {c.get('status')} | {c.get('reason') or ''} "
            f"| {_vs(c.get('accept_rate'), fl.get('min_accept_rate'))} "
            f"| {_vs(c.get('accept_len'), fl.get('min_accept_len'))} "
            f"| {_vs(c.get('speedup'), None, '.3f')} "
            f"| {_vs(c.get('identical_fraction'), fl.get('min_identical_fraction'), '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def write_summary(results_dir: Path) -> Path | None:
    """summary.md from results.json (the suite writes it once, when its session ends)."""
    src = Path(results_dir) / "results.json"
    if not src.is_file():
        return None
    out = Path(results_dir) / "summary.md"
    atomic.write_text(out, summary_markdown(json.loads(src.read_text())))
    return out


def append_step_summary(summary: Path) -> None:
    """Append a run's summary.md to $GITHUB_STEP_SUMMARY, when set (a job summary on Actions)."""
    if target := os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(summary.read_text() + "\n")
