#!/usr/bin/env python3
"""Benchmark the fetcher against the obvious baselines (results go into the README).

1. Cold fetch of one large random file served by the loopback fake Hub: ``python -m specsuite fetch-models``
   (stream + sha256 + fsync + atomic publish) against ``curl -o`` of the same URL, alternating, median of
   ``--runs``. Goal: at most 1.15x curl's time.
2. Warm ``fetch-models`` on an already-verified cache of several GiB against ``sha256sum`` of the same files.
   Goal: under 1 s and at least 50x faster.

Usage: python benchmarks/bench_fetch.py [--cold-gib 2] [--warm-gib 6] [--runs 5] [--warm-runs 3]
       [--workdir DIR]
Needs about cold + warm GiB (+ cold again while a fetch runs) of free disk under --workdir; removes it after.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakehub import REPO, REVISION, FakeHub  # noqa: E402

BLOCK = 64 << 20


def random_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes (no sparse or compressible pages); returns their sha256."""
    import numpy as np

    rng, h = np.random.default_rng(), hashlib.sha256()
    with open(path, "wb") as f:
        for off in range(0, size, BLOCK):
            chunk = rng.bytes(min(BLOCK, size - off))
            f.write(chunk)
            h.update(chunk)
    return h.hexdigest()


def timed(cmd: list[str], env: dict | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def lock_text(entries: list[tuple[str, int, str]]) -> str:
    out = ["version = 1"]
    for name, size, sha in entries:
        out.append(f'[[model]]\nname = "{name}"\nsource = "hf"\nrepo = "{REPO}"\nrevision = "{REVISION}"\n'
                   f'path = "{name}"\nsize = {size}\nsha256 = "{sha}"')  # fmt: skip
    return "\n\n".join(out) + "\n"


def cold(work: Path, hub: FakeHub, size: int, sha: str, runs: int, env: dict) -> None:
    lock = work / "cold.lock"
    lock.write_text(lock_text([("big.gguf", size, sha)]))
    models = work / "cold-models"
    url = f"{hub.url}/{REPO}/resolve/{REVISION}/big.gguf"
    fetch_cmd = [sys.executable, "-m", "specsuite", "fetch-models", "--models", "big.gguf",
                 "--lock", str(lock), "--model-dir", str(models)]  # fmt: skip
    times: dict[str, list[float]] = {"curl -o": [], "curl -o + sync FILE": [], "fetch-models": []}
    out = work / "curl.out"
    for _ in range(runs):  # alternate, so drifting load on a shared machine hits all three alike
        times["curl -o"].append(timed(["curl", "-sS", "--fail", "-o", str(out), url]))
        out.unlink()
        times["curl -o + sync FILE"].append(
            timed(["sh", "-c", f'curl -sS --fail -o "{out}" "{url}" && sync "{out}"'])
        )
        out.unlink()
        times["fetch-models"].append(timed(fetch_cmd, env))
        assert (models / "big.gguf").stat().st_size == size
        shutil.rmtree(models)
    med = {k: statistics.median(v) for k, v in times.items()}
    gib = size / 2**30
    print(f"cold, {gib:.2f} GiB from 127.0.0.1, median of {runs} (load average {os.getloadavg()[0]:.1f}):")
    for k, v in times.items():
        print(
            f"  {k:20s} {med[k]:7.2f} s  ({gib / med[k]:.2f} GiB/s)   "
            f"runs: {', '.join(f'{t:.2f}' for t in v)}"
        )
    print(f"  ratio fetch / curl -o        {med['fetch-models'] / med['curl -o']:.3f}  (goal <= 1.15)")
    print(
        f"  ratio fetch / curl -o + sync {med['fetch-models'] / med['curl -o + sync FILE']:.3f}  "
        "(same durability)"
    )


def warm(work: Path, warm_bytes: int, n_files: int, runs: int, env: dict) -> None:
    models = work / "warm-models"
    models.mkdir()
    entries = []
    for i in range(n_files):
        name = f"warm{i}.gguf"
        size = warm_bytes // n_files
        entries.append((name, size, random_file(models / name, size)))
    lock = work / "warm.lock"
    lock.write_text(lock_text(entries))
    names = ",".join(e[0] for e in entries)
    cmd = [sys.executable, "-m", "specsuite", "fetch-models", "--models", names, "--lock", str(lock),
           "--model-dir", str(models), "--offline"]  # fmt: skip
    timed(cmd, env)  # first run: hashes everything once and writes the stamps
    files = [str(models / e[0]) for e in entries]
    sums = [timed(["sha256sum", *files]) for _ in range(runs)]
    cli = [timed(cmd, env) for _ in range(runs)]
    os.environ.update(env)
    from specsuite.models.fetch import fetch_models

    inproc = []
    for _ in range(runs):
        t = time.perf_counter()
        fetch_models(models=[e[0] for e in entries], lock=lock, model_dir=models, offline=True, tty=False)
        inproc.append(time.perf_counter() - t)
    s, c, p = statistics.median(sums), statistics.median(cli), statistics.median(inproc)
    load = os.getloadavg()[0]
    print(
        f"warm, {n_files} files, {warm_bytes / 2**30:.2f} GiB verified cache, "
        f"median of {runs} (load {load:.1f}):"
    )
    print(f"  sha256sum                  {s:8.3f} s")
    print(f"  fetch-models (new process) {c:8.3f} s   {s / c:6.1f}x faster  (goal < 1 s and >= 50x)")
    print(f"  fetch_models() in-process  {p:8.3f} s   {s / p:6.1f}x faster")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold-gib", type=float, default=2.0)
    ap.add_argument("--warm-gib", type=float, default=6.0)
    ap.add_argument("--warm-files", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5, help="cold runs (alternating curl / fetch)")
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/bench_fetch")
    a = ap.parse_args()
    work = Path(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    size = int(a.cold_gib * 2**30)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPEC_CACHE_DIR": str(work / "cache")}
    try:
        sha = random_file(work / "src.bin", size)
        with FakeHub({"big.gguf": work / "src.bin"}) as hub:
            env["HF_ENDPOINT"] = hub.url
            cold(work, hub, size, sha, a.runs, env)
        (work / "src.bin").unlink()
        if a.warm_gib > 0:
            warm(work, int(a.warm_gib * 2**30), a.warm_files, a.warm_runs, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
