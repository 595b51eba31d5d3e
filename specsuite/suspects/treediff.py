"""Two llama.cpp trees compared without git: which files of their build inputs differ, and for a file, its
changed blocks (lines added and removed, and the function each is in: ``funcname``).

A pair is computed once and cached beside the trees (``<cache>/llama.cpp/suspects/<base>-<head>.json``,
named by both trees' content hashes, so an edited tree is a new pair): the list of changed files when the
pair is first asked for, a file's blocks when a case first asks for that file. Every write holds the pair's
lock and replaces the file whole (``common.atomic``), so two runs asking at once neither lose nor tear what
the other added. The line diff is difflib's (standard library; ``autojunk`` off, so that the many ``}`` and
blank lines of C++ are not taken for junk); its counts can differ from git's by a line where two minimal
diffs exist.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsuite.common import atomic, locks
from specsuite.llamacpp import identity
from specsuite.llamacpp.identity import BUILD_INPUTS
from specsuite.suspects.funcname import entities

VERSION = 2  # the cache's shape and rules: another is computed again
MODIFIED, ADDED, REMOVED = "modified", "added", "removed"


@dataclass(frozen=True)
class Hunk:
    """One changed block: what it is in, lines added, lines removed."""

    entity: str
    plus: int
    minus: int


@dataclass(frozen=True)
class FileDiff:
    path: str
    status: str  # MODIFIED, ADDED, REMOVED
    hunks: tuple[Hunk, ...] = ()

    @property
    def plus(self) -> int:
        return sum(h.plus for h in self.hunks)

    @property
    def minus(self) -> int:
        return sum(h.minus for h in self.hunks)


def tree_files(tree: Path) -> dict[str, Path]:
    """A tree's build inputs (``identity.BUILD_INPUTS``) by path relative to it; dot folders and CMake
    build folders skipped, as the content hash skips them."""
    found: dict[str, Path] = {}
    for top in BUILD_INPUTS:
        start = tree / top
        if start.is_file():
            found[top] = start
        for folder, dirs, files in os.walk(start):
            dirs[:] = [
                d for d in dirs if not (d.startswith(".") or Path(folder, d, "CMakeCache.txt").exists())
            ]
            for name in files:
                path = Path(folder, name)
                found[path.relative_to(tree).as_posix()] = path
    return found


def _same(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def changed_files(base: Path, head: Path) -> dict[str, str]:
    """Every build input that differs between the trees: path -> MODIFIED, ADDED or REMOVED."""
    old, new = tree_files(base), tree_files(head)
    out = {rel: REMOVED for rel in old.keys() - new.keys()}
    out.update({rel: ADDED for rel in new.keys() - old.keys()})
    out.update({rel: MODIFIED for rel in old.keys() & new.keys() if not _same(old[rel], new[rel])})
    return dict(sorted(out.items()))


BINARY = "(binary)"


def _lines(path: Path) -> list[str] | None:
    """A file's lines; None for a binary file (a NUL byte in its first 8000, git's rule: no lines)."""
    data = path.read_bytes()
    return None if b"\0" in data[:8000] else data.decode("utf-8", errors="replace").splitlines()


def file_diff(base: Path, head: Path, rel: str, status: str) -> FileDiff:
    """A changed file's blocks; an added or removed file is one block of all its lines, a binary one a
    block of none."""
    a = _lines(base / rel) if status != ADDED else []
    b = _lines(head / rel) if status != REMOVED else []
    if a is None or b is None:
        return FileDiff(rel, status, (Hunk(BINARY, 0, 0),))
    if status != MODIFIED:
        return FileDiff(rel, status, (Hunk("(whole file)", len(b), len(a)),))
    in_a, in_b = entities(a), entities(b)
    hunks: list[Hunk] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        # a block can span definitions (a new struct inserted after another's last method): each line is
        # counted where it is, removed lines in the old file, added ones in the new
        counts: dict[str, list[int]] = {}
        for k in range(j1, j2):
            counts.setdefault(in_b[k], [0, 0])[0] += 1
        for k in range(i1, i2):
            counts.setdefault(in_a[k], [0, 0])[1] += 1
        hunks += [Hunk(where, plus, minus) for where, (plus, minus) in counts.items()]
    return FileDiff(rel, status, tuple(hunks))


class PairDiff:
    """Two trees' differences, cached (see the module)."""

    def __init__(self, base: Path, head: Path, cache: Path) -> None:
        self.base, self.head = Path(base), Path(head)
        pair = f"{identity.tree_sha256(self.base)[:16]}-{identity.tree_sha256(self.head)[:16]}"
        self.path = Path(cache) / f"{pair}.json"
        self.lock = Path(cache) / f"{pair}.lock"
        self._doc = self._read()
        if self._doc is None:
            self._update(lambda doc: None)

    def _read(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not (isinstance(doc, dict) and doc.get("version") == VERSION):
            return None
        return doc if isinstance(doc.get("changed"), dict) and isinstance(doc.get("files"), dict) else None

    def _update(self, add: Any) -> None:
        """Under the pair's lock: the cache as it is now (computed if absent), ``add`` applied, written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with locks.held(self.lock, f"the source diff {self.path.name}"):
            doc = self._read()
            if doc is None:
                changed = changed_files(self.base, self.head)
                doc = {"version": VERSION, "base": str(self.base), "head": str(self.head), "changed": changed,
                       "files": {}}  # fmt: skip
            add(doc)
            atomic.write_json(self.path, doc, indent=None)
        self._doc = doc

    @property
    def changed(self) -> dict[str, str]:
        assert self._doc is not None
        return dict(self._doc["changed"])

    def files(self, rels: Iterable[str]) -> list[FileDiff]:
        """The blocks of each of ``rels`` (changed files), computed once and cached."""
        assert self._doc is not None
        wanted = [r for r in rels if r in self._doc["changed"]]
        missing = [r for r in wanted if r not in self._doc["files"]]
        if missing:
            computed = {r: file_diff(self.base, self.head, r, self._doc["changed"][r]) for r in missing}

            def add(doc: dict[str, Any]) -> None:
                for r, d in computed.items():
                    hunks = [[h.entity, h.plus, h.minus] for h in d.hunks]
                    doc["files"][r] = {"status": d.status, "hunks": hunks}

            self._update(add)
        out = []
        for r in wanted:
            kept = self._doc["files"][r]
            hunks = tuple(Hunk(str(e), int(p), int(m)) for e, p, m in kept["hunks"])
            out.append(FileDiff(r, kept["status"], hunks))
        return out
