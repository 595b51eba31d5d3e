"""cases.toml parsing, validation and selection (the real file and small hand-written ones)."""

from __future__ import annotations

import re

import pytest
from casetext import HEAD

from specsuite.cases import schema
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
        'n_min = 1\np_min = 0.5\nsynth_rates = [1.0, 0.5, 0]\nserver_args = ["-ub", "64"]\nn_predict = 32\n'
        'prompts = "synthetic"\nexpect_accepted = 0\nexpect_all_accepted = true\nexpect_accept_len = 2.5\n'
        "accept_len_tolerance = 0.25\nexpect_full_positions = true\nexpect_draft_len = 3\n"
        'expect_log = ["clamping"]\nmin_identical_fraction = 1.0\ngpus = 2\n'
        '[case.calibration]\ndate = "2026-11-30"\nruns = 3\n'
    )
    assert c.synth_rates == (1.0, 0.5, 0.0)
    assert c.server_args == ("-ub", "64")
    assert c.calibration == {"date": "2026-11-30", "runs": 3}
    assert (c.n_predict, c.prompts, c.expect_draft_len, c.gpus) == (32, "synthetic", 3, 2)
    assert _one("")[0].gpus == 1  # one GPU unless the case says more


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("colour = 1\n", "unknown key(s) colour"),
        ("n_predict = true\n", "n_predict must be an integer from 1 to 16384 (tokens), got Tr"),
        ("temperature = 2.5\n", "temperature must be a number in [0, 2], got 2.5"),
        ("ctx_size = 32\n", "ctx_size must be an integer from 64 to 262144 (tokens), got 32"),
        ("category_floors = { x = { min_accept_rate = 2 } }\n", "min_accept_rate must be a number in [0, 1]"),
        ("category_floors = { x = { min_accept_rate = 0.5 } }\n", "prompt set 'seed' has no category 'x'"),
        ("synth_rates = [0.5, 1.0, 0.5]\n", "non-increasing"),
        ("synth_rates = [0.0, 0.0, 0.0]\nsynth_len = 2.0\n", "mutually exclusive"),
        ("expect_accept_len = 2.0\n", "go together"),
        ("min_identical_fraction = 1.5\n", "min_identical_fraction must be a number in [0, 1], got 1.5"),
        ('prompts = "poems"\n', "prompts 'poems'"),
        ("gpus = 0\n", "gpus must be a whole number from 1 to 64, got 0"),
        ("repeat = 0\n", "repeat must be a whole number from 1 to 100, got 0"),
        ("pin_cpu = true\n", "pin_cpu puts the servers on one CPU: give them one thread"),
        ("speed_rtol = 1.0\n", "speed_rtol must be a fraction in (0, 1), got 1.0"),
        ("decode_rtol = 0\n", "decode_rtol must be a fraction in (0, 1), got 0"),
        ('pin_cpu = true\nserver_args = ["-t", "2"]\n', "give them one thread"),
        # round five: TOML's inf and nan, and llama.cpp taking the last of a repeated flag
        ("min_speedup = inf\n", "min_speedup = inf: not a finite number"),
        ("expect_accept_len = nan\naccept_len_tolerance = 0.1\n", "expect_accept_len = nan: not a finite"),
        ("expect_accept_len = 2.0\naccept_len_tolerance = inf\n", "accept_len_tolerance = inf: not a finite"),
        ("category_floors = { x = { min_accept_len = inf } }\n", "min_accept_len = inf: not a finite number"),
        ('pin_cpu = true\nserver_args = ["--threads", "1", "--threads", "2"]\n', "give them one thread"),
        ('pin_cpu = true\nserver_args = ["--threads", "1", "-tb", "8"]\n', "give them one thread"),
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
    with pytest.raises(
        UserError, match=r"spec_type must be one of none, draft-simple, .*, detect, got 'mtp'$"
    ):
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
            "mode must be one of auto, mtp, ngram, mtp+ngram, off, ngram-simple, got 'turbo'",
        ),
        (('spec_type = "ngram-mod"', 'spec_type = ["ngram-mod", "detect"]'), "cannot be part of a chain"),
        (('spec_type = "ngram-mod"', 'spec_type = ["ngram-mod", "ngram-mod"]'), "names a type twice"),
        (("n_max = 3\n", ""), "missing n_max"),
        (("n_max = 3\n", "n_max = 3\nn_min = -5\n"), "an integer >= 0"),
        (("n_max = 3\n", "n_max = 3\nn_min = 4\n"), "n_min = 4 is more than n_max = 3"),
        (
            ('spec_type = "ngram-mod"', 'spec_type = ["none", "ngram-mod"]'),
            "'none' cannot be part of a chain",
        ),
        (
            ('spec_type = "ngram-mod"', 'spec_type = "ngram-mod"\nmodel_id = "x/Qwen3.5-0.8B-MTP"'),
            "only with mode",
        ),
        (("n_max = 3\n", 'n_max = 3\nexpect_resolved = "ngram-mod"\n'), "only with mode"),
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
    named = parse_cases(
        no_floors.replace(
            'spec_type = "ngram-mod"\n', 'mode = "auto"\nmodel_id = "org/Qwen3.5-0.8B-MTP-GGUF"\n'
        )
    )[0]
    assert named.model_id == "org/Qwen3.5-0.8B-MTP-GGUF"


