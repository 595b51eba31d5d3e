"""The end of a bisect: ``bisect.json``, ``summary.md`` and the table printed, from the steps' records."""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specsuite.bisect.step import Params, load_steps
from specsuite.common import atomic, table
from specsuite.llamacpp.identity import short
from specsuite.results.document import utc_now

# status -> exit code: found 0; every other end is "no answer", said in the headline
STATUSES = ("running", "found", "undecided", "stopped", "not_bracketed", "interrupted", "failed")


def log2_bound(n_commits: int) -> int:
    """Steps a binary search needs over ``n_commits`` candidates (good..bad, bad included)."""
    return math.ceil(math.log2(n_commits)) if n_commits > 1 else 0


@dataclass
class Report:
    params: Params
    n_commits: int
    order: list[str]  # good, then good..bad oldest first: the rows' order
    status: str = "running"
    first_bad: str | None = None
    first_bad_subject: str | None = None
    candidates: list[str] = field(default_factory=list)
    range_left: tuple[str, str, int] | None = None  # stopped: (last good, last bad, commits in between)
    message: str = ""
    unit: str = "commit"  # "build": a bisect over upstream builds (bisect.builds), not git's commits
    between: str = ""  # a build bisect's answer when builds lie far apart: the commits it leaves open
    suspects: list[str] = field(default_factory=list)  # of the range it ends on: what touches the case
    started: str = field(default_factory=utc_now)
    t0: float = field(default_factory=time.monotonic)

    @property
    def out(self) -> Path:
        return Path(self.params.out)

    @property
    def header(self) -> list[str]:
        return [self.unit, "tested as", self.params.metric, "verdict", "rule", "build s", "run s", "subject"]

    def headline(self, steps: list[dict[str, Any]]) -> str:
        n = _n_steps(steps)
        what = f"{self.params.case}, {self.params.metric}, rtol {self.params.rtol:g}"
        if self.status == "found" and self.unit == "build":
            return f"first bad build {self.first_bad} ({what}; {n} bisect steps){self.between}"
        if self.status == "found":
            sha = self.first_bad or ""
            return f"first bad commit {sha} {self.first_bad_subject!r} ({what}; {n} bisect steps)"
        if self.status == "undecided":
            return (
                f"could not decide ({what}): only skipped commits left; first bad is one of {self.candidates}"
            )
        if self.status == "stopped":
            left = self.range_left or (self.params.good, self.params.bad, None)
            count = f" ({left[2]} {self.unit}s)" if left[2] is not None else ""
            where = f"the first bad {self.unit} is in {short(left[0], 10)}..{short(left[1], 10)}{count}"
            return f"could not pin it ({what}): {self.message}; {where}"
        return f"{self.status} ({what}): {self.message}" if self.message else f"{self.status} ({what})"

    def rows(self, steps: list[dict[str, Any]]) -> list[list[str]]:
        """One row per tested commit, in history order (good first), the first bad one marked."""
        pos = {c: i for i, c in enumerate(self.order)}
        return [self._row(s) for s in sorted(steps, key=lambda s: pos.get(s["commit"], len(pos)))]

    def _row(self, s: dict[str, Any]) -> list[str]:
        verdict = s["verdict"] + (" (first bad)" if s["commit"] == self.first_bad else "")
        value = "–" if s["value"] is None else f"{s['value']:.4f}"
        build_s, run_s = _secs(s["build_s"]), _secs(s["run_s"])
        key, subject = short(s["commit"], 10), s["subject"][:60]
        return [key, s["label"], value, verdict, s["rule"], build_s, run_s, subject]

    def doc(self, steps: list[dict[str, Any]]) -> dict[str, Any]:
        first_bad = {"commit": self.first_bad, "subject": self.first_bad_subject} if self.first_bad else None
        return {
            "status": self.status,
            "headline": self.headline(steps),
            "first_bad": first_bad,
            "candidates": self.candidates,
            "range_left": list(self.range_left) if self.range_left else None,
            "params": asdict(self.params),
            "commits_in_range": self.n_commits,  # a build bisect: the builds after good up to bad
            "unit": self.unit,
            "suspects": self.suspects,
            "steps": _n_steps(steps),
            "log2_bound": log2_bound(self.n_commits),
            "tested": steps,
            "started": self.started,
            "wall_s": round(time.monotonic() - self.t0, 1),
        }

    def write(self) -> list[dict[str, Any]]:
        """bisect.json (also the steps' parameters) and summary.md; the steps found so far."""
        steps = load_steps(self.out)
        atomic.write_json(self.out / "bisect.json", self.doc(steps))
        atomic.write_text(self.out / "summary.md", self.markdown(steps))
        return steps

    def _counts(self, steps: list[dict[str, Any]]) -> str:
        wall = time.monotonic() - self.t0
        return (
            f"{self.n_commits} {self.unit}s in {short(self.params.good, 10)}..{short(self.params.bad, 10)}, "
            f"{_n_steps(steps)} bisect steps (log2 bound {log2_bound(self.n_commits)}), {wall:.0f} s"
        )

    def markdown(self, steps: list[dict[str, Any]]) -> str:
        head = self.headline(steps)
        sha = self.first_bad or ""
        if self.status == "found" and (url := commit_url(self.params.repository, sha)):
            head = head.replace(sha, f"[`{sha[:12]}`]({url})", 1)  # the first line links the commit
        why = [f"- **{table.markdown_text(line)}**" for line in self.suspects]
        lines = [f"### specsuite bisect: {head}", "", *why]
        lines += [f"- {self._counts(steps)}", ""]
        lines += [table.render(self.header, self.rows(steps), markdown=True), ""]
        lines += [
            f"- `{short(s['commit'], 10)}` {s['label']}: {s['verdict']} ({s['rule']}) {s['detail']}"
            for s in steps
        ]
        return "\n".join(lines) + "\n"

    def text(self, steps: list[dict[str, Any]]) -> str:
        body = table.render(self.header, self.rows(steps))
        why = "".join(f"\n{line}" for line in self.suspects)
        tail = f"{self._counts(steps)}; results in {self.out}"
        return f"\nbisect: {self.headline(steps)}{why}\n\n{body}\n\n{tail}"


def commit_url(repository: str, sha: str) -> str | None:
    """The web page of a commit of a GitHub repository (https or git@ spelling); None for any other."""
    m = re.fullmatch(r"(?:https://github\.com/|git@github\.com:)([\w.-]+/[\w.-]+?)(?:\.git)?/?", repository)
    return f"https://github.com/{m.group(1)}/commit/{sha}" if m and sha else None


def _n_steps(steps: list[dict[str, Any]]) -> int:
    return sum(1 for s in steps if s["label"].startswith("step"))


def _secs(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"
