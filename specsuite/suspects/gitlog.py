"""The commits of a range that touch a case's paths, from a git repository that knows both ends (the
llama.cpp mirror, or a checkout): each with its short sha, subject, the pull request its subject names
(``(#12345)``, as GitHub's squash merges write it), the case's files it changes and, from the hunk headers
of its diff (git's default function context: ``funcname``), where in them."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specsuite.common import git
from specsuite.suspects.funcname import entities, header_name

TIMEOUT_S = 120
_PR = re.compile(r"\(#([0-9]{1,7})\)\s*$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
_REF = re.compile(r"[0-9a-fA-F]{7,40}|b[0-9]{1,7}")  # a commit or a build's tag: never an option


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    files: tuple[str, ...]  # the case's files it changes
    entities: tuple[tuple[str, str], ...] = ()  # (file, what a hunk header names), each once

    @property
    def pr(self) -> int | None:
        m = _PR.search(self.subject)
        return int(m.group(1)) if m else None


def _git(repo: Path, args: list[str]) -> str | None:
    try:
        res = git.run(["-C", str(repo), *args], timeout=TIMEOUT_S, ceiling=Path(repo).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def resolve(repo: Path, ref: str) -> str | None:
    """The full commit of a commit or a build's tag (``b9702``) in ``repo``; None when it lacks it."""
    if not _REF.fullmatch(ref):
        return None
    names = [f"refs/tags/{ref}", ref] if ref.startswith("b") else [ref]
    for name in names:
        out = _git(repo, ["rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"])
        if out:
            return out.strip()
    return None


def count(repo: Path, base: str, head: str) -> int | None:
    """The commits in ``base..head``."""
    out = _git(repo, ["rev-list", "--count", f"{base}..{head}", "--"])
    return int(out) if out and out.strip().isdigit() else None


BLOBS_READ = 200  # file versions read to name methods; past that, a range's hunks keep git's headers


@dataclass(frozen=True)
class Hunk:
    """A ``-U0`` hunk: its header's words, and the lines it removes (old file) and adds (new file)."""

    header: str
    old: tuple[int, int]  # first line (1-based), count
    new: tuple[int, int]


def touching(repo: Path, base: str, head: str, paths: list[str]) -> list[Commit]:
    """The commits in ``base..head`` that change one of ``paths``, newest first (``git log``'s order),
    with their changed files among them and where in them: the function each changed line is in, read
    from the file as the commit left it (``funcname.entities``: the method inside a struct, as the trees
    route names it), else git's hunk header."""
    fmt = "%x1e%H%x1f%s"
    out = _git(repo, ["log", "-p", "-U0", "--no-color", "--no-ext-diff", "--no-renames", f"--format={fmt}",
                      f"{base}..{head}", "--", *paths])  # fmt: skip
    reader = _Blobs(repo)
    commits = []
    for sha, subject, hunks in parse_patches(out or ""):
        where = [(f, name) for f, hs in hunks.items() for h in hs for name in reader.names(sha, f, h)]
        commits.append(Commit(sha, subject, tuple(hunks), tuple(dict.fromkeys(where))))
    return commits


class _Blobs:
    """Each file version's line entities, read once (``git show COMMIT:PATH``), at most ``BLOBS_READ``."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.seen: dict[str, list[str] | None] = {}

    def entities(self, spec: str) -> list[str] | None:
        if spec not in self.seen:
            if len(self.seen) >= BLOBS_READ:
                return None
            text = _git(self.repo, ["show", spec])
            self.seen[spec] = entities(text.splitlines()) if text is not None else None
        return self.seen[spec]

    def names(self, sha: str, path: str, h: Hunk) -> list[str]:
        """Where a hunk's lines are: added ones in the commit's file, removed ones in its parent's."""
        found: list[str] = []
        for (start, n), spec in ((h.new, f"{sha}:{path}"), (h.old, f"{sha}^:{path}")):
            if n == 0:
                continue
            lines = self.entities(spec)
            if lines is None:
                return [header_name(h.header) or "(top of file)"]
            found += [lines[i] for i in range(start - 1, min(start - 1 + n, len(lines)))]
        return list(dict.fromkeys(found)) or [header_name(h.header) or "(top of file)"]


def _span(start: str, count: str | None) -> tuple[int, int]:
    return int(start), 1 if count is None else int(count)


def parse_patches(text: str) -> list[tuple[str, str, dict[str, list[Hunk]]]]:
    """``git log -p -U0 --format=%x1e%H%x1f%s``'s output: (sha, subject, each file's hunks)."""
    out = []
    for chunk in text.split("\x1e")[1:]:
        head, _, patch = chunk.partition("\n")
        sha, _, subject = head.partition("\x1f")
        files: dict[str, list[Hunk]] = {}
        current = None
        for line in patch.splitlines():
            if line.startswith("diff --git "):
                current = line.rsplit(" b/", 1)[-1]
                files[current] = []
            elif current and (m := _HUNK.match(line)):
                old, new = _span(m.group(1), m.group(2)), _span(m.group(3), m.group(4))
                files[current].append(Hunk(m.group(5), old, new))
        out.append((sha, subject.strip(), files))
    return out
