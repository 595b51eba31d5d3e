"""Known upstream bugs as data: a case that names the bug it reproduces (``[case.known_bug]``) is judged
against it once it has ended.

- It ended as the bug shows (its failure reason, and the evidence text in its message or server log, where
  given): status ``known_bug``, counted and said, not red. A bug the suite stepped around is a bug it would
  never report fixed; a case that reproduces it keeps saying that it is still there.
- It passed: the bug is FIXED, named in the first lines, a green worth knowing; on a build older than the
  pin the bugs were recorded on, it is not there yet (``absent``): where it appeared, in a replay's story.
  An intermittent bug (seen in k of n servers when measured) is not fixed after one clean run: it is
  ``not_seen`` until enough runs in a row were clean (``clean_runs_needed``), counted from the history
  the harness hands in.
- It failed another way: red as usual; the record still names the bug, so the line says which one was
  expected.

A bug of older builds only (``fixed_in``: the first upstream build without it) is judged on builds before
that one; from it on the case is any other case: a pass says nothing (the pin's run names no bug fixed long
before it), and the bug back is red, a regression, not a known bug.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from specsuite.cases.schema import KnownBug
from specsuite.results.record import KNOWN_BUG, CaseRecord, KnownBugRef, bug_name

# The chance a still-present intermittent bug leaves this many runs in a row clean, below which a clean
# streak is believed to be a fix.
STILL_THERE = 0.05
LOG_READ_BYTES = 4 * 1024 * 1024  # an abort line is near the end of a log; no more is read for evidence

# (case name) -> the statuses of its earlier runs on this setup, newest first (the harness's history)
History = Callable[[str], list[str]]


def clean_runs_needed(seen: tuple[int, int]) -> int:
    """Clean runs in a row after which a bug seen in ``k`` of ``n`` servers is believed fixed: the smallest
    m with (1 - k/n)^m < STILL_THERE, and never fewer than two (a bug named intermittent is never believed
    gone after one clean run, whatever its rate: a rate from few servers is itself uncertain). DFlash at
    np 8 in the bench's configuration, seen in 6 of 13: 5 runs; seen in 14 of 14: 2."""
    k, n = seen
    if k >= n:
        return 2
    return max(2, math.ceil(math.log(STILL_THERE) / math.log(1 - k / n)))


def shows(bug: KnownBug, rec: CaseRecord, log_text: str) -> bool:
    """Whether the case ended as the bug shows: its failure reason, and the evidence (any of them) where
    given."""
    if rec.status not in ("failed", "error") or rec.reason != bug.reason:
        return False
    if bug.evidence is None:
        return True
    texts = (bug.evidence,) if isinstance(bug.evidence, str) else bug.evidence
    return any(t in (rec.message or "") or t in log_text for t in texts)


def applies(bug: KnownBug, build: int | None) -> bool:
    """Whether the bug is judged on this build: always, but for a bug of older builds (``fixed_in``) only on
    a numbered build before its fix. A build of no number (a local tree, a fork; builds 0 and 1 are no
    numbers) is taken as current: a bug fixed long ago is not named on every run of it as FIXED."""
    if bug.fixed_in is None:
        return True
    return build is not None and build > 1 and build < bug.fixed_in


def judge(
    bug: KnownBug,
    rec: CaseRecord,
    log: Path | None,
    history: History | None = None,
    older: bool = False,
    build: int | None = None,
) -> None:
    """The ended case against the bug it names: its status, message and ``known_bug`` record (the
    module's rules). ``history``: the earlier runs' statuses, for an intermittent bug's clean streak.
    ``older``: the binary predates the pin the bug was recorded on, so a case that passes there says the
    bug is not there yet (``absent``), not that it was fixed. ``build``: the binary's upstream build
    number, against a bug's ``fixed_in``."""
    if rec.status not in ("passed", "failed", "error") or not applies(bug, build):
        return  # not run, not in this build, skipped, interrupted, or built after its fix: nothing said
    ref = KnownBugRef(issue=bug.issue, title=bug.title, state="other", reason=bug.reason,
                      seen=list(bug.seen) if bug.seen else None)  # fmt: skip
    rec.known_bug = ref
    named = bug_name(bug.issue, bug.title)
    if shows(bug, rec, _tail(log)):
        ref.state, rec.status = "present", KNOWN_BUG
        rec.message = f"known bug, still present: {named}: [{rec.reason}] {rec.message}"
    elif rec.status == "passed" and older:
        ref.state = "absent"
    elif rec.status == "passed":
        ref.state = "fixed"
        if bug.seen is not None:
            _streak(bug, rec.name, ref, history)
    else:
        rec.message = f"{rec.message}\n(expected {named} to show as {bug.reason}; it failed another way)"


def _streak(bug: KnownBug, name: str, ref: KnownBugRef, history: History | None) -> None:
    """An intermittent bug that did not show: fixed only after ``clean_runs_needed`` clean runs in a row,
    this one included (a run that measured it and passed; one where it showed ends the streak)."""
    assert bug.seen is not None
    ref.clean_needed = clean_runs_needed(bug.seen)
    earlier = history(name) if history is not None else []
    streak = 1
    for status in earlier:
        if status != "passed":
            break
        streak += 1
    ref.clean_runs = streak
    ref.state = "fixed" if streak >= ref.clean_needed else "not_seen"


def _tail(log: Path | None) -> str:
    """The end of the case's server log (its abort line is there), or nothing."""
    if log is None:
        return ""
    try:
        with log.open("rb") as fh:
            fh.seek(max(0, log.stat().st_size - LOG_READ_BYTES))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
