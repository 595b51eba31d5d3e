"""The package's shape: imports run one way (no cycle, function-local imports counted), no package imports
from a layer above its own, few top-level rooms, and no block of lines written twice."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "specsuite"

# Lowest first. A module may import from its own package and from packages of lower layers; packages that
# share a layer do not import each other.
LAYERS = (
    ("common",),
    ("cases",),
    ("models",),
    ("server",),
    ("llamacpp",),
    ("results",),
    ("history",),
    ("suite",),
    ("tools", "bisect", "bench", "report"),
    ("cli", "__main__", "__init__"),
)
LAYER = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every specsuite module the file imports, at any depth of the code (function-local ones too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("specsuite")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if not base.startswith("specsuite"):
                continue
            for alias in node.names:  # `from pkg import module` names a module; else the name lives in base
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found - {name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) & known for name, path in mods.items()}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_imports_never_go_up_a_layer() -> None:
    bad = []
    for src, targets in graph().items():
        for dst in targets:
            a, b = room(src), room(dst)
            if a in ("cli", "__main__") or dst == "specsuite":
                continue
            if a not in LAYER or b not in LAYER:
                bad.append(f"{src} -> {dst}: a room missing from LAYERS")
            elif a != b and LAYER[b] >= LAYER[a]:
                bad.append(f"{src} -> {dst}: {a} (layer {LAYER[a]}) may not import {b} (layer {LAYER[b]})")
    assert bad == []


def test_few_top_level_rooms() -> None:
    rooms = [p for p in PKG.iterdir() if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())]
    assert len(rooms) <= 20, sorted(p.name for p in rooms)
    assert {p.stem for p in rooms} <= set(LAYER), "a new top-level room needs its place in LAYERS"


def test_every_package_says_what_it_owns() -> None:
    for init in PKG.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 40, f"{init.relative_to(PKG.parent)} needs a docstring saying what it owns"


BLOCK = 6


def _normalised(line: str) -> str:
    return re.sub(r"\s+", " ", line.strip())


def _meaningful(text: str) -> bool:
    """Code a repetition of which would be a copy: not blank, a comment or a closing bracket."""
    return bool(text) and not text.startswith("#") and text not in (")", "]", "}")


def _import_lines(source: str) -> set[int]:
    """Line numbers of import statements (a sorted import block naturally repeats another's)."""
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return {line for n in nodes for line in range(n.lineno, (n.end_lineno or n.lineno) + 1)}


def test_no_block_written_twice() -> None:
    """No run of six meaningful lines appears in two files of the package."""
    seen: dict[tuple[str, ...], str] = {}
    twice: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PKG.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        imports = _import_lines(source)
        lines = [
            (n, _normalised(t))
            for n, t in enumerate(source.splitlines(), 1)
            if _meaningful(_normalised(t)) and n not in imports
        ]
        for i in range(len(lines) - BLOCK + 1):
            key = tuple(t for _, t in lines[i : i + BLOCK])
            where = f"{path.relative_to(PKG.parent)}:{lines[i][0]}"
            if key in seen and not seen[key].startswith(f"{path.relative_to(PKG.parent)}:"):
                twice[seen[key]].append(where)
            seen.setdefault(key, where)
    assert dict(twice) == {}


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ],
)
def test_cycle_finder(edges: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(edges) == expected


def test_function_local_imports_count(tmp_path: Path) -> None:
    src = tmp_path / "specsuite" / "x.py"
    src.parent.mkdir()
    src.write_text("def f():\n    from .y import z\n    return z\n")
    assert imports_of("specsuite.x", src, {"specsuite.y"}) == {"specsuite.y"}
