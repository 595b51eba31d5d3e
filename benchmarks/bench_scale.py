#!/usr/bin/env python3
"""One suite over a box: the same run serial and spread over workers, wall time side by side.

    python benchmarks/bench_scale.py [--runs N] [--skip-cpu] [--skip-gpu]

1. The synthetic tier on the real CPU build (LLAMA_SERVER_BIN_PATH, else build/bin/llama-server):
   ``run-tier synthetic`` against ``run-tier synthetic --workers 2`` (two cases side by side:
   acceptance only, speed not measured).
2. A fake 4-GPU box (tests/fakellama.py: a fake ``nvidia-smi`` listing 4 H200s and a fake CUDA
   llama-server whose speculative requests sleep 0.5 s, standing in for a GPU's decode time), eight cases
   on four targets: ``--gpus 1`` (serial, one GPU) against ``--gpus all`` (one xdist worker per GPU).

Each wall time is the whole ``specsuite run-tier`` process (probe, model check, pytest, every case, the
results), median of ``--runs``; no history is kept (``--no-history``). Goal: ``--gpus all`` on 4 GPUs at
most 0.35 of the serial wall (a quarter plus the workers' start-up).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fakellama import fake_llama, fake_nvidia_smi, gpu_devices  # noqa: E402

from specsuite.common import paths  # noqa: E402
from specsuite.models.fetch import FetchOptions, fetch_models  # noqa: E402

FAKE_CASES = (
    "tiny-simple-fixed,tiny-eagle3-fixed,tiny-mtp-fixed,tiny-mtp-n8,tiny-simple-random,"
    "tiny-eagle3-random,tiny-mtp-drafter,tiny-auto-drafter"
)
DROPPED = (
    "SPEC_GPUS",
    "SPEC_WORKERS",
    "SPEC_SHARD",
    "SPEC_PLAN",
    "SPEC_METHODS",
    "SPEC_RESULTS_DIR",
    "CUDA_VISIBLE_DEVICES",
    "GITHUB_STEP_SUMMARY",
)


def timed(env: dict[str, str], out: Path, selector: str, *args: str) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "specsuite", "run-tier", selector, "--no-history", *args],
        cwd=ROOT,
        env={**env, "SPEC_RESULTS_DIR": str(out)},
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - t0
    if not (out / "results.json").is_file():
        raise SystemExit(
            f"run-tier {selector} {' '.join(args)} wrote no results:\n{proc.stdout}{proc.stderr}"
        )
    # a red run is still timed, but says so: a case not run (a dead worker) makes a side look faster
    verdict = (out / "summary.md").read_text(encoding="utf-8").splitlines()[0]
    print(f"  {' '.join(args) or 'serial'}: exit {proc.returncode}, {verdict.split(': ', 1)[-1]}", flush=True)
    return wall


def compare(
    name: str, env: dict[str, str], root: Path, selector: str, serial: list[str], spread: list[str], runs: int
) -> None:
    a, b = [], []
    for i in range(runs):  # alternate, so a machine that slows down favours neither side
        a.append(timed(env, root / f"{name}-serial-{i}", selector, *serial))
        b.append(timed(env, root / f"{name}-spread-{i}", selector, *spread))
        print(f"{name} run {i + 1}: serial {a[-1]:.1f} s, {' '.join(spread)} {b[-1]:.1f} s", flush=True)
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"| {name} | {' '.join(serial) or 'serial'}: {ma:.1f} s | {' '.join(spread)}: {mb:.1f} s | "
        f"{mb / ma:.2f} | median of {runs} |",
        flush=True,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1, help="runs of each side (default 1)")
    p.add_argument("--skip-cpu", action="store_true", help="skip the real CPU build part")
    p.add_argument("--skip-gpu", action="store_true", help="skip the fake 4-GPU part")
    a = p.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in DROPPED}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        root = Path(tmp)
        if not a.skip_cpu:
            binary = paths.server_binary()  # LLAMA_SERVER_BIN_PATH, else build/bin
            if not binary.is_file():
                raise SystemExit(f"{binary}: build it first (nox -s build)")
            compare(
                "synthetic tier, real CPU build",
                {**base, "LLAMA_SERVER_BIN_PATH": str(binary)},
                root,
                "synthetic",
                [],
                ["--workers", "2"],
                a.runs,
            )
        if not a.skip_gpu:
            models = root / "models"
            fetch_models(FetchOptions(methods=FAKE_CASES.split(","), model_dir=models, tty=False))
            fake_nvidia_smi(root / "smi", ["NVIDIA H200"] * 4)
            exe = fake_llama(
                root / "bin",
                devices=gpu_devices(["NVIDIA H200"] * 4),
                request_sleep_s=0.5,
                drafted=12,
                accepted=12,
                drafts=4,
                per_pos=[4, 4, 4],
            )
            env = {
                **base,
                "PATH": f"{root / 'smi'}{os.pathsep}{base['PATH']}",
                "LLAMA_SERVER_BIN_PATH": str(exe),
                "SPEC_MODEL_DIR": str(models),
                "SPEC_CACHE_DIR": str(root / "cache"),
            }
            compare(
                "fake 4-GPU box, 8 cases on 4 targets",
                env,
                root,
                FAKE_CASES,
                ["--gpus", "1"],
                ["--gpus", "all"],
                a.runs,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
