"""Like for like: the speculation-off baseline of a case runs the case's own command minus its speculative
flags (suite.baseline, command.split_speculative); what a speculative flag is comes from the binary's own
--help entries (probe.parse_speculative, serverflags.speculative_option)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from testdata import DATA_ROOT

from specsuite.cases.schema import GPU_TIERS, Case, load_cases
from specsuite.common.serverflags import FLAG_SPELLINGS, NGRAM_N_MAX, NGRAM_N_MIN, speculative_option
from specsuite.measure.argv import server_command
from specsuite.measure.plain import off_flags, plain_of, split_speculative, without_speculation
from specsuite.server.probe import Capabilities, parse_help, parse_speculative
from specsuite.server.resolver import caps_from_probe, resolve

HELP = (DATA_ROOT / "help" / "current.txt").read_text()
H100 = ("CUDA0: NVIDIA H100 80GB HBM3 (81007 MiB, 80468 MiB free)",)


def _caps(backend: str = "cpu", help_text: str = HELP) -> Capabilities:
    options, removed, types = parse_help(help_text)
    speculative, switches = parse_speculative(help_text)
    devices = H100 if backend != "cpu" else ()
    return Capabilities("/b/llama-server", "version: x", "0c1e570", types, options, removed, backend, devices,
                        speculative=speculative, spec_switches=switches)  # fmt: skip


def _resolved(caps: Capabilities, case: Case) -> tuple[str, ...] | None:
    """A mode case's flags as the resolver gives them (its model's MTP heads guessed from the file name)."""
    if not case.mode:
        return None
    return resolve(
        case.mode,
        caps=caps_from_probe(caps),
        model_name=case.model_id or case.target,
        nextn_predict_layers=1 if "-mtp" in case.target else 0,
        gpu=case.gpu,
        mtp_draft_path=f"/m/{case.draft}" if case.draft else None,
        spec_draft_n_max=case.n_max,
        extra_args=list(case.server_args),
    ).flags


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and not arg[1:2].isdigit()


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c.name)
def test_every_case_of_every_tier_differs_from_its_baseline_only_by_speculative_flags(case: Case) -> None:
    """For each case of cases.toml (every tier, on the build its tier runs on): the baseline's argv is the
    case's with tokens removed, in order; every removed token is a speculative flag or the value right after
    one; no speculative flag is left; every non-speculative flag of the case (server_args: --threads 1)
    is there with its value."""
    caps = _caps("cuda" if case.tier in GPU_TIERS else "cpu")
    draft = Path(f"/m/{case.draft}") if case.draft else None
    command = lambda port: server_command(caps, Path(f"/m/{case.target}"), port, case, draft,  # noqa: E731
                                          _resolved(caps, case))  # fmt: skip
    base = plain_of(caps, command, Path(case.target), case.gpus)
    spec_argv, base_argv = command(8111), base.command(8111)
    off = off_flags(caps)  # the build's word for no speculation, last: then the case's own argv, less
    assert off == ["--spec-type", "none"] and base_argv[-len(off) :] == off
    base_argv = base_argv[: -len(off)]
    assert spec_argv != base_argv or case.mode == "off"
    removed, j = [], 0  # the case's tokens the baseline lacks, matched greedily in order
    for i, arg in enumerate(spec_argv):
        if j < len(base_argv) and base_argv[j] == arg:
            j += 1
        else:
            removed.append(i)
    assert j == len(base_argv), f"the baseline is not the case's command with tokens removed: {base_argv}"
    for i in removed:
        arg = spec_argv[i]
        after_spec_flag = i > 0 and i - 1 in removed and caps.is_speculative(spec_argv[i - 1])
        assert caps.is_speculative(arg) if _is_flag(arg) else after_spec_flag, (arg, spec_argv)
    assert not [a for a in base_argv if _is_flag(a) and caps.is_speculative(a)]
    for k, arg in enumerate(case.server_args):
        if _is_flag(arg) and not caps.is_speculative(arg):
            at = base_argv.index(arg)
            if k + 1 < len(case.server_args) and not _is_flag(case.server_args[k + 1]):
                assert base_argv[at + 1] == case.server_args[k + 1]


def test_the_synthetic_tier_baselines_run_on_one_thread_as_their_cases() -> None:
    """The issue's measurement: the baseline ran llama.cpp's default thread count next to a --threads 1
    case (a speedup of 2150)."""
    caps = _caps()
    for case in (c for c in load_cases() if c.tier == "synthetic"):
        command = lambda port, c=case: server_command(caps, Path("/m/t.gguf"), port, c, None, ())  # noqa: E731
        base = plain_of(caps, command, Path("t.gguf")).argv
        assert base[base.index("--threads") + 1] == "1", case.name


def test_split_keeps_order_values_switches_and_equals_forms() -> None:
    caps = _caps()
    argv = ["/b", "--threads", "2", "-td", "1", "--spec-default", "-c", "64", "--spec-draft-ngl", "-1",
            "--spec-draft-cpu-moe", "--spec-type=draft-mtp", "-md", "d.gguf", "--flash-attn", "on",
            "--no-spec-draft-backend-sampling", "--port", "1"]  # fmt: skip
    rest, spec = split_speculative(caps, argv)
    assert rest == ["/b", "--threads", "2", "-c", "64", "--flash-attn", "on", "--port", "1"]
    assert spec == ["-td", "1", "--spec-default", "--spec-draft-ngl", "-1", "--spec-draft-cpu-moe",
                    "--spec-type=draft-mtp", "-md", "d.gguf", "--no-spec-draft-backend-sampling"]  # fmt: skip


def test_a_flag_the_help_does_not_list_is_judged_by_its_spelling_and_what_follows() -> None:
    caps = _caps()
    off = ["--spec-type", "none"]
    assert without_speculation(caps, ["/b", "--spec-new-knob", "3", "-c", "8"]) == ["/b", "-c", "8", *off]
    assert without_speculation(caps, ["/b", "--spec-new-switch", "-c", "8"]) == ["/b", "-c", "8", *off]
    assert without_speculation(caps, ["/b", "--draft-thing", "x"]) == ["/b", *off]
    bare = Capabilities("/b", "v", None, frozenset())  # probed without entries (a cached older probe)
    assert without_speculation(bare, ["/b", "-td", "2", "-t", "2"]) == ["/b", "-td", "2", "-t", "2"]
    assert without_speculation(_caps(), ["/b", "-td", "2", "-t", "2"]) == ["/b", "-t", "2", *off]


def test_the_plain_server_is_told_not_to_speculate_in_the_builds_own_words() -> None:
    """--spec-type none where the build lists it; --no-spec-type where its help has one (upstream's #28391:
    --spec-type adds to a speculating default there); nothing where it has neither (an old build)."""
    caps = _caps()
    assert off_flags(caps) == ["--spec-type", "none"]
    additive = dataclasses.replace(caps, options=caps.options | {"--no-spec-type"})
    assert off_flags(additive) == ["--no-spec-type"]
    assert off_flags(dataclasses.replace(caps, spec_types=caps.spec_types - {"none"})) == []
    assert off_flags(Capabilities("/b", "v", None, frozenset())) == []


@pytest.mark.parametrize("name", ["current", "legacy", "post-rename", "removal-stubs"])
def test_speculative_options_come_from_the_binarys_own_entries(name: str) -> None:
    """A legacy short spelling is speculative because its --help entry names speculation beside it; the
    harness's own speculative flags are all speculative by that one definition; nothing else is."""
    help_text = (DATA_ROOT / "help" / f"{name}.txt").read_text()
    speculative, switches = parse_speculative(help_text)
    options, removed, _ = parse_help(help_text)
    assert {"-md", "-td", "-ctkd", "--spec-type"} <= speculative and switches <= speculative
    assert {"--spec-default", "--spec-draft-cpu-moe"} <= switches and "--spec-type" not in switches
    plain = {"--threads", "-t", "--ctx-size", "-c", "-ngl", "--cache-type-k", "-ctk", "--poll",
             "--batch-size", "-ub", "--flash-attn", "--lookup-cache-static"}  # fmt: skip
    assert not speculative & plain
    assert speculative <= options | removed
    spec_names = {"spec_type", "draft_model", "draft_n_max", "draft_n_min", "draft_p_min", "draft_ngl",
                  "synth_len", "synth_rates", "spec_default"}  # fmt: skip
    for canonical, spellings in FLAG_SPELLINGS.items():
        assert speculative_option(spellings) == (canonical in spec_names), canonical
    assert all(speculative_option((f,)) for f in (*NGRAM_N_MAX.values(), *NGRAM_N_MIN.values()))
