"""The shared envelope of the project's TOML data files (models.lock, cases.toml): syntax, keys, version."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import tomlkit
import tomlkit.exceptions
from tomlkit.toml_document import TOMLDocument

from specsuite.common.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

D = TypeVar("D", bound=Mapping[str, Any])
MAX_BYTES = 4 << 20  # the real data files are a few KiB; anything this big is the wrong file


def parse_versioned(text: str, label: str, array: str, *more_arrays: str) -> TOMLDocument:
    """Parse ``version = 1`` plus ``[[array]]`` tables, as a document that keeps its layout when edited
    (tomlkit); one clear UserError (with the line) otherwise."""
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise UserError(f"{label}: not valid TOML at line {exc.line}, column {exc.col}: {exc}") from None
    except tomlkit.exceptions.TOMLKitError as exc:  # a key twice in one [[table]]: tomlkit knows no line
        raise UserError(f"{label}: not valid TOML: {exc}") from None
    return _envelope(doc, label, array, *more_arrays)


def load_versioned(text: str, label: str, array: str, *more_arrays: str) -> dict[str, Any]:
    """``parse_versioned`` for a file that is only read: plain data from tomllib, 7 ms for cases.toml
    against tomlkit's 61 (every run-tier reads cases.toml in two processes)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line L, column C)"
        raise UserError(f"{label}: not valid TOML: {exc}") from None
    return _envelope(doc, label, array, *more_arrays)


def _envelope(doc: D, label: str, array: str, *more_arrays: str) -> D:
    """The envelope's checks: the known top-level keys and ``version = 1``."""
    allowed = {"version", array, *more_arrays}
    unknown = sorted(set(doc) - allowed)
    if unknown:
        expected = ", ".join(["version", *(f"[[{a}]]" for a in (array, *more_arrays))])
        raise UserError(f"{label}: unknown top-level key(s) {', '.join(unknown)} (expected {expected})")
    if doc.get("version") != 1:
        raise UserError(f"{label}: `version = 1` is required at the top, got {doc.get('version')!r}")
    return doc


def read_text(path: Path, what: str, flag: str) -> str:
    # what: "lock file", "cases file"; flag: the option that names another file
    """A small UTF-8 text file, or one UserError saying why not (unreadable, too big, not UTF-8)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror}; pass {flag}") from None
    if len(data) > MAX_BYTES:
        raise UserError(f"{what} {path} is larger than {MAX_BYTES >> 20} MiB: not a {what}; pass {flag}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{what} {path} is not UTF-8 text (byte {exc.start}: {data[exc.start]:#04x}); "
            f"save it as UTF-8 or pass {flag}"
        ) from None
