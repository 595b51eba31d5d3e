"""A red night, bisected: which failed cases of a run to bisect, between which commits and by which metric
(``bisect --plan RESULTS.json...``), and the bisects of such a plan one after the other within one time
budget (``bisect --from-plan JSON``), as the workflow's bisect job runs them.

A case is bisected when it failed on its numbers: ``regressed`` (from its history baseline's commit, by the
first metric that dropped), ``drifted`` (from the last commit before the change point, by the drifted
metric), or a floor (``floor``, ``speed``: from its baseline's commit). The bad end is the run's own commit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specsuite.bisect.judge import METRICS, SPEED_METRICS
from specsuite.common.errors import UserError
from specsuite.results.document import Run, load_run
from specsuite.results.record import CaseRecord
from specsuite.results.summary import append_text

BISECTABLE = ("regressed", "drifted", "floor", "speed")
SPEED_REPEAT = 4  # a speedup is judged only from 4 rounds on (regress: Mann–Whitney)


def _metric(rec: CaseRecord) -> str:
    """What to bisect by: the drifted metric, the first that regressed, the speed floor's, else
    accept_rate."""
    if rec.reason == "drifted" and rec.drift is not None:
        return rec.drift.metric
    if rec.reason == "speed":
        return "speedup"
    for message in rec.baseline.regressions if rec.baseline is not None else []:
        if (word := message.split(" ", 1)[0]) in METRICS:  # regress's messages start with the metric
            return word
    return "accept_rate"


def _good(rec: CaseRecord) -> str | None:
    if rec.reason == "drifted" and rec.drift is not None:
        return rec.drift.before_commit
    return rec.baseline.commit if rec.baseline is not None else None


def plan(runs: Sequence[Run]) -> tuple[list[dict[str, Any]], list[str]]:
    """(one entry per case to bisect, one note per failed case that cannot be): each entry names the case,
    good and bad commits, the metric, the reason, rtol and the speed rounds."""
    entries, notes = [], []
    for run in runs:
        bad, opts = run.binary.key, run.run_options
        for rec in run.cases.values():
            if rec.status != "failed" or rec.reason not in BISECTABLE:
                continue
            good = _good(rec)
            if good is None or bad is None:
                notes.append(
                    f"{rec.name} ({rec.reason}): no earlier commit measured on this setup, nothing to bisect"
                )
                continue
            metric = _metric(rec)
            repeat = max(opts.repeat or 1, SPEED_REPEAT) if metric in SPEED_METRICS else opts.repeat
            entries.append(
                {
                    "case": rec.name,
                    "good": good,
                    "bad": bad,
                    "metric": metric,
                    "reason": rec.reason,
                    "rtol": opts.rtol,
                    "repeat": repeat,
                }
            )
    return entries, notes


def plan_command(files: Sequence[Path]) -> int:
    """Print the plan as JSON; with ``$GITHUB_OUTPUT`` (a step of Actions), also as its outputs ``plan``
    (the JSON, one line) and ``cases`` (their names): the bisect job reads them from the environment."""
    entries, notes = plan([load_run(f) for f in files])
    for note in notes:
        print(f"not bisected: {note}", file=sys.stderr)
    text = json.dumps(entries, separators=(",", ":"))
    print(text)
    if target := os.environ.get("GITHUB_OUTPUT"):
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(f"plan={text}\ncases={','.join(e['case'] for e in entries)}\n")
    return 0


def parse_plan(text: str) -> list[dict[str, Any]]:
    """A plan as ``--plan`` wrote it; UserError for anything else."""
    try:
        entries = json.loads(text)
    except ValueError as exc:
        raise UserError(
            f"--from-plan: not a bisect plan ({exc}); give what `bisect --plan` printed"
        ) from None
    keys = {"case", "good", "bad", "metric", "rtol", "repeat"}
    if not isinstance(entries, list) or not all(isinstance(e, dict) and keys <= set(e) for e in entries):
        raise UserError(
            f"--from-plan: not a bisect plan: a JSON list of objects with {', '.join(sorted(keys))}"
        )
    return entries


Bisector = Callable[[argparse.Namespace, list[str]], int]


def from_plan(
    entries: list[dict[str, Any]], args: argparse.Namespace, build_argv: list[str], run_bisect: Bisector
) -> int:
    """Bisect every entry in turn, the time budget shared (each gets what the earlier ones left); exit 0
    when every one pinned its commit. A bisect that fails (not bracketed, a bad input) is said and the next
    one goes on; one the budget did not reach is said with its range."""
    deadline = time.monotonic() + args.budget_min * 60 if args.budget_min else None
    ok = True
    for e in entries:
        left = None if deadline is None else (deadline - time.monotonic()) / 60
        what = f"{e['case']} by {e['metric']} between {e['good'][:10]} and {e['bad'][:10]}"
        if left is not None and left <= 0:
            ok = False
            line = f"### specsuite bisect: not run ({what}): the time budget was spent on the cases before it"
            print(line, flush=True)
            append_text(line + "\n")
            continue
        one = argparse.Namespace(
            good=e["good"], bad=e["bad"], case=e["case"], metric=e["metric"], rtol=str(e["rtol"]),
            repeat=e["repeat"], allow_cpu=args.allow_cpu, out=None, builder=args.builder,
            max_steps=args.max_steps, budget_min=left,
        )  # fmt: skip
        try:
            ok = run_bisect(one, build_argv) == 0 and ok
        except UserError as exc:
            ok = False
            line = f"### specsuite bisect: could not bisect {what}: {exc}"
            print(line, flush=True)
            append_text(line + "\n")
    return 0 if ok else 1
