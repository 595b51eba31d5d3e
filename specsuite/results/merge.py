"""Parts of one run merged into that run: the shards of ``run-tier --shard`` (``specsuite merge``) and the
workers of a parallel run (``--gpus``, ``--workers``).

Parts belong together only when they measured the same thing the same way: one llama.cpp commit, one
harness commit, one tier, one cases file, one device class and backend, one set of run options and one
plan; otherwise the merge is refused with one line naming what differs. A case that two parts ran keeps
its worst outcome (a retry never hides a failure); a planned case that no part ran is a failure
(``not_run``), so a shard that crashed before writing anything still turns the merged run red.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from specsuite.common.errors import UserError
from specsuite.results.document import Harness, HistoryNote, Run, RunOptions
from specsuite.results.record import KNOWN_BUG, NOT_IN_BUILD, CaseRecord

# worst last: a case two parts ran keeps the worse of its two outcomes
RANK = {"passed": 0, "skipped": 1, NOT_IN_BUILD: 1, KNOWN_BUG: 1, "failed": 2, "error": 3, "interrupted": 4}
NOT_RUN = "not_run"


def _plan_size(run: Run) -> str | None:
    return run.shard.partition("/")[2] if run.shard else None


def _options(run: Run) -> bytes:
    return msgspec.json.encode(run.options or RunOptions())


# What must be the same in every part, and how the refusal names it.
SAME: tuple[tuple[str, Callable[[Run], Any]], ...] = (
    ("llama.cpp builds", lambda r: r.binary.key),
    ("harness commits", lambda r: (r.harness or Harness()).commit),
    ("tiers", lambda r: r.tier),
    ("cases files", lambda r: r.cases_sha256),
    ("device classes", lambda r: r.device_class),
    ("backends", lambda r: r.binary.backend),
    ("run options", _options),
    ("plans (shard counts)", _plan_size),
)


def check_parts(parts: list[tuple[str, Run]]) -> None:
    """Refuse parts that are not of one run: one line naming what differs and two parts that differ."""
    for what, key in SAME:
        seen: dict[Any, str] = {}
        for label, run in parts:
            seen.setdefault(key(run), label)
        if len(seen) > 1:
            (a, la), (b, lb) = list(seen.items())[:2]
            shown = [v.decode() if isinstance(v, bytes) else v for v in (a, b)]
            raise UserError(
                f"cannot merge: these are shards of different {what}: {shown[0]!r} ({la}) and "
                f"{shown[1]!r} ({lb}); merge the shards of one run only"
            )


def worse(a: CaseRecord, b: CaseRecord) -> CaseRecord:
    """The worse of two records of one case (the first on a tie)."""
    return b if RANK.get(b.status or "", 5) > RANK.get(a.status or "", 5) else a


def not_run(name: str, why: str, *, interrupted: bool = False) -> CaseRecord:
    """A case no part ran: a failure, or ``interrupted`` when the run was (reason ``not_run`` either way:
    the verdict names these apart from the case a run was interrupted in)."""
    return CaseRecord(
        name=name, status="interrupted" if interrupted else "failed", reason=NOT_RUN, message=why
    )


def _history(parts: list[Run]) -> HistoryNote | None:
    notes = [p.history for p in parts if p.history is not None]
    if not notes:
        return None
    note = notes[0]
    for other in notes[1:]:
        note = note.merged(other)
    return msgspec.structs.replace(note, recorded=None, warning=None)


def _cases(
    parts: list[Run], expected: list[str], missing: Callable[[str], CaseRecord]
) -> dict[str, CaseRecord]:
    found: dict[str, CaseRecord] = {}
    for part in parts:
        for name, rec in part.cases.items():
            found[name] = worse(found[name], rec) if name in found else rec
    order = [*expected, *(n for n in found if n not in expected)]
    return {n: found[n] if n in found else missing(n) for n in order}


def merge_runs(
    parts: list[Run],
    *,
    run_id: str,
    shard: str | None,
    expected: list[str] | None = None,
    missing: Callable[[str], CaseRecord] | None = None,
) -> Run:
    """One run from its parts (already checked with ``check_parts``): the first part's header, the earliest
    start, the latest finish, the longest part's wall time (parts run side by side), every case once.

    ``expected``: the cases that must be there (default: every part's ``planned``); one that no part ran
    becomes ``missing(name)`` (default: a ``not_run`` failure)."""
    first = parts[0]
    planned = list(dict.fromkeys(n for p in parts for n in p.planned))
    expected = planned if expected is None else expected
    missing = missing or (lambda name: not_run(name, "no shard of the run reported this case"))
    hosts = ",".join(dict.fromkeys(p.host for p in parts if p.host))
    return msgspec.structs.replace(
        first,
        run_id=run_id,
        started=min((p.started for p in parts if p.started), default=None),
        finished=max((p.finished for p in parts if p.finished), default=None),
        wall_s=max((p.wall_s for p in parts if p.wall_s is not None), default=None),
        host=hosts or None,
        verdict=None,
        models={k: v for p in parts for k, v in p.models.items()},
        baselines={k: v for p in parts for k, v in p.baselines.items()},
        history=_history(parts),
        shard=shard,
        planned=planned,
        parts=[],
        cases=_cases(parts, expected, missing),
    )
