"""The one table renderer: aligned plain text for terminals and logs, markdown for job summaries."""

from __future__ import annotations

from collections.abc import Sequence


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
