"""The front end's speculative-mode resolver: the seed's own cases, the recorded --help texts, real GGUFs.

The front end (Unsloth Studio, commit a5d6e6928d) tests its resolver through a backend object
whose probe is monkeypatched; here the same cases call the pure ``resolve`` with a ``ResolverCaps`` holding
the values that fake probe returned. Capabilities of real binaries come from ``tests/data/help/``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from fakellama import fake_llama
from fakeserver import HELP_DIR

from specsuite.common.errors import UserError
from specsuite.models.gguf import has_mtp_marker
from specsuite.server.probe import Capabilities, parse_commit, parse_help
from specsuite.server.resolver import (
    Resolution,
    ResolverCaps,
    auto_mode_drops_mtp,
    canonicalize_spec_mode,
    caps_from_probe,
    explain,
    extra_args_set_spec_type,
    extract_model_size_b,
    ngram_mod_flags,
    resolve,
    resolve_for_model,
)

# The seed's _resolver_backend probe: draft-mtp, new ngram-mod knobs, --spec-draft-n-max.
CAPS = ResolverCaps(
    found=True, mtp_token="draft-mtp", ngram_mod_flavor="new", spec_draft_n_max_flag="--spec-draft-n-max"
)
NO_MTP = ResolverCaps(
    found=True, mtp_token=None, ngram_mod_flavor="new", spec_draft_n_max_flag="--spec-draft-n-max"
)
NO_NGRAM = ResolverCaps(
    found=True, mtp_token="draft-mtp", ngram_mod_flavor=None, spec_draft_n_max_flag="--spec-draft-n-max"
)

MTP_MODEL = "unsloth/Qwen3.6-27B-MTP-GGUF"
NON_MTP_MODEL = "unsloth/Qwen3-7B-Instruct-GGUF"
SUB_3B_MTP_MODEL = "unsloth/Qwen3.5-0.8B-MTP-GGUF"
NEW_KNOBS = ["--spec-ngram-mod-n-match", "24", "--spec-ngram-mod-n-min", "48", "--spec-ngram-mod-n-max", "64"]
LEGACY_KNOBS = ["--spec-ngram-size-n", "24", "--draft-min", "48", "--draft-max", "64"]


def flags_dict(flags: tuple[str, ...]) -> dict[str, str | bool]:
    """{flag: value}, a bare flag (``--spec-default``) maps to True; as the seed's _flags_dict."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(flags):
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            out[flags[i]], i = flags[i + 1], i + 2
        else:
            out[flags[i]], i = True, i + 1
    return out


def run(
    mode: object, model: str = MTP_MODEL, *, gpu: bool = True, caps: ResolverCaps = CAPS, **kw
) -> Resolution:
    return resolve(mode, caps=caps, model_name=model, gpu=gpu, **kw)


# --- canonicalize_spec_mode (the seed's table) --------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("auto", "auto"),
        ("mtp", "mtp"),
        ("ngram", "ngram"),
        ("mtp+ngram", "mtp+ngram"),
        ("off", "off"),
        ("ngram-simple", "ngram-simple"),
        ("default", "auto"),
        ("draft-mtp", "mtp"),
        ("ngram-mod", "ngram"),
        ("ngram-mod,draft-mtp", "mtp+ngram"),
        ("draft-mtp,ngram-mod", "mtp+ngram"),
        ("draft-mtp,mtp", "mtp"),
        ("ngram-mod,ngram", "ngram"),
        (" AUTO ", "auto"),
        ("MTP", "mtp"),
        ("MTP+Ngram", "mtp+ngram"),
        (None, None),
        ("", None),
        (" ", None),
        (42, None),
        (True, None),
        ("bogus", "auto"),
    ],
)
def test_canonicalize_spec_mode(value, expected):
    assert canonicalize_spec_mode(value) == expected


# --- the resolver matrix (the seed's _build_speculative_flags matrix) ---------------------------------------


