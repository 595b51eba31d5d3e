"""models.lock: parse and validate the pinned model list; write it back keeping comments.

Validation is strict and happens before any network use, so a typo is one clear message naming the entry
and the field, and nothing is downloaded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from specsuite.common import atomic, paths, tomldata
from specsuite.common.errors import UserError

SOURCES = ("hf", "pypi", "generated")
_COMMON = {"name", "source", "size", "sha256", "locked", "license", "note"}
_FIELDS = {
    "hf": _COMMON | {"repo", "revision", "path"},
    "pypi": _COMMON | {"packages"},
    "generated": _COMMON | {"recipe"},
}
_REQUIRED = {"hf": ("repo", "revision", "path"), "pypi": ("packages",), "generated": ("recipe",)}
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_PKG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$")


@dataclass(frozen=True)
class Entry:
    """One ``[[model]]`` table; ``size``/``sha256`` are None only for an hf entry with ``locked = false``."""

    name: str
    source: str
    size: int | None
    sha256: str | None
    repo: str | None = None
    revision: str | None = None
    path: str | None = None
    packages: tuple[str, ...] = ()
    recipe: str | None = None
    license: str | None = None
    note: str | None = None

    @property
    def locked(self) -> bool:
        return self.size is not None and self.sha256 is not None


@dataclass
class Lock:
    path: Path
    entries: dict[str, Entry]
    doc: tomlkit.TOMLDocument

    def names(self) -> set[str]:
        return set(self.entries)


def _err(where: str, msg: str) -> UserError:
    return UserError(f"{where}: {msg}")


def _check_name(where: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise _err(where, "`name` must be a non-empty string (the file name in the model folder)")
    if os.path.isabs(name) or "/" in name or "\\" in name or ".." in name.split("."):
        raise _err(
            where, f"name {name!r} must be a plain file name: no path separator, no '..', not absolute"
        )
    if not _NAME.match(name):
        raise _err(
            where,
            f"name {name!r} must match {_NAME.pattern} (letters, digits, . _ + -; not starting with '.', "
            "which is kept for partial files, stamps and locks)",
        )
    return name


def _check_repo_path(where: str, path: Any) -> str:
    if not isinstance(path, str) or not path:
        raise _err(where, "`path` must be a non-empty string (the file's path in the repository)")
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise _err(where, f"path {path!r} must be relative inside the repository: no leading '/', '..', '\\'")
    return path


def _check_common(where: str, raw: dict[str, Any], source: str) -> tuple[int | None, str | None]:
    locked = raw.get("locked", True)
    if not isinstance(locked, bool):
        raise _err(where, "`locked` must be true or false")
    if locked is False and source != "hf":
        raise _err(
            where, f"`locked = false` is only allowed for hf entries; a {source} entry needs size and sha256"
        )
    if locked is False:
        present = [k for k in ("size", "sha256") if k in raw]
        if present:
            raise _err(where, f"`locked = false` but {', '.join(present)} given: drop `locked` or the values")
        return None, None
    for key in ("size", "sha256"):
        if key not in raw:
            hint = " (or `locked = false` for an hf entry not locked yet)" if source == "hf" else ""
            raise _err(where, f"missing field `{key}`{hint}")
    size, sha = raw["size"], raw["sha256"]
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise _err(where, f"size must be a positive integer (bytes), got {size!r}")
    if not isinstance(sha, str) or not _HEX64.match(sha):
        raise _err(where, f"sha256 must be 64 lowercase hex digits, got {sha!r}")
    return size, sha


def _check_source_fields(where: str, raw: dict[str, Any], source: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if source == "hf":
        if not isinstance(raw["repo"], str) or not _REPO.match(raw["repo"]):
            raise _err(where, f"repo {raw['repo']!r} must look like 'owner/name'")
        rev = raw["revision"]
        if not isinstance(rev, str) or not _HEX40.match(rev):
            raise _err(
                where,
                f"revision {rev!r} is not a 40-hex commit; pin a commit, not a branch or tag "
                "(the Hub reports it in the X-Repo-Commit header or on the repo's commit page)",
            )
        out.update(repo=raw["repo"], revision=rev, path=_check_repo_path(where, raw["path"]))
    elif source == "pypi":
        pkgs = raw["packages"]
        if (
            not isinstance(pkgs, list)
            or not pkgs
            or not all(isinstance(p, str) and _PKG.match(p) for p in pkgs)
        ):
            raise _err(where, f"packages must be a non-empty list of 'name==version' strings, got {pkgs!r}")
        out["packages"] = tuple(pkgs)
    else:
        if not isinstance(raw["recipe"], str) or not raw["recipe"]:
            raise _err(where, "recipe must be a non-empty string (a synthetic model recipe id)")
        out["recipe"] = raw["recipe"]
    return out


def _to_entry(where: str, raw: Any) -> Entry:
    if not isinstance(raw, dict):
        raise _err(where, "each [[model]] must be a table")
    name = _check_name(where, raw.get("name"))
    where = f"{where} ({name})"
    source = raw.get("source")
    if source not in SOURCES:
        raise _err(where, f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    unknown = sorted(set(raw) - _FIELDS[source])
    if unknown:
        allowed = ", ".join(sorted(_FIELDS[source]))
        raise _err(where, f"unknown field(s) {', '.join(unknown)} for source {source!r} (allowed: {allowed})")
    missing = [k for k in _REQUIRED[source] if k not in raw]
    if missing:
        raise _err(where, f"missing field(s) {', '.join(missing)} (required for source {source!r})")
    size, sha = _check_common(where, raw, source)
    for key in ("license", "note"):
        if key in raw and not isinstance(raw[key], str):
            raise _err(where, f"`{key}` must be a string")
    return Entry(
        name=name, source=source, size=size, sha256=sha, license=raw.get("license"), note=raw.get("note"),
        **_check_source_fields(where, raw, source),
    )  # fmt: skip


def parse_lock(text: str, path: Path | str = "models.lock") -> Lock:
    """Parse and validate the text of a lock file; UserError naming the entry and field on any problem."""
    path = Path(path)
    doc = tomldata.parse_versioned(text, str(path), "model")
    raw = doc.unwrap()
    models = raw.get("model", [])
    if not isinstance(models, list):
        raise UserError(f"{path}: `model` must be an array of tables ([[model]])")
    entries: dict[str, Entry] = {}
    for i, item in enumerate(models):
        entry = _to_entry(f"{path}: [[model]] #{i + 1}", item)
        if entry.name in entries:
            raise UserError(f"{path}: two [[model]] entries are named {entry.name!r}; names must be unique")
        entries[entry.name] = entry
    return Lock(path=path, entries=entries, doc=doc)


def load_lock(path: str | os.PathLike[str] | None = None) -> Lock:
    """Read and validate a lock file (default: models.lock at the repository root)."""
    path = Path(path) if path else paths.MODELS_LOCK
    return parse_lock(tomldata.read_text(path, "lock file", "--lock PATH"), path)


def set_locked(lock: Lock, name: str, size: int, sha256: str) -> None:
    """Record size and sha256 of an entry in the document, in place of ``locked = false`` if present.

    The entry is rebuilt with tomlkit's public API (its items, comments and blank lines in order), so
    the lines around stay as they were; the trailing comment of ``locked = false`` goes with that line.
    """
    models = lock.doc["model"]
    index = next(i for i, t in enumerate(models) if t["name"] == name)
    old = models[index]
    if "locked" not in old:
        old["size"] = size  # replacing a value keeps its place
        old["sha256"] = sha256
        return
    new = tomlkit.table()
    for part in ("indent", "comment_ws", "comment", "trail"):  # the header line's own layout and comment
        setattr(new.trivia, part, getattr(old.trivia, part))
    for key, item in old.value.body:
        if key is None:
            new.append(None, item)  # a comment or blank line
        elif key.key == "locked":
            new.append("size", size)
            new.append("sha256", sha256)
        else:
            new.append(key, item)
    models[index] = new


def write_lock(lock: Lock) -> None:
    """Write the document atomically (temp file + rename); the text depends only on the document."""
    text = tomlkit.dumps(lock.doc)
    parse_lock(text, lock.path)  # never write a file we would refuse to read
    atomic.write_text(lock.path, text)
