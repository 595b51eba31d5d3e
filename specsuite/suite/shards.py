"""``specsuite merge DIR... [--out DIR]``: the shards of one run (``run-tier --shard K/N``, each on its own
runner) as that one run, judged once and recorded once.

Each DIR is a shard's results folder, or a folder holding them (an artifact download with
``merge-multiple``). The merged ``results/<run-id>/`` has what a run of the whole tier on one machine has:
results.json, summary.md, junit.xml (from the records: no one pytest session saw every case), bench.json
and every shard's logs. Shards of different commits, tiers, cases files, device classes, run options or
plans are refused with one line (``results.merge``), and so is a shard from elsewhere that no live run
could have written (``results.checks``: impossible numbers, an unknown status). The plan is this
checkout's: the cases cases.toml selects for the shards' selector (their cases.toml must be this one), not
what each shard says it planned; a shard case outside it is refused. A case two shards ran keeps its worst
outcome; a planned case no shard ran is a ``not_run`` failure, so a runner that died before uploading
anything turns the merged run red; and every passed case is judged again by cases.toml's floors
(``judge.recheck``): a shard's own "passed" is not believed. The merged run's id comes from its shards
(the earliest start and the tier), so a merge done again replaces its history record instead of adding
one. Exit 0 when the merged run is green, 1 when it is not, 2 when the shards cannot be merged.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import stat
from pathlib import Path

import msgspec

from specsuite.cases.schema import Case, load_cases, select_cases
from specsuite.common import atomic, paths, settings
from specsuite.common.argtypes import CommandParser
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_text
from specsuite.common.table import markdown_plain
from specsuite.measure import judge
from specsuite.results.checks import run_problems
from specsuite.results.document import Run, RunResults, load_run, make_results_dir
from specsuite.results.junit import junit_xml
from specsuite.results.merge import check_parts, merge_runs
from specsuite.results.summary import append_step_summary
from specsuite.suite.plan import parse_shard
from specsuite.suite.session import finish_run


def find_shards(dirs: list[Path]) -> list[Path]:
    """The results folders among ``dirs`` and their direct subfolders (an artifact download's layout)."""
    found: list[Path] = []
    for d in dirs:
        if not d.is_dir():
            raise UserError(f"{d}: not a folder (give shards' results folders, or a folder holding them)")
        inner = [d] if (d / "results.json").is_file() else sorted(p for p in d.iterdir() if p.is_dir())
        found += [p for p in inner if (p / "results.json").is_file()]
    if not found:
        raise UserError(
            f"no results.json in {', '.join(map(str, dirs))} nor in their subfolders: no shard ran"
        )
    return found


def merged_id(runs: list[Run]) -> str:
    """The merged run's id, the same however often it is merged: its earliest start and its tier."""
    start = min(r.started for r in runs if r.started) if any(r.started for r in runs) else None
    stamp = dt.datetime.fromisoformat(start).astimezone(dt.timezone.utc) if start else None
    when = stamp.strftime("%Y%m%dT%H%M%SZ") if stamp else "unknown"
    name = re.sub(r"[^a-z0-9_-]+", "_", str(runs[0].selector or runs[0].tier or "run").lower()).strip("_")
    return f"{when}-{name or 'run'}"


def _regular(path: Path) -> bool:
    """A plain file, not a link (a results folder from elsewhere is read, never followed out of)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def copy_logs(shard: Path, run: Run, out: Path, taken: set[str]) -> None:
    """The shard's logs into ``out/logs``; a name an earlier shard took (``taken``) goes to
    ``logs/<shard run id>/``, and the shard's records point at it."""
    src = shard / "logs"
    if not src.is_dir() or src.is_symlink():
        return
    moved: dict[str, str] = {}
    for f in sorted(p for p in src.iterdir() if _regular(p)):
        rel = f"logs/{f.name}"
        if rel in taken:
            moved[rel] = rel = f"logs/{run.run_id}/{f.name}"
        taken.add(rel)
        atomic.write_bytes(out / rel, f.read_bytes())
    for rec in run.cases.values():
        rec.log = moved.get(rec.log or "", rec.log)
    for ref in run.baselines.values():
        ref.log = moved.get(ref.log or "", ref.log)


def the_plan(parts: list[tuple[str, Run]]) -> list[Case]:
    """The cases the shards are parts of, from this checkout's cases.toml (never from a shard's own
    ``planned``); UserError naming the shard that does not fit it."""
    mine = sha256_text(paths.CASES_FILE.read_text(encoding="utf-8"))
    selectors = {r.selector or r.tier or "" for _, r in parts}
    if len(selectors) > 1:
        raise UserError(f"cannot merge: the shards ran different selections ({', '.join(sorted(selectors))})")
    selector = selectors.pop()
    for label, run in parts:
        if not run.shard:
            raise UserError(
                f"cannot merge: {label} is not a shard (no 'shard': run-tier --shard K/N writes one)"
            )
        try:
            parse_shard(run.shard)
        except UserError:
            raise UserError(
                f"cannot merge: {label}: shard {run.shard[:20]!r} is not K/N with 1 <= K <= N"
            ) from None
        if run.cases_sha256 != mine:
            raise UserError(
                f"cannot merge: {label} ran another cases.toml (sha256 {str(run.cases_sha256)[:12]}…, this "
                f"checkout's is {mine[:12]}…): merge the shards in a checkout of the commit they ran"
            )
    cases = select_cases(load_cases(), selector)
    names = {c.name for c in cases}
    for label, run in parts:
        if stray := [n for n in run.cases if n not in names]:
            raise UserError(
                f"cannot merge: {label}: case {stray[0][:60]!r} is not one of cases.toml's {selector!r}"
            )
        if set(run.planned) != names:
            raise UserError(
                f"cannot merge: {label} says its run planned {len(run.planned)} case(s); cases.toml's "
                f"{selector!r} has {len(names)}: not a shard of this plan"
            )
    return cases


def recheck_cases(run: Run, cases: list[Case]) -> None:
    """Every passed case judged again by cases.toml (``judge.recheck``); one that fails is failed here."""
    by_name = {c.name: c for c in cases}
    for name, rec in run.cases.items():
        if rec.status != "passed" or name not in by_name:
            continue
        if failures := judge.recheck(by_name[name], rec, speed=run.run_options.speed):
            body = "; ".join(f"[{f.reason}] {f.message}" for f in failures)
            rec.status, rec.reason = "failed", failures[0].reason
            rec.message = f"{name}: the shard said passed; judged again at merge by cases.toml: {body}"


def merge_shards(dirs: list[Path], out: Path | None, *, no_history: bool = False) -> tuple[Path, bool]:
    """Merge, judge once, record once, write the run's files; (the merged folder, green)."""
    found = find_shards(dirs)
    parts = [(str(d), load_run(d)) for d in found]
    for label, part in parts:  # a shard from elsewhere, checked as strictly as `history import` checks one
        if problems := run_problems(part):
            raise UserError(f"cannot merge: {label}: {problems[0]}; not a shard the suite wrote")
    check_parts(parts)
    cases = the_plan(parts)
    runs = [r for _, r in parts]
    run_id = merged_id(runs)
    out = (out or paths.RESULTS_DIR / run_id).resolve()
    if out in {d.resolve() for d in found}:
        raise UserError(f"--out {out} is one of the shards; merge into a folder of its own")
    make_results_dir(out)
    taken: set[str] = set()
    for d, r in zip(found, runs, strict=True):
        copy_logs(d, r, out, taken)
    run = merge_runs(runs, run_id=run_id, shard=None, expected=[c.name for c in cases])
    run.planned = [c.name for c in cases]
    run.parts = [r.run_id for r in runs]
    recheck_cases(run, cases)
    options = settings.load()
    skip = no_history or options.no_history or not run.run_options.history
    judged = finish_run(RunResults(out, run, timed=False), msgspec.structs.replace(options, no_history=skip))
    atomic.write_bytes(out / "junit.xml", junit_xml(run))
    return out, judged.green


def parser() -> CommandParser:
    p = CommandParser(
        "merge", "Merge the shards of one run (run-tier --shard) into one run, judged and recorded once."
    )
    p.add_argument(
        "dirs", nargs="+", type=Path, metavar="DIR", help="shards' results folders, or folders of them"
    )
    p.add_argument("--out", type=Path, help="the merged run's folder (default: results/<run-id>)")
    p.add_argument("--no-history", action="store_true", help="do not record the merged run in the history")
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    out, green = merge_shards(a.dirs, a.out, no_history=a.no_history)
    summary = out / "summary.md"
    print(markdown_plain(summary.read_text(encoding="utf-8")))  # a terminal shows the text, not escapes
    append_step_summary(summary)
    print(f"merged: {out} (results.json, summary.md, junit.xml, bench.json, logs/)")
    return 0 if green else 1
