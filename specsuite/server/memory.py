"""A server process's memory: resident (``/proc/<pid>/status``) and GPU (``nvidia-smi``), sampled at the
points a case chooses, and whether it kept growing across repeated requests.

Resident memory: ``VmHWM`` is the kernel's own peak of the resident set (no sampling can miss a spike
between two samples) and ``VmRSS`` the current one. Written by hand: psutil reports no peak resident set
on Linux (only Windows' ``peak_wset``), and two fields of one file need no dependency. On a system without
``/proc`` nothing is reported (None), never a guess.

GPU memory: ``nvidia-smi --query-compute-apps=pid,used_memory`` lists each process's memory on each GPU;
a server's is the sum of its rows. nvidia-smi keeps no per-process peak, so the GPU peak is the largest of
the samples (taken after each pass of the prompts, where llama.cpp's buffers have grown if they grow).

Growth (llama.cpp #23446: VRAM grew with every MTP run until OOM): the memory after the last pass minus
after the first warmed pass (the cold pass and the warm-up pay for graph and buffer allocations that a
healthy server makes once), over the requests between them.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from specsuite.server.device import smi

GPU_QUERY = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
_KIB = re.compile(r"^(VmRSS|VmHWM):\s+(\d+)\s+kB$", re.MULTILINE)


def proc_status(pid: int, proc: Path = Path("/proc")) -> dict[str, int]:
    """``{"VmRSS": kib, "VmHWM": kib}`` of a live process; {} when it is gone or there is no /proc."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return {}
    return {name: int(kib) for name, kib in _KIB.findall(text)}


def parse_compute_apps(text: str) -> dict[int, float]:
    """MiB per process from ``nvidia-smi --query-compute-apps=pid,used_memory`` rows (one per process and
    GPU; a process on several GPUs is summed). Rows that are not ``pid, number`` (``[N/A]``) are skipped."""
    out: dict[int, float] = {}
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(row) >= 2 and row[0].strip().isdigit() and re.fullmatch(r"\d+(\.\d+)?", row[1].strip()):
            pid = int(row[0].strip())
            out[pid] = out.get(pid, 0.0) + float(row[1].strip())
    return out


def gpu_mib(pids: list[int]) -> dict[int, float] | None:
    """Each pid's GPU memory in MiB (0.0 for a pid nvidia-smi does not list); None without nvidia-smi."""
    text = smi(*GPU_QUERY)
    if text is None:
        return None
    found = parse_compute_apps(text)
    return {pid: found.get(pid, 0.0) for pid in pids}


def _mib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024, 2)


@dataclass
class Sample:
    requests: int  # the requests this server had answered when the sample was taken
    rss_mib: float | None
    gpu_mib: float | None


@dataclass
class Sampler:
    """Samples of one server (``pid``) and, beside it, the speculation-off baseline (``base_pid``)."""

    pid: int
    base_pid: int | None = None
    gpu: bool = False  # ask nvidia-smi too (a GPU build that sees a GPU)
    samples: list[Sample] = field(default_factory=list)
    base_gpu: list[float] = field(default_factory=list)
    peak_kib: int | None = None
    base_peak_kib: int | None = None

    def sample(self, requests: int) -> None:
        """After a pass of the prompts: resident and GPU memory now, and the peaks so far."""
        status = proc_status(self.pid)
        gpus = gpu_mib([p for p in (self.pid, self.base_pid) if p is not None]) if self.gpu else None
        self.samples.append(Sample(requests, _mib(status.get("VmRSS")), gpus.get(self.pid) if gpus else None))
        if gpus and self.base_pid is not None:
            self.base_gpu.append(gpus[self.base_pid])
        self.peak_kib = status.get("VmHWM", self.peak_kib)
        if self.base_pid is not None:
            self.base_peak_kib = proc_status(self.base_pid).get("VmHWM", self.base_peak_kib)

    def growth(self, what: str, first: int = 0) -> tuple[float | None, int | None]:
        """(MiB, requests) from sample ``first`` to the last: ``what`` is rss_mib or gpu_mib."""
        pts = [(s.requests, getattr(s, what)) for s in self.samples[first:] if getattr(s, what) is not None]
        if len(pts) < 2:
            return None, None
        return round(pts[-1][1] - pts[0][1], 2), pts[-1][0] - pts[0][0]

    @property
    def peak_mib(self) -> float | None:
        return _mib(self.peak_kib)

    @property
    def base_peak_mib(self) -> float | None:
        return _mib(self.base_peak_kib)
