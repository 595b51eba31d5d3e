"""The suspects where a user reads "why" besides summary.md: a replay's story per build pair, `compare`'s
two runs. Both runs' binaries carry the build record `specsuite build` writes, naming a small fake tree;
the second tree changes draft-simple's function only."""

from __future__ import annotations

import json
from pathlib import Path

import suspecttree

from specsuite.replay import story
from specsuite.results.document import Binary, Run
from specsuite.results.record import CaseRecord
from specsuite.tools import compare

FIX = suspecttree.SPECULATIVE.replace("        n += x;\n", "        n += 2 * x;\n", 1)
LINE = (
    "suspects for tiny-simple-fixed (b100 -> b101): common/speculative.cpp +1 -1 in "
    "common_speculative_impl_draft_simple::draft()"
)


def built_run(tmp_path: Path, build: int, tree: Path, *cases: CaseRecord) -> Run:
    """A run whose binary's build record (build-info.json beside bin/) names ``tree``."""
    sha = f"{build:064x}"
    exe = tmp_path / f"b{build}" / "bin" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    identity = {"build": build, "origin": "LLAMA_CPP_BUILD"}
    record = {"binary_sha256": sha, "backend": "cpu", "identity": identity,
              "source": {"kind": "dir", "path": str(tree)}}  # fmt: skip
    (exe.parent.parent / "build-info.json").write_text(json.dumps(record))
    binary = Binary(path=str(exe), sha256=sha, build=build, backend="cpu")
    return Run(run_id=f"r{build}", tier="synthetic", binary=binary, cases={c.name: c for c in cases})


def rec(name: str, status: str, accepted: int) -> CaseRecord:
    return CaseRecord(name=name, status=status, accepted=accepted, drafted=12, accept_rate=accepted / 12)  # type: ignore[arg-type]


def two_runs(make_tree, tmp_path: Path, after: list[CaseRecord]) -> tuple[Run, Run]:
    before = [rec("tiny-simple-fixed", "passed", 11), rec("tiny-ngram-map-k", "passed", 5)]
    run_a = built_run(tmp_path, 100, make_tree("t100"), *before)
    run_b = built_run(tmp_path, 101, make_tree("t101", {"common/speculative.cpp": FIX}), *after)
    return run_a, run_b


def test_a_replay_step_names_the_suspects_of_the_cases_that_changed(make_tree, cache, tmp_path: Path) -> None:
    """tiny-simple-fixed turned red with its counters moved: its type's function changed; tiny-ngram-map-k
    did not move, so it is not asked about."""
    after = [rec("tiny-simple-fixed", "failed", 6), rec("tiny-ngram-map-k", "passed", 5)]
    run_a, run_b = two_runs(make_tree, tmp_path, after)
    assert story.changed_cases(run_a, run_b) == ["tiny-simple-fixed"]
    assert story.suspect_lines(run_a, run_b) == [LINE]


def test_a_change_outside_the_cases_paths_names_nothing(make_tree, cache, tmp_path: Path) -> None:
    """The same pair, but the case that moved is ngram-map-k, whose code did not change."""
    after = [rec("tiny-simple-fixed", "passed", 11), rec("tiny-ngram-map-k", "passed", 3)]
    run_a, run_b = two_runs(make_tree, tmp_path, after)
    assert story.suspect_lines(run_a, run_b) == [
        "no cause found in the source between b100 and b101 for tiny-ngram-map-k (1 files changed, none "
        "among the case's paths)"
    ]


def test_compare_says_why_after_what_moved(make_tree, cache, tmp_path: Path, capsys) -> None:
    after = [rec("tiny-simple-fixed", "failed", 6), rec("tiny-ngram-map-k", "passed", 5)]
    run_a, run_b = two_runs(make_tree, tmp_path, after)
    assert compare.suspects(run_a, run_b, ["tiny-simple-fixed"]) == [LINE]
    assert compare.suspects(run_a, run_a, ["tiny-simple-fixed"]) == []  # one build: no source changed
    assert compare.suspects(run_a, run_b, []) == []
