"""The suspects of a case between two builds, and the one line that names them.

Three routes, the first that works:

1. **git**: a repository that knows both ends (the mirror, or a checkout): the commits of the range that
   touch the case's paths (``gitlog``), newest first, capped, with the total said;
2. **trees**: both trees on this machine (``trees``): the changed files among the case's paths, with lines
   added and removed and the functions they are in (``treediff``, cached per pair);
3. neither: one line saying what is missing.

A change inside another type's implementation struct (``common_speculative_impl_draft_mtp`` for an
ngram-map-k case) is not the case's suspect, though the file is: ``Exercised.foreign``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specsuite.common import git
from specsuite.results.names import names_phrase
from specsuite.suspects import gitlog, trees
from specsuite.suspects.exercised import Exercised
from specsuite.suspects.gitlog import Commit
from specsuite.suspects.treediff import ADDED, BINARY, REMOVED, FileDiff, PairDiff
from specsuite.suspects.trees import Tree

GIT, TREES, NONE = "git", "trees", "none"
COMMITS_SHOWN = 10  # commits named in a line, newest first; the total is said
FILES_SHOWN = 4  # files named in a line, in the case's paths' order, the most changed first in each
FUNCTIONS_SHOWN = 3  # functions named per file: the case's own types' first, then the most changed


@dataclass(frozen=True)
class Suspects:
    """What changed between two builds among one case's paths, and how that was found."""

    case: str
    base: str  # how the line names each end: b9702, 0c1e570, tree-…
    head: str
    route: str  # GIT, TREES or NONE
    files: tuple[FileDiff, ...] = ()  # TREES: the case's changed files (other types' blocks left out)
    changed_total: int = 0  # TREES: files changed among the trees' build inputs
    commits: tuple[Commit, ...] = ()  # GIT: every commit of the range touching the case's paths
    range_total: int = 0  # GIT: every commit of the range
    missing: str = ""  # NONE: what is missing
    gone: tuple[str, ...] = ()  # the case's paths in neither tree (paths.toml names the pinned tree's)
    notes: tuple[str, ...] = ()  # what could not be said about the case's paths
    own: frozenset[str] = frozenset()  # the case's types' implementation structs: named first in a file

    @property
    def found(self) -> bool:
        return bool(self.files or self.commits)

    def line(self, names: Sequence[str] = ()) -> str:
        """``suspects for CASE (b1 -> b2): common/speculative.cpp +12 -3 in f()``, ``no cause found in the
        source between b1 and b2 for CASE (…)``, or ``no suspects for CASE (b1 -> b2): what is missing``;
        ``names``: the cases that share these suspects (default: this one)."""
        who = names_phrase(list(names) or [self.case])
        extra = [*self.notes, *(f"{p} is in neither tree" for p in self.gone)]
        tail = f" [{'; '.join(extra)}]" if extra else ""
        span = f"{self.base} -> {self.head}"
        if self.route == NONE:
            return f"no suspects for {who} ({span}): {self.missing}{tail}"
        if self.found:
            found = _commits_text(self) if self.route == GIT else _files_text(self)
            return f"suspects for {who} ({span}): {found}{tail}"
        within = (
            f"{self.range_total} commits, none touching the case's paths"
            if self.route == GIT
            else f"{self.changed_total} files changed, none among the case's paths"
        )
        return f"no cause found in the source between {self.base} and {self.head} for {who} ({within}){tail}"


def _functions(d: FileDiff, own: frozenset[str]) -> str:
    """The functions a file's changes are in: the case's own types' first, then by lines changed."""
    totals: dict[str, int] = {}
    for h in d.hunks:
        totals[h.entity] = totals.get(h.entity, 0) + h.plus + h.minus
    ranked = sorted(totals, key=lambda e: (_owner(e) not in own, -totals[e]))
    shown = ", ".join(ranked[:FUNCTIONS_SHOWN])
    more = len(ranked) - FUNCTIONS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _file_text(d: FileDiff, own: frozenset[str]) -> str:
    if d.hunks and d.hunks[0].entity == BINARY:
        return f"{d.path} {d.status} (binary)"
    if d.status == ADDED:
        return f"{d.path} new (+{d.plus})"
    if d.status == REMOVED:
        return f"{d.path} removed (-{d.minus})"
    return f"{d.path} +{d.plus} -{d.minus} in {_functions(d, own)}"


def _files_text(s: Suspects) -> str:
    text = "; ".join(_file_text(d, s.own) for d in s.files[:FILES_SHOWN])
    rest = s.files[FILES_SHOWN:]
    if rest:
        text += f"; and {len(rest)} more files (+{sum(d.plus for d in rest)} -{sum(d.minus for d in rest)})"
    return text


def _commits_text(s: Suspects) -> str:
    shown = "; ".join(f"{c.sha[:7]} {c.subject}" for c in s.commits[:COMMITS_SHOWN])
    more = len(s.commits) - COMMITS_SHOWN
    head = f"{len(s.commits)} of {s.range_total} commits touch the case's paths, newest first: "
    return head + shown + (f"; and {more} more" if more > 0 else "")


def _owner(entity: str) -> str:
    """The struct a hunk is in: ``struct S`` -> S, ``S::f()`` -> S."""
    if entity.startswith(("struct ", "class ")):
        return entity.split(" ", 1)[1]
    return entity.split("::", 1)[0]


def _mine(ex: Exercised, entity: str) -> bool:
    return _owner(entity) not in ex.foreign


def _git_repo(candidates: Sequence[Path | None], base: Tree, head: Tree) -> tuple[Path, str, str] | None:
    """The first repository that knows both ends, and their commits there."""
    if base.git_ref is None or head.git_ref is None:
        return None
    for repo in candidates:
        if repo is None or not Path(repo).exists():
            continue
        b, h = gitlog.resolve(Path(repo), base.git_ref), gitlog.resolve(Path(repo), head.git_ref)
        if b and h:
            return Path(repo), b, h
    return None


