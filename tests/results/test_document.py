"""results.json: the document, its loader, the typed case record, the verdict and summary.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest
from testdata import DATA_ROOT

from specsuite.common.errors import UserError
from specsuite.results.document import Binary, Run, RunResults, decode_run, load_run, new_run_id
from specsuite.results.record import CaseRecord, decode_record
from specsuite.results.summary import append_step_summary, summary_markdown, write_summary
from specsuite.results.verdict import verdict

BINARY = Binary(path="/b/llama-server", sha256="0" * 64, commit="0c1e570", backend="cpu")


def _md(run: Run) -> str:
    return summary_markdown(run, verdict(run))


def _rec(name: str, status: str = "passed", reason: str | None = None, **kw: object) -> CaseRecord:
    base = dict(accept_rate=0.61234, accept_len=2.5, speedup=1.25, identical_fraction=1.0)
    floors = {
        "min_accept_rate": 0.5,
        "min_accept_len": 2.0,
        "min_identical_fraction": None,
        "min_speedup": None,
    }
    return CaseRecord(name=name, status=status, reason=reason, floors=floors, **{**base, **kw})  # type: ignore[arg-type]


def test_results_json_is_written_on_every_change(tmp_path) -> None:
    r = RunResults(tmp_path / "20261130T043000Z-smoke", Run(tier="smoke", selector="smoke", binary=BINARY))
    r.add_model("m.gguf", "a" * 64, 123)
    r.add_case(_rec("ngram-mod"))
    doc = json.loads(r.path.read_text())
    assert doc["schema"] == 2 and doc["run_id"] == "20261130T043000Z-smoke" and doc["tier"] == "smoke"
    assert doc["cases"]["ngram-mod"]["status"] == "passed"
    assert doc["models"] == {"m.gguf": {"sha256": "a" * 64, "size": 123}}
    assert doc["binary"]["commit"] == "0c1e570" and doc["wall_s"] >= 0
    assert r.logs.is_dir() and r.rel(r.logs / "x.log") == "logs/x.log"
    assert not list(r.dir.glob(".*.tmp"))
    assert list(r.run.cases) == ["ngram-mod"] and load_run(r.dir).cases == r.run.cases


def test_unwritable_results_folder_is_one_clear_error(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"cannot create the results folder .*SPEC_RESULTS_DIR"):
        RunResults(tmp_path / "file" / "run", Run(tier="smoke", selector="smoke"))


@pytest.mark.parametrize(
    "plant",
    ["junit.xml", "summary.md", "logs", "logs/ngram-mod.log", "logs/deeper/x.log", "hard:junit.xml"],
)
def test_a_reused_results_folder_holding_a_link_is_refused(tmp_path: Path, plant: str) -> None:
    """A run writes nothing through a link planted in a reused folder: it refuses the folder, naming the
    link, before it writes anything (pytest's junit.xml and the server logs are opened by path)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("not yours\n")
    folder = tmp_path / "run"
    hard, name = plant.startswith("hard:"), plant.removeprefix("hard:")
    link = folder / name
    link.parent.mkdir(parents=True, exist_ok=True)
    if hard:
        os.link(victim, link)  # a hard link: writing through its path writes the victim's inode
    else:
        link.symlink_to(outside if name == "logs" else victim)
    with pytest.raises(UserError) as exc:
        RunResults(folder, Run(tier="smoke", selector="smoke", binary=BINARY))
    message = str(exc.value)
    assert message.startswith(f"the results folder {folder} holds a link: {link}") and "\n" not in message
    assert victim.read_text() == "not yours\n" and [p.name for p in outside.iterdir()] == ["victim.txt"]
    assert not (folder / "results.json").exists()


def test_a_reused_results_folder_without_links_is_fine(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "old.log").write_text("an earlier run\n")
    RunResults(folder, Run(tier="smoke", selector="smoke", binary=BINARY)).save()
    assert (folder / "results.json").is_file()


def test_summary_table_and_step_summary(tmp_path, monkeypatch) -> None:
    r = RunResults(tmp_path / "run", Run(tier="compact", selector="compact", binary=BINARY))
    r.add_case(_rec("mtp"))
    r.add_case(_rec("dspark", "skipped", "binary_no_dspark", accept_rate=None, accept_len=None, speedup=None,
                    identical_fraction=None))  # fmt: skip
    md = _md(load_run(r.path))
    assert md.splitlines()[0].endswith("PASSED, with warnings (1 SKIPPED): 1 passed, 1 skipped")
    assert md.splitlines()[2] == "- **SKIPPED 1: dspark (binary_no_dspark)**"
    assert "| mtp | passed |  | 0.6123 (≥ 0.5000) | 2.5000 (≥ 2.0000) | 1.250 | – | 1.00 |" in md
    assert "| dspark | skipped | binary_no_dspark | – | – | – | – | – |" in md
    step = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    out = write_summary(r.run, verdict(r.run), r.dir)
    assert out.read_text() == md and not step.exists()  # only the tier command appends
    append_step_summary(out)
    assert step.read_text() == md + "\n"


def _doc(*recs: CaseRecord, **extra: object) -> Run:
    return decode_run({"cases": {r.name: msgspec.to_builtins(r) for r in recs}, **extra}, "test")


def test_summary_table_is_the_shared_markdown_table_with_pipes_escaped() -> None:
    odd = _rec("odd", "skipped", "binary_no_a|b", accept_rate=None, accept_len=None, speedup=None,
               identical_fraction=None)  # fmt: skip
    lines = _md(_doc(_rec("a"), odd)).splitlines()
    columns = "case | status | reason | accept rate (floor) | accept len (floor) | speedup (floor)"
    block = "ms per block (x plain token, tokens)"
    head = lines.index(f"| {columns} | {block} | identical | counters vs baseline |")
    assert lines[head + 1] == "|---|---|---|---|---|---|---|---|---|"
    assert lines[head + 3] == "| odd | skipped | binary_no_a\\|b | – | – | – | – | – |  |"
    assert all(line.replace("\\|", "").count("|") == 10 for line in lines[head:])  # 9 columns, every row


COUNTER_WARNING = "the binary exports no llamacpp:spec_decode_num_accepted_tokens_per_pos_total counters"
GPU = {"name": "NVIDIA H200", "class": "nvidia-h200"}
CPU = {"name": "cpu", "class": "cpu-x86-64"}


@pytest.mark.parametrize(
    ("doc", "headline"),
    [
        (_doc(_rec("a")), "PASSED: 1 passed"),
        (_doc(_rec("a"), _rec("b", "skipped", "binary_no_dspark"), options={"strict": False}),
         "PASSED, with warnings (STRICT OFF: 1 skipped): 1 passed, 1 skipped"),
        (_doc(_rec("a"), options={"strict": False}),
         "PASSED, with warnings (STRICT OFF: 0 skipped): 1 passed"),
        (_doc(_rec("a", uncalibrated=True)), "PASSED, with warnings (1 UNCALIBRATED): 1 passed"),
        (_doc(_rec("a", warnings=[COUNTER_WARNING])),
         "PASSED, with warnings (MISSING COUNTERS in 1 case(s)): 1 passed"),
        (_doc(_rec("a", tier="compact"), options={"allow_cpu": True}, device=CPU, tier="compact"),
         "PASSED, with warnings (GPU TIER WITHOUT A GPU): 1 passed"),
        (_doc(_rec("a", tier="compact"), options={"allow_cpu": True}, device=CPU, tier="compact,smoke"),
         "PASSED, with warnings (GPU TIER WITHOUT A GPU): 1 passed"),
        (_doc(_rec("a", tier="compact"), options={"allow_cpu": True}, device=GPU, tier="compact"),
         "PASSED: 1 passed"),  # --allow-cpu given, but the run had its GPU
        (_doc(_rec("a", tier="smoke"), options={"allow_cpu": True}, device=CPU, tier="smoke"),
         "PASSED: 1 passed"),
        (_doc(_rec("a", tier="synthetic"), binary={"backend": "cuda"}, device=CPU, tier="synthetic"),
         "PASSED, with warnings (CUDA BINARY ON THE CPU): 1 passed"),  # ggml_cuda_init failed: CPU numbers
        (_doc(_rec("a", tier="synthetic"), binary={"backend": "cuda"}, device=GPU, tier="synthetic"),
         "PASSED: 1 passed"),
    ],
)  # fmt: skip
def test_green_headline_names_what_weakens_it(doc: Run, headline: str) -> None:
    v = verdict(doc)
    assert v.green and v.headline == headline
    first = _md(doc).splitlines()[0]
    assert first.endswith(f": {headline}")


def test_cuda_binary_on_the_cpu_is_spelled_out() -> None:
    doc = _doc(_rec("a"), binary={"backend": "cuda"}, device={"name": "AMD EPYC", "class": "cpu-x86-64-avx2"})
    line = (
        "CUDA BINARY ON THE CPU: this cuda build saw no GPU (ggml_cuda_init failed) and ran every case on "
        "the CPU (AMD EPYC): these are CPU numbers"
    )
    assert verdict(doc).attention == [line]
    assert f"- **{line}**" in _md(doc)


def test_no_history_says_the_relative_gate_was_off() -> None:
    off = verdict(_doc(_rec("a"), options={"history": False}))
    assert any(line.startswith("RELATIVE GATE OFF (--no-history") for line in off.attention)
    assert "- **RELATIVE GATE OFF" in _md(_doc(_rec("a"), options={"history": False}))
    assert off.headline == "PASSED, with warnings (RELATIVE GATE OFF): 1 passed"
    on = verdict(_doc(_rec("a"), options={"history": True}))
    assert not any("RELATIVE GATE" in line for line in on.attention) and on.headline == "PASSED: 1 passed"


def test_verdict_is_never_green_on_a_failure_or_when_nothing_ran() -> None:
    assert verdict(_doc(_rec("a"), _rec("b"))).green
    bad = verdict(_doc(_rec("a"), _rec("b", "failed", "regressed")))
    assert not bad.green and bad.headline == "FAILED: 1 of 2 case(s): b (regressed)"
    assert not verdict(_doc(_rec("a", "interrupted", "interrupted"))).green
    nothing = verdict(_doc(_rec("a", "skipped", "binary_no_mtp")))
    assert not nothing.green and "no selected case ran" in nothing.headline
    assert not verdict(_doc()).green


def test_green_run_says_what_weakens_it_first() -> None:
    v = verdict(
        _doc(
            _rec(
                "a",
                warnings=[
                    "the binary exports no llamacpp:spec_decode_num_accepted_tokens_per_pos_total counters"
                ],
            ),
            _rec("b", uncalibrated=True),
            _rec("c", "skipped", "binary_no_dspark"),
            options={"strict": False, "allow_cpu": True},
            tier="compact",
        )
    )
    assert v.green
    text = "\n".join(v.attention)
    uncal = "UNCALIBRATED (acceptance floors not enforced; a min_speedup is): b"
    for word in ("SKIPPED 1: c", "STRICT OFF", uncal, "MISSING COUNTERS", "GPU TIER ON A CPU BUILD"):
        assert word in text
    assert v.headline == (
        "PASSED, with warnings (STRICT OFF: 1 skipped; 1 UNCALIBRATED; MISSING COUNTERS in 1 case(s); "
        "GPU TIER WITHOUT A GPU): 2 passed, 1 skipped"
    )


def test_load_run_refuses_junk_with_one_line(tmp_path: Path) -> None:
    for name, content in [("bad.json", b"{not json"), ("latin1.json", b"\xff\xfe"), ("list.json", b"[1, 2]"),
                          ("cases.json", b'{"cases": {"a": 3}}')]:  # fmt: skip
        (tmp_path / name).write_bytes(content)
        with pytest.raises(UserError, match=name):
            load_run(tmp_path / name)
    with pytest.raises(UserError, match=r"no results\.json there"):
        load_run(tmp_path / "missing")


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"cases": {"x": {"floors": [1]}}}, "case 'x': floors must be an object, got [1]"),
        ({"cases": []}, "no 'cases' table"),
        ({"cases": {"x": {"speed": 3}}}, "case 'x': speed must be an object or null, got 3"),
        ({"cases": {"x": {"accept_rate": "0.9"}}}, "accept_rate must be a number or null, got '0.9'"),
        ({"cases": {"x": {"per_position": [1, None]}}}, "case 'x': per_position[1] must be a whole number"),
        ({"cases": {"x": {"warnings": "w"}}}, "case 'x': warnings must be a list, got 'w'"),
        ({"cases": {"x": {"uncalibrated": "yes"}}}, "uncalibrated must be true or false, got 'yes'"),
        ({"cases": {"x": {}}, "options": 3}, "options must be an object or null, got 3"),
        ({"cases": {"x": {}}, "binary": {"commit": 7}}, "binary.commit must be a string or null, got 7"),
    ],
)
def test_load_run_names_the_file_and_the_field_of_a_wrong_shape(
    tmp_path: Path, doc: dict, field: str
) -> None:
    (tmp_path / "results.json").write_text(json.dumps(doc))
    with pytest.raises(UserError) as err:
        load_run(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'results.json'}: ") and field in str(err.value)
    assert "\n" not in str(err.value)


