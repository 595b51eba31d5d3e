"""The function (or struct, or variable) a changed line of C or C++ belongs to, as a diff's hunk header
names it.

git's default rule for a hunk header (no diff driver set, which is how a bare mirror and ``git diff
--no-index`` run): the nearest line above that starts with a letter, ``_`` or ``$``: a top-level
definition. The same rule is used here for two plain trees, where no git may be installed, so both routes
name the same things; written by hand because difflib has no hunk headers and no C++ parser is a
dependency. One step further than git: inside a top-level ``struct`` or ``class`` (llama.cpp's speculative
types are structs whose methods are defined in the body) the method a line is in is named too,
``common_speculative_impl_ngram_map_k::draft()``; git's header would say only the struct.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

TOP = re.compile(r"^[A-Za-z_$]")  # git's default funcname rule
_COMPOUND = re.compile(r"^(?:typedef\s+)?(?:struct|class|union|enum(?:\s+class)?|namespace)\s+([A-Za-z_]\w*)")
_NAME = re.compile(r"(?:[A-Za-z_~]\w*|operator\S*)(?:::(?:[A-Za-z_~]\w*|operator\S*))*")
_KEYWORDS = {
    "if", "for", "while", "switch", "return", "else", "case", "do", "catch", "sizeof", "new", "delete",
    "throw", "static_assert", "decltype", "alignas", "defined",
}  # fmt: skip
_SKIP = ("template", 'extern "C"', "public:", "private:", "protected:")


def name_of(line: str) -> str | None:
    """What a top-level line defines, short: ``f()``, ``A::f()``, ``struct S``, a variable's name; None for
    a line that defines nothing to name (``template <...>``, ``extern "C" {``)."""
    text = line.strip()
    if not text or text.startswith(_SKIP):
        return None
    if m := _COMPOUND.match(text):
        kind = text.split()[1] if text.startswith("typedef") else text.split()[0]
        return f"{kind} {m.group(1)}"
    if "(" in text and "=" not in text.split("(", 1)[0]:
        names = _NAME.findall(text.split("(", 1)[0])
        return f"{names[-1]}()" if names and names[-1] not in _KEYWORDS else None
    head = re.split(r"[=;{\[]", text, maxsplit=1)[0]
    names = _NAME.findall(head)
    return names[-1] if names else None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _method_name(line: str) -> str | None:
    """The name a member line defines when it opens a method (a name and ``(``, no ``;`` or ``=`` before
    it), else None."""
    head = line.split("(", 1)[0]
    if "(" not in line or "=" in head or line.rstrip().endswith(";") or not head.strip():
        return None
    if line.lstrip().startswith(("//", "/*", "#")):
        return None
    names = _NAME.findall(head)
    return names[-1] if names and names[-1] not in _KEYWORDS else None


def entities(lines: Sequence[str]) -> list[str]:
    """What each line (0-based) of a file belongs to, in one pass: the last top-level definition at or
    above it (a changed signature names its own function), and inside a struct or class the method, at the
    struct's member indent (its first member line's), that the line is in; ``(top of file)`` above any."""
    out: list[str] = []
    top, struct, indent, method = "(top of file)", None, None, None
    for line in lines:
        name = name_of(line) if TOP.match(line) else None
        if name is not None:
            top, method, indent = name, None, None
            struct = name.split(" ", 1)[1] if name.startswith(("struct ", "class ")) else None
        elif struct is not None and line.strip():
            indent = _indent(line) if indent is None else indent
            if _indent(line) == indent and not line.strip().startswith(("}", "//", "/*", "*")):
                method = _method_name(line)  # a member that is no method ends the one before
        out.append(f"{struct}::{method}()" if struct and method else top)
    return out


def header_name(header: str) -> str | None:
    """A git hunk header's function context (``@@ -1 +1 @@ CONTEXT``) as ``name_of`` words it."""
    return name_of(header) if header and TOP.match(header) else None
