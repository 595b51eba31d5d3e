"""The device a run measures on: its name, its class (what history compares like with like), driver and CUDA.

The GPU comes from the binary's own ``--list-devices`` (what llama-server will really use); the driver and
CUDA versions from ``nvidia-smi`` where it exists. A CPU build, or a GPU build that sees no GPU, runs on the
CPU: its name is the CPU's model and its class ``cpu-<machine>[-<vector ISA>]``. The ISA is in the class
because a ``-march=native`` build computes with it: AVX2 and AVX-512 kernels round differently, greedy tokens
differ, and so do the acceptance counts (the smoke tier's floors moved by up to 10 % between two x86-64
machines), so history must not compare one with the other.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess

from specsuite.common.procs import child_env
from specsuite.server.probe import Capabilities

_GPU_BACKENDS = ("cuda", "rocm", "vulkan", "metal", "sycl")


def smi(*args: str) -> str | None:
    """nvidia-smi's output (stripped), or None where it is missing or fails. It runs, as every child does,
    without the Hub token (``child_env``): whatever ``nvidia-smi`` is first on PATH gets no secret."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        return subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=30, check=True, env=child_env()
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_device_name(line: str) -> str:
    """``CUDA0: NVIDIA H200 (143000 MiB, 142000 MiB free)`` -> ``NVIDIA H200``."""
    return line.split(":", 1)[-1].split(" (", 1)[0].strip()


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def device_info(caps: Capabilities) -> dict[str, str | None]:
    """{name, class, driver, cuda} for results.json and the history database."""
    if caps.backend in _GPU_BACKENDS and caps.gpus:
        name = gpu_device_name(caps.gpus[0])
        driver = smi("--query-gpu=driver_version", "--format=csv,noheader")
        header = smi() or ""
        cuda = m.group(1) if (m := re.search(r"CUDA Version:\s*([0-9.]+)", header)) else None
        return {
            "name": name,
            "class": slug(name),
            "driver": (driver or "").splitlines()[0] or None,
            "cuda": cuda,
        }
    machine = platform.machine() or "unknown"
    model, flags = cpu_info()
    isa = vector_isa(flags)
    cls = f"cpu-{slug(machine)}" + (f"-{isa}" if isa else "")
    return {"name": model or "cpu", "class": cls, "driver": None, "cuda": None}


def cpu_info(cpuinfo: str = "/proc/cpuinfo") -> tuple[str | None, set[str]]:
    """(model name, feature flags) of the first CPU in /proc/cpuinfo; (None, empty) where there is none."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)  # the first processor's block is enough
    except OSError:
        return None, set()
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    model = fields.get("model name") or fields.get("cpu model") or fields.get("hardware")
    return model or None, set((fields.get("flags") or fields.get("features") or "").split())


def vector_isa(flags: set[str]) -> str | None:
    """The widest x86 vector ISA a native build uses (``avx512``, ``avx2``); None elsewhere or below AVX2."""
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else None
