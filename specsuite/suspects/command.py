"""``specsuite suspects``: the upstream changes between two builds that touch what the named cases
exercise, one line per set of cases with the same suspects (``--paths``: the paths themselves, and which
of them each tree has)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from specsuite.cases.schema import load_cases, select_cases
from specsuite.common import errors, paths
from specsuite.common.argtypes import CommandParser
from specsuite.common.errors import UserError
from specsuite.llamacpp import info, pypi
from specsuite.llamacpp.identity import parse_build
from specsuite.llamacpp.source import source_from_pypi
from specsuite.suspects import cause, derive, exercised, trees
from specsuite.suspects.trees import Tree

_COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")
_BUILD = re.compile(r"b?[0-9]{1,7}")


def parser() -> CommandParser:
    p = CommandParser(
        "suspects",
        "Name the upstream changes between two llama.cpp builds that touch what cases exercise.\n\n"
        "With a git repository that knows both (the llama.cpp mirror, --git): the commits that touch each "
        "case's paths. Else, with both trees on this machine (the sdists in the cache, a tree a run was "
        "built from, a folder): the changed files, lines and functions. No build and no network (--fetch "
        "allows PyPI).",
    )
    p.add_argument("cases", nargs="+", metavar="CASE", help="case names or tiers (as run-tier selects them)")
    p.add_argument("--base", required=True, help="the earlier build: b9702, a commit, or a llama.cpp folder")
    p.add_argument("--head", required=True, help="the later build: b10280, a commit, or a llama.cpp folder")
    p.add_argument(
        "--backend", choices=["cpu", "cuda"], default=None,
        help="the backend whose sources count (default: the published build's, else cpu)",
    )  # fmt: skip
    p.add_argument("--git", type=Path, default=None, help="a git repository that knows both commits")
    p.add_argument(
        "--fetch", action="store_true", help="download a build's sdist from PyPI where no tree of it is here"
    )
    p.add_argument("--paths", action="store_true", help="list each case's paths and which tree has each")
    p.add_argument(
        "--details", action="store_true", help="under each line, every commit or file and function it caps"
    )
    return p


def _side(text: str, fetch: bool, what: str) -> Tree:
    """A build, a commit or a folder, as a Tree (its folder found on this machine, or fetched)."""
    if Path(text).expanduser().is_dir() or "/" in text:
        return trees.from_folder(Path(text))
    if _BUILD.fullmatch(text) and not _COMMIT.fullmatch(text):
        build = parse_build(text, what)
        found = trees.locate(f"b{build}")
        if found.path is None and fetch:
            src = source_from_pypi(build, paths.cache_dir(), pypi.index_url({}))
            found = Tree(found.label, src.path, None, build)
        return found
    if _COMMIT.fullmatch(text):
        return trees.locate(text.lower())
    raise UserError(f"{what}={text!r} is not a build (b9702), a commit (7 to 40 hex digits) or a folder")


def _backend(given: str | None) -> str:
    if given:
        return given
    published = info.load()
    backend = published.get("backend") if published else None
    return backend if backend in ("cpu", "cuda") else "cpu"


def _path_lines(ex: exercised.Exercised, base: Tree, head: Tree) -> list[str]:
    out = [f"{ex.case}:"]
    for p in ex.paths:
        has = [t.label for t in (base, head) if t.path is not None and (t.path / p).exists()]
        there = f"in {' and '.join(has)}" if has else "in neither tree"
        out.append(f"  {p} ({there})")
    out += [f"  note: {n}" for n in ex.notes]
    return out


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    selected = select_cases(load_cases(), ",".join(a.cases))
    if not selected:
        raise UserError("no case selected; name cases or a tier")
    base, head = _side(a.base, a.fetch, "--base"), _side(a.head, a.fetch, "--head")
    backend = _backend(a.backend)

    def arch_files(arch: str) -> list[str]:  # an architecture paths.toml lacks: read from a tree
        tree = head.path or base.path
        return derive.arch_files(tree, arch) if tree is not None else []

    cases = [exercised.for_case(c, backend, derive_arch=arch_files) for c in selected]
    if a.paths:
        for ex in cases:
            print("\n".join(_path_lines(ex, base, head)))
        return errors.OK
    finder = cause.Finder(base, head, repo=a.git)
    if a.git is not None and (finder.git is None or finder.git[0] != a.git):
        print(f"note: --git {a.git} does not know both {base.label} and {head.label}", file=sys.stderr)
    for group in cause.grouped([finder.find(ex) for ex in cases]):
        print(group[0].line([s.case for s in group]))
        if a.details:
            print("\n".join(f"  {d}" for d in cause.details(group[0])))
    return errors.OK