@pytest.mark.parametrize("spec_type", ["none", "ngram-cache", ["ngram-cache"]])
def test_types_without_a_draft_length_omit_n_max(spec_type) -> None:
    text = BASE.replace('"ngram-mod"', repr(spec_type).replace("'", '"')).replace("n_max = 3\n", "")
    (c,) = parse_cases(text)
    assert c.n_max is None and c.spec_type == tuple(spec_type if isinstance(spec_type, list) else [spec_type])
    with pytest.raises(UserError, match="missing n_max"):  # a chain with a type that has a length needs it
        parse_cases(text.replace(repr(spec_type).replace("'", '"'), '["ngram-cache", "ngram-mod"]'))


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
    # the GPU tiers' other prompt sets are SPEED-Bench's (issue 34's workloads), never a stand-in for the seed
    assert {c.prompts for c in select_cases(cases, "all")} == {
        "seed", "speed-bench-qualitative", "speed-bench-8k", "speed-bench-32k"}  # fmt: skip
    assert all(
        c.prompts == "seed"
        for c in select_cases(cases, "all")
        if not c.name.startswith(("dflash2-", "lilicorr-"))
    )
    seed = parse_case_file(paths.CASES_FILE.read_text()).prompt_sets["seed"]
    assert [p.text.encode() for p in seed.prompts] == [u.encode() for u in upstream]
    assert seed.dataset is None and seed.categories == ()


def test_prompt_set_errors() -> None:
    one_of = "give exactly one of prompts (a non-empty list of {id, text}) and dataset"
    with pytest.raises(UserError, match=rf"^cases\.toml: \[\[prompt_set\]\] 'x': {re.escape(one_of)}$"):
        parse_cases('version = 1\n[[prompt_set]]\nname = "x"\n')
    with pytest.raises(UserError, match=re.escape(one_of)):
        parse_cases('version = 1\n[[prompt_set]]\nname = "x"\nprompts = []\n')
    both = 'prompts = [{ id = "a", text = "1" }]\ndataset = { file = "d.jsonl", format = "jsonl" }\n'
    with pytest.raises(UserError, match=re.escape(one_of)):
        parse_cases(f'version = 1\n[[prompt_set]]\nname = "x"\n{both}')
    with pytest.raises(UserError, match="give every prompt a category, or none"):
        mixed = '[{ id = "a", text = "1", category = "c" }, { id = "b", text = "2" }]'
        parse_cases(f'version = 1\n[[prompt_set]]\nname = "x"\nprompts = {mixed}\n')
    with pytest.raises(UserError, match=r"dataset\.format must be one of jsonl, parquet, got 'csv'"):
        parse_cases('version = 1\n[[prompt_set]]\nname = "x"\ndataset = { file = "d", format = "csv" }\n')
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
    with pytest.raises(UserError, match=r"^cases\.toml: not valid TOML: .*\(at line 2, column \d+\)$"):
        parse_cases("version = 1\n[[case]\n")
    line = (BASE + "n_max = 4\n").count("\n")  # the key given twice, on the last line
    with pytest.raises(UserError, match=rf"^cases\.toml: not valid TOML: .*\(at line {line}, column \d+\)$"):
        parse_cases(BASE + "n_max = 4\n")
    with pytest.raises(UserError, match="cannot read cases file"):
        load_cases("/nonexistent/cases.toml")


