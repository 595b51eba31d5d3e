"""The package's shape: imports run one way (no cycle, function-local imports counted), no package imports
from a layer above its own, few top-level rooms, and no block of lines written twice."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
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
    ("history", "suspects"),
    ("measure",),
    ("suite",),
    ("tools", "bisect", "bench", "report", "replay"),
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


# A function-local import of one of the package's own modules must say which heavy library it keeps out
# of its module's import ("# defers numpy, gguf" on the import or on the comment line above its block), and
# that must be true: importing the module leaves those libraries unloaded, importing the target loads them.
# Every other import of our own modules is a module import (none breaks a cycle: the graph above counts
# function-local imports too, and has none).
DEFERS = re.compile(r"#\s*defers ([\w.]+(?:,\s*[\w.]+)*)")


def local_imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, target module, the libraries its comment says it defers) of each function-local import of a
    specsuite module in ``path``."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            target = _from_target(node) if isinstance(node, ast.ImportFrom) else None
            if isinstance(node, ast.Import):
                target = next((a.name for a in node.names if a.name.startswith("specsuite")), None)
            if target and target.startswith("specsuite"):
                found.append((node.lineno, target, _deferred(lines, node.lineno)))
    return found


def _from_target(node: ast.ImportFrom) -> str | None:
    """The module a ``from`` import loads: ``from specsuite.models import hub`` loads the module hub."""
    base = node.module or ""
    sub = f"{base}.{node.names[0].name}"
    path = PKG.parent / sub.replace(".", "/")
    return sub if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() else base


def _deferred(lines: list[str], lineno: int) -> tuple[str, ...]:
    """The libraries named by ``# defers`` on the import's line or above its block of imports."""
    i = lineno - 1
    while True:
        hit = DEFERS.search(lines[i])
        if hit:
            return tuple(s.strip() for s in hit.group(1).split(","))
        i -= 1
        if i < 0 or not (lines[i].strip().startswith(("from ", "import ", "#"))):
            return ()


def test_function_local_imports_of_our_modules_each_defer_a_heavy_library() -> None:
    found = {(module_name(p), n, t, d) for p in PKG.rglob("*.py") for n, t, d in local_imports(p)}
    assert [
        f"{m}:{n} imports {t} inside a function without '# defers LIB'" for m, n, t, d in found if not d
    ] == []
    for module, _, target, libs in sorted(found):
        code = (
            "import importlib, sys\n"
            f"importlib.import_module({module!r})\n"
            f"early = [lib for lib in {libs!r} if lib in sys.modules]\n"
            f"importlib.import_module({target!r})\n"
            f"late = [lib for lib in {libs!r} if lib not in sys.modules]\n"
            "print(early, late)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "[] []", f"{module} -> {target} # defers {', '.join(libs)}: {out.stdout}"


def test_local_imports_are_found_with_their_reason(tmp_path: Path) -> None:
    src = tmp_path / "x.py"
    src.write_text(
        "import os\n\n\ndef f():\n    # defers numpy\n    from specsuite.a import b\n"
        "    from specsuite.c import d  # defers gguf, numpy\n    from specsuite.e import f\n"
        "    return b\n\n\n"
        "def g():\n    x = 1\n    from specsuite.h import i\n    return i\n"
    )
    assert sorted(local_imports(src)) == [
        (6, "specsuite.a", ("numpy",)),
        (7, "specsuite.c", ("gguf", "numpy")),
        (8, "specsuite.e", ("gguf", "numpy")),  # the nearest reason above its block
        (14, "specsuite.h", ()),
    ]


# docs/DESIGN.md's package map: a tree in the first fenced block under "## The package", one item a line
# after "├── " or "└── " (four columns a level), a folder's item standing for its __init__, the root line
# for specsuite/__init__.py. Every module has its line and every line is a module.
DESIGN = PKG.parent / "docs" / "DESIGN.md"
TREE_ITEM = re.compile(r"[├└]── (\S+)")


def design_map(text: str) -> list[str]:
    """The dotted names (``specsuite.measure.cold``) the package map in ``text`` names, in its order."""
    block = re.split(r"^## The package\n", text, maxsplit=1, flags=re.M)[1].split("```\n", 2)[1]
    lines = block.splitlines()
    root = lines[0].split()[0]
    assert root == "specsuite/", f"the map's first line names {root!r}, not specsuite/"
    named, folders = ["specsuite"], ["specsuite"]
    for line in lines[1:]:
        hit = TREE_ITEM.search(line)
        if hit is None:  # a phrase carried over to the next line
            continue
        level = hit.start() // 4 + 1
        name = hit.group(1)
        del folders[level:]
        named.append(".".join([*folders, name.rstrip("/")]))
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
    return named


def test_the_design_map_names_every_module_and_nothing_else() -> None:
    named = design_map(DESIGN.read_text(encoding="utf-8"))
    have = set(modules())
    assert sorted({n for n in named if named.count(n) > 1}) == [], "named twice in docs/DESIGN.md's map"
    assert sorted(have - set(named)) == [], "modules without a line in docs/DESIGN.md's package map"
    assert sorted(set(named) - have) == [], "docs/DESIGN.md's package map names modules that do not exist"
    rooms = [n.split(".")[1] for n in named if n.count(".") == 1]
    assert rooms == sorted(rooms, key=LAYER.__getitem__), "the map's folders are not in layer order"


def test_the_design_map_reads_folders_and_their_modules() -> None:
    text = (
        "## The package\n\nprose\n\n```\nspecsuite/     all\n├── common/      shared\n│   ├── errors   a\n"
        "│   │            carried over\n│   └── git      b\n├── models/      files\n│   ├── synthetic/ made\n"
        "│   │   └── arch     c\n│   └── lock     d\n└── cli          door\n```\n"
    )
    assert design_map(text) == [
        "specsuite",
        "specsuite.common",
        "specsuite.common.errors",
        "specsuite.common.git",
        "specsuite.models",
        "specsuite.models.synthetic",
        "specsuite.models.synthetic.arch",
        "specsuite.models.lock",
        "specsuite.cli",
    ]