@pytest.mark.parametrize(
    "requested, gpu, model, expect_flag, expect_n_max, expect_knobs, expect_spec",
    [
        # auto + MTP model + 3B+: GPU = mtp only, CPU = chain
        ("auto", True, MTP_MODEL, "draft-mtp", "2", False, "draft-mtp"),
        ("auto", False, MTP_MODEL, "ngram-mod,draft-mtp", "3", True, "ngram-mod,draft-mtp"),
        # auto + non-MTP: --spec-default
        ("auto", True, NON_MTP_MODEL, None, None, False, "default"),
        ("auto", False, NON_MTP_MODEL, None, None, False, "default"),
        # auto + sub-3B MTP: ngram-mod
        ("auto", True, SUB_3B_MTP_MODEL, "ngram-mod", None, True, "ngram-mod"),
        ("auto", False, SUB_3B_MTP_MODEL, "ngram-mod", None, True, "ngram-mod"),
        # mtp forced: MTP only on both platforms, sub-3B engaged anyway, non-MTP defaults back
        ("mtp", True, MTP_MODEL, "draft-mtp", "2", False, "draft-mtp"),
        ("mtp", False, MTP_MODEL, "draft-mtp", "3", False, "draft-mtp"),
        ("mtp", True, SUB_3B_MTP_MODEL, "draft-mtp", "2", False, "draft-mtp"),
        ("mtp", True, NON_MTP_MODEL, None, None, False, "default"),
        # ngram forced: ngram-mod alone
        ("ngram", True, MTP_MODEL, "ngram-mod", None, True, "ngram-mod"),
        ("ngram", False, MTP_MODEL, "ngram-mod", None, True, "ngram-mod"),
        ("ngram", True, NON_MTP_MODEL, "ngram-mod", None, True, "ngram-mod"),
        # mtp+ngram forced: chain on both platforms; non-MTP keeps the ngram half
        ("mtp+ngram", True, MTP_MODEL, "ngram-mod,draft-mtp", "2", True, "ngram-mod,draft-mtp"),
        ("mtp+ngram", False, MTP_MODEL, "ngram-mod,draft-mtp", "3", True, "ngram-mod,draft-mtp"),
        ("mtp+ngram", True, SUB_3B_MTP_MODEL, "ngram-mod,draft-mtp", "2", True, "ngram-mod,draft-mtp"),
        ("mtp+ngram", True, NON_MTP_MODEL, "ngram-mod", None, True, "ngram-mod"),
        # off: nothing
        ("off", True, MTP_MODEL, None, None, False, None),
        ("off", False, MTP_MODEL, None, None, False, None),
        # legacy values
        ("default", True, MTP_MODEL, "draft-mtp", "2", False, "draft-mtp"),
        ("draft-mtp", True, MTP_MODEL, "draft-mtp", "2", False, "draft-mtp"),
        ("ngram-mod", True, MTP_MODEL, "ngram-mod", None, True, "ngram-mod"),
        ("ngram-mod,draft-mtp", False, MTP_MODEL, "ngram-mod,draft-mtp", "3", True, "ngram-mod,draft-mtp"),
        # ngram-simple: pass through
        ("ngram-simple", True, MTP_MODEL, "ngram-simple", None, False, "ngram-simple"),
    ],
)
def test_resolver_matrix(requested, gpu, model, expect_flag, expect_n_max, expect_knobs, expect_spec):
    res = run(requested, model, gpu=gpu)
    parsed = flags_dict(res.flags)
    assert parsed.get("--spec-type") == expect_flag
    assert parsed.get("--spec-draft-n-max") == expect_n_max
    for knob in ("--spec-ngram-mod-n-match", "--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max"):
        assert (knob in parsed) is expect_knobs
    assert ("--spec-default" in parsed) is (expect_spec == "default")
    assert res.spec_type == expect_spec
    assert res.fallback_reason is None


def test_exact_flags_of_the_shipped_configurations():
    assert run("auto").flags == ("--spec-type", "draft-mtp", "--spec-draft-n-max", "2")
    assert run("auto", gpu=False).flags == (
        "--spec-type",
        "ngram-mod,draft-mtp",
        "--spec-draft-n-max",
        "3",
        *NEW_KNOBS,
    )
    assert run("auto", SUB_3B_MTP_MODEL).flags == ("--spec-type", "ngram-mod", *NEW_KNOBS)
    assert run("auto", NON_MTP_MODEL).flags == ("--spec-default",)
    assert run("off").flags == ()


@pytest.mark.parametrize("mode", ["auto", "mtp", "ngram", "mtp+ngram", "off"])
def test_requested_mode_round_trips(mode):
    assert run(mode).requested_mode == mode


def test_unset_mode_is_auto():
    assert run(None).requested_mode == "auto"
    assert run(None).flags == run("auto").flags


