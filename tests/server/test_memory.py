"""server.memory and its judgement (suite.observe): resident memory of real processes from /proc, GPU memory
from a fake nvidia-smi (no GPU exists here: the fake prints what the driver prints for --query-compute-apps),
and the memory_growth rule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakellama import fake_nvidia_smi

from specsuite.measure.observe import GROWTH_MIB, limit, memory_failures
from specsuite.results.record import Memory
from specsuite.server.memory import Sampler, gpu_mib, parse_compute_apps, proc_status

# A process that holds 8 MiB more, touched, each time it reads a line, and says so.
GROWER = (
    "import sys\nheld = []\n"
    "for line in sys.stdin:\n    held.append(bytearray(8 << 20))\n    print(len(held), flush=True)\n"
)


@pytest.fixture
def grower():
    proc = subprocess.Popen(
        [sys.executable, "-c", GROWER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    yield proc
    proc.kill()
    proc.wait()


def _grow(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("more\n")
    proc.stdin.flush()
    proc.stdout.readline()


def test_resident_memory_and_its_peak_come_from_proc(grower) -> None:
    mine = proc_status(os.getpid())
    assert mine["VmHWM"] >= mine["VmRSS"] > 0
    assert proc_status(2**22 + 12345) == {}  # no such process: nothing, not a guess
    mem = Sampler(grower.pid)
    _grow(grower)  # the first one also pays for the interpreter's own first allocations
    mem.sample(1)
    for _ in range(3):
        _grow(grower)
    mem.sample(4)
    growth, requests = mem.growth("rss_mib")
    assert requests == 3 and growth is not None and 23 < growth < 32, growth  # 3 x 8 MiB held, and the heap
    assert mem.peak_mib is not None and mem.peak_mib >= mem.samples[-1].rss_mib


def test_growth_past_the_limit_fails_memory_growth() -> None:
    healthy = Memory(peak_rss_mib=26.0, growth_mib=0.04, growth_requests=87, rss_mib=[26.0, 26.04])
    assert memory_failures(healthy) == [] and limit(26.0) == GROWTH_MIB + 0.26
    leak = Memory(peak_rss_mib=60.0, growth_mib=24.0, growth_requests=3, rss_mib=[36.0, 60.0])
    [f] = memory_failures(leak)
    assert f.reason == "memory_growth" and "resident memory grew 24.0 MiB over 3 requests" in f.message
    gpu = Memory(gpu_peak_mib=20000.0, gpu_growth_mib=900.0, growth_requests=3, gpu_mib=[19100.0, 20000.0])
    [g] = memory_failures(gpu)
    assert g.reason == "memory_growth" and "GPU memory grew 900.0 MiB" in g.message and "216" in g.message
    assert memory_failures(None) == []


def test_gpu_memory_per_process_from_nvidia_smi(tmp_path: Path, monkeypatch) -> None:
    rows = "123, 2048\n456, 1000\n456, 24\n789, [N/A]\n"
    assert parse_compute_apps(rows) == {123: 2048.0, 456: 1024.0}  # a process on two GPUs is summed
    path = os.environ.get("PATH", "")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu_mib([123]) is None  # no nvidia-smi: nothing
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "123").write_text("123, 2048\n")
    smi = fake_nvidia_smi(tmp_path / "smi", ["NVIDIA H200"], apps)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{path}")
    assert gpu_mib([123, 999]) == {123: 2048.0, 999: 0.0}  # a pid nvidia-smi does not list holds nothing
