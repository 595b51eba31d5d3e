"""Which bytes of a partial file are present (disjoint half-open ranges), and the parts still to fetch.

A parallel download writes at offsets in any order, so the partial's size says nothing about what arrived;
this set (kept in ``.NAME.part.json``) does. It is read back only if it describes a file of the expected size,
with sorted, disjoint ranges inside it; anything else means the partial is not resumed.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

Range = tuple[int, int]  # [start, end)


class Ranges:
    """Disjoint, sorted, non-touching ranges; adding merges neighbours."""

    def __init__(self, ranges: Iterable[Range] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for a, b in ranges:
            self.add(a, b)

    def add(self, a: int, b: int) -> None:
        if a >= b:
            return
        i = bisect.bisect_left(self._ends, a)  # first range that ends at or after a: may touch or overlap
        j = bisect.bisect_right(self._starts, b)  # ranges before j start at or before b
        if i < j:
            a, b = min(a, self._starts[i]), max(b, self._ends[j - 1])
        self._starts[i:j] = [a]
        self._ends[i:j] = [b]

    def clip(self, end: int) -> None:
        """Forget everything at or beyond ``end``."""
        i = bisect.bisect_left(self._starts, end)
        del self._starts[i:], self._ends[i:]
        if self._ends:
            self._ends[-1] = min(self._ends[-1], end)

    def __iter__(self) -> Iterator[Range]:
        return iter(zip(self._starts, self._ends, strict=True))

    def __len__(self) -> int:
        return len(self._starts)

    def total(self) -> int:
        return sum(b - a for a, b in self)

    def prefix(self) -> int:
        """End of the range that starts at byte 0 (0 when byte 0 is missing)."""
        return self._ends[0] if self._starts and self._starts[0] == 0 else 0

    def missing(self, size: int) -> list[Range]:
        out, pos = [], 0
        for a, b in self:
            if a > pos:
                out.append((pos, min(a, size)))
            pos = max(pos, b)
        if pos < size:
            out.append((pos, size))
        return [(a, b) for a, b in out if a < b]

    def copy(self) -> Ranges:
        return Ranges(self)

    def to_json(self) -> list[list[int]]:
        return [[a, b] for a, b in self]

    @classmethod
    def from_json(cls, raw: object, size: int) -> Ranges | None:
        """The ranges of ``raw`` (``[[start, end], ...]``): sorted, disjoint, inside ``size``; else None."""
        if not isinstance(raw, list):
            return None
        out, last = cls(), 0
        for item in raw:
            if not (isinstance(item, list) and len(item) == 2 and all(type(x) is int for x in item)):
                return None
            a, b = item
            if not last <= a < b <= size:
                return None
            out.add(a, b)
            last = b
        return out


def parts(missing: list[Range], size: int) -> list[Range]:
    """The missing ranges cut into pieces of at most ``size`` bytes, in file order."""
    return [(p, min(p + size, b)) for a, b in missing for p in range(a, b, size)]
