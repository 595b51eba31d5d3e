"""``specsuite suspects``: two folders (small fake trees) or builds, case names; one line per set of cases
with the same suspects, ``--paths`` and ``--details``; bad input is one ``error:`` line and exit 2."""

from __future__ import annotations

import re
from pathlib import Path

from suspecttree import SPECULATIVE

from specsuite import cli

FIX = SPECULATIVE.replace("        map.n -= n;\n", "        map.n -= n + 1;\n")


def test_two_folders_and_a_case_give_its_line(make_tree, cache: Path, capsys) -> None:
    base, head = make_tree("base"), make_tree("head", {"common/speculative.cpp": FIX})
    argv = ["suspects", "--base", str(base), "--head", str(head), "--backend", "cpu"]
    assert cli.main([*argv, "tiny-ngram-map-k", "tiny-simple-fixed"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        r"suspects for tiny-ngram-map-k \(tree-[0-9a-f]{12} -> tree-[0-9a-f]{12}\): common/speculative.cpp "
        r"\+1 -1 in common_speculative_impl_ngram_map_k::accept\(\)",
        out[0],
    ), out
    assert out[1].startswith("no cause found in the source between tree-") and out[1].endswith(
        " for tiny-simple-fixed (1 files changed, none among the case's paths)"
    )
    assert cli.main([*argv, "--details", "tiny-ngram-map-k"]) == 0
    detail = capsys.readouterr().out.splitlines()[1]
    assert detail == (
        "  common/speculative.cpp (modified, +1 -1): common_speculative_impl_ngram_map_k::accept() +1 -1"
    )


def test_paths_lists_each_path_and_which_tree_has_it(make_tree, cache: Path, capsys) -> None:
    base, head = make_tree("base"), make_tree("head", {"common/ngram-map.h": None})
    argv = ["suspects", "--paths", "--base", str(base), "--head", str(head), "--backend", "cuda"]
    assert cli.main([*argv, "tiny-ngram-map-k"]) == 0
    out = capsys.readouterr().out
    assert "\n  common/speculative.cpp (in tree-" in out
    assert re.search(r"\n  common/ngram-map.h \(in tree-[0-9a-f]{12}\)\n", out)  # the base's only
    assert "\n  ggml/src/ggml-cuda (in neither tree)\n" in out


def test_a_build_with_no_tree_here_says_what_is_missing(make_tree, cache: Path, capsys) -> None:
    argv = ["suspects", "--base", "b9113", "--head", str(make_tree("head")), "tiny-ngram-map-k"]
    assert cli.main(argv) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("no suspects for tiny-ngram-map-k (b9113 -> tree-")
    assert "no tree of b9113 on this machine (`specsuite suspects --fetch` fetches its sdist)" in line


def test_bad_input_is_one_error_line(cache: Path, capsys) -> None:
    assert cli.main(["suspects", "--base", "nonsense", "--head", "b2", "tiny-ngram-map-k"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --base='nonsense' is not a build (b9702), a commit (7 to 40 hex digits) or a folder"
    ]
    assert cli.main(["suspects", "--base", "b1", "--head", "b2", "tiny-ngram-map-kk"]) == 2
    assert "tiny-ngram-map-k" in capsys.readouterr().err  # the nearest name