def _in_tree(repo: Path, commit: str, paths: Sequence[str]) -> set[str]:
    """Which of ``paths`` exist at ``commit`` (a folder counts when it holds a file)."""
    try:
        res = git.run(["-C", str(repo), "ls-tree", "-r", "--name-only", commit, "--", *paths], timeout=60)
    except (OSError, subprocess.SubprocessError):
        return set(paths)  # cannot tell: say nothing is gone
    names = res.stdout.splitlines() if res.returncode == 0 else []
    return {p for p in paths if any(n == p or n.startswith(p.rstrip("/") + "/") for n in names)}


def by_git(ex: Exercised, repo: Path, base: str, head: str, labels: tuple[str, str]) -> Suspects:
    """The GIT route: the range's commits that touch the case's paths, other types' blocks left out."""
    kept = []
    for c in gitlog.touching(repo, base, head, list(ex.paths)):
        where = tuple((f, e) for f, e in c.entities if ex.covers(f) and _mine(ex, e))
        if where:
            kept.append(replace(c, files=tuple(dict.fromkeys(f for f, _ in where)), entities=where))
    present = _in_tree(repo, base, ex.paths) | _in_tree(repo, head, ex.paths)
    gone = tuple(p for p in ex.paths if p not in present)
    total = gitlog.count(repo, base, head) or 0
    return Suspects(ex.case, *labels, GIT, commits=tuple(kept), range_total=total, gone=gone, notes=ex.notes,
                    own=ex.impls)  # fmt: skip


def by_trees(ex: Exercised, pair: PairDiff, labels: tuple[str, str]) -> Suspects:
    """The TREES route: the case's changed files (its types' first, then its architectures', the
    server's, the arguments', the backend's; the most changed first within each), other types' blocks
    left out."""
    changed = pair.changed
    files = []
    for d in pair.files(r for r in changed if ex.covers(r)):
        hunks = tuple(h for h in d.hunks if _mine(ex, h.entity))
        if hunks:
            files.append(replace(d, hunks=hunks))
    files.sort(key=lambda d: (ex.rank(d.path), -(d.plus + d.minus)))
    gone = tuple(p for p in ex.paths if not ((pair.base / p).exists() or (pair.head / p).exists()))
    return Suspects(
        ex.case,
        *labels,
        TREES,
        files=tuple(files),
        changed_total=len(changed),
        gone=gone,
        notes=ex.notes,
        own=ex.impls,
    )


def git_candidates(head: Tree, extra: Path | None = None) -> list[Path | None]:
    """Where a repository may know both ends: one given, the head's own checkout, the llama.cpp mirror."""
    own = head.path if head.path is not None and (head.path / ".git").exists() else None
    return [extra, own, trees.mirror()]


class Finder:
    """Suspects for several cases of one pair of builds: the route chosen and the pair diffed once."""

    def __init__(
        self, base: Tree, head: Tree, *, repo: Path | None = None, cache: Path | None = None
    ) -> None:
        self.base, self.head = base, head
        self.labels = (base.label, head.label)
        self.git = _git_repo(git_candidates(head, repo), base, head)
        self.cache = cache or trees.cache_root() / "suspects"
        self._pair: PairDiff | None = None

    @property
    def route(self) -> str:
        if self.git is not None:
            return GIT
        return TREES if self.base.path is not None and self.head.path is not None else NONE

    def missing(self) -> str:
        whys = [t.why or f"no tree of {t.label}" for t in (self.base, self.head) if t.path is None]
        return "; ".join(whys) + "; and no git repository here knows both (the llama.cpp mirror, a checkout)"

    def pair(self) -> PairDiff:
        if self._pair is None:
            assert self.base.path is not None and self.head.path is not None
            self._pair = PairDiff(self.base.path, self.head.path, self.cache)
        return self._pair

    def find(self, ex: Exercised) -> Suspects:
        if self.git is not None:
            repo, b, h = self.git
            return by_git(ex, repo, b, h, self.labels)
        if self.route == TREES:
            return by_trees(ex, self.pair(), self.labels)
        return Suspects(ex.case, *self.labels, NONE, missing=self.missing(), notes=ex.notes)


def grouped(found: Sequence[Suspects]) -> list[list[Suspects]]:
    """The cases with the same suspects together (the 12 cases of one fix are one line), in order."""
    groups: dict[str, list[Suspects]] = {}
    for s in found:
        groups.setdefault(replace(s, case="").line(["\0"]), []).append(s)
    return list(groups.values())


def lines(found: Sequence[Suspects]) -> list[str]:
    """One line per set of cases with the same suspects."""
    return [group[0].line([s.case for s in group]) for group in grouped(found)]


def details(s: Suspects) -> list[str]:
    """Everything the line caps: each commit with the functions its hunk headers name, or each file with
    each function's lines."""
    if s.route == GIT:
        out = []
        for c in s.commits:
            where = ", ".join(f"{f}: {e}" for f, e in c.entities)
            out.append(f"{c.sha[:12]} {c.subject} [{where}]")
        return out
    out = []
    for d in s.files:
        totals: dict[str, list[int]] = {}
        for h in d.hunks:
            t = totals.setdefault(h.entity, [0, 0])
            t[0], t[1] = t[0] + h.plus, t[1] + h.minus
        parts = ", ".join(f"{e} +{p} -{m}" for e, (p, m) in sorted(totals.items(), key=lambda x: -sum(x[1])))
        out.append(f"{d.path} ({d.status}, +{d.plus} -{d.minus}): {parts}")
    return out
