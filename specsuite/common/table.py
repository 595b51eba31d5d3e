"""The one table renderer: aligned plain text for terminals and logs, markdown for job summaries; and
text from outside (a binary's ``--help``, its build record) written into markdown as text."""

from __future__ import annotations

import re
from collections.abc import Sequence

# What GitHub's markdown (CommonMark and its extensions) reads as markup in running text: code, emphasis
# (``_`` only at a word's edge: ``GGML_CUDA`` is one word), links, HTML and entities, table cells,
# headings, strikethrough, math. Each is backslash-escaped, which CommonMark shows as the character itself.
# ``>`` is left as it is: without ``<`` it opens no tag, and it quotes only at a line's start, where no
# escaped text goes (a line break in it is replaced).
_MARKUP = re.compile(r"[\\`*\[\]<&|#~$]|(?<![^\W_])_|_(?![^\W_])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # a line break would start a line (a heading) of its own
# markdown_text's escapes, and code spans (whose text is never escaped) to leave alone
_ESCAPED = re.compile(r"(`+).*?\1|\\([\\`*\[\]<&|#~$_])")


def markdown_text(text: str) -> str:
    """Text from outside for running markdown text: shown as written, never as markup or HTML; a control
    character is U+FFFD (as a default's, ``server.probe.stated_default``)."""
    return _MARKUP.sub(lambda m: "\\" + m.group(), _CONTROL.sub("\ufffd", text))


def markdown_code(text: str) -> str:
    """Text from outside as an inline code span: fenced by more backticks than any run of them inside."""
    text = _CONTROL.sub("\ufffd", text)
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_plain(text: str) -> str:
    """Markdown for a terminal: ``markdown_text``'s escapes undone (code spans kept as they are)."""
    return _ESCAPED.sub(lambda m: m.group(2) or m.group(), text)


def render(header: Sequence[str], rows: Sequence[Sequence[str]], *, markdown: bool = False) -> str:
    """A table of strings; plain text pads columns and underlines the header with dashes."""
    if markdown:
        esc = [[str(c).replace("|", "\\|") for c in r] for r in [header, *rows]]
        lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in esc[1:]])
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()

    return "\n".join([line(cells[0]), line(["-" * w for w in widths]), *map(line, cells[1:])])
