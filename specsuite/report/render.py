"""Pages from templates: Jinja with autoescape (every text from data is escaped where it lands), data for
the page's script embedded as JSON that no text can end early, and sparklines drawn as SVG here."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import Any

import msgspec
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from specsuite.llamacpp import identity

# In a <script type="application/json"> only "</script" or "<!--" could end the data early: JSON keeps
# "<" inside strings only, so escaping it (and > and &, for good measure) as \u00XX keeps every value intact.
_JSON_ESCAPES = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"))
SPARK_W, SPARK_H, SPARK_PAD = 100, 24, 2.0  # 30 runs, 3 px apart: narrow enough for 1400 px
# A sparkline's height spans at least this share of its values' size: noise of a percent stays a ripple
# and a 17 % drop shows as one, where a plain lowest-to-highest scale would make both fill the line.
SPARK_MIN_SPAN = 0.1


def embedded_json(value: Any) -> Markup:
    """``value`` as JSON safe inside a <script> element (NaN and infinities as null)."""
    data = msgspec.json.encode(value)
    for raw, escaped in _JSON_ESCAPES:
        data = data.replace(raw, escaped)
    return Markup(data.decode("utf-8"))


def number(value: Any, fmt: str = ".4f") -> str:
    """A measured number as the tables print it; an en dash where there is none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    return format(value, fmt)


def percent(value: Any) -> str:
    """A relative change as every page writes it (``-7.2 %``, the script's way too)."""
    return "–" if not isinstance(value, (int, float)) or not math.isfinite(value) else f"{value * 100:+.1f} %"


def sparkline(values: Sequence[float | None], bad: Sequence[bool], what: str = "") -> Markup:
    """An inline SVG of ``values`` (oldest first; None leaves a gap), failing runs as red dots, its height
    at least ``SPARK_MIN_SPAN`` of the values' size around their middle."""
    finite = [v for v in values if v is not None]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    span = max(hi - lo, SPARK_MIN_SPAN * max(abs(lo), abs(hi))) or 1.0
    base = (lo + hi - span) / 2  # the values in the middle of the height
    step = (SPARK_W - 2 * SPARK_PAD) / max(1, len(values) - 1)
    pts = [
        None
        if v is None
        else (SPARK_PAD + i * step, SPARK_H - SPARK_PAD - (v - base) / span * (SPARK_H - 2 * SPARK_PAD))
        for i, v in enumerate(values)
    ]
    runs: list[list[str]] = [[]]
    for p in pts:
        if p is None:  # a gap (no value) ends one polyline and starts the next
            runs.append([])
        else:
            runs[-1].append(f"{p[0]:.1f},{p[1]:.1f}")
    parts = [f'<polyline class="spark-line" points="{" ".join(r)}"/>' for r in runs if len(r) > 1]
    parts += [f'<circle class="spark-dot" cx="{r[0].split(",")[0]}" cy="{r[0].split(",")[1]}" r="1.6"/>'
              for r in runs if len(r) == 1]  # fmt: skip
    parts += [
        f'<circle class="spark-bad" cx="{p[0]:.1f}" cy="{p[1]:.1f}" r="2.2"/>'
        for p, b in zip(pts, bad, strict=True)
        if b and p is not None
    ]
    label = (
        f"{what}{', ' if what else ''}last {len(values)} runs, {lo:.4g} to {hi:.4g}"
        if finite
        else "no values"
    )
    return Markup(
        f'<svg class="spark" width="{SPARK_W}" height="{SPARK_H}" viewBox="0 0 {SPARK_W} {SPARK_H}" '
        f'role="img" aria-label="{escape(label)}">{"".join(parts)}</svg>'
    )


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("specsuite.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(json=embedded_json, num=number, pct=percent, shell=shlex.join, short=identity.short)
    return env
