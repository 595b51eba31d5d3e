"""The KV-cache axis in cases.toml (``kv_types``): one case per cache type, its f16 member first and named
as its table, each member's flags; every misuse one clear error; the real file's axes."""

from __future__ import annotations

import pytest
from casetext import HEAD

from specsuite.cases.kvtypes import REFERENCE, KvPair
from specsuite.cases.schema import load_cases, parse_cases, select_cases
from specsuite.common import paths
from specsuite.common.errors import UserError

AXIS = (
    HEAD
    + """[[case]]
name = "k"
tier = "synthetic"
spec_type = "draft-simple"
target = "t.gguf"
draft = "d.gguf"
n_max = 3
min_accept_rate = 0.5
min_accept_len = 1.5
server_args = ["--threads", "1"]
"""
)
F16 = ("--cache-type-k", "f16", "--cache-type-v", "f16")
F16 += ("--spec-draft-type-k", "f16", "--spec-draft-type-v", "f16")


def _axis(extra: str) -> list:
    return parse_cases(AXIS + extra)


def test_an_axis_is_one_case_per_type_its_f16_member_first_and_named_as_its_table() -> None:
    cases = _axis('kv_types = ["q8_0", "f16/q4_0", "f16"]\nkv_min_accept_fraction = 0.8\n')
    assert [(c.name, c.kv, c.kv_sweep, c.kv_fraction, c.table) for c in cases] == [
        ("k", REFERENCE, "k", 0.8, "k"),
        ("k-q8_0", KvPair("q8_0", "q8_0"), "k", 0.8, "k"),
        ("k-f16-q4_0", KvPair("f16", "q4_0"), "k", 0.8, "k"),
    ]
    # each member's server_args: the table's, then the flags of its types (target's K and V, draft's K and V)
    assert cases[0].server_args == ("--threads", "1", *F16)
    assert cases[2].server_args == (
        *("--threads", "1", "--cache-type-k", "f16", "--cache-type-v", "f16"),
        *("--spec-draft-type-k", "q4_0", "--spec-draft-type-v", "q4_0"),
    )
    # a member is one case: no list of its own, not on the concurrency axis
    assert all(c.kv_types == () and c.kv_min_accept_fraction is None and not c.concurrent for c in cases)
    assert select_cases(cases, "k-q8_0") == [cases[1]] and len(select_cases(cases, "synthetic")) == 3


def test_a_members_f16_reference_is_its_f16_member_and_back() -> None:
    f16, q8, mixed = _axis('kv_types = ["f16", "q8_0", "f16/q4_0"]\n')
    assert q8.kv_member(REFERENCE) == f16 and mixed.kv_member(REFERENCE) == f16
    assert f16.kv_member(KvPair("q8_0", "q8_0")) == q8
    assert [c.kv_fraction for c in (f16, q8, mixed)] == [0.9] * 3  # the default fraction