def test_why_names_the_deciding_rule():
    assert (
        run("auto", "unsloth/Qwen3.5-4B-MTP-GGUF").why == "auto on a 4B MTP model on GPU: draft-mtp, n_max 2"
    )
    assert "below 3B" in run("auto", SUB_3B_MTP_MODEL).why
    assert "failed to measure MTP context memory" in run("mtp", NON_MTP_MODEL).why


# --- the user's extra args own --spec-type ------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra_args",
    [
        ["--spec-type", "none"],
        ["--spec-type", "ngram-mod"],
        ["--spec-type", "draft-mtp"],
        ["--spec-type=none"],
        ["--top-k", "20", "--spec-type", "ngram-simple", "--seed", "42"],
        ["--spec-default"],
    ],
)
def test_extra_args_set_spec_type_detects_user_override(extra_args):
    assert extra_args_set_spec_type(extra_args) is True
    res = run("mtp", extra_args=extra_args)  # would normally force MTP
    assert (res.flags, res.requested_mode, res.spec_type) == ((), None, None)


@pytest.mark.parametrize(
    "extra_args",
    [
        None,
        [],
        ["--spec-draft-n-max", "4"],
        ["--spec-ngram-mod-n-match", "32"],
        ["--draft-max", "32"],
        ["--top-k", "20", "--seed", "42"],
    ],
)
def test_extra_args_set_spec_type_passes_on_non_spec_type_args(extra_args):
    assert extra_args_set_spec_type(extra_args) is False
    assert run("mtp", extra_args=extra_args).flags == run("mtp").flags


# --- draft length, binary without MTP, forced modes on non-MTP models ---------------------------------------


def test_user_draft_n_max_override():
    assert flags_dict(run("mtp", spec_draft_n_max=5).flags)["--spec-draft-n-max"] == "5"
    assert flags_dict(run("auto", gpu=False, spec_draft_n_max=4).flags)["--spec-draft-n-max"] == "4"


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_bad_draft_n_max_is_a_user_error(bad):
    with pytest.raises(UserError, match=r"spec_draft_n_max must be a positive integer, got"):
        run("mtp", spec_draft_n_max=bad)


def test_mtp_token_missing_degrades_to_off():
    res = run("mtp", caps=NO_MTP)
    assert "--spec-type" not in res.flags and res.flags == ()
    assert (res.requested_mode, res.spec_type, res.fallback_reason) == ("mtp", None, "binary_no_mtp")


def test_forced_mtp_on_non_mtp_model_defaults_back():
    res = run("mtp", NON_MTP_MODEL)
    assert "--spec-type" not in res.flags and "--spec-default" in res.flags
    assert (res.spec_type, res.requested_mode) == ("default", "mtp")


def test_forced_mtp_ngram_on_non_mtp_model_keeps_ngram():
    res = run("mtp+ngram", NON_MTP_MODEL)
    assert flags_dict(res.flags)["--spec-type"] == "ngram-mod"
    assert (res.spec_type, res.requested_mode) == ("ngram-mod", "mtp+ngram")


def test_sub_3b_auto_without_ngram_mod_is_off():
    # The seed's reload mirror: 0.8B MTP + a binary without ngram-mod falls back to off.
    res = run("auto", SUB_3B_MTP_MODEL, caps=NO_NGRAM)
    assert (res.flags, res.spec_type, res.fallback_reason) == ((), None, None)


def test_cpu_chain_without_ngram_knobs_is_mtp_only():
    res = run("auto", gpu=False, caps=NO_NGRAM)
    assert res.flags == ("--spec-type", "draft-mtp", "--spec-draft-n-max", "3")
    assert res.spec_type == "draft-mtp" and "chain dropped" in res.why


# --- the real-repo matrix (Qwen3.5 MTP and plain, gemma-4 with its separate drafter) ------------------------

