"""The documentation a user reads: README.md and every page of docs/, and the commands and links they show.

tests/test_readme.py checks what these find (commands parse, links resolve, numbers match cases.toml);
tests/test_cli.py the invoke lines among them.
"""

from __future__ import annotations

import re
from pathlib import Path

from specsuite.common import paths

ROOT = paths.REPO_ROOT
PAGES: dict[str, str] = {
    p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
}

FENCE = re.compile(r"^ *```[a-z]*\n(.*?)^ *```", re.S | re.M)  # also a block indented in a list item
SPAN = re.compile(r"`([^`\n]+)`")
# What separates commands on one shell line; a pipe only with spaces around it (`all|N|0,2,5` is a value)
SEPARATORS = re.compile(r"&&|\|\||;| \| ")
ENV_PREFIX = re.compile(r"^(?:[A-Z][A-Z0-9_]*=\S*\s+)+")  # SPEC_BUDGET_FACTOR=0 specsuite run-tier smoke
SHELL_WORDS = ("$ ", "do ", "then ")


def code_lines(text: str) -> list[str]:
    """Every line of the text's fenced code blocks, without a trailing ``  # comment``."""
    return [ln.split("  #")[0] for block in FENCE.findall(text) for ln in block.splitlines()]


def commands(program: str, text: str) -> set[str]:
    """Every ``program …`` command the text shows, in a code span or a fenced block: each command of a
    shell line (``&&``, ``;``), without its prompt, a leading ``do``, or ``NAME=value`` settings before it."""
    found = set()
    for line in [*SPAN.findall(text), *code_lines(text)]:
        for part in SEPARATORS.split(line):
            part = part.strip()
            for word in SHELL_WORDS:
                part = part.removeprefix(word)
            part = ENV_PREFIX.sub("", part)
            if part.startswith(program + " "):
                found.add(part)
    return found


def shown(program: str) -> list[str]:
    """Every ``program …`` command of every page."""
    return sorted(set().union(*(commands(program, text) for text in PAGES.values())))


def prose(text: str) -> str:
    """The text without its code: fenced blocks, then inline spans (which may run over a line break)."""
    return re.sub(r"`[^`]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", text), re.M)}


def links(text: str) -> list[str]:
    """Every link and image target of the prose that is not a web address."""
    targets = re.findall(r"\]\(([^)\s]+)\)", prose(text))
    return [t for t in targets if not t.startswith(("http://", "https://", "mailto:"))]


def resolve(page: str, target: str) -> tuple[Path, str]:
    """(the file a page's link names, its anchor or '')."""
    file, _, anchor = target.partition("#")
    path = (ROOT / page).parent / file if file else ROOT / page
    return path.resolve(), anchor
