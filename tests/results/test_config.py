"""results.config: a run's configuration as the binary states it and as the harness passed it, and what
changed between two runs; the summary's first lines name it."""

from __future__ import annotations

from fakeserver import HELP_DIR

from specsuite.common.table import markdown_plain
from specsuite.measure.observe import spellings
from specsuite.results.config import BuildOptions, CaseConfig, RunConfig, changes, effective, passed_flags
from specsuite.results.document import Binary, BinarySource, Device, Run
from specsuite.results.record import BaselineRef, CaseRecord, Memory, Prefill
from specsuite.results.summary import config_lines, summary_markdown
from specsuite.results.verdict import verdict
from specsuite.server.probe import parse_defaults

CURRENT = parse_defaults((HELP_DIR / "current.txt").read_text())
LEGACY = parse_defaults((HELP_DIR / "legacy.txt").read_text())
KEYS = spellings(CURRENT)


def run_config(defaults: dict[str, tuple[tuple[str, ...], str | None]], **build: str) -> RunConfig:
    opts = BuildOptions(source="CMakeCache.txt", backend="cuda", options=build) if build else None
    return RunConfig(defaults={k: v for k, (_, v) in defaults.items()}, build=opts)


def test_the_help_states_each_speculative_and_batching_default() -> None:
    assert CURRENT["--spec-draft-p-min"] == (("--spec-draft-p-min", "--draft-p-min"), "0.00")
    assert CURRENT["--spec-draft-n-max"][1] == "3"
    assert CURRENT["--flash-attn"][1] == "auto"  # quotes dropped
    assert CURRENT["--parallel"][1] == "-1, -1 = auto"  # as the binary words it
    assert "-ctkd" in CURRENT["--spec-draft-type-k"][0] and CURRENT["--spec-draft-type-k"][1] == "f16"
    assert CURRENT["--spec-synth-rates"][1] is None  # no default stated
    assert "--metrics" not in CURRENT and "--seed" not in CURRENT  # neither speculative nor batching


def test_a_renamed_flag_keeps_its_key_and_a_removed_stub_is_no_default() -> None:
    assert LEGACY["--spec-draft-p-min"] == (("--draft-p-min",), "0.75")  # before the --spec-draft-* rename
    assert LEGACY["--spec-draft-n-max"] == (("-draft", "--draft-n", "--draft-max"), "16")
    stubs = parse_defaults((HELP_DIR / "post-rename.txt").read_text())
    assert stubs["--spec-draft-n-max"] == (("--spec-draft-n-max",), "3")  # not the "removed" --draft-max


def test_passed_flags_last_one_wins_as_in_llama_cpp() -> None:
    argv = [
        "-c",
        "512",
        "--spec-draft-p-min=0.5",
        "-np",
        "1",
        "--threads",
        "-1",
        "--no-kv-unified",
        "--kv-unified",
        "--ctx-size",
        "1024",
        "-ctkd",
        "q8_0",
        "-nocb",
        "--metrics",
    ]
    assert passed_flags(argv, KEYS) == {
        "--ctx-size": "1024",
        "--spec-draft-p-min": "0.5",
        "--parallel": "1",
        "--threads": "-1",  # a negative number is a value, not a flag
        "--kv-unified": "on",  # a bare switch; the --no- form said off before it
        "--spec-draft-type-k": "q8_0",
        "--cont-batching": "off",
    }
    eff = effective(run_config(CURRENT), CaseConfig(passed={"--spec-draft-n-max": "3"}))
    assert eff["--spec-draft-n-max"] == ("3", "passed") and eff["--spec-draft-p-min"] == ("0.00", "default")


def test_a_changed_default_is_named_where_the_case_did_not_pass_the_flag() -> None:
    old, new = run_config(LEGACY), run_config(CURRENT)
    pinned = CaseConfig(passed={"--spec-draft-n-max": "3"})
    found = changes((old, pinned), (new, pinned), ("a1a1a1a1", "b2b2b2b2"))
    assert "default of --spec-draft-p-min: 0.75 -> 0.00 between a1a1a1a and b2b2b2b" in found
    assert not any("--spec-draft-n-max" in line for line in found)  # pinned: its default does not apply
    assert found[0].startswith("default of --spec-") or found[0].startswith(
        "new flag --spec-"
    )  # speculative first
    unpinned = changes((old, None), (new, None), ("a1a1a1a", "b2b2b2b"))
    assert "default of --spec-draft-n-max: 16 -> 3 between a1a1a1a and b2b2b2b" in unpinned
    assert changes((new, pinned), (new, pinned), ("a", "b")) == []
    assert changes((None, pinned), (new, pinned), ("a", "b")) == []  # a baseline from before it was recorded


