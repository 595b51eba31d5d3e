"""A GGUF file's header, key/value metadata and tensor infos walked with every count and length checked
against the bytes the file has left, before the ``gguf`` package's reader reads it.

GGUFReader trusts those numbers: an array header claiming 2^62 elements makes it loop and grow without end
(a 98-byte file held ``resolve`` at full CPU), a deep nesting of arrays recurses past Python's limit. No
reader of the gguf package checks them, so this walk does, by hand (the format: llama.cpp's
``docs/gguf.md``). It reads no value, only lengths, and is linear in the metadata, which ``MAX_ITEMS`` and
``MAX_TENSORS`` bound.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUFValueType: bytes
_STRING, _ARRAY = 8, 9
_MIN_TENSOR_INFO = 8 + 4 + 4 + 8  # name length, dimension count, type, offset (a name and dims add to it)
HEADER = 24  # magic, version, tensor count, key count
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp refuses a tensor of more
MAX_DEPTH = 4  # arrays of arrays (the gguf writer nests lists; no llama.cpp model nests deeper)
# Metadata array elements in all: GGUFReader keeps a NumPy view per element (a few hundred bytes), so this
# bounds its memory near 1 GiB; the largest vocabularies (262k tokens with their scores and types, and
# their merges) hold under 2 M.
MAX_ITEMS = 1 << 22
MAX_TENSORS = 1 << 20


class LayoutError(ValueError):
    """A count or length the file cannot hold (a ValueError: the reader's callers turn it into one line)."""


class _Walk:
    def __init__(self, data: mmap.mmap, order: str) -> None:
        self.data, self.size, self.pos, self.items, self.order = data, len(data), 0, 0, order

    def take(self, n: int, what: str) -> int:
        left = self.size - self.pos
        if n > left:
            raise LayoutError(f"{what} claims {n} bytes at offset {self.pos}; the file has {left} left")
        start, self.pos = self.pos, self.pos + n
        return start

    def number(self, fmt: str, what: str) -> int:
        fmt = self.order + fmt
        value: int = struct.unpack_from(fmt, self.data, self.take(struct.calcsize(fmt), what))[0]
        return value

    def string(self, what: str) -> None:
        self.take(self.number("Q", f"{what}'s length"), what)

    def fits(self, n: int, least: int, what: str) -> None:
        """``n`` entries of at least ``least`` bytes each fit in what is left of the file."""
        if n * least > self.size - self.pos:
            raise LayoutError(f"{what} claims {n} entries; the file has {self.size - self.pos} bytes left")

    def value(self, kind: int, what: str, depth: int = 0) -> None:
        if kind in _SCALAR_SIZE:
            self.take(_SCALAR_SIZE[kind], what)
        elif kind == _STRING:
            self.string(what)
        elif kind == _ARRAY:
            self.array(what, depth + 1)
        else:
            raise LayoutError(f"{what} has the unknown value type {kind}")

    def array(self, what: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise LayoutError(f"{what} nests arrays more than {MAX_DEPTH} deep")
        kind, n = self.number("I", f"{what}'s element type"), self.number("Q", f"{what}'s length")
        self.items += n
        if self.items > MAX_ITEMS:
            raise LayoutError(
                f"{what} brings the metadata to {self.items} array elements (at most {MAX_ITEMS})"
            )
        if kind in _SCALAR_SIZE:
            self.take(n * _SCALAR_SIZE[kind], what)
            return
        self.fits(n, 8 if kind == _STRING else 12, what)  # a string's length; an array's type and length
        for _ in range(n):
            self.value(kind, what, depth)

    def tensor(self, i: int) -> None:
        self.string(f"tensor {i}'s name")
        dims = self.number("I", f"tensor {i}'s dimension count")
        if dims > MAX_DIMS:
            raise LayoutError(f"tensor {i} claims {dims} dimensions (GGUF allows {MAX_DIMS})")
        self.take(dims * 8 + 4 + 8, f"tensor {i}'s shape, type and offset")


def check_layout(path: str | os.PathLike[str]) -> None:
    """LayoutError naming the first count or length of ``path``'s header, metadata or tensor infos that the
    file cannot hold, or that passes MAX_ITEMS, MAX_TENSORS, MAX_DIMS or MAX_DEPTH; None when all fit."""
    with open(Path(path), "rb") as fh:
        if os.fstat(fh.fileno()).st_size < HEADER:
            raise LayoutError(f"shorter than a GGUF header ({HEADER} bytes)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[:4] != b"GGUF":
                raise LayoutError("GGUF magic invalid")
            # as GGUFReader: a version whose low half is 0 was written for the other byte order
            order = ">" if struct.unpack_from("<I", data, 4)[0] & 0xFFFF == 0 else "<"
            walk = _Walk(data, order)
            walk.take(8, "the magic and version")  # GGUFReader checks the version
            n_tensors, n_kv = walk.number("Q", "the tensor count"), walk.number("Q", "the key count")
            walk.fits(n_kv, 8 + 4, "the key/value table")  # a key's length and a value's type at least
            for i in range(n_kv):
                walk.string(f"key {i}")
                walk.value(walk.number("I", f"key {i}'s type"), f"key {i}")
            if n_tensors > MAX_TENSORS:
                raise LayoutError(f"the tensor table claims {n_tensors} tensors (at most {MAX_TENSORS})")
            walk.fits(n_tensors, _MIN_TENSOR_INFO, "the tensor table")
            for i in range(n_tensors):
                walk.tensor(i)