GEMMA_DRAFTER = "/snap/mtp-gemma-4-it.gguf"  # a stand-in path: resolve only puts it on the command line
REAL_REPO_MATRIX = [
    ("unsloth/Qwen3.5-0.8B-MTP-GGUF", None, "ngram-mod"),
    ("unsloth/Qwen3.5-2B-MTP-GGUF", None, "ngram-mod"),
    ("unsloth/Qwen3.5-4B-MTP-GGUF", None, "draft-mtp"),
    ("unsloth/Qwen3.5-9B-MTP-GGUF", None, "draft-mtp"),
    ("unsloth/Qwen3.5-27B-MTP-GGUF", None, "draft-mtp"),
    ("unsloth/Qwen3.5-35B-A3B-MTP-GGUF", None, "draft-mtp"),
    ("unsloth/Qwen3.5-122B-A10B-MTP-GGUF", None, "draft-mtp"),
    ("unsloth/Qwen3.5-397B-A17B-MTP-GGUF", None, "draft-mtp"),
    ("unsloth/Qwen3.5-0.8B-GGUF", None, None),
    ("unsloth/Qwen3.5-2B-GGUF", None, None),
    ("unsloth/Qwen3.5-4B-GGUF", None, None),
    ("unsloth/Qwen3.5-9B-GGUF", None, None),
    ("unsloth/gemma-4-E2B-it-GGUF", GEMMA_DRAFTER, "draft-mtp"),
    ("unsloth/gemma-4-E4B-it-GGUF", GEMMA_DRAFTER, "draft-mtp"),
    ("unsloth/gemma-4-12b-it-GGUF", GEMMA_DRAFTER, "draft-mtp"),
    ("unsloth/gemma-4-26B-A4B-it-GGUF", GEMMA_DRAFTER, "draft-mtp"),
    ("unsloth/gemma-4-31B-it-GGUF", GEMMA_DRAFTER, "draft-mtp"),
    ("unsloth/gemma-4-E2B-it-qat-GGUF", GEMMA_DRAFTER, "draft-mtp"),
    ("unsloth/gemma-4-E4B-it-qat-GGUF", GEMMA_DRAFTER, "draft-mtp"),
    ("unsloth/gemma-4-12b-it-qat-GGUF", GEMMA_DRAFTER, "draft-mtp"),
    ("unsloth/gemma-4-26B-A4B-it-qat-GGUF", GEMMA_DRAFTER, "draft-mtp"),
    ("unsloth/gemma-4-31B-it-qat-GGUF", GEMMA_DRAFTER, "draft-mtp"),
]
REPO_IDS = [r[0].split("/")[-1] for r in REAL_REPO_MATRIX]


@pytest.mark.parametrize("repo, drafter, auto_spec", REAL_REPO_MATRIX, ids=REPO_IDS)
def test_real_repo_auto_routing(repo, drafter, auto_spec):
    res = run("auto", repo, mtp_draft_path=drafter)  # GPU, the seed's B200 default
    parsed = flags_dict(res.flags)
    if auto_spec is None:
        assert "--spec-type" not in parsed and "--spec-default" in parsed
        assert res.spec_type == "default"
    elif auto_spec == "draft-mtp":
        assert parsed["--spec-type"] == "draft-mtp" and parsed["--spec-draft-n-max"] == "2"
        assert res.spec_type == "draft-mtp"
        assert parsed.get("--model-draft") == drafter if drafter else "--model-draft" not in parsed
    else:
        assert parsed["--spec-type"] == "ngram-mod" and "--model-draft" not in parsed
        assert "--spec-ngram-mod-n-match" in parsed and res.spec_type == "ngram-mod"
    assert res.requested_mode == "auto"


@pytest.mark.parametrize("repo, drafter", [r[:2] for r in REAL_REPO_MATRIX], ids=REPO_IDS)
def test_real_repo_off_emits_nothing(repo, drafter):
    res = run("off", repo, mtp_draft_path=drafter)
    assert (res.flags, res.spec_type, res.requested_mode) == ((), None, "off")


@pytest.mark.parametrize("repo, drafter", [r[:2] for r in REAL_REPO_MATRIX], ids=REPO_IDS)
def test_real_repo_forced_mtp_never_aborts(repo, drafter):
    res = run("mtp", repo, mtp_draft_path=drafter)
    parsed = flags_dict(res.flags)
    if has_mtp_marker(repo) or drafter:
        assert parsed["--spec-type"] == "draft-mtp" and res.spec_type == "draft-mtp"
        assert parsed.get("--model-draft") == drafter if drafter else "--model-draft" not in parsed
    else:
        assert "--spec-type" not in parsed and "--spec-default" in parsed
        assert res.spec_type == "default"
    assert res.requested_mode == "mtp"


# --- the sub-3B separate-drafter exemption ------------------------------------------------------------------


