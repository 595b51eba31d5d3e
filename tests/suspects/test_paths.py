"""paths.toml kept current: every path it names exists in the pinned tree, and deriving them again from
that tree (suspects.derive) gives the same; every type of the schema and every architecture the cases'
models have is in it. The derivation rules themselves run on a small fake tree in every CI run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest
from suspecttree import make_tree

from specsuite.cases.schema import SpecType, load_cases
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.models.gguf import read_info
from specsuite.models.lock import GeneratedEntry, load_lock
from specsuite.suspects import derive, exercised, trees

DATA = exercised.load()


def pinned() -> Path:
    """The pinned llama.cpp tree, as `specsuite build` unpacked it (CI builds before the tests run)."""
    found = trees.pinned_tree()
    if found is None:
        try:
            source = json.loads(paths.build_info_path().read_text())["source"]
        except (OSError, ValueError, KeyError, TypeError):
            source = {}
        if source.get("kind") == "pinned-sdist" and Path(source.get("path", "/nonexistent")).is_dir():
            found = Path(source["path"])
    if found is None:
        pytest.skip("needs the pinned llama.cpp tree (`nox -s build` unpacks it)")
    return found


def test_every_type_of_the_schema_has_its_part() -> None:
    assert sorted(DATA.names("type")) == sorted(get_args(SpecType))
    assert set(DATA.names("backend")) == {"cpu", "cuda"}
    for alias in DATA.names("alias"):
        assert set(DATA.parts[("alias", alias)].types) <= set(DATA.names("type")), alias


def test_every_architecture_the_cases_models_have_is_known_or_said() -> None:
    """Each case's models name an architecture that has its part, except Hub models nobody here read."""
    unknown = set()
    for case in load_cases():
        ex = exercised.for_case(case, "cpu", on_disk=lambda _: None)
        assert set(ex.archs) <= set(DATA.names("arch")), case.name
        unknown |= {n.split()[2] for n in ex.notes if n.startswith("architecture of")}
    lock = load_lock()
    assert all(not isinstance(lock.entries[name], GeneratedEntry) for name in unknown)
    assert set(DATA.models) <= set(lock.entries)


def test_a_models_architecture_on_disk_is_the_one_paths_toml_says() -> None:
    """Where the model folder holds a file that paths.toml names, its GGUF header says the same."""
    read = 0
    for name, arch in DATA.models.items():
        path = paths.model_dir() / name
        if path.is_file():
            assert read_info(path).arch == arch, name
            read += 1
    if not read:
        pytest.skip(f"no file of paths.toml's [[model]] in {paths.model_dir()}")


def test_a_generated_models_architecture_is_what_its_recipe_builds() -> None:
    assert exercised.arch_of_recipe("synth-target-glm4moe-mtp-fixed.gguf") == "glm4moe"
    assert exercised.arch_of_recipe("synth-draft-eagle3-random.gguf") == "eagle3"
    assert exercised.arch_of_recipe("gemma-3-270m-q4_k_m.gguf") is None  # not generated


@pytest.mark.integration
def test_every_path_exists_in_the_pinned_tree() -> None:
    tree = pinned()
    named = {p for part in DATA.parts.values() for p in part.paths}
    assert sorted(p for p in named if not (tree / p).exists()) == []


@pytest.mark.integration
def test_derived_again_from_the_pinned_tree_the_paths_are_the_same() -> None:
    tree = pinned()
    for name in DATA.names("type"):
        part = DATA.parts[("type", name)]
        assert derive.type_part(tree, name) == (list(part.paths), list(part.impls)), name
    for alias, types in derive.aliases(tree).items():
        assert list(DATA.parts[("alias", alias)].types) == types, alias
    for arch in DATA.names("arch"):
        assert derive.arch_files(tree, arch) == list(DATA.parts[("arch", arch)].paths), arch
    assert derive.server_files(tree) == list(DATA.parts[("server", "server")].paths)


def test_the_derivation_reads_a_small_tree(tmp_path: Path) -> None:
    arg = (
        '    add_opt(common_arg(\n        {"--spec-default"},\n        [](common_params & params) {\n'
        "            params.speculative.types.push_back(COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K);\n"
        "        }\n    ));\n"
    )
    tree = make_tree(tmp_path / "t", {
        "common/arg.cpp": arg,
        "src/llama-arch.cpp": '    { LLM_ARCH_LLAMA,            "llama"            },\n',
        "src/llama-model.cpp": "        case LLM_ARCH_LLAMA:\n            return new llama_model_llama(p);\n",
    })  # fmt: skip
    assert derive.type_part(tree, "ngram-map-k") == (
        ["common/speculative.cpp", "common/speculative.h", "common/ngram-map.h", "common/ngram-map.cpp"],
        ["common_speculative_impl_ngram_map_k"],
    )
    assert derive.type_part(tree, "draft-simple") == (
        ["common/speculative.cpp", "common/speculative.h"],
        ["common_speculative_impl_draft_simple"],
    )
    assert derive.type_part(tree, "draft-mtp") == ([], [])  # a type this tree lacks
    assert derive.aliases(tree) == {"spec-default": ["ngram-map-k"]}
    assert derive.arch_files(tree, "llama") == ["src/models/llama.cpp"]
    assert derive.arch_files(tree, "qwen3") == []
    assert derive.server_files(tree) == []  # the fake server sources call no common_speculative_*


def test_a_broken_paths_file_is_one_line() -> None:
    with pytest.raises(UserError, match=r"paths.toml: \[\[part\]\] 'x': kind must be one of type, alias"):
        exercised.parse('version = 1\n[[part]]\nkind = "file"\nname = "x"\n', "paths.toml")
    with pytest.raises(UserError, match="given twice"):
        exercised.parse(
            'version = 1\n[[part]]\nkind = "args"\nname = "a"\n[[part]]\nkind = "args"\nname = "a"\n'
        )
