"""What one case exercises in llama.cpp's source: its types' implementation, its models' architectures,
the server's speculative loop, argument parsing and the backend built, as paths (``paths.toml``).

A case names its method as ``spec_type`` (a type, a chain, ``detect``), ``spec_default`` or a front end's
``mode`` (resolved at run time: what ``expect_resolved`` says it must resolve to, else every type), and its
models by lock name; a model's architecture is its GGUF header's where the model folder holds the file, else
``paths.toml``'s ``[[model]]`` entry, else, for a generated model, what its recipe builds (models.lock's
entry; nothing is written), else what ``models.gguf`` requires of a draft of its type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

import msgspec

from specsuite.cases.schema import DETECT, Case
from specsuite.common import declared, paths, tomldata
from specsuite.common.errors import UserError
from specsuite.models.gguf import DRAFT_ARCH, read_info
from specsuite.models.lock import GeneratedEntry, load_lock

DATA = Path(__file__).with_name("paths.toml")
LABEL = "specsuite/suspects/paths.toml"
ALL_TYPES = "every type"  # a mode case with no expected resolution: the resolver may pick any


class Part(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One ``[[part]]``: a kind, its name, and the paths it exercises (see paths.toml's header)."""

    kind: Literal["type", "alias", "arch", "server", "args", "backend"]
    name: str
    paths: tuple[str, ...] = ()
    impls: tuple[str, ...] = ()  # a type's implementation structs in common/speculative*.cpp
    types: tuple[str, ...] = ()  # an alias's types


