"""A finished run's suspects lines: for each case that turned red, was fixed, or moved (a regression, its
counters changed) against its history baseline, the upstream changes between the baseline's build and this
run's that touch what the case exercises; cases with the same suspects share a line.

The run's tree is the one its build record names (``build-info.json``'s ``source.path``); it is recorded
under the run's key (``trees.remember``) so that a later run whose baseline this one is finds it. The
baseline's tree is found by its key (``trees.locate``); where it is not here, the line says so (a history
imported from elsewhere). A baseline of the same build as the run is no source change at all: no line (the
cause is elsewhere: the configuration lines, the machine, a build option); nor is there one for a binary no
build record names (one not built here), unless a git repository knows both commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specsuite.cases.schema import Case, load_cases
from specsuite.common.errors import UserError
from specsuite.llamacpp import info
from specsuite.llamacpp.identity import Identity, short
from specsuite.results.document import Run
from specsuite.results.names import names_phrase
from specsuite.results.record import CaseRecord
from specsuite.suspects import cause, derive, exercised, trees
from specsuite.suspects.trees import Tree

RED, FIXED, MOVED = "red", "fixed", "moved"
_UNCOMPARED = (None, "identical", "nondeterministic", "not recorded")


def change(rec: CaseRecord) -> str | None:
    """How a case moved against its baseline: RED (it fails, it did not there), FIXED (it passes, it
    failed there), MOVED (a regression, or counters that differ), or None."""
    base = rec.baseline
    if base is None:
        return None
    if rec.status == "failed" and base.status not in (None, "failed"):
        return RED
    if rec.status == "passed" and base.status == "failed":
        return FIXED
    if base.regressions or base.counters not in _UNCOMPARED:
        return MOVED
    return None


def head_tree(run: Run) -> Tree:
    """The run's own tree, from the build record that names its binary."""
    b = run.binary
    ident = Identity(b.commit, b.build, b.tree_sha256)
    label = short(ident.key) if ident.key else "this run"
    record = info.for_binary(Path(b.path), b.sha256) if b.path and b.sha256 else None
    source = record.get("source") if record else None
    path = Path(source["path"]) if isinstance(source, dict) and isinstance(source.get("path"), str) else None
    if path is None or not (path / "CMakeLists.txt").is_file():
        why = "its build record names no tree still here" if record else "no build record names its binary"
        return Tree(label, None, b.commit, b.build, f"no tree of this run's build ({label}): {why}")
    if ident.key:
        trees.remember(ident.key, path)
    return Tree(label, path, b.commit, b.build)


def for_run(run: Run, cases: Sequence[Case] | None = None) -> list[str]:
    """The suspects lines of the run's red, fixed and moved cases (see the module); [] when none moved."""
    moved = [r for r in run.cases.values() if change(r) is not None and r.baseline is not None]
    if not moved:
        return []
    head = head_tree(run)
    by_base: dict[str, list[str]] = {}
    for r in moved:
        assert r.baseline is not None
        by_base.setdefault(r.baseline.commit, []).append(r.name)
    out: list[str] = []
    for key, names in by_base.items():
        if key == run.binary.key or (head.commit and key.startswith(head.commit[:12])):
            continue  # the same source: no suspect in it
        out += between(trees.locate(key), head, names, run.binary.backend, cases, quiet=True)
    return out


def between(
    base: Tree,
    head: Tree,
    names: Sequence[str],
    backend: str | None,
    cases: Sequence[Case] | None = None,
    *,
    quiet: bool = False,
) -> list[str]:
    """The suspects lines of the named cases between two trees (the replay's build pairs, compare's two
    runs, a bisect's last good and first bad build). ``quiet``: no line where neither tree nor git is here
    and the head is no tree at all (a binary not built here: nothing to read, nothing to say)."""
    finder = cause.Finder(base, head)
    if quiet and finder.route == cause.NONE and head.path is None:
        return []
    known = {c.name: c for c in (cases if cases is not None else load_cases())}

    def arch_files(arch: str) -> list[str]:
        return derive.arch_files(head.path, arch) if head.path is not None else []

    found = [
        finder.find(exercised.for_case(known[n], backend, derive_arch=arch_files))
        for n in names
        if n in known
    ]
    unknown = [n for n in names if n not in known]
    out = [f"no suspects for {names_phrase(unknown)}: not in cases.toml (what they exercise is unknown)"]
    return cause.lines(found) + (out if unknown else [])


def safe_between(base: Tree, head: Tree, names: Sequence[str], backend: str | None) -> list[str]:
    """``between``, never deciding anything: what stops it is one line saying so."""
    try:
        return between(base, head, names, backend)
    except (UserError, OSError, ValueError) as exc:
        return [f"suspects not named: {exc}"]


def safe_for_run(run: Run, cases: Sequence[Case] | None = None) -> list[str]:
    """``for_run``, never deciding a run: what stops it is one line saying so."""
    try:
        return for_run(run, cases)
    except (UserError, OSError, ValueError) as exc:
        return [f"suspects not named: {exc}"]
