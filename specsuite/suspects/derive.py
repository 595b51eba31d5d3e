"""What a case exercises, read from a llama.cpp tree: each speculative type's files and implementation
structs, each architecture's ``src/models/`` files, the server files that drive speculation.

``paths.toml`` is the data the suspects use; this module is how it was derived from the pinned tree, and
how a test keeps it current (``tests/suspects/test_paths.py`` derives again and compares). Every rule reads
names llama.cpp itself writes, never a guess from a file name:

- a type: its ``{"ngram-map-k", COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K}`` entry in ``common/speculative*.cpp``;
  the ``case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K:`` blocks there name the implementation structs
  (``common_speculative_impl_ngram_map_k``); the ``common_ngram_*`` names those use lead to the
  ``common/ngram-*.h`` that declares them, and its ``.cpp``;
- an architecture: ``{ LLM_ARCH_GLM4_MOE, "glm4moe" }`` in ``src/llama-arch.cpp``, ``case LLM_ARCH_GLM4_MOE:
  return new llama_model_glm4_moe(...)`` in ``src/llama-model.cpp``, and the ``src/models/*.cpp`` that
  define ``llama_model_glm4_moe::``;
- the server: the ``tools/server/`` sources that call the ``common_speculative_*`` API;
- ``--spec-default``: the types its handler in ``common/arg.cpp`` pushes; ``detect``: the types
  ``common_speculative_types_from_gguf`` can return.
"""

from __future__ import annotations

import re
from pathlib import Path

_TYPE_ENTRY = re.compile(r'\{\s*"([a-z0-9-]+)"\s*,\s*(COMMON_SPECULATIVE_TYPE_\w+)\s*\}')
_IMPL = re.compile(r"\bcommon_speculative_impl_\w+")
_NGRAM = re.compile(r"\bcommon_ngram_\w+")
_ARCH_ENTRY = re.compile(r'\{\s*(LLM_ARCH_\w+)\s*,\s*"([A-Za-z0-9_.-]+)"\s*\}')
_ENUM = re.compile(r"\bCOMMON_SPECULATIVE_TYPE_\w+")
_SPEC_API = re.compile(r"\bcommon_speculative_\w+\s*\(")


def _read(tree: Path, rel: str) -> str:
    return (tree / rel).read_text(encoding="utf-8", errors="replace")


def _rel(tree: Path, path: Path) -> str:
    return path.relative_to(tree).as_posix()


def speculative_sources(tree: Path) -> list[str]:
    """``common/speculative*.cpp``, the files that name the types."""
    return sorted(_rel(tree, p) for p in (tree / "common").glob("speculative*.cpp"))


def type_enums(tree: Path) -> dict[str, str]:
    """Every ``--spec-type`` name the tree knows -> its enum constant."""
    found: dict[str, str] = {}
    for rel in speculative_sources(tree):
        found.update(_TYPE_ENTRY.findall(_read(tree, rel)))
    return found


def _case_blocks(text: str, enum: str) -> list[str]:
    """The text of every ``case ENUM:`` up to the next ``case`` or ``default:`` of a switch."""
    out = []
    for m in re.finditer(rf"\bcase\s+{enum}\s*:", text):
        end = re.compile(r"\bcase\s+\w+\s*:|\bdefault\s*:").search(text, m.end())
        out.append(text[m.end() : end.start() if end else len(text)])
    return out


def _block(text: str, head: str, close: str) -> str:
    """The text from the first line matching ``head`` to the first line after it starting with ``close``
    (both at column 0: the tree's own style for top-level blocks); "" when there is none."""
    m = re.search(head, text, re.MULTILINE)
    if m is None:
        return ""
    end = re.compile(close, re.MULTILINE).search(text, m.end())
    return text[m.start() : end.end() if end else len(text)]


def _struct_body(text: str, name: str) -> str:
    """A top-level ``struct NAME`` from its line to the ``};`` that closes it at column 0."""
    return _block(text, rf"^struct\s+{name}\b", r"^};")