def test_sub3b_gemma_separate_drafter_engages_mtp():
    drafter = "/snap/mtp-gemma-4-E2B-it.gguf"
    res = run("auto", "unsloth/gemma-4-E2B-it-GGUF", mtp_draft_path=drafter)
    parsed = flags_dict(res.flags)
    assert parsed["--spec-type"] == "draft-mtp" and parsed["--model-draft"] == drafter
    assert "--spec-ngram-mod-n-match" not in parsed and res.spec_type == "draft-mtp"


def test_sub3b_qwen_embedded_head_still_drops_to_ngram():
    res = run("auto", "unsloth/Qwen3.5-2B-MTP-GGUF")
    parsed = flags_dict(res.flags)
    assert parsed["--spec-type"] == "ngram-mod" and "--model-draft" not in parsed
    assert res.spec_type == "ngram-mod"


def test_auto_mode_drops_mtp_exempts_separate_drafter():
    assert auto_mode_drops_mtp("auto", 2.0) is True
    assert auto_mode_drops_mtp("auto", 2.0, has_separate_drafter=True) is False
    assert auto_mode_drops_mtp("auto", 4.0) is False
    assert auto_mode_drops_mtp("mtp", 2.0) is False  # forced engages regardless
    assert auto_mode_drops_mtp("auto", 3.0) is False  # the threshold itself engages (A3B)
    assert auto_mode_drops_mtp("auto", None) is False  # no size in the name: no drop


@pytest.mark.parametrize(
    "name, size",
    [
        ("unsloth/gemma-4-E2B-it-GGUF", 2.0),
        ("unsloth/Qwen3.5-35B-A3B-MTP-GGUF", 3.0),
        ("unsloth/Qwen3.5-122B-A10B-MTP-GGUF", 10.0),
        ("unsloth/Qwen3.5-397B-A17B-MTP-GGUF", 17.0),
        ("unsloth/gemma-4-26B-A4B-it-GGUF", 4.0),
        ("unsloth/Qwen3.5-0.8B-MTP-GGUF", 0.8),
        ("unsloth/Qwen3.6-27B-MTP-GGUF", 27.0),
        ("Qwen3-4B-Q4_K_M.gguf", 4.0),
        ("Qwen3-4B.gguf", 4.0),
        ("gemma-3-270m-q4_k_m.gguf", 0.27),
        ("unsloth/Llama-3.1-8B-Instruct-GGUF", 8.0),
        ("hypothetical-30B-E4B-A2B", 2.0),  # active > effective > total
        ("hypothetical-30B-E4B", 4.0),  # effective > total
        ("mystery-model-q4_k_m.gguf", None),
        ("", None),
    ],
)
def test_extract_model_size_b(name, size):
    assert extract_model_size_b(name) == size


# --- fallback reasons ---------------------------------------------------------------------------------------


def test_fallback_reason_set_when_binary_lacks_mtp():
    assert run("mtp", caps=NO_MTP).fallback_reason == "binary_no_mtp"
    assert run("mtp+ngram", caps=NO_MTP).fallback_reason == "binary_no_mtp"
    assert run("auto", caps=NO_MTP).fallback_reason == "binary_no_mtp"  # auto on an MTP model asks for MTP


def test_fallback_reason_none_when_mtp_engages_or_is_not_asked_for():
    res = run("auto")
    assert (res.spec_type, res.fallback_reason) == ("draft-mtp", None)
    assert run("auto", NON_MTP_MODEL, caps=NO_MTP).fallback_reason is None
    assert run("ngram", caps=NO_MTP).fallback_reason is None


def test_fallback_reason_cleared_by_a_later_off():
    # The seed resets the reason on every load; a pure resolver carries nothing from the last call.
    assert run("mtp", caps=NO_MTP).fallback_reason == "binary_no_mtp"
    assert run("off", caps=NO_MTP).fallback_reason is None


# --- ngram-mod knob flavours --------------------------------------------------------------------------------


def test_ngram_mod_flags_new():
    assert ngram_mod_flags("new") == NEW_KNOBS


def test_ngram_mod_flags_legacy():
    assert ngram_mod_flags("legacy") == LEGACY_KNOBS


def test_ngram_mod_flags_empty_when_unsupported():
    assert ngram_mod_flags(None) == []
    assert ngram_mod_flags("") == []


def test_ngram_mod_flags_respects_custom_values():
    assert ngram_mod_flags("new", n_match=16, n_min=24, n_max=32) == [
        "--spec-ngram-mod-n-match",
        "16",
        "--spec-ngram-mod-n-min",
        "24",
        "--spec-ngram-mod-n-max",
        "32",
    ]


