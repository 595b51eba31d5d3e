"""The build options of a llama-server binary that change what a case measures, and where they were read.

A build option can pass for a regression: with the default CUDA build a q4_1 KV cache has no flash-attention
kernel (``GGML_CUDA_FA_QUANTS`` lists q4_0, q8_0, f16 and bf16 pairs at the pinned commit) and silently runs
attention on the CPU (llama.cpp #28633: prompt 34 against 659-1094 t/s). So a run records, per binary, the
backend and the CMake variables in ``VARIABLES``, from the best source there is:

1. ``build-info.json`` describing this binary (its ``binary_sha256``; the suite's own, or the one beside the
   binary's ``bin/`` folder): its ``build_options`` (written by ``build`` from the CMake cache), else the
   CMake cache of its ``build_dir`` if that still exists, else its ``cmake_flags`` (only what was overridden);
2. a ``CMakeCache.txt`` beside the binary's ``bin/`` folder (a binary inside its CMake build folder);
3. nothing but the backend the probe saw (``source`` says ``binary``).
"""

from __future__ import annotations

from pathlib import Path

from specsuite.llamacpp import info as buildinfo

# What changes a measurement: the kernels built (native ISA, CUDA architectures, flash-attention quant
# pairs, all quants), memory management (VMM), graphs, the backends compiled in, the build type.
VARIABLES = (
    "CMAKE_BUILD_TYPE",
    "GGML_NATIVE",
    "GGML_CUDA",
    "CMAKE_CUDA_ARCHITECTURES",
    "GGML_CUDA_FA",
    "GGML_CUDA_FA_ALL_QUANTS",
    "GGML_CUDA_FA_QUANTS",
    "GGML_CUDA_NO_VMM",
    "GGML_CUDA_GRAPHS",
    "GGML_CUDA_FORCE_MMQ",
    "GGML_CUDA_FORCE_CUBLAS",
    "GGML_HIP",
    "GGML_VULKAN",
    "GGML_METAL",
    "GGML_BLAS",
    "GGML_OPENMP",
    "GGML_CPU_ALL_VARIANTS",
    "GGML_BACKEND_DL",
    "BUILD_SHARED_LIBS",
)


def parse_cmake_cache(text: str) -> dict[str, str]:
    """``VARIABLES`` from a CMakeCache.txt (``NAME:TYPE=VALUE`` lines)."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        name = name.split(":", 1)[0]
        if sep and name in VARIABLES:
            out[name] = value
    return out


def parse_flags(flags: list[str]) -> dict[str, str]:
    """``VARIABLES`` given as ``-DNAME=VALUE`` or ``-DNAME:TYPE=VALUE`` (the last one wins, as in CMake)."""
    out = {}
    for flag in flags:
        if flag.startswith("-D") and "=" in flag:
            name, value = flag[2:].split("=", 1)
            name = name.split(":", 1)[0]
            if name in VARIABLES:
                out[name] = value
    return out


def read_cache(build_dir: Path) -> dict[str, str] | None:
    try:
        return parse_cmake_cache((Path(build_dir) / "CMakeCache.txt").read_text(errors="replace"))
    except OSError:
        return None


def for_binary(binary: Path, sha256: str) -> tuple[str, str | None, dict[str, str]]:
    """(source, backend or None, options) of ``binary`` (see the module's list of sources)."""
    build_folder = Path(binary).resolve().parent.parent
    info = buildinfo.for_binary(binary, sha256)
    if info is not None:
        backend = info.get("backend")
        if isinstance(info.get("build_options"), dict):
            return "build-info.json", backend, {str(k): str(v) for k, v in info["build_options"].items()}
        cached = read_cache(Path(info["build_dir"])) if info.get("build_dir") else None
        if cached is not None:
            return "CMakeCache.txt", backend, cached
        flags = parse_flags([str(f) for f in info.get("cmake_flags") or []])
        if info.get("cuda_architectures"):
            flags.setdefault("CMAKE_CUDA_ARCHITECTURES", str(info["cuda_architectures"]))
        return "cmake flags", backend, flags
    cached = read_cache(build_folder)
    if cached is not None:
        return "CMakeCache.txt", _backend(cached), cached
    return "binary", None, {}


def _backend(options: dict[str, str]) -> str:
    on = [name for var, name in _BACKEND_VARS if options.get(var, "").upper() in ("ON", "1", "TRUE")]
    return on[0] if on else "cpu"


_BACKEND_VARS = (
    ("GGML_CUDA", "cuda"),
    ("GGML_HIP", "rocm"),
    ("GGML_VULKAN", "vulkan"),
    ("GGML_METAL", "metal"),
)