def test_nulls_take_the_defaults() -> None:
    rec = decode_record("x", {"floors": None, "warnings": None, "per_position": None, "status": None})
    assert (rec.floors, rec.warnings, rec.per_position, rec.status) == ({}, [], [], None)
    chain = decode_record("x", {"spec_type": ["ngram-mod", "draft-mtp"]})
    assert chain.spec_type == "ngram-mod,draft-mtp"


def test_schema1_records_are_read() -> None:
    rec = load_run(DATA_ROOT / "results" / "smoke-real-1").cases["ngram-mod"]
    assert rec.accept_rate == 1.0 and rec.pos0 == rec.per_position_rate[0] and rec.pos0_rate is None


def test_run_id_is_timestamp_and_selector() -> None:
    rid = new_run_id("mtp,eagle3")
    assert rid.endswith("-mtp_eagle3") and rid[8] == "T" and rid[15] == "Z"


def test_runs_started_in_the_same_second_claim_folders_of_their_own(tmp_path: Path, monkeypatch) -> None:
    """Eight runs claim results/<run-id> at once, all in one second (issue 35: two runs shared one folder):
    the name is taken with mkdir, so each gets its own folder, and its name is its run id."""
    import threading

    from specsuite.common import paths
    from specsuite.results import document

    monkeypatch.setattr(paths, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(document, "new_run_id", lambda selector: f"20261204T211307Z-{selector}")
    start, claimed = threading.Barrier(8), []

    def claim() -> None:
        start.wait()
        claimed.append(document.claim_results_dir("synthetic"))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(claimed)) == 8 and sorted(claimed) == sorted((tmp_path / "results").iterdir())
    assert tmp_path / "results" / "20261204T211307Z-synthetic" in claimed
    assert all(document.run_id_problem(p.name) is None for p in claimed)  # an id `history import` takes