def test_select_by_tier_names_and_all() -> None:
    cases = load_cases(paths.CASES_FILE)
    assert select_cases(cases, "") == []
    compact = [c.name for c in select_cases(cases, "compact")]
    assert compact == [
        *("mtp", "dflash", "dspark", "eagle3", "mtp-n2", "auto-qwen35-4b-mtp", "auto-qwen3-4b"),
        "mtp-ngram-qwen35-4b-mtp",
        "self-draft-qwen3-4b",
        *("mtp-defaults", "eagle3-defaults", "dflash-defaults", "dspark-defaults"),
    ]
    every = [c.name for c in select_cases(cases, "all")]
    sweeps = [
        f"sweep-{m}{'' if n == 1 else f'-np{n}'}"
        for m in ("mtp", "dflash", "dspark", "eagle3", "dflash2")
        for n in (1, 2, 4, 8, 16)
    ]
    workloads = [f"{m}-{w}" for m in ("dflash2", "lilicorr") for w in ("speed-bench", "temp1", "long-output",
                                                                       "isl8k", "isl32k")]  # fmt: skip
    kv = [f"{m}-kv{q}" for m, t in (("mtp", "q8_0"), ("dflash2", "q8_0"), ("eagle3", "q4_0"))
          for q in ("", f"-{t}")]  # fmt: skip
    mine = ["dflash2-defaults", *kv]  # cases.toml's order: each KV axis's f16 member, then its quantised one
    assert every == [*compact[:9], "dflash2", "lilicorr", *sweeps, *workloads, *compact[9:], *mine]
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


# --- server_args: never a flag the harness owns (issue 19) -------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--host", "0.0.0.0"],  # llama.cpp takes the last --host: the case would listen on every interface
        ["--host=0.0.0.0"],
        ["--port", "8080"],
        ["-m", "other.gguf"],  # another model than results.json records
        ["--model=other.gguf"],
        ["-hf", "someone/model"],  # a model from the network
        ["--model-url", "http://x/m.gguf"],
        ["-md", "d.gguf"],
        ["--spec-draft-model", "d.gguf"],
        ["--spec-type", "draft-simple"],
        ["--draft-max", "99"],
        ["--spec-draft-n-max=9"],
        ["--spec-ngram-mod-n-max", "64"],
        ["-c", "99999"],
        ["--ctx-size", "99999"],
        ["-np", "4"],
        ["--seed", "7"],
        ["-s", "7"],
        ["--metrics"],
        ["--offline"],
        ["--log-file", "/tmp/elsewhere.log"],
        ["-ngl", "0"],
        ["-fa", "off"],
        ["--temp", "1.0"],
        ["--fit", "on"],
        ["--poll", "50"],
        ["--spec-default"],
        ["--spec-synth-rates", "1,1"],
        ["--threads", "1", "--host", "::"],  # found wherever it is in the list
    ],
)
def test_server_args_refuse_every_flag_the_harness_owns(args: list[str]) -> None:
    flag = next(a for a in args if a not in ("--threads", "1")).split("=")[0]
    with pytest.raises(UserError) as exc:
        _one(f"server_args = {args!r}\n".replace("'", '"'))
    message = str(exc.value)
    assert message.startswith("cases.toml: [[case]] 'a': server_args: ") and "\n" not in message
    assert f"{flag!r} is a flag the harness sets" in message, message