# --- caps_from_probe on recorded --help texts ---------------------------------------------------------------


def recorded_caps(variant: str, help_text: str | None = None) -> Capabilities:
    """Capabilities as probe() builds them, from a recorded (or derived) help text and --version."""
    text = help_text if help_text is not None else (HELP_DIR / f"{variant}.txt").read_text()
    options, removed, types = parse_help(text)
    version = (HELP_DIR / f"{variant}.version").read_text().strip()
    return Capabilities(f"recorded/{variant}", version, parse_commit(version), types, options, removed)


def without_ngram_mod_knobs(help_text: str) -> str:
    """The help text with the --spec-ngram-mod-* entries (and their continuation lines) removed."""
    out, dropping = [], False
    for line in help_text.splitlines(keepends=True):
        if not line.startswith(" "):
            dropping = line.startswith("--spec-ngram-mod-")
        if not dropping:
            out.append(line)
    return "".join(out)


@pytest.mark.parametrize(
    "variant, expected",
    [
        ("current", ResolverCaps(True, "draft-mtp", "new", "--spec-draft-n-max")),
        ("post-rename", ResolverCaps(True, "draft-mtp", "new", "--spec-draft-n-max")),
        ("legacy", ResolverCaps(True, "mtp", "new", "--draft-max")),
        ("removal-stubs", ResolverCaps(True, "draft-mtp", "new", "--spec-draft-n-max")),
        ("minimal", ResolverCaps(True, None, None, None)),
    ],
)
def test_caps_from_recorded_help(variant, expected):
    assert caps_from_probe(recorded_caps(variant)) == expected


def test_caps_without_a_binary():
    assert caps_from_probe(None) == ResolverCaps(False, None, None, None)
    res = run("mtp", caps=caps_from_probe(None))
    assert (res.flags, res.fallback_reason) == ((), "binary_no_mtp")


def test_removal_stubs_never_read_as_the_legacy_flavour():
    # current.txt lists --spec-ngram-size-n, --draft-min and --draft-max as "has been removed" stubs; with
    # the live --spec-ngram-mod-* knobs taken out nothing usable is left.
    text = without_ngram_mod_knobs((HELP_DIR / "current.txt").read_text())
    caps = recorded_caps("current", text)
    assert {"--spec-ngram-size-n", "--draft-max"} <= caps.removed
    assert caps_from_probe(caps).ngram_mod_flavor is None


def test_legacy_flavour_from_a_pre_rename_layout():
    # legacy.txt without the --spec-ngram-mod-* knobs, plus the seed's own --spec-ngram-size-n line.
    text = without_ngram_mod_knobs((HELP_DIR / "legacy.txt").read_text())
    text += "--spec-ngram-size-n N                   ngram lookup length (default: 24)\n"
    assert caps_from_probe(recorded_caps("legacy", text)) == ResolverCaps(
        True, "mtp", "legacy", "--draft-max"
    )


# The seed's own help fixtures (one line per option, not the column layout).
SEED_POST_RENAME_HELP = """\
--spec-draft-n-max N number of tokens to draft for speculative decoding (default: 16)
--spec-ngram-mod-n-min N minimum number of ngram tokens (default: 48)
--spec-ngram-mod-n-max N maximum number of ngram tokens (default: 64)
--spec-ngram-mod-n-match N ngram-mod lookup length (default: 24)
--spec-type none,draft-simple,draft-mtp,ngram-mod comma-separated list of types of speculative decoding to use
"""
SEED_LEGACY_HELP = """\
--draft, --draft-n, --draft-max N number of tokens to draft for speculative decoding (default: 8)
--draft-min, --draft-n-min N minimum number of draft tokens to use for speculative decoding (default: 0)
--spec-ngram-size-n N ngram lookup length (default: 24)
--spec-type none,ngram-mod,ngram-simple comma-separated list of types of speculative decoding to use
"""


@pytest.mark.parametrize(
    "help_text, expected",
    [
        (SEED_POST_RENAME_HELP, ResolverCaps(True, "draft-mtp", "new", "--spec-draft-n-max")),
        (SEED_LEGACY_HELP, ResolverCaps(True, None, "legacy", "--draft-max")),
        ("--spec-type none\n--threads N\n", ResolverCaps(True, None, None, None)),
    ],
    ids=["post-rename", "legacy", "minimal"],
)
def test_caps_from_the_seeds_help_fixtures(help_text, expected):
    assert caps_from_probe(recorded_caps("current", help_text)) == expected


