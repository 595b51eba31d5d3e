"""Numeric settings from environment variables: one rule, one message, for every ``SPEC_*`` number."""

from __future__ import annotations

import math
import os

from specsuite.common.errors import UserError


def env_number(name: str, default: float, *, integer: bool = False) -> float:
    """``$name`` as a positive finite number (a whole one with ``integer``), else ``default`` when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    kind = "a whole number >= 1" if integer else "a finite number > 0"
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r} is not {kind}; set it to, e.g., {default:g} or unset it") from None
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{name}={raw!r} must be {kind}; set it to, e.g., {default:g} or unset it")
    return value
