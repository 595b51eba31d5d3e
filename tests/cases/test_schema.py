"""cases.toml parsing, validation and selection (the real file and small hand-written ones)."""

from __future__ import annotations

import pytest
from casetext import HEAD

from specsuite.cases.schema import TIERS, load_cases, parse_case_file, parse_cases, select_cases
from specsuite.common import paths
from specsuite.common.errors import UserError

BASE = (
    HEAD
    + """[[case]]
name = "a"
tier = "smoke"
spec_type = "ngram-mod"
target = "t.gguf"
n_max = 3
min_accept_rate = 0.5
min_accept_len = 1.5
"""
)


def _one(extra: str = "", base: str = BASE):
    return parse_cases(base + extra)


def test_real_cases_file_loads_and_has_every_tier() -> None:
    cases = load_cases(paths.CASES_FILE)
    tiers = {c.tier for c in cases}
    assert {"smoke", "compact", "nightly"} <= tiers
    mtp = next(c for c in cases if c.name == "mtp")
    assert (mtp.spec_type, mtp.n_max, mtp.min_accept_rate, mtp.min_accept_len) == (
        ("draft-mtp",),
        3,
        0.6855,
        2.923,
    )
    assert mtp.models == ["Qwen3.5-4B-MTP-Q4_K_M.gguf"]


def test_real_cases_file_names_only_locked_models() -> None:
    if not paths.MODELS_LOCK.is_file():
        pytest.skip("models.lock not written yet")
    from specsuite.models.lock import load_lock

    load_cases(lock_names=load_lock().names())  # raises on any unknown model name


def test_models_lists_target_then_draft_once() -> None:
    (c,) = _one('draft = "d.gguf"\n')
    assert c.models == ["t.gguf", "d.gguf"]
    (c,) = _one('draft = "t.gguf"\n')  # draft-simple drafting for itself
    assert c.models == ["t.gguf"]


def test_full_vocabulary_parses() -> None:
    (c,) = _one(
        'n_min = 1\np_min = 0.5\nsynth_rates = [1.0, 0.5, 0]\nserver_args = ["--x", "1"]\nn_predict = 32\n'
        'prompts = "synthetic"\nexpect_accepted = 0\nexpect_all_accepted = true\nexpect_accept_len = 2.5\n'
        "accept_len_tolerance = 0.25\nexpect_full_positions = true\nexpect_draft_len = 3\n"
        'expect_log = ["clamping"]\nmin_identical_fraction = 1.0\ngpus = 2\n'
        '[case.calibration]\ndate = "2026-11-30"\nruns = 3\n'
    )
    assert c.synth_rates == (1.0, 0.5, 0.0)
    assert c.server_args == ("--x", "1")
    assert c.calibration == {"date": "2026-11-30", "runs": 3}
    assert (c.n_predict, c.prompts, c.expect_draft_len, c.gpus) == (32, "synthetic", 3, 2)
    assert _one("")[0].gpus == 1  # one GPU unless the case says more


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("colour = 1\n", "unknown key(s) colour"),
        ("n_predict = true\n", "n_predict must be an integer >= 1, got True"),
        ("synth_rates = [0.5, 1.0, 0.5]\n", "non-increasing"),
        ("synth_rates = [0.0, 0.0, 0.0]\nsynth_len = 2.0\n", "mutually exclusive"),
        ("expect_accept_len = 2.0\n", "go together"),
        ("min_identical_fraction = 1.5\n", "min_identical_fraction must be a number in [0, 1], got 1.5"),
        ('prompts = "poems"\n', "prompts 'poems'"),
        ("gpus = 0\n", "gpus must be a whole number from 1 to 64, got 0"),
    ],
)
def test_bad_case_is_one_clear_error(extra: str, needle: str) -> None:
    with pytest.raises(UserError, match=r"^cases\.toml: \[\[case\]\] 'a': ") as exc:
        _one(extra)
    assert needle in str(exc.value)


def test_rate_floor_outside_unit_interval() -> None:
    with pytest.raises(UserError, match=r"min_accept_rate must be a number in \[0, 1\], got 1.2$"):
        parse_cases(BASE.replace("min_accept_rate = 0.5", "min_accept_rate = 1.2"))


def test_missing_floor_and_unknown_spec_type() -> None:
    with pytest.raises(UserError, match="missing floor 'min_accept_len'"):
        parse_cases(BASE.replace("min_accept_len = 1.5\n", ""))
    parse_cases(BASE.replace("min_accept_len = 1.5\n", "expect_no_drafts = true\n"))  # allowed there
    with pytest.raises(UserError, match=r"spec_type must be one of draft-simple, .*, detect, got 'mtp'$"):
        parse_cases(BASE.replace('"ngram-mod"', '"mtp"'))


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            ('spec_type = "ngram-mod"', 'spec_type = "ngram-mod"\nmode = "auto"'),
            "exactly one of spec_type, mode",
        ),
        (('spec_type = "ngram-mod"', ""), "exactly one of spec_type, mode, spec_default (got none)"),
        (
            ('spec_type = "ngram-mod"', 'mode = "turbo"'),
            "mode must be one of auto, mtp, ngram, mtp+ngram, off, got 'turbo'",
        ),
        (('spec_type = "ngram-mod"', 'spec_type = ["ngram-mod", "detect"]'), "cannot be part of a chain"),
        (('spec_type = "ngram-mod"', 'spec_type = ["ngram-mod", "ngram-mod"]'), "names a type twice"),
        (("n_max = 3\n", ""), "missing n_max"),
        (
            ("min_accept_len = 1.5", "min_accept_len = 1.5\nmin_speedup = 0"),
            "min_speedup must be a number > 0, got 0",
        ),
    ],
)
def test_method_keys(change, needle) -> None:
    with pytest.raises(UserError) as exc:
        parse_cases(BASE.replace(*change))
    assert needle in str(exc.value)