def test_legacy_binary_gets_its_own_token_and_spelling():
    caps = caps_from_probe(recorded_caps("legacy"))
    assert run("auto", caps=caps).flags == ("--spec-type", "mtp", "--draft-max", "2")
    assert run("auto", gpu=False, caps=caps).flags[:4] == ("--spec-type", "ngram-mod,mtp", "--draft-max", "3")


def test_legacy_knobs_repeat_draft_max_and_why_says_so():
    # The seed's legacy knob set reuses --draft-max, which a legacy binary also spells n_max with.
    caps = ResolverCaps(True, "mtp", "legacy", "--draft-max")
    res = run("auto", gpu=False, caps=caps)
    assert res.flags == ("--spec-type", "ngram-mod,mtp", "--draft-max", "3", *LEGACY_KNOBS)
    assert "keeps the last, 64" in res.why


# --- explain -----------------------------------------------------------------------------------------------


def test_describe_quotes_flags_and_says_why():
    drafter = "/models/my drafts/mtp-gemma-4-E2B-it.gguf"
    res = run("auto", "unsloth/gemma-4-E2B-it-GGUF", mtp_draft_path=drafter)
    text = explain(res)
    flags_line = next(line for line in text.splitlines() if line.startswith("flags: "))
    assert shlex.split(flags_line.removeprefix("flags: ")) == list(res.flags)
    assert shlex.quote(drafter) in flags_line
    assert f"why: {res.why}" in text.splitlines()
    assert "fallback" not in text


def test_describe_names_fallback_and_empty_flags():
    text = explain(run("mtp", caps=NO_MTP))
    assert "flags: (none)" in text.splitlines()
    assert "fallback: binary_no_mtp" in text.splitlines()


# --- resolve_for_model on real GGUF files -------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))  # read_info caches metadata there


def write_gguf(path: Path, nextn: int | None) -> Path:
    """A real, tiny GGUF (one 4x8 tensor), with or without ``qwen35.nextn_predict_layers``."""
    writer = gguf.GGUFWriter(path, "qwen35")
    writer.add_uint32("qwen35.block_count", 1)
    if nextn is not None:
        writer.add_uint32("qwen35.nextn_predict_layers", nextn)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_resolve_for_model_reads_mtp_heads_from_metadata(tmp_path):
    # No -MTP marker in either name: only the GGUF key tells them apart.
    heads = write_gguf(tmp_path / "Qwen3.5-4B-Q4_K_M.gguf", nextn=1)
    (tmp_path / "plain").mkdir()
    plain = write_gguf(tmp_path / "plain" / "Qwen3.5-4B-Q4_K_M.gguf", nextn=None)
    res = resolve_for_model("auto", caps=CAPS, model_path=heads, gpu=True)
    assert (res.flags, res.spec_type) == (
        ("--spec-type", "draft-mtp", "--spec-draft-n-max", "2"),
        "draft-mtp",
    )
    res = resolve_for_model("auto", caps=CAPS, model_path=plain, gpu=True)
    assert (res.flags, res.spec_type) == (("--spec-default",), "default")


def test_resolve_for_model_uses_the_file_name_for_size_and_marker(tmp_path):
    small = write_gguf(tmp_path / "Qwen3.5-0.8B-Q4_K_M.gguf", nextn=1)
    assert resolve_for_model("auto", caps=CAPS, model_path=small, gpu=True).spec_type == "ngram-mod"
    marked = write_gguf(tmp_path / "Qwen3.5-9B-MTP-Q4_K_M.gguf", nextn=None)
    assert resolve_for_model("mtp", caps=CAPS, model_path=marked, gpu=False).spec_type == "draft-mtp"


def test_resolve_for_model_with_a_separate_drafter(tmp_path):
    target = write_gguf(tmp_path / "gemma-4-E2B-it-Q4_K_M.gguf", nextn=None)
    drafter = write_gguf(tmp_path / "mtp-gemma-4-E2B-it.gguf", nextn=None)
    res = resolve_for_model("auto", caps=CAPS, model_path=target, gpu=True, mtp_draft_path=drafter)
    assert flags_dict(res.flags)["--model-draft"] == str(drafter) and res.spec_type == "draft-mtp"