def test_server_args_keep_what_the_harness_leaves_alone() -> None:
    (c,) = _one('server_args = ["--threads", "1", "--spec-ngram-simple-size-n", "4", "-sm", "none"]\n')
    assert c.server_args == ("--threads", "1", "--spec-ngram-simple-size-n", "4", "-sm", "none")


# --- server_args: an allowlist (issue 35): what a case may add, each with its reason; nothing else ---------

# What the round found a case could still add: flags that load other files, serve files or reach the
# network (with the real binary, --path DIR served a planted secret.txt during a green run); and spellings
# around the list: llama.cpp reads --a_b as --a-b, and takes no --flag=value.
UNSAFE = [
    ["--rpc", "127.0.0.1:50052"],
    ["--path", "/etc"],
    ["--slot-save-path", "/tmp/slots"],
    ["--media-path", "/home"],
    ["--webui"],
    ["-mm", "p.gguf"],
    ["--mmproj", "p.gguf"],
    ["--mmproj-url", "http://x/p.gguf"],
    ["--lora", "l.gguf"],
    ["--lora-scaled", "l.gguf:0.5"],
    ["--control-vector", "c.gguf"],
    ["-mv", "v.gguf"],
    ["--override-kv", "general.name=str:x"],
    ["--chat-template-file", "/etc/passwd"],
    ["--hf-repo-v", "someone/voc"],
    ["--threads", "1", "--slot_save_path", "/tmp/slots"],  # llama.cpp's own spelling of --slot-save-path
    ["--log-prompts-dir", "/tmp/p"],
    ["--api-key-file", "/tmp/k"],
    ["--props"],
    ["-ot", "x=CPU"],
]


@pytest.mark.parametrize("args", UNSAFE, ids=lambda a: next(x for x in a if x not in ("--threads", "1")))
def test_server_args_refuse_every_flag_not_allowed(args: list[str]) -> None:
    flag = next(a for a in args if a not in ("--threads", "1"))
    with pytest.raises(UserError) as exc:
        _one(f"server_args = {args!r}\n".replace("'", '"'))
    message = str(exc.value)
    assert message.startswith(f"cases.toml: [[case]] 'a': server_args: {flag!r} is ") and "\n" not in message


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--threads=1"], "'--threads=1' is not a flag a case may add"),  # llama.cpp has no --flag=value
        (["--threads"], "'--threads' takes 1 value(s) as the next item(s) of the list (it is the last item)"),
        (
            ["--threads", "--path", "/etc"],
            "'--threads' takes 1 value(s) as the next item(s) of the list (got '--path')",
        ),
        (["-t", "-m", "x.gguf"], "'-t' takes 1 value(s) as the next item(s) of the list (got '-m')"),
        (["1"], "'1' is not a flag (a value must follow the flag it belongs to)"),
        (
            ["--spec-type", "ngram-mod"],
            "'--spec-type' is a flag the harness sets (spec type)",
        ),  # not a mode case
    ],
)
def test_server_args_are_read_as_llama_cpp_reads_them(args: list[str], why: str) -> None:
    with pytest.raises(UserError, match=re.escape(f"cases.toml: [[case]] 'a': server_args: {why}")):
        _one(f"server_args = {args!r}\n".replace("'", '"'))


def test_a_negative_number_is_a_value() -> None:
    assert _one('server_args = ["--threads", "-1"]\n')[0].server_args == ("--threads", "-1")


