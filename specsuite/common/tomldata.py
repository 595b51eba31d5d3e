"""The shared envelope of the project's TOML data files (models.lock, cases.toml): syntax, keys, version."""

from __future__ import annotations

import tomlkit
import tomlkit.exceptions
from tomlkit.toml_document import TOMLDocument

from specsuite.common.errors import UserError


def parse_versioned(text: str, label: str, array: str, *more_arrays: str) -> TOMLDocument:
    """Parse ``version = 1`` plus ``[[array]]`` tables; one clear UserError (with the line) otherwise."""
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise UserError(f"{label}: not valid TOML at line {exc.line}, column {exc.col}: {exc}") from None
    allowed = {"version", array, *more_arrays}
    unknown = sorted(set(doc) - allowed)
    if unknown:
        expected = ", ".join(["version", *(f"[[{a}]]" for a in (array, *more_arrays))])
        raise UserError(f"{label}: unknown top-level key(s) {', '.join(unknown)} (expected {expected})")
    if doc.get("version") != 1:
        raise UserError(f"{label}: `version = 1` is required at the top, got {doc.get('version')!r}")
    return doc
