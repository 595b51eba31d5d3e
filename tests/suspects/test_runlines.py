"""The first integration: a finished run's red, fixed and moved cases get their suspects line in the
summary's first lines, from the run's tree (its build record) and the baseline's (found by its key), both
small fake trees on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from suspecttree import SPECULATIVE

from specsuite.common.table import markdown_text
from specsuite.results.document import Binary, HistoryNote, Run
from specsuite.results.record import BaselineRef, CaseRecord
from specsuite.results.summary import summary_markdown
from specsuite.results.verdict import verdict
from specsuite.suite import gate
from specsuite.suspects import runlines, trees

FIX = SPECULATIVE.replace("        map.n += x;\n", "        map.n += x + 1;\n")


def build_record(tmp_path: Path, tree: Path, sha: str = "ab" * 32) -> Path:
    """A published binary with the build record ``specsuite build`` writes beside it, naming ``tree``."""
    exe = tmp_path / "b" / "bin" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    record = {"binary_sha256": sha, "backend": "cpu", "identity": {"build": 101, "origin": "LLAMA_CPP_BUILD"},
              "source": {"kind": "dir", "path": str(tree)}}  # fmt: skip
    (tmp_path / "b" / "build-info.json").write_text(json.dumps(record))
    return exe


def rec(name: str, status: str, base_status: str | None, base: str = "b100", counters: str = "identical"):
    ref = BaselineRef(commit=base, status=base_status, counters=counters)
    return CaseRecord(name=name, status=status, baseline=ref)  # type: ignore[arg-type]


def a_run(exe: Path, *cases: CaseRecord) -> Run:
    binary = Binary(path=str(exe), sha256="ab" * 32, build=101, backend="cpu")
    note = HistoryNote(basis="x", line="baseline (x)")
    return Run(run_id="r1", tier="synthetic", binary=binary, history=note, cases={c.name: c for c in cases})


@pytest.fixture
def run_on_trees(make_tree, cache: Path, tmp_path: Path) -> Path:
    """b100's tree recorded (a run built from it), b101's named by the published binary's record."""
    trees.remember("b100", make_tree("b100"))
    return build_record(tmp_path, make_tree("b101", {"common/speculative.cpp": FIX}))


def test_a_red_and_a_fixed_case_get_their_lines_first(run_on_trees: Path) -> None:
    run = a_run(
        run_on_trees,
        rec("tiny-ngram-map-k", "failed", "passed"),
        rec("tiny-simple-fixed", "passed", "failed"),
        rec("tiny-none", "passed", "passed"),  # neither: no line
    )
    gate.name_suspects(run)
    assert run.history is not None and run.history.suspects == [
        "suspects for tiny-ngram-map-k (b100 -> b101): common/speculative.cpp +1 -1 in "
        "common_speculative_impl_ngram_map_k::draft()",
        "no cause found in the source between b100 and b101 for tiny-simple-fixed (1 files changed, none "
        "among the case's paths)",
    ]
    text = summary_markdown(run, verdict(run))
    assert f"- **{markdown_text(run.history.suspects[0])}**" in text
    assert text.index("suspects for") < text.index("baseline (x)")


def test_counters_that_moved_on_a_passing_case_are_a_cause_to_look_for(run_on_trees: Path) -> None:
    run = a_run(run_on_trees, rec("tiny-ngram-map-k", "passed", "passed", counters="accepted 25 → 45 (+20)"))
    assert runlines.for_run(run)[0].startswith("suspects for tiny-ngram-map-k (b100 -> b101): ")


def test_the_runs_tree_is_recorded_for_the_runs_after_it(run_on_trees: Path, tmp_path: Path) -> None:
    runlines.for_run(a_run(run_on_trees, rec("tiny-ngram-map-k", "failed", "passed")))
    assert trees.locate("b101").path == tmp_path / "b101"


def test_a_baseline_of_the_same_build_names_no_source(run_on_trees: Path) -> None:
    assert (
        runlines.for_run(a_run(run_on_trees, rec("tiny-ngram-map-k", "failed", "passed", base="b101"))) == []
    )


def test_a_baseline_with_no_tree_here_says_so(run_on_trees: Path) -> None:
    (line,) = runlines.for_run(a_run(run_on_trees, rec("tiny-ngram-map-k", "failed", "passed", base="b99")))
    assert line.startswith("no suspects for tiny-ngram-map-k (b99 -> b101): no tree of b99 on this machine")


def test_a_recorded_tree_that_changed_since_is_not_used(run_on_trees: Path, tmp_path: Path) -> None:
    (tmp_path / "b100" / "common" / "arg.cpp").write_text("void edited() {\n}\n")
    found = trees.locate("b100")
    assert found.path is None and "has changed since" in found.why


def test_a_binary_no_build_record_names_gets_no_line(run_on_trees: Path, tmp_path: Path) -> None:
    (tmp_path / "b" / "build-info.json").unlink()
    assert runlines.for_run(a_run(run_on_trees, rec("tiny-ngram-map-k", "failed", "passed"))) == []


def test_what_stops_the_suspects_is_one_line_never_the_run(run_on_trees: Path, tmp_path: Path) -> None:
    (tmp_path / "b" / "build-info.json").write_text(
        json.dumps({"binary_sha256": "ab" * 32, "backend": "tpu"})
    )
    run = a_run(run_on_trees, rec("tiny-ngram-map-k", "failed", "passed"))
    gate.name_suspects(run)
    assert run.history is not None
    (line,) = run.history.suspects
    assert line.startswith("suspects not named: ") and "backend 'tpu'" in line