class ModelArch(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    arch: str


class _File(msgspec.Struct, forbid_unknown_fields=True):
    version: int
    part: list[Part] = []
    model: list[ModelArch] = []


@dataclass(frozen=True)
class Data:
    parts: dict[tuple[str, str], Part]  # (kind, name) -> part
    models: dict[str, str]  # lock name -> architecture

    def names(self, kind: str) -> list[str]:
        return [n for k, n in self.parts if k == kind]

    @property
    def impls(self) -> frozenset[str]:
        """Every type's implementation structs."""
        return frozenset(i for p in self.parts.values() for i in p.impls)


def parse(text: str, label: str = LABEL) -> Data:
    raw = tomldata.load_versioned(text, label, "part", "model")
    doc = declared.convert(raw, _File, label)
    parts: dict[tuple[str, str], Part] = {}
    for p in doc.part:
        if (p.kind, p.name) in parts:
            raise UserError(f"{label}: [[part]] {p.kind} {p.name!r} is given twice")
        parts[(p.kind, p.name)] = p
    return Data(parts, {m.name: m.arch for m in doc.model})


@cache
def load() -> Data:
    """``paths.toml`` beside this module, parsed once a process."""
    return parse(tomldata.read_text(DATA, "the suspects' paths file", "nothing: it ships with specsuite"))


@dataclass(frozen=True)
class Exercised:
    """A case's paths (files or folders, in the order the suspects line names them: its types', its
    architectures', the server's, the arguments', the backend's), the implementation structs of its types,
    those of the other types (a change inside one of them is not this case's), and what could not be
    said (an architecture nobody knows)."""

    case: str
    paths: tuple[str, ...]
    impls: frozenset[str] = frozenset()
    foreign: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()
    archs: tuple[str, ...] = field(default=())

    def rank(self, rel: str) -> int:
        """The place of the first of the case's paths that covers a file of the tree (a folder covers
        what is under it); ``len(paths)`` when none does."""
        return next((i for i, p in enumerate(self.paths) if rel == p or rel.startswith(p.rstrip("/") + "/")),
                    len(self.paths))  # fmt: skip

    def covers(self, rel: str) -> bool:
        return self.rank(rel) < len(self.paths)


def case_types(case: Case, data: Data) -> tuple[str, ...]:
    """The ``--spec-type`` names a case runs (an alias resolved, a mode by what it must resolve to)."""
    if case.spec_default:
        return data.parts[("alias", "spec-default")].types
    if case.mode is not None:
        resolved = case.expect_resolved or ""
        if resolved in ("none", "default"):
            return ()
        return tuple(resolved.split(",")) if resolved else (ALL_TYPES,)
    out: list[str] = []
    for t in case.spec_type:
        out += list(data.parts[("alias", DETECT)].types) if t == DETECT else [t]
    return tuple(dict.fromkeys(out))


ArchOf = Callable[[str], "str | None"]


def arch_on_disk(name: str) -> str | None:
    """A model's architecture from its GGUF header, where the model folder holds the file."""
    path = paths.model_dir() / name
    if not path.is_file():
        return None
    try:
        return read_info(path).arch
    except UserError:
        return None


@cache
def _generated() -> dict[str, str]:
    """models.lock's generated entries: lock name -> recipe (the lock read once a process: 250 ms)."""
    return {n: e.recipe for n, e in load_lock().entries.items() if isinstance(e, GeneratedEntry)}


@cache
def arch_of_recipe(name: str) -> str | None:
    """A generated model's architecture: that of the model its recipe (models.lock's entry) builds, in
    memory only (35 ms a recipe; once a process)."""
    if name not in _generated():
        return None
    from specsuite.models.synthetic.generate import RECIPES  # defers numpy, gguf
    from specsuite.models.synthetic.weights import Weights  # defers numpy

    recipe = RECIPES.get(_generated()[name])
    return recipe.build(Weights(recipe.mode, recipe.seed), recipe.id).arch if recipe else None


def model_archs(case: Case, data: Data, on_disk: ArchOf = arch_on_disk) -> tuple[list[str], list[str]]:
    """The architectures of the case's target and draft, and a note for each model nobody can name."""
    archs: list[str] = []
    notes: list[str] = []
    for name, role in ((case.target, "target"), (case.draft, "draft")):
        if not name or not name.endswith(".gguf"):
            continue
        arch = on_disk(name) or data.models.get(name) or arch_of_recipe(name)
        if arch is None and role == "draft":
            arch = next((DRAFT_ARCH[t] for t in case.spec_type if t in DRAFT_ARCH), None)
        if arch is None:
            notes.append(f"architecture of {name} unknown (not in the model folder, not in {LABEL})")
        else:
            archs.append(arch)
    return list(dict.fromkeys(archs)), notes


def for_case(
    case: Case,
    backend: str | None,
    data: Data | None = None,
    *,
    on_disk: ArchOf = arch_on_disk,
    derive_arch: Callable[[str], list[str]] | None = None,
) -> Exercised:
    """The case's paths. ``derive_arch``: an architecture's files read from a tree, for one that
    paths.toml lacks (``derive.arch_files`` on the run's tree)."""
    data = data or load()
    types = case_types(case, data)
    every = ALL_TYPES in types
    names = data.names("type") if every else [t for t in types if ("type", t) in data.parts]
    found: list[str] = []
    impls: set[str] = set()
    notes = [f"type {t} is not in {LABEL}" for t in types if t != ALL_TYPES and ("type", t) not in data.parts]
    for t in names:
        found += data.parts[("type", t)].paths
        impls |= set(data.parts[("type", t)].impls)
    archs, arch_notes = model_archs(case, data, on_disk)
    notes += arch_notes
    for arch in archs:
        part = data.parts.get(("arch", arch))
        files = list(part.paths) if part else (derive_arch(arch) if derive_arch else [])
        if not files:
            notes.append(f"no src/models/ file known for architecture {arch}")
        found += files
    found += [p for kind in ("server", "args") for n in data.names(kind) for p in data.parts[(kind, n)].paths]
    if backend is not None and ("backend", backend) in data.parts:
        found += data.parts[("backend", backend)].paths
    elif backend is not None:
        notes.append(f"backend {backend} is not in {LABEL}")
    foreign = frozenset() if every else data.impls - impls
    return Exercised(
        case.name, tuple(dict.fromkeys(found)), frozenset(impls), foreign, tuple(notes), tuple(archs)
    )
