"""Cases named in a line a reader takes in at a glance: ``all 62 cases``, ``all 62 cases but mtp-x``,
a few names, or the first few and how many more (the table below a summary's first lines names them all)."""

from __future__ import annotations

from collections.abc import Sequence

SHOWN = 4  # names in a line before "and N more"
ALL_BUT = 3  # "all N cases but a, b, c" up to this many left out


def names_phrase(names: Sequence[str], total: int | None = None) -> str:
    """``names`` (cases of a run of ``total`` cases) for one line of a summary."""
    names = list(dict.fromkeys(names))
    n = len(names)
    if n <= SHOWN:
        return ", ".join(names)
    if total is not None and n == total:
        return f"all {n} cases"
    return f"{n} cases ({', '.join(names[:SHOWN])} and {n - SHOWN} more)"


def all_but(names: Sequence[str], everyone: Sequence[str]) -> str:
    """Like ``names_phrase`` against the run's case list, saying ``all N cases but x`` where few are left
    out of a long list."""
    names, everyone = list(dict.fromkeys(names)), list(dict.fromkeys(everyone))
    left = [c for c in everyone if c not in set(names)]
    if names and left and len(left) <= ALL_BUT and len(names) > SHOWN:
        return f"all {len(everyone)} cases but {', '.join(left)}"
    return names_phrase(names, len(everyone))
