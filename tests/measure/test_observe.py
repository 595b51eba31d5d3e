"""GPU memory and its growth in a whole run: no GPU exists here, so a fake CUDA llama-server
(tests/fakellama.py, really serving HTTP) reports its GPU memory through a fake nvidia-smi on PATH, as the
driver's ``--query-compute-apps=pid,used_memory`` lists it; the suite reads it per server process. Also
the prefill numbers from the servers' own timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakellama import fake_llama, fake_nvidia_smi, gpu_devices

from specsuite.common import paths
from specsuite.measure.observe import GROWTH_MIB, Watch
from specsuite.measure.outcome import Completion

CASE = "tiny-simple-fixed"
DROPPED = (
    "SPEC_METHODS",
    "SPEC_REPEAT",
    "SPEC_NO_HISTORY",
    "SPEC_GPUS",
    "SPEC_WORKERS",
    "CUDA_VISIBLE_DEVICES",
    "GITHUB_STEP_SUMMARY",
)
EXACT = {"drafted": 23, "accepted": 23, "drafts": 8, "per_pos": [8, 8, 7]}  # the case's exact counters


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = tmp_path_factory.mktemp("models")
    fetch_models(FetchOptions(methods=[CASE], model_dir=folder, tty=False))
    return folder


def gpu_run(root: Path, models: Path, mib_per_request: float) -> tuple[int, dict[str, Any]]:
    apps = root / "apps"
    apps.mkdir(parents=True)
    smi = fake_nvidia_smi(root / "smi", ["NVIDIA H200"], apps)
    exe = fake_llama(
        root / "bin",
        devices=gpu_devices(["NVIDIA H200"]),
        gpu_apps=str(apps),
        gpu_mib_per_request=mib_per_request,
        **EXACT,
    )
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env.update(
        PATH=f"{smi.parent}{os.pathsep}{os.environ['PATH']}",
        LLAMA_SERVER_BIN_PATH=str(exe),
        SPEC_MODEL_DIR=str(models),
        SPEC_CACHE_DIR=str(root / "cache"),
        SPEC_REPEAT="3",
        SPEC_HISTORY=str(root / "history.sqlite"),
        SPEC_RESULTS_DIR=str(root / "out"),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "specsuite", "run-tier", CASE],
        cwd=paths.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, json.loads((root / "out" / "results.json").read_text())


@pytest.mark.slow
def test_gpu_memory_per_server_process_and_a_leak_fails_memory_growth(tmp_path: Path, models: Path) -> None:
    rc, steady = gpu_run(tmp_path / "steady", models, 0.0)
    mem = steady["cases"][CASE]["memory"]
    assert rc == 0 and mem["gpu_peak_mib"] == 1000.0 and mem["base_gpu_peak_mib"] == 1000.0
    assert mem["gpu_mib"] == [1000.0] * 5 and mem["gpu_growth_mib"] == 0.0  # cold, warm-up, 3 rounds
    # llama.cpp #23446: the speculative server's GPU memory grows with every request
    rc, leak = gpu_run(tmp_path / "leak", models, 10.0)
    rec = leak["cases"][CASE]
    assert rc == 1 and (rec["status"], rec["reason"]) == ("failed", "memory_growth")
    assert rec["memory"]["gpu_mib"] == [1030.0, 1040.0, 1070.0, 1100.0, 1130.0]  # after 3, 4, 7, 10, 13
    assert rec["memory"]["gpu_growth_mib"] == 90.0 > GROWTH_MIB + 0.01 * 1130.0
    assert "GPU memory grew 90.0 MiB over 9 requests after the warm-up" in rec["message"]
    assert rec["memory"]["base_gpu_peak_mib"] == 1000.0 + 10.0 * 9 + 10.0  # the baseline's own: its requests


def test_prefill_is_the_servers_own_prompt_timing() -> None:
    class Srv:
        pid = None

    watch = Watch(Srv(), Srv(), gpu=False)  # type: ignore[arg-type]
    spec = [
        Completion("a", (), 32, 10.0, prompt_n=10, prompt_ms=2.0),
        Completion("b", (), 32, 10.0, prompt_n=30, prompt_ms=6.0),
    ]
    base = [
        Completion("a", (), 32, 20.0, prompt_n=10, prompt_ms=1.0),
        Completion("b", (), 32, 20.0, prompt_n=30, prompt_ms=3.0),
    ]
    watch.round("base", base)
    watch.round("spec", spec)
    p = watch.prefill()
    assert p is not None and (p.prompt_tps, p.base_prompt_tps, p.ratio) == (5000.0, 10000.0, 0.5)
    assert (p.ttft_ms, p.base_ttft_ms) == (4.0, 2.0)  # the median request's prompt_ms
    assert watch.memory() is None  # no process to read
