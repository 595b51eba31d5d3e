"""suspects without git: two plain trees (small fake ones, conftest.py), the changed files among a case's
paths with their lines and functions, another type's block and a file outside the paths naming nothing,
and the pair's diff computed once and cached."""

from __future__ import annotations

from pathlib import Path

import pytest
from suspecttree import SPECULATIVE

from specsuite.cases.schema import Case, load_cases
from specsuite.suspects import cause, exercised, treediff
from specsuite.suspects.trees import Tree


def case(name: str) -> Case:
    return next(c for c in load_cases() if c.name == name)


def paths_of(name: str) -> exercised.Exercised:
    return exercised.for_case(case(name), "cpu", on_disk=lambda _: None)


def find(base: Path | None, head: Path, name: str, cache: Path) -> cause.Suspects:
    finder = cause.Finder(
        Tree("b1", base, why="no tree of b1 here"), Tree("b2", head), cache=cache / "suspects"
    )
    return finder.find(paths_of(name))


NGRAM_FIX = SPECULATIVE.replace("        map.n += x;\n", "        map.n += 2 * x;\n        map.n -= 1;\n")
SIMPLE_FIX = SPECULATIVE.replace("        n += x;\n", "        n += 3 * x;\n")


def test_a_change_inside_one_function_is_named_with_its_lines(make_tree, cache: Path) -> None:
    base, head = make_tree("base"), make_tree("head", {"common/speculative.cpp": NGRAM_FIX})
    found = find(base, head, "tiny-ngram-map-k", cache)
    assert found.route == cause.TREES
    assert found.line() == (
        "suspects for tiny-ngram-map-k (b1 -> b2): common/speculative.cpp +2 -1 in "
        "common_speculative_impl_ngram_map_k::draft()"
    )


def test_another_types_block_and_a_file_outside_the_paths_name_nothing(make_tree, cache: Path) -> None:
    """draft-simple's struct changed (a file of the case, not its block) and src/llama-vocab.cpp (no path
    of the case): for ngram-map-k, no cause; for draft-simple, its own function."""
    vocab = "int llama_vocab_n() {\n    return 2;\n}\n"
    base = make_tree("base")
    head = make_tree("head", {"common/speculative.cpp": SIMPLE_FIX, "src/llama-vocab.cpp": vocab})
    assert find(base, head, "tiny-ngram-map-k", cache).line() == (
        "no cause found in the source between b1 and b2 for tiny-ngram-map-k (2 files changed, none among "
        "the case's paths)"
    )
    assert find(base, head, "tiny-simple-fixed", cache).line() == (
        "suspects for tiny-simple-fixed (b1 -> b2): common/speculative.cpp +1 -1 in "
        "common_speculative_impl_draft_simple::draft()"
    )


def test_the_types_files_come_first_and_each_file_says_its_functions(make_tree, cache: Path) -> None:
    server = "void server_context_impl::update_slots() {\n    int a = 1;\n    int b = 2;\n}\n"
    head = make_tree("head", {"common/speculative.cpp": NGRAM_FIX, "tools/server/server-context.cpp": server})
    found = find(make_tree("base"), head, "tiny-ngram-map-k", cache)
    assert [f.path for f in found.files] == ["common/speculative.cpp", "tools/server/server-context.cpp"]
    assert found.line().endswith(
        "common/speculative.cpp +2 -1 in common_speculative_impl_ngram_map_k::draft(); "
        "tools/server/server-context.cpp +2 -0 in server_context_impl::update_slots()"
    )


def test_a_removed_file_and_a_path_in_neither_tree_are_said(make_tree, cache: Path) -> None:
    base = make_tree("base", {"common/common.h": None})
    head = make_tree("head", {"common/common.h": None, "common/ngram-map.cpp": None})
    line = find(base, head, "tiny-ngram-map-k", cache).line()
    assert line == (
        "suspects for tiny-ngram-map-k (b1 -> b2): common/ngram-map.cpp removed (-3) "
        "[common/common.h is in neither tree]"
    )


def test_a_binary_file_is_named_without_lines(make_tree, cache: Path) -> None:
    head = make_tree("head", {"ggml/src/ggml-cpu/kernel.bin": "\0\1\2"})
    assert find(make_tree("base"), head, "tiny-ngram-map-k", cache).line() == (
        "suspects for tiny-ngram-map-k (b1 -> b2): ggml/src/ggml-cpu/kernel.bin added (binary)"
    )


def test_the_pair_is_diffed_once_and_cached_beside_the_trees(make_tree, cache: Path, monkeypatch) -> None:
    base, head = make_tree("base"), make_tree("head", {"common/speculative.cpp": NGRAM_FIX})
    first = find(base, head, "tiny-ngram-map-k", cache).line()
    (kept,) = (cache / "suspects").glob("*.json")
    assert not list((cache / "suspects").glob(".*.tmp"))  # written whole: no temporary file left

    def never(*_: object) -> object:
        raise AssertionError("the pair was diffed again")

    monkeypatch.setattr(treediff, "changed_files", never)
    monkeypatch.setattr(treediff, "file_diff", never)
    assert find(base, head, "tiny-ngram-map-k", cache).line() == first
    assert "common_speculative_impl_ngram_map_k::draft()" in kept.read_text()


def test_an_edited_tree_is_a_new_pair(make_tree, cache: Path) -> None:
    base, head = make_tree("base"), make_tree("head", {"common/speculative.cpp": NGRAM_FIX})
    find(base, head, "tiny-ngram-map-k", cache)
    (head / "common" / "speculative.cpp").write_text(SIMPLE_FIX)
    assert "draft_simple" not in find(base, head, "tiny-ngram-map-k", cache).line()
    assert len(list((cache / "suspects").glob("*.json"))) == 2


def test_without_a_tree_or_git_the_line_says_what_is_missing(make_tree, cache: Path) -> None:
    line = find(None, make_tree("head"), "tiny-ngram-map-k", cache).line()
    assert line == (
        "no suspects for tiny-ngram-map-k (b1 -> b2): no tree of b1 here; and no git repository here knows "
        "both (the llama.cpp mirror, a checkout)"
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("#include <a>\n  b\n", "#include <a>\n  B\n", [("(top of file)", 1, 1)]),
        (
            "void f() {\n    x;\n}\n",
            "void f() {\n    x;\n    y;\n}\nvoid g() {\n}\n",
            [("f()", 1, 0), ("g()", 2, 0)],
        ),
    ],
)
def test_a_block_across_definitions_counts_each_line_where_it_is(tmp_path: Path, old, new, expected) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.cpp").write_text(old)
    (tmp_path / "b" / "x.cpp").write_text(new)
    diff = treediff.file_diff(tmp_path / "a", tmp_path / "b", "x.cpp", treediff.MODIFIED)
    assert [(h.entity, h.plus, h.minus) for h in diff.hunks] == expected