def test_a_table_without_the_axis_is_untouched() -> None:
    (plain,) = _axis("")
    assert (plain.kv, plain.kv_sweep, plain.kv_fraction, plain.table) == (None, None, None, "k")
    assert plain.server_args == ("--threads", "1")


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ('kv_types = ["q8_0", "q4_0"]\n', "kv_types = ['q8_0', 'q4_0'] lacks f16: the member every other"),
        ('kv_types = ["f16", "f16/f16"]\n', "names f16/f16 twice"),
        ('kv_types = ["f16", "q8_0", "q8_0/q8_0"]\n', "names q8_0/q8_0 twice"),
        ('kv_types = ["f16"]\n', "kv_types must be a list of 2 to 16 KV cache types"),
        ('kv_types = ["f16", "q3_k"]\n', "kv_types[1] must be a KV cache type (f32, f16, bf16, q8_0, q4_0"),
        ('kv_types = ["f16", "q8_0/"]\n', "kv_types[1] must be a KV cache type"),
        ("kv_min_accept_fraction = 0.8\n", "kv_min_accept_fraction judges a kv_types axis's members"),
        ('kv_types = ["f16", "q8_0"]\nkv_min_accept_fraction = 0\n', "must be a fraction in (0, 1], got 0"),
        ('kv_types = ["f16", "q8_0"]\nkv_min_accept_fraction = 1.5\n', "must be a fraction in (0, 1]"),
        ('kv_types = ["f16", "q8_0"]\nparallel = [1, 2]\n', "parallel: not with kv_types (one axis a table"),
        ('kv_types = ["f16", "q8_0"]\nexpect_drafted = 3\n', "expect_drafted: not with kv_types"),
        (
            'kv_types = ["f16", "q8_0"]\nserver_args = ["--threads", "1", "-ctkd", "q8_0"]\n',
            "server_args: -ctkd: kv_types sets the cache types (remove it)",
        ),
        (
            'kv_types = ["f16", "q8_0"]\nserver_args = ["--cache-type-k-draft", "q4_0", "-ctk", "q8_0"]\n',
            "server_args: --cache-type-k-draft, -ctk: kv_types sets the cache types",
        ),
    ],
)
def test_a_misused_axis_is_one_clear_error(extra: str, needle: str) -> None:
    text = AXIS.replace('server_args = ["--threads", "1"]\n', "") if "server_args" in extra else AXIS
    with pytest.raises(UserError, match=r"^cases\.toml: \[\[case\]\] 'k': ") as exc:
        parse_cases(text + extra)
    assert needle in str(exc.value)


def test_defaults_and_modes_leave_the_draft_cache_to_the_binary() -> None:
    defaults = AXIS.replace("n_max = 3\n", "defaults = true\n")
    with pytest.raises(UserError, match="defaults: not with kv_types"):
        parse_cases(defaults + 'kv_types = ["f16", "q8_0"]\n')
    mode = AXIS.replace('spec_type = "draft-simple"\n', 'mode = "mtp"\n')
    with pytest.raises(UserError, match="mode: not with kv_types"):
        parse_cases(mode + 'kv_types = ["f16", "q8_0"]\n')


def test_a_member_whose_name_is_taken_names_its_axis() -> None:
    taken = AXIS.replace('name = "k"', 'name = "k-q8_0"')
    with pytest.raises(UserError, match=r"duplicate case name 'k-q8_0' \(a member of the sweep 'k'\)"):
        parse_cases(
            taken + AXIS.split("[[case]]", 1)[1].join(["[[case]]", ""]) + 'kv_types = ["f16", "q8_0"]\n'
        )


def test_the_real_files_axes() -> None:
    """The synthetic tier runs every quantised type on the head-32 files; the GPU tiers' KV cases are axes
    whose quantised members keep the names the cases had before."""
    cases = load_cases(paths.CASES_FILE)
    axes: dict[str, list] = {}
    for c in cases:
        if c.kv is not None:
            axes.setdefault(c.kv_sweep, []).append(c)
    assert {a: [m.kv.spelled for m in ms] for a, ms in axes.items()} == {
        "tiny-simple-kv": ["f16/f16", "f16/q4_0", "q8_0/q8_0", "q4_0/q4_0"],
        "tiny-mtp-kv": ["f16/f16", "q8_0/q8_0", "q4_0/q4_0"],
        "tiny-dspark-kv": ["f16/f16", "f16/q8_0", "q4_0/q4_0"],
        "mtp-kv": ["f16/f16", "q8_0/q8_0"],
        "dflash2-kv": ["f16/f16", "q8_0/q8_0"],
        "eagle3-kv": ["f16/f16", "q4_0/q4_0"],
    }
    synthetic = [m for ms in axes.values() for m in ms if m.tier == "synthetic"]
    assert all(m.target.endswith("-head32.gguf") and (m.draft or "-head32.gguf").endswith("-head32.gguf")
               for m in synthetic)  # fmt: skip
    gpu = {m.name for ms in axes.values() for m in ms if m.gpu}
    assert {"mtp-kv-q8_0", "dflash2-kv-q8_0", "eagle3-kv-q4_0"} <= gpu
    assert all(m.min_identical_fraction == 1.0 for ms in axes.values() for m in ms)