def test_resolve_for_model_missing_files(tmp_path):
    with pytest.raises(UserError, match="model file not found"):
        resolve_for_model("auto", caps=CAPS, model_path=tmp_path / "absent.gguf", gpu=True)
    target = write_gguf(tmp_path / "Qwen3.5-4B-Q4_K_M.gguf", nextn=1)
    with pytest.raises(UserError, match=r"MTP drafter not found: .*mtp-absent\.gguf"):
        resolve_for_model(
            "auto", caps=CAPS, model_path=target, gpu=True, mtp_draft_path=tmp_path / "mtp-absent.gguf"
        )


# --- the `specsuite resolve` command, on a fake binary and real GGUF files -------------------------------


def resolve_cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "specsuite", "resolve", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=os.environ.copy())


@pytest.mark.parametrize(
    ("device", "flags"),
    [
        ("gpu", "--spec-type draft-mtp --spec-draft-n-max 2"),
        ("cpu", "--spec-type ngram-mod,draft-mtp --spec-draft-n-max 3"),
    ],
)
def test_resolve_command_prints_the_flags_and_why(tmp_path, device, flags):
    exe = fake_llama(tmp_path / "bin")
    model = write_gguf(tmp_path / "Qwen3.5-4B-Q4_K_M.gguf", nextn=1)
    proc = resolve_cli("--model", str(model), "--device", device, "--binary", str(exe))
    assert proc.returncode == 0, proc.stderr
    assert f"device: {device}" in proc.stdout and flags in proc.stdout
    assert "MTP" in proc.stdout  # the deciding rule is named


def test_resolve_command_device_defaults_to_what_the_binary_sees(tmp_path):
    exe = fake_llama(tmp_path / "bin")  # a CPU build that lists no GPU
    model = write_gguf(tmp_path / "Qwen3.5-4B-Q4_K_M.gguf", nextn=1)
    proc = resolve_cli("--model", str(model), "--mode", "off", "--binary", str(exe))
    assert proc.returncode == 0, proc.stderr
    assert "device: cpu" in proc.stdout and "--spec-type" not in proc.stdout


def test_resolve_command_on_a_missing_model_is_one_line(tmp_path):
    exe = fake_llama(tmp_path / "bin")
    proc = resolve_cli("--model", str(tmp_path / "absent.gguf"), "--binary", str(exe))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "model file not found" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "lines"),
    [
        # the user's draft length replaces the platform default
        (["--mode", "mtp", "--spec-draft-n-max", "5"], ["flags: --spec-type draft-mtp --spec-draft-n-max 5"]),
        # a --spec-type in the extra args owns speculation: nothing is emitted ("=" form: a value with "--")
        (
            ["--extra-args=--spec-type ngram-mod --seed 7"],
            ["speculative mode: (set by the extra args) -> none", "flags: (none)"],
        ),
        (["--extra-args=--spec-default"], ["flags: (none)"]),
        # tuning knobs in the extra args compose with the resolver's own flags
        (["--extra-args=--spec-draft-n-max 4"], ["flags: --spec-type draft-mtp --spec-draft-n-max 2"]),
        # the identifier decides size and marker: a 0.8B MTP repo drops to ngram-mod under auto
        (
            ["--model-id", "unsloth/Qwen3.5-0.8B-MTP-GGUF"],
            [
                "speculative mode: auto -> ngram-mod",
                "flags: --spec-type ngram-mod --spec-ngram-mod-n-match 24",
            ],
        ),
    ],
)
def test_resolve_command_takes_the_front_ends_other_inputs(tmp_path, args, lines):
    exe = fake_llama(tmp_path / "bin")
    model = write_gguf(tmp_path / "Qwen3.5-4B-Q4_K_M.gguf", nextn=1)
    proc = resolve_cli("--model", str(model), "--device", "gpu", "--binary", str(exe), *args)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert all(any(ln.startswith(line) for ln in out) for line in lines), proc.stdout


@pytest.mark.parametrize("bad", [["--spec-draft-n-max", "0"], ["--extra-args=--seed 'open"]])
def test_resolve_command_refuses_bad_inputs_in_one_line(tmp_path, bad):
    exe = fake_llama(tmp_path / "bin")
    model = write_gguf(tmp_path / "Qwen3.5-4B-Q4_K_M.gguf", nextn=1)
    proc = resolve_cli("--model", str(model), "--binary", str(exe), *bad)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert ("--spec-draft-n-max" if "0" in bad else "--extra-args") in proc.stderr.strip().splitlines()[-1]