def test_every_allowed_flag_is_the_pinned_servers_and_accepted() -> None:
    """Each spelling of the allowlist is one the pinned build's --help lists, and a case may give it."""
    from specsuite.common.serverflags import CASE_FLAGS

    help_text = (paths.REPO_ROOT / "tests" / "data" / "help" / "current.txt").read_text()
    for entry in CASE_FLAGS:
        assert entry.why and entry.values in (0, 1)
        for flag in entry.spellings:
            assert re.search(rf"(^|[\s,]){re.escape(flag)}([\s,]|$)", help_text, re.M), flag
            args = [flag, *(["1"] * entry.values)]
            body = f"server_args = {args!r}\n".replace("'", '"')
            if entry.mode_only:
                mode = BASE.replace('spec_type = "ngram-mod"\n', 'mode = "auto"\n').replace("n_max = 3\n", "")
                assert parse_cases(mode + body)[0].server_args == tuple(args)
            else:
                assert _one(body)[0].server_args == tuple(args)


def test_the_real_cases_file_gives_no_owned_flag() -> None:
    load_cases(paths.CASES_FILE)  # a case of the real file breaking the rule would raise here


# --- upper bounds: a typo must not start an endless run ----------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("n_predict = 1025\n", "n_predict = 1025 is more than ctx_size = 1024: the server's context holds"),
        ("n_predict = 100000000000\n", "n_predict must be an integer from 1 to 16384"),
        ("n_predict = 8\n", "n_max = 3 is more than n_predict = 8"),
    ],
)
def test_bounds_of_n_predict_and_n_max(extra: str, needle: str) -> None:
    body = BASE if "n_max" not in needle else BASE.replace("n_max = 3", "n_max = 9")
    needle = needle.replace("n_max = 3", "n_max = 9")
    with pytest.raises(UserError) as exc:
        _one(extra, base=body)
    assert needle in str(exc.value)
    assert _one("n_predict = 1024\n")[0].n_predict == 1024


DEFAULTS = BASE.replace('spec_type = "ngram-mod"\n', 'spec_type = "draft-mtp"\ndefaults = true\n').replace(
    "n_max = 3\n", ""
)


def test_a_defaults_case_gives_the_type_and_nothing_else_speculative() -> None:
    (c,) = parse_cases(DEFAULTS)
    assert c.defaults and c.n_max is None and c.spec_type == ("draft-mtp",)
    assert parse_cases(DEFAULTS.replace("min_accept_len = 1.5", "min_accept_len = 7.5"))  # no n_max to cap it
    for extra, named in (
        ("n_max = 3\n", "n_max"),
        ("p_min = 0.5\n", "p_min"),
        ("synth_len = 2.0\n", "synth_len"),
        ('server_args = ["--threads", "1", "--spec-draft-p-split", "0.2"]\n', "--spec-draft-p-split"),
        ('server_args = ["--spec-draft-type-k=q8_0"]\n', "--spec-draft-type-k=q8_0"),
        ('server_args = ["-ctkd", "q8_0"]\n', "-ctkd"),  # --spec-draft-type-k by its other spelling
        ('server_args = ["--threads-draft", "2"]\n', "--threads-draft"),
    ):
        with pytest.raises(
            UserError, match=f"leaves every speculative setting at the binary's default; remove {named}"
        ):
            parse_cases(DEFAULTS + extra)
    with pytest.raises(UserError, match="give spec_type"):
        parse_cases(DEFAULTS.replace('spec_type = "draft-mtp"\n', "spec_default = true\n"))


def test_a_pinned_case_with_every_thread_flag_1_loads() -> None:
    args = '["--threads", "2", "--threads", "1", "-tb", "1"]'
    (c,) = _one(f"pin_cpu = true\nserver_args = {args}\n")
    assert c.pin_cpu and c.server_args[-1] == "1"


def test_every_greedy_gpu_case_gates_identical_output() -> None:
    """docs/workloads.md and cases.toml say so: greedy speculative decoding keeps the target's argmax, so on
    the GPU tiers (quantised targets, defaults, sweeps, quantised KV caches alike) every greedy case's tokens
    must equal its baseline's; only the sampled cases, which the docs name, go without."""
    gpu = [c for c in load_cases(paths.CASES_FILE) if c.gpu]
    assert [c.name for c in gpu if c.temperature == 0 and c.min_identical_fraction != 1.0] == []
    assert {c.name for c in gpu if c.temperature > 0} == {"dflash2-temp1", "lilicorr-temp1"}
    assert {"sweep-mtp-np16", "mtp-defaults", "eagle3-kv-q4_0"} <= {c.name for c in gpu}  # all in the scope


