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
    """Whether the case ended as the bug shows: its failure reason, and the evidence where given."""
    if rec.status not in ("failed", "error") or rec.reason != bug.reason:
        return False
    return bug.evidence is None or bug.evidence in (rec.message or "") or bug.evidence in log_text


def judge(
    bug: KnownBug, rec: CaseRecord, log: Path | None, history: History | None = None, older: bool = False
) -> None:
    """The ended case against the bug it names: its status, message and ``known_bug`` record (the
    module's rules). ``history``: the earlier runs' statuses, for an intermittent bug's clean streak.
    ``older``: the binary predates the pin the bug was recorded on, so a case that passes there says the
    bug is not there yet (``absent``), not that it was fixed."""
    if rec.status not in ("passed", "failed", "error"):
        return  # not run, not in this build, skipped, interrupted: nothing said of the bug
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