def _declaring_files(tree: Path, names: set[str]) -> list[str]:
    """``common/ngram-*.h`` that declare one of ``names`` (a struct, or a function at column 0), each with
    its ``.cpp`` where there is one."""
    out: list[str] = []
    for header in sorted((tree / "common").glob("ngram-*.h")):
        text = header.read_text(encoding="utf-8", errors="replace")
        if any(re.search(rf"^(?:struct\s+{n}\b|.*\b{n}\s*\()", text, re.MULTILINE) for n in names):
            out.append(_rel(tree, header))
            if header.with_suffix(".cpp").is_file():
                out.append(_rel(tree, header.with_suffix(".cpp")))
    return out


def type_part(tree: Path, name: str) -> tuple[list[str], list[str]]:
    """One type's files and implementation structs: (paths, impls). Empty when the tree lacks the type."""
    enum = type_enums(tree).get(name)
    if enum is None:
        return [], []
    files: list[str] = []
    impls: list[str] = []
    helpers: set[str] = set()
    for rel in speculative_sources(tree):
        text = _read(tree, rel)
        blocks = _case_blocks(text, enum)
        if not blocks:
            continue
        files += [rel, *(h for h in [rel[: -len(".cpp")] + ".h"] if (tree / h).is_file())]
        found = sorted({i for b in blocks for i in _IMPL.findall(b)})
        impls += found
        bodies = "".join(_struct_body(text, i) for i in found)
        helpers |= set(_NGRAM.findall("".join(blocks) + bodies))
    return list(dict.fromkeys(files + _declaring_files(tree, helpers))), impls


def aliases(tree: Path) -> dict[str, list[str]]:
    """The types a case stands for when it names none itself: ``spec-default`` (the types its handler in
    ``common/arg.cpp`` pushes) and ``detect`` (what ``common_speculative_types_from_gguf`` returns)."""
    by_enum = {enum: name for name, enum in type_enums(tree).items()}
    out: dict[str, list[str]] = {}
    arg = _read(tree, "common/arg.cpp") if (tree / "common/arg.cpp").is_file() else ""
    m = re.search(r'\{"--spec-default"\}.*?\n\s*\}\s*\n', arg, re.DOTALL)
    if m:
        pushed = re.findall(r"^\s*params\.speculative\.types\.push_back\((\w+)\)", m.group(0), re.MULTILINE)
        out["spec-default"] = [by_enum[e] for e in pushed if e in by_enum]
    for rel in speculative_sources(tree):
        body = _function_body(_read(tree, rel), "common_speculative_types_from_gguf")
        if body:
            out["detect"] = sorted({by_enum[e] for e in _ENUM.findall(body) if e in by_enum})
    return out


def _function_body(text: str, name: str) -> str:
    """A function defined at column 0, from its line to the ``}`` that closes it at column 0."""
    return _block(text, rf"^[^\s#/].*\b{name}\s*\(", r"^}")


def arch_files(tree: Path, arch: str) -> list[str]:
    """An architecture's ``src/models/`` files: the class ``src/llama-model.cpp`` makes for its enum."""
    arch_src = tree / "src" / "llama-arch.cpp"
    model_src = tree / "src" / "llama-model.cpp"
    if not arch_src.is_file() or not model_src.is_file():
        return []
    enum = next((e for e, a in _ARCH_ENTRY.findall(arch_src.read_text(errors="replace")) if a == arch), None)
    if enum is None:
        return []
    made = re.search(
        rf"\bcase\s+{enum}\s*:\s*return\s+new\s+(\w+)\s*\(", model_src.read_text(errors="replace")
    )
    if made is None:
        return []
    cls = made.group(1)
    return sorted(
        _rel(tree, p)
        for p in (tree / "src" / "models").glob("*.cpp")
        if re.search(rf"\b{cls}::", p.read_text(encoding="utf-8", errors="replace"))
    )


def server_files(tree: Path) -> list[str]:
    """The ``tools/server/`` sources that call the speculative API (``common_speculative_*(``)."""
    folder = tree / "tools" / "server"
    found = [
        _rel(tree, p)
        for p in sorted(folder.glob("*.c*"))
        if p.suffix in (".cpp", ".c") and _SPEC_API.search(p.read_text(encoding="utf-8", errors="replace"))
    ]
    return found
