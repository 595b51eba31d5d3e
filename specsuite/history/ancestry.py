"""A llama.cpp commit's ancestry from the local git mirror: which runs can be baselines (nearest first), and
the one order of a history's runs (the site's series and ``specsuite changes`` alike): ancestry where the
mirror knows every commit, else upstream's build numbers where every run has one, else time."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from specsuite.common import git, paths

GIT_TIMEOUT_S = 60
_COMMIT = re.compile(r"[0-9a-fA-F]{4,40}")  # hex only: never a ref name or an option git would act on
T = TypeVar("T")


def default_mirror() -> Path:
    """The llama.cpp mirror the builds clone (``<cache>/llama.cpp/git``): it orders commits by ancestry."""
    return paths.cache_dir() / "llama.cpp" / "git"


def ancestors(mirror: Path, commit: str, limit: int = 5000) -> list[str] | None:
    """Up to ``limit`` ancestors of ``commit`` (full shas, nearest first, ``commit`` itself excluded).

    ``git rev-list --topo-order``: every commit comes before its parents, so the first ancestor that has a
    recorded run is the nearest one. None when the mirror is missing, is not a git repository, lacks the
    commit, or git fails; the caller then falls back to time order.
    """
    mirror = Path(mirror)
    if not mirror.is_dir() or not _COMMIT.fullmatch(commit) or limit < 0:
        return None
    args = ["-C", str(mirror), "rev-list", "--topo-order", f"--max-count={limit + 1}", commit, "--"]
    try:
        out = git.run(args, ceiling=mirror.resolve().parent, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    shas = out.stdout.split()
    if not shas or not shas[0].startswith(commit.lower()):
        return None  # rev-list always lists the commit itself first
    return shas[1:]


def topo_positions(mirror: Path, commits: list[str]) -> dict[str, int] | None:
    """Each of ``commits`` (full or abbreviated) at its place in the mirror's history, oldest first: a
    parent always comes before its children (``git rev-list --topo-order --reverse``; commits on sibling
    branches in git's order). None when the mirror is missing or lacks one of them: the caller then orders
    by time, since half an ancestry order is no order."""
    mirror = Path(mirror)
    wanted = sorted({c.lower() for c in commits})
    if not wanted or not mirror.is_dir() or not all(_COMMIT.fullmatch(c) for c in wanted):
        return None
    args = ["-C", str(mirror), "rev-list", "--topo-order", "--reverse", *wanted, "--"]
    try:
        out = git.run(args, ceiling=mirror.resolve().parent, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None  # a commit the mirror does not have
    order = out.stdout.split()
    by_prefix: dict[str, int] = {}
    for i, sha in enumerate(order):
        by_prefix.setdefault(sha[:7], i)  # short shas collide rarely; the full one is checked below
    found: dict[str, int] = {}
    for c in wanted:
        at = by_prefix.get(c[:7])
        if at is None or not order[at].startswith(c):
            at = next((j for j, sha in enumerate(order) if sha.startswith(c)), None)
        if at is None:
            return None
        found[c] = at
    return found


ANCESTRY, BUILD, TIME = "ancestry", "build number", "time"  # the three orders, as the site names them


def in_commit_order(
    items: Sequence[T],
    commit: Callable[[T], str],
    mirror: Path | None,
    build: Callable[[T], int | None] | None = None,
) -> tuple[list[T], str]:
    """``items`` (given in time order) in the history's one order, and which order it is:

    1. ``ANCESTRY``: the mirror knows every commit (``topo_positions``);
    2. ``BUILD``: else, when every item has an upstream build number (``build``): upstream's build number
       counts commits on master, so it is a linear history even with no git at all (PyPI's builds);
    3. ``TIME``: else the order given.

    Items of one commit (or one build) keep the order given."""
    pos = topo_positions(mirror, [commit(i) for i in items]) if mirror is not None and items else None
    if pos is not None:
        return sorted(items, key=lambda i: pos[commit(i).lower()]), ANCESTRY
    numbers = [build(i) for i in items] if build is not None and items else []
    if numbers and all(n is not None for n in numbers):
        order = sorted(range(len(items)), key=lambda k: (numbers[k], k))
        return [items[k] for k in order], BUILD
    return list(items), TIME
