"""The device a run measures on: its name, its class (what history compares like with like), driver and CUDA.

The GPU comes from the binary's own ``--list-devices`` (what llama-server will really use); the driver and
CUDA versions from ``nvidia-smi`` where it exists. A CPU build, or a GPU build that sees no GPU, runs on the
CPU: its class is ``cpu-<machine>``.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess

from .probe import Capabilities

_GPU_BACKENDS = ("cuda", "rocm", "vulkan", "metal", "sycl")


def _smi(*args: str) -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        return subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_device_name(line: str) -> str:
    """``CUDA0: NVIDIA H200 (143000 MiB, 142000 MiB free)`` -> ``NVIDIA H200``."""
    return line.split(":", 1)[-1].split(" (", 1)[0].strip()


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def describe(caps: Capabilities) -> dict[str, str | None]:
    """{name, class, driver, cuda} for results.json and the history database."""
    if caps.backend in _GPU_BACKENDS and caps.gpus:
        name = gpu_device_name(caps.gpus[0])
        driver = _smi("--query-gpu=driver_version", "--format=csv,noheader")
        header = _smi() or ""
        cuda = m.group(1) if (m := re.search(r"CUDA Version:\s*([0-9.]+)", header)) else None
        return {
            "name": name,
            "class": slug(name),
            "driver": (driver or "").splitlines()[0] or None,
            "cuda": cuda,
        }
    machine = platform.machine() or "unknown"
    return {"name": "cpu", "class": f"cpu-{slug(machine)}", "driver": None, "cuda": None}
