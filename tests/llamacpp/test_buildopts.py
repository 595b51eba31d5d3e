"""llamacpp.buildopts: a binary's build options from build-info.json, its CMake cache or its flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsuite.common import paths
from specsuite.common.filehash import sha256_file
from specsuite.llamacpp.buildopts import for_binary, parse_cmake_cache, parse_flags

# Lines as CMake writes them, the values of the pinned commit's CUDA build made on this machine (no libcuda:
# VMM off; the default flash-attention quant pairs).
CACHE = """# This is the CMakeCache file.
CMAKE_BUILD_TYPE:STRING=Release
CMAKE_CUDA_ARCHITECTURES:STRING=90-real
GGML_CUDA:BOOL=ON
GGML_CUDA_FA_ALL_QUANTS:BOOL=OFF
GGML_CUDA_FA_QUANTS:STRING=q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16
GGML_CUDA_NO_VMM:BOOL=ON
GGML_NATIVE:BOOL=ON
GGML_UNRELATED:BOOL=ON
//GGML_NATIVE:BOOL=OFF
"""


def _binary(folder: Path) -> Path:
    exe = folder / "bin" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_bytes(b"\x7fELF not really")
    return exe


def test_the_cmake_cache_and_the_flags() -> None:
    found = parse_cmake_cache(CACHE)
    assert found["GGML_CUDA_NO_VMM"] == "ON" and found["CMAKE_CUDA_ARCHITECTURES"] == "90-real"
    assert found["GGML_CUDA_FA_QUANTS"] == "q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16"
    assert "GGML_UNRELATED" not in found and found["GGML_NATIVE"] == "ON"  # comments are not values
    flags = ["-G", "Ninja", "-DGGML_NATIVE=OFF", "-DGGML_CUDA_FA_ALL_QUANTS:BOOL=ON", "-DGGML_NATIVE=ON"]
    assert parse_flags(flags) == {"GGML_NATIVE": "ON", "GGML_CUDA_FA_ALL_QUANTS": "ON"}  # the last one wins


def test_each_source_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "BUILD_DIR", tmp_path / "suite-build")  # the suite's own build-info.json
    build = tmp_path / "build"
    exe = _binary(build)
    sha = sha256_file(exe)
    assert for_binary(exe, sha) == ("binary", None, {})
    (build / "CMakeCache.txt").write_text(CACHE)  # a binary inside its CMake build folder
    source, backend, options = for_binary(exe, sha)
    assert (source, backend, options["GGML_CUDA_NO_VMM"]) == ("CMakeCache.txt", "cuda", "ON")
    info = {
        "binary_sha256": sha,
        "backend": "cuda",
        "cmake_flags": ["-DGGML_CUDA=ON"],
        "cuda_architectures": "90-real",
        "build_dir": str(tmp_path / "gone"),
    }
    (build / "build-info.json").write_text(json.dumps(info))  # beside bin/, its build folder since removed
    assert for_binary(exe, sha) == (
        "cmake flags",
        "cuda",
        {"GGML_CUDA": "ON", "CMAKE_CUDA_ARCHITECTURES": "90-real"},
    )
    suite_info = paths.build_info_path()
    suite_info.parent.mkdir()
    suite_info.write_text(json.dumps({**info, "build_options": {"GGML_NATIVE": "OFF"}}))
    assert for_binary(exe, sha) == ("build-info.json", "cuda", {"GGML_NATIVE": "OFF"})
    suite_info.write_text(json.dumps({**info, "binary_sha256": "0" * 64}))  # another binary's
    assert for_binary(exe, sha)[0] == "cmake flags"
