"""``history forget``: runs taken out of the history by run id (a fake binary's run that landed in the
default history, a run on a misconfigured machine), all or nothing, saying what each one was.

A run's case rows and texts go with it (``ON DELETE CASCADE``, foreign keys on in ``schema.connect``). What
is built from the history is built again without it: the site's run pages exist only for the runs the
history holds, and the change points' cache is keyed by the series' values (history.changecache), so a
series that lost a run is computed afresh.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specsuite.cases.schema import suggest
from specsuite.common.errors import UserError
from specsuite.history import schema
from specsuite.llamacpp.identity import short


@dataclass(frozen=True)
class Forgotten:
    """One run as it was in the history, for the line that says it is gone."""

    run_id: str
    commit: str
    started: str | None
    device_class: str
    backend: str
    tier: str | None
    cases: int

    def line(self) -> str:
        when = str(self.started or "?")[:16].replace("T", " ")
        tier = f"{self.tier} run" if self.tier else "run"
        on = f"{self.device_class}/{self.backend}"
        return f"{self.run_id}: {tier} of llama.cpp {short(self.commit, 7)} on {on}, started {when}, " + (
            f"{self.cases} case record(s)"
        )


_SELECT = (
    "SELECT r.id, r.run_id, r.llama_commit, r.started, r.device_class, r.backend, r.tier, "
    "(SELECT COUNT(*) FROM cases c WHERE c.run = r.id) FROM runs r WHERE r.run_id = ?"
)


def forget_runs(
    run_ids: Sequence[str], path: Path | None = None, *, dry_run: bool = False
) -> list[Forgotten]:
    """Take ``run_ids`` out of the history in one transaction; what they were. A run id the history does
    not hold is a UserError (the nearest one named) and nothing is taken out."""
    target = Path(path) if path is not None else schema.default_path()
    if not target.is_file():
        raise UserError(
            f"history {target} does not exist: nothing to forget (SPEC_HISTORY or --db names one)"
        )
    wanted = list(dict.fromkeys(run_ids))
    try:
        with contextlib.closing(schema.connect(target)) as conn, schema.transaction(conn):
            found = {rid: conn.execute(_SELECT, (rid,)).fetchone() for rid in wanted}
            missing = [rid for rid, row in found.items() if row is None]
            if missing:
                known = [r[0] for r in conn.execute("SELECT run_id FROM runs ORDER BY started DESC, id DESC")]
                why = f"no run {missing[0]!r} in the history {target}{suggest(missing[0], known)}"
                raise UserError(f"nothing forgotten: {why}")
            if not dry_run:
                conn.executemany("DELETE FROM runs WHERE id = ?", [(row[0],) for row in found.values()])
    except (sqlite3.Error, OSError) as exc:  # the transaction rolled back: nothing was taken out
        raise UserError(f"history {target}: nothing forgotten ({' '.join(str(exc).split())})") from None
    return [Forgotten(*row[1:]) for row in found.values()]
