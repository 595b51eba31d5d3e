"""cases.toml parsing, validation and selection (the real file and small hand-written ones)."""

from __future__ import annotations

import pytest

from specsuite import paths
from specsuite.cases import TIERS, load_cases, parse_cases, select_cases
from specsuite.errors import UserError

BASE = """version = 1
[[case]]
name = "a"
tier = "smoke"
spec_type = "ngram-mod"
target = "t.gguf"
n_max = 3
min_accept_rate = 0.5
min_accept_len = 1.5
"""


def _one(extra: str = "", base: str = BASE):
    return parse_cases(base + extra)


def test_real_cases_file_loads_and_has_every_tier() -> None:
    cases = load_cases(paths.CASES_FILE)
    tiers = {c.tier for c in cases}
    assert {"smoke", "compact", "nightly"} <= tiers
    mtp = next(c for c in cases if c.name == "mtp")
    assert (mtp.spec_type, mtp.n_max, mtp.min_accept_rate, mtp.min_accept_len) == (
        "draft-mtp",
        3,
        0.6855,
        2.923,
    )
    assert mtp.models == ["Qwen3.5-4B-MTP-Q4_K_M.gguf"]


def test_real_cases_file_names_only_locked_models() -> None:
    if not paths.MODELS_LOCK.is_file():
        pytest.skip("models.lock not written yet")
    from specsuite.lockfile import load_lock

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
        'expect_log = ["clamping"]\nmin_identical_fraction = 1.0\n'
        '[case.calibration]\ndate = "2026-11-30"\nruns = 3\n'
    )
    assert c.synth_rates == (1.0, 0.5, 0.0)
    assert c.server_args == ("--x", "1")
    assert c.calibration == {"date": "2026-11-30", "runs": 3}
    assert (c.n_predict, c.prompts, c.expect_draft_len) == (32, "synthetic", 3)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("colour = 1\n", "unknown key(s) colour"),
        ("n_predict = true\n", "n_predict must be int"),
        ("synth_rates = [0.5, 1.0, 0.5]\n", "non-increasing"),
        ("synth_rates = [0.0, 0.0, 0.0]\nsynth_len = 2.0\n", "mutually exclusive"),
        ("expect_accept_len = 2.0\n", "go together"),
        ("min_identical_fraction = 1.5\n", "min_identical_fraction = 1.5 is outside [0, 1]"),
        ('prompts = "poems"\n', "prompts 'poems'"),
    ],
)
def test_bad_case_is_one_clear_error(extra: str, needle: str) -> None:
    with pytest.raises(UserError, match="case 'a'") as exc:
        _one(extra)
    assert needle in str(exc.value)


def test_rate_floor_outside_unit_interval() -> None:
    with pytest.raises(UserError, match=r"min_accept_rate = 1.2 is outside \[0, 1\]"):
        parse_cases(BASE.replace("min_accept_rate = 0.5", "min_accept_rate = 1.2"))


def test_missing_floor_and_unknown_spec_type() -> None:
    with pytest.raises(UserError, match="missing floor 'min_accept_len'"):
        parse_cases(BASE.replace("min_accept_len = 1.5\n", ""))
    parse_cases(BASE.replace("min_accept_len = 1.5\n", "expect_no_drafts = true\n"))  # allowed there
    with pytest.raises(UserError, match="spec_type 'mtp' is not one of"):
        parse_cases(BASE.replace('"ngram-mod"', '"mtp"'))


def test_unknown_model_name_against_lock() -> None:
    with pytest.raises(UserError, match=r"model 't\.gguf' is not in models\.lock"):
        parse_cases(BASE, lock_names={"other.gguf"})
    assert parse_cases(BASE, lock_names={"t.gguf"})


def test_duplicate_names_version_and_toml_errors() -> None:
    with pytest.raises(UserError, match="duplicate case name"):
        parse_cases(BASE + BASE.replace("version = 1\n", ""))
    with pytest.raises(UserError, match="`version = 1` is required"):
        parse_cases(BASE.replace("version = 1", "version = 2"))
    with pytest.raises(UserError, match="not valid TOML at line 2"):
        parse_cases("version = 1\n[[case]\n")
    with pytest.raises(UserError, match="cannot read cases file"):
        load_cases("/nonexistent/cases.toml")


def test_select_by_tier_names_and_all() -> None:
    cases = load_cases(paths.CASES_FILE)
    assert select_cases(cases, "") == []
    compact = [c.name for c in select_cases(cases, "compact")]
    assert compact == ["mtp", "dflash", "dspark", "eagle3"]
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
