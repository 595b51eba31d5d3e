"""Check GGUF metadata before a server starts: architecture, MTP heads, DFlash/DSpark/EAGLE-3 drafts.

A swapped, truncated or wrong model then fails here with one message naming the file and what it lacks,
not later as an unexplained server exit. Metadata is read with the ``gguf`` package's GGUFReader (the
reference reader from llama.cpp's gguf-py); it memory-maps the file, so a multi-GiB model costs only the
pages of its header. Every count and length of the header is checked against the file's size first
(``gguflayout``): GGUFReader trusts them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specsuite.common.errors import UserError
from specsuite.common.statcache import StatCache
from specsuite.models.gguflayout import check_layout

if TYPE_CHECKING:
    from gguf import GGUFReader

# What each spec type needs from the draft file (the arch and tensors the pinned tree loads).
DRAFT_ARCH = {"draft-dflash": "dflash", "draft-dspark": "dflash", "draft-eagle3": "eagle3"}
DSPARK_TENSOR = "markov_w1.weight"  # common/speculative.cpp: the Markov head tells DSpark from DFlash
_NEXTN_RE = re.compile(r"^blk\.\d+\.nextn\.")
# "-MTP" as a marker: after a separator, before a separator or the end (not "mtp-research", "MTPower").
_MTP_MARKER = re.compile(r"(?<=[-_. ])mtp(?=[-_. ]|$)", re.IGNORECASE)
# Anything GGUFReader raises on bytes that are not a complete GGUF file (seen: ValueError for a bad magic
# or a short array, IndexError for a cut header); turned into one clear UserError.
_READ_ERRORS = (ValueError, IndexError, OSError, struct.error, OverflowError, KeyError, TypeError)


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    arch: str
    name: str | None  # general.name
    nextn_predict_layers: int  # 0 when the key is absent
    nextn_tensors: int  # number of blk.N.nextn.* tensors
    has_markov_head: bool
    context_length: int | None = None  # {arch}.context_length: the context it was trained for

    @property
    def has_mtp_heads(self) -> bool:
        return self.nextn_predict_layers > 0 or self.nextn_tensors > 0


def has_mtp_marker(name: str) -> bool:
    """True for names that carry an ``-MTP`` marker (``Qwen3.6-27B-MTP-GGUF``, ``…-mtp-q4_k_m.gguf``)."""
    return _MTP_MARKER.search(name) is not None


def _field(reader: GGUFReader, key: str) -> object | None:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


_CACHE = StatCache("modelinfo", 2)


def read_info(path: Path) -> ModelInfo:
    """Architecture, MTP heads and DSpark head of a GGUF file; UserError if it is missing or not GGUF.

    GGUFReader turns every metadata array element into Python objects: a 262k-token vocabulary takes
    seconds to read. The answer is cached per file identity (statcache), like the fetcher's stamps, so a
    changed or truncated file is read again and an unchanged one is not.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"model file not found: {path}; fetch it with `specsuite fetch-models`")
    cached = _CACHE.get(path)
    with contextlib.suppress(TypeError, ValueError):
        if isinstance(cached, dict):
            return ModelInfo(path=path, **cached)
    info = _read_uncached(path)
    _CACHE.put(path, {k: v for k, v in dataclasses.asdict(info).items() if k != "path"})
    return info


def _read_uncached(path: Path) -> ModelInfo:
    from gguf import GGUFReader  # heavy (numpy): imported only when a model is read

    try:
        check_layout(path)  # every count and length against the file's size: GGUFReader trusts them
        reader = GGUFReader(path, "r")
    except _READ_ERRORS as exc:
        raise UserError(
            f"{path}: not a readable GGUF file ({exc}); "
            "it is truncated or not a model: delete it and fetch it again"
        ) from None
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise UserError(f"{path}: GGUF file lacks general.architecture; not a llama.cpp model")
    layers = _field(reader, f"{arch}.nextn_predict_layers")
    ctx = _field(reader, f"{arch}.context_length")
    name = _field(reader, "general.name")
    names = [t.name for t in reader.tensors]
    return ModelInfo(
        path=path,
        arch=arch,
        name=name if isinstance(name, str) else None,
        nextn_predict_layers=int(layers) if isinstance(layers, int) else 0,
        nextn_tensors=sum(1 for n in names if _NEXTN_RE.match(n)),
        has_markov_head=DSPARK_TENSOR in names,
        context_length=int(ctx) if isinstance(ctx, int) else None,
    )


def _check_draft(spec_type: str, draft: Path | None, info: ModelInfo | None) -> None:
    want = DRAFT_ARCH.get(spec_type)
    if want is None:
        return
    if draft is None or info is None:
        raise UserError(f"{spec_type} needs a draft model of architecture {want!r}, but the case names none")
    if info.arch != want:
        raise UserError(
            f"{draft}: {spec_type} needs a draft of architecture {want!r}, this file is {info.arch!r}"
        )
    if spec_type == "draft-dspark" and not info.has_markov_head:
        raise UserError(
            f"{draft}: a DSpark draft needs the tensor {DSPARK_TENSOR!r} (the Markov head); "
            "this file has none (a plain DFlash draft? use spec_type draft-dflash)"
        )


def _suspicious(info: ModelInfo) -> str | None:
    # The file name and general.name; callers holding a repository name can use has_mtp_marker on it.
    if any(has_mtp_marker(label) for label in (info.path.name, info.name or "")) and not info.has_mtp_heads:
        return (
            f"suspicious: {info.path} is named as an MTP model but its metadata has no MTP heads "
            f"({info.arch}.nextn_predict_layers absent or 0, no blk.N.nextn.* tensors)"
        )
    return None


def check_models(
    spec_types: Sequence[str], target: Path, draft: Path | None, ctx_size: int | None = None
) -> list[str]:
    """Refuse (UserError) a target/draft pair these spec types cannot use, or a ``ctx_size`` beyond the
    target's trained context (llama.cpp only warns, and what it measures there is not the model); return
    warnings.

    ``draft-mtp`` needs MTP heads in the model that drafts: the target itself, or a separate MTP drafter
    given as the draft (llama.cpp then creates the MTP context on the draft model). Every file is read, so a
    truncated or non-GGUF draft fails here even for types that ignore its architecture."""
    tinfo = read_info(Path(target))
    dinfo = read_info(Path(draft)) if draft is not None else None
    if ctx_size is not None and tinfo.context_length is not None and ctx_size > tinfo.context_length:
        raise UserError(
            f"{tinfo.path}: ctx_size {ctx_size} is more than the model's context "
            f"({tinfo.arch}.context_length = {tinfo.context_length}); a long-input case must fit its model: "
            "lower ctx_size or the prompts"
        )
    if "draft-mtp" in spec_types:
        drafter = dinfo or tinfo
        if not drafter.has_mtp_heads:
            role = "its separate MTP drafter" if dinfo else "the target"
            raise UserError(
                f"{drafter.path}: draft-mtp needs MTP heads in {role}, and this {drafter.arch!r} model "
                f"has none ({drafter.arch}.nextn_predict_layers absent or 0, no blk.N.nextn.* tensors); "
                "use an -MTP GGUF of the model"
            )
    for spec_type in spec_types:
        _check_draft(spec_type, draft, dinfo)
    infos = [tinfo] + ([dinfo] if dinfo is not None and dinfo.path != tinfo.path else [])
    return [w for w in map(_suspicious, infos) if w]