def test_the_real_defaults_cases_pin_nothing_speculative() -> None:
    found = [c for c in load_cases(paths.CASES_FILE) if c.defaults]
    assert {c.tier for c in found} == {"synthetic", "compact", "nightly"}
    assert {c.spec_type[0] for c in found if c.tier == "synthetic"} >= {
        "draft-simple", "draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark",
    }  # fmt: skip
    assert all(c.n_max is None and c.p_min is None and c.n_min is None for c in found)
    assert _one("n_predict = 4096\nctx_size = 8192\n")[0].n_predict == 4096


# --- the concurrency axis ----------------------------------------------------------------------------------


def test_a_sweep_is_one_case_per_slot_count_and_np1_keeps_the_name() -> None:
    cases = _one('parallel = [1, 2, 4]\nserver_args = ["--threads", "1"]\n')
    assert [(c.name, c.parallel, c.streams, c.sweep_name, c.sweep_nps) for c in cases] == [
        ("a", 1, 1, "a", (1, 2, 4)),
        ("a-np2", 2, 2, "a", (1, 2, 4)),
        ("a-np4", 4, 4, "a", (1, 2, 4)),
    ]
    assert all(c.concurrent and c.server_args == ("--threads", "1") for c in cases)
    assert [c.name for c in select_cases(cases, "smoke")] == ["a", "a-np2", "a-np4"]
    assert select_cases(cases, "a-np4") == [cases[2]]


def test_one_slot_count_and_streams() -> None:
    (plain,) = _one()
    assert (plain.parallel, plain.streams, plain.sweep_name, plain.concurrent) == (1, 1, None, False)
    (four,) = _one("parallel = 4\n")
    assert (four.name, four.parallel, four.streams, four.sweep_name, four.concurrent) == (
        "a",
        4,
        4,
        None,
        True,
    )
    (queued,) = _one("parallel = 2\nstreams = 8\n")
    assert (queued.parallel, queued.streams) == (2, 8)
    assert [c.streams for c in _one("parallel = [1, 4]\nstreams = 8\n")] == [8, 8]
    assert _one("parallel = 4\nexpect_drafted = 4\n")[0].expect_drafted == 4  # one np: its own counts


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            "parallel = 0\n",
            "parallel must be a whole number from 1 to 64 (the slots) or a non-empty list of them",
        ),
        (
            "parallel = [2, 4]\n",
            "parallel = [2, 4]: a sweep lists distinct slot counts in increasing order from 1",
        ),
        ("parallel = [1, 4, 2]\n", "in increasing order from 1"),
        ("parallel = [1, 2, 2]\n", "distinct slot counts"),
        ("parallel = []\n", "(a sweep), got []"),
        ("parallel = [1, 128]\n", "parallel[1] must be a whole number from 1 to 64, got 128"),
        ("streams = 0\n", "streams must be a whole number from 1 to 64, got 0"),
        ("parallel = [1, 2]\nexpect_drafted = 3\n", "expect_drafted: not on a sweep"),
        ("parallel = [1, 2]\nmin_speedup = 1.0\n", "min_speedup: not on a sweep"),
        ('server_args = ["-np", "4"]\n', "'-np' is a flag the harness sets (parallel)"),
        ('server_args = ["--kv-unified"]\n', "'--kv-unified' is a flag the harness sets (slot context)"),
        ('server_args = ["--no-kv-unified"]\n', "(slot context)"),
    ],
)
def test_bad_concurrency_keys_are_one_clear_error(extra: str, needle: str) -> None:
    with pytest.raises(UserError, match=r"^cases\.toml: \[\[case\]\] 'a': ") as exc:
        _one(extra)
    assert needle in str(exc.value)