def test_chain_mode_spec_default_and_uncalibrated_parse() -> None:
    chain = parse_cases(BASE.replace('"ngram-mod"', '["ngram-mod", "draft-mtp"]'))[0]
    assert chain.spec_type == ("ngram-mod", "draft-mtp") and chain.method == "ngram-mod,draft-mtp"
    no_floors = BASE.replace("min_accept_rate = 0.5\nmin_accept_len = 1.5\n", "uncalibrated = true\n")
    mode = parse_cases(
        no_floors.replace('spec_type = "ngram-mod"\n', 'mode = "auto"\n').replace("n_max = 3\n", "")
    )[0]
    assert (mode.mode, mode.n_max, mode.method, mode.uncalibrated) == ("auto", None, "mode=auto", True)
    default = parse_cases(no_floors.replace('spec_type = "ngram-mod"\n', "spec_default = true\n"))[0]
    assert default.spec_default and default.method == "spec-default"


def test_seed_prompts_are_upstreams_byte_for_byte() -> None:
    """The compact and nightly floors were measured on these texts (upstream test_spec_methods.py PROMPTS)."""
    upstream = [
        "Write a Python function that returns the n-th Fibonacci number using memoization.\n\n```python\n",
        "The three main differences between TCP and UDP are:\n1.",
        "Question: What is the capital of France, and what river flows through it?\nAnswer:",
    ]
    cases = load_cases(paths.CASES_FILE)
    for tier in ("compact", "nightly", "smoke"):
        for case in select_cases(cases, tier):
            if case.prompts == "seed":
                assert [text for _, text in case.prompt_texts] == upstream, case.name
    assert all(c.prompts == "seed" for c in select_cases(cases, "all"))
    seed = parse_case_file(paths.CASES_FILE.read_text()).prompt_sets["seed"]
    assert [text.encode() for _, text in seed] == [u.encode() for u in upstream]


def test_prompt_set_errors() -> None:
    with pytest.raises(UserError, match=r"^cases\.toml: \[\[prompt_set\]\] 'x': missing key `prompts`$"):
        parse_cases('version = 1\n[[prompt_set]]\nname = "x"\n')
    with pytest.raises(UserError, match=r"\[\[prompt_set\]\] 'x': duplicate prompt id\(s\) 'a'$"):
        parse_cases(
            'version = 1\n[[prompt_set]]\nname = "x"\n'
            'prompts = [{ id = "a", text = "1" }, { id = "a", text = "2" }]\n'
        )


def test_unknown_model_name_against_lock() -> None:
    with pytest.raises(UserError, match=r"model 't\.gguf' is not in models\.lock"):
        parse_cases(BASE, lock_names={"other.gguf"})
    assert parse_cases(BASE, lock_names={"t.gguf"})


def test_duplicate_names_version_and_toml_errors() -> None:
    with pytest.raises(UserError, match="duplicate case name"):
        parse_cases(BASE + BASE.split("[[case]]", 1)[1].join(["[[case]]", ""]))
    with pytest.raises(UserError, match="`version = 1` is required"):
        parse_cases(BASE.replace("version = 1", "version = 2"))
    with pytest.raises(UserError, match="not valid TOML at line 2"):
        parse_cases("version = 1\n[[case]\n")
    with pytest.raises(UserError, match=r'^cases\.toml: not valid TOML: Key "n_max" already exists\.$'):
        parse_cases(BASE + "n_max = 4\n")
    with pytest.raises(UserError, match="cannot read cases file"):
        load_cases("/nonexistent/cases.toml")


def test_select_by_tier_names_and_all() -> None:
    cases = load_cases(paths.CASES_FILE)
    assert select_cases(cases, "") == []
    compact = [c.name for c in select_cases(cases, "compact")]
    assert compact == ["mtp", "dflash", "dspark", "eagle3", "mtp-n2", "auto-qwen35-4b-mtp", "auto-qwen3-4b"]
    every = [c.name for c in select_cases(cases, "all")]
    assert every == [*compact, "dflash2", "lilicorr"]
    assert [c.name for c in select_cases(cases, "eagle3, mtp")] == ["eagle3", "mtp"]
    assert all(c.tier == "smoke" for c in select_cases(cases, "smoke"))
    assert "all" in TIERS


def test_select_unknown_lists_valid_names() -> None:
    cases = load_cases(paths.CASES_FILE)
    with pytest.raises(UserError) as exc:
        select_cases(cases, "mtp,medusa")
    msg = str(exc.value)
    assert "'medusa'" in msg and "valid tiers: smoke, synthetic, compact, nightly, all" in msg
    assert "mtp" in msg and "ngram-mod" in msg