def test_build_options_compare_what_both_sides_know() -> None:
    a = run_config(CURRENT, GGML_CUDA_FA_QUANTS="q4_0-q4_0;q8_0-q8_0", GGML_NATIVE="ON")
    b = run_config(CURRENT, GGML_CUDA_FA_QUANTS="all", GGML_CUDA_NO_VMM="ON")
    found = changes((a, None), (b, None), ("a1a1a1a", "b2b2b2b"))
    assert found == ["build GGML_CUDA_FA_QUANTS: q4_0-q4_0;q8_0-q8_0 -> all between a1a1a1a and b2b2b2b"]
    props = changes(
        (a, CaseConfig(props={"total_slots": 1})), (a, CaseConfig(props={"total_slots": 4})), ("a", "b")
    )
    assert props == ["/props total_slots: 1 -> 4 between a and b"]


def _record(name: str, status: str, reason: str | None, changed: list[str]) -> CaseRecord:
    base = BaselineRef(commit="a1a1a1a", run_id="r-a", config_changes=changed)
    mem = Memory(peak_rss_mib=22.5, base_peak_rss_mib=20.8, growth_mib=0.02, growth_requests=3)
    pre = Prefill(ttft_ms=0.66, base_ttft_ms=1.15, prompt_tps=22651.0, base_prompt_tps=13964.3)
    return CaseRecord(
        name=name, status=status, reason=reason, baseline=base, accept_rate=0.5, memory=mem, prefill=pre
    )


def test_the_summary_names_the_changed_setting_in_its_first_lines() -> None:
    line = "default of --spec-draft-p-min: 0.75 -> 0.00 between a1a1a1a and b2b2b2b"
    run = Run(
        run_id="r-b",
        tier="synthetic",
        cases={
            "tiny-simple-random": _record("tiny-simple-random", "failed", "floor", [line]),
            "tiny-mtp-random": _record("tiny-mtp-random", "failed", "regressed", [line]),
            "tiny-ngram": _record("tiny-ngram", "passed", None, [line]),
        },
    )
    text = summary_markdown(run, verdict(run)).splitlines()
    assert text[0].startswith("### specsuite synthetic run `r-b`: FAILED")
    assert text[2] == (
        f"- **CONFIGURATION CHANGED under tiny-simple-random (floor), tiny-mtp-random (regressed): {line}**"
    )
    assert f"- configuration differs from the baseline under tiny-ngram: {line}" in text
    assert config_lines(run, True) == [text[2][4:-2]]
    assert (
        "| tiny-simple-random | 22.5 (20.8) | +0.02 / 3 | – | 0.66 (1.15) | 22651.0 (13964.3) | – |" in text
    )


def test_a_new_flag_without_a_stated_default_is_a_change() -> None:
    """4df29be -> 0c1e570 (llama-cpp-python 0.3.35 -> 0.3.36) added --spec-synth-len, whose help states no
    default, and gave --spec-draft-device one."""
    old = RunConfig(defaults={"--spec-draft-device": None})
    new = RunConfig(defaults={"--spec-draft-device": "follows --device", "--spec-synth-len": None})
    assert changes((old, None), (new, None), ("4df29be", "0c1e570")) == [
        "default of --spec-draft-device: none stated -> follows --device between 4df29be and 0c1e570",
        "new flag --spec-synth-len (default none stated) between 4df29be and 0c1e570",
    ]


def test_text_from_the_binary_is_text_in_the_summary_and_plain_elsewhere() -> None:
    """A default from --help and a binary's names, as a merged shard or a wrapper may carry them: summary.md
    shows them as written (no HTML, no heading of their own, no bold ended early); the site's line (Jinja
    escapes it) and the terminal (markdown_plain) get the plain text."""
    line = "default of --spec-draft-p-min: <b>x</b> -> **x** ## y between a1a1a1a and b2b2b2b"
    run = Run(
        run_id="r-b",
        tier="synthetic",
        binary=Binary(
            path="/w/`x`/llama-server",
            commit="b2b2b2b",
            backend="<b>cpu</b>",
            source=BinarySource(origin="_o_"),
        ),
        device=Device(name="<img src=x>\n## injected"),
        cases={"tiny-simple-random": _record("tiny-simple-random", "failed", "floor", [line])},
    )
    text = summary_markdown(run, verdict(run))
    assert "\n## injected" not in text and " on \\<img src=x>\ufffd\\#\\# injected;" in text
    assert text.splitlines()[2] == (
        r"- **CONFIGURATION CHANGED under tiny-simple-random (floor): default of --spec-draft-p-min: "
        r"\<b>x\</b> -> \*\*x\*\* \#\# y between a1a1a1a and b2b2b2b**"
    )
    assert "binary: ``/w/`x`/llama-server`` llama.cpp `b2b2b2b` (from \\_o\\_) backend `<b>cpu</b>`" in text
    assert config_lines(run, True) == [f"CONFIGURATION CHANGED under tiny-simple-random (floor): {line}"]
    assert markdown_plain(text).splitlines()[2] == f"- **{config_lines(run, True)[0]}**"