def test_a_sweep_member_whose_name_is_taken_names_the_sweep() -> None:
    taken = BASE.replace('name = "a"', 'name = "a-np2"')
    with pytest.raises(
        UserError, match=r"\[\[case\]\] 'a': duplicate case name 'a-np2' \(a member of the sweep 'a'\)"
    ):
        parse_cases(taken + BASE.split("[[case]]", 1)[1].join(["[[case]]", ""]) + "parallel = [1, 2]\n")


def test_the_real_file_sweeps_every_drafter_in_the_synthetic_tier() -> None:
    cases = load_cases(paths.CASES_FILE)
    sweeps = {c.sweep_name: c for c in cases if c.sweep_name and c.tier == "synthetic"}
    assert {c.spec_type[0] for c in sweeps.values()} == {
        "draft-simple", "draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark",
    }  # fmt: skip
    assert {c.sweep_nps for c in sweeps.values()} == {(1, 2, 4)}


def test_cases_toml_is_parsed_once_per_process_while_it_is_the_same_file(tmp_path, monkeypatch):
    """One run asks for the cases several times (run-tier, the plan, the plugin, a fetch): parsed once;
    a rewritten file is parsed again."""
    file = tmp_path / "cases.toml"
    file.write_text(paths.CASES_FILE.read_text())
    calls = []
    real = schema.parse_cases
    monkeypatch.setattr(schema, "parse_cases", lambda text, lock=None: calls.append(1) or real(text, lock))
    first = schema.load_cases(file)
    assert schema.load_cases(file) == first and len(calls) == 1
    first.clear()  # a caller's list is its own
    assert schema.load_cases(file) and len(calls) == 1
    file.write_text(file.read_text() + "\n# edited\n")
    schema.load_cases(file)
    assert len(calls) == 2


@pytest.mark.parametrize(
    ("sequence", "message"),
    [
        ('["a", "nosuch"]', "sequence: prompt set 'p' has no prompt 'nosuch' (its ids: a, b)"),
        ('["@save", "a"]', "sequence: '@save': the first step is a prompt"),
        ('["a", "@bogus", "b"]', "sequence: '@bogus' is not a step ('@save' or '@restore'; a prompt id"),
        ('["a", "@restore", "a"]', "sequence: '@restore' at step 2 must follow a '@save'"),
        ('["a", "@save", "b", "@restore", "a"]', "and be followed by the prompt that followed it ('b')"),
    ],
)
def test_a_bad_sequence_is_one_clear_error(sequence: str, message: str) -> None:
    text = f"""
version = 1
[[prompt_set]]
name = "p"
prompts = [{{ id = "a", text = "x" }}, {{ id = "b", text = "y" }}]
[[case]]
name = "s"
tier = "synthetic"
spec_type = "draft-simple"
target = "t.gguf"
draft = "d.gguf"
n_max = 3
prompts = "p"
uncalibrated = true
sequence = {sequence}
"""
    with pytest.raises(UserError) as err:
        parse_cases(text)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_known_bug_is_checked_like_every_other_key() -> None:
    head = 'version = 1\n[[prompt_set]]\nname = "p"\nprompts = [{ id = "a", text = "x" }]\n'
    case = (
        '[[case]]\nname = "k"\ntier = "synthetic"\nspec_type = "ngram-cache"\ntarget = "t.gguf"\n'
        'prompts = "p"\nuncalibrated = true\n[case.known_bug]\ntitle = "t"\n'
    )
    found = parse_cases(head + case + 'reason = "crashed"\nissue = 21815\n')[0].known_bug
    assert found is not None and (found.issue, found.reason, found.seen) == (21815, "crashed", None)
    for keys, said in (
        ('reason = "crashed"\nseen = [3, 2]', "seen in more servers than were measured"),
        ('reason = "crashed"\nissue = 0', "issue"),
        ('reason = "Crashed!"', "reason"),
        ('reason = "crashed"\ncolour = 1', "colour"),
        ("issue = 1", "reason"),
    ):
        with pytest.raises(UserError, match=said):
            parse_cases(head + case + keys + "\n")
