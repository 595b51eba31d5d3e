#!/usr/bin/env python3
"""Benchmark the fetcher against the plain tools, side by side in one run (results: docs/benchmarks.md).

1. Throttled: the loopback fake Hub serves each connection at ``--rate-mib`` MiB/s (as a CDN edge caps
   each connection, not the client). ``python -m specsuite fetch-models`` (default settings: 8 ranges at
   once, hash while it arrives, fsync, atomic publish) against ``curl -o`` (one connection) and
   ``aria2c -x 8 -s 8`` (the plain tool for parallel ranges) on the same file, alternating, median of
   ``--runs``. Goals: at least 4x faster than curl, at most 1.2x aria2c.
2. Unthrottled: the same server at full speed. ``fetch-models`` (default settings, and ``--connections 1``)
   against ``curl -o`` and ``curl -o`` + ``sync FILE`` (the same durability). Goal: at most 1.15x curl.
3. Warm ``fetch-models`` on an already-verified cache of several GiB against ``sha256sum`` of the same files.
   Goal: under 1 s and at least 50x faster.

Usage: python benchmarks/bench_fetch.py [--throttled-gib 0.5] [--rate-mib 16] [--cold-gib 2] [--runs 5]
       [--throttled-runs 3] [--warm-gib 6] [--warm-runs 3] [--workdir DIR]
Needs about 2x the largest cold file plus the warm GiB of free disk under --workdir; removes it after.
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
from collections.abc import Callable
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


class Cold:
    """One file on one server, and the commands that fetch it, each leaving nothing behind."""

    def __init__(self, work: Path, hub: FakeHub, size: int, sha: str, env: dict) -> None:
        self.work, self.size, self.env = work, size, env
        self.lock = work / "cold.lock"
        self.lock.write_text(lock_text([("big.gguf", size, sha)]))
        self.url = f"{hub.url}/{REPO}/resolve/{REVISION}/big.gguf"
        self.out = work / "out" / "big.gguf"

    def _check_and_clean(self) -> None:
        assert self.out.stat().st_size == self.size, self.out
        shutil.rmtree(self.out.parent)

    def command(self, name: str) -> list[str]:
        """The exact command line each tool runs (printed with the results)."""
        return {
            "curl -o": ["curl", "-sS", "--fail", "-o", str(self.out), self.url],
            "curl -o + sync FILE": ["sh", "-c",
                                    f'curl -sS --fail -o "{self.out}" "{self.url}" && sync "{self.out}"'],
            "aria2c -x 8 -s 8": ["aria2c", "-x", "8", "-s", "8", "-d", str(self.out.parent), "-o", "big.gguf",
                                 "--console-log-level=warn", "--summary-interval=0", "--allow-overwrite=true",
                                 self.url],
            "fetch-models": [sys.executable, "-m", "specsuite", "fetch-models", "--models", "big.gguf",
                             "--lock", str(self.lock), "--model-dir", str(self.out.parent)],
            "fetch-models --connections 1": [sys.executable, "-m", "specsuite", "fetch-models", "--models",
                                             "big.gguf", "--connections", "1", "--lock", str(self.lock),
                                             "--model-dir", str(self.out.parent)],
        }[name]  # fmt: skip

    def run(self, name: str) -> float:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        elapsed = timed(self.command(name), self.env)
        self._check_and_clean()
        return elapsed


def alternate(cold: Cold, names: list[str], runs: int) -> dict[str, list[float]]:
    """Each tool once per round, in turn: a drifting load on a shared machine hits them all alike."""
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(runs):
        for n in names:
            times[n].append(cold.run(n))
    return times


def report(title: str, cold: Cold, times: dict[str, list[float]], ratios: list[tuple[str, Callable]]) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    gib = cold.size / 2**30
    print(f"{title}: {gib:.2f} GiB, median of {len(next(iter(times.values())))} "
          f"(load average {os.getloadavg()[0]:.1f})")  # fmt: skip
    for k, v in times.items():
        runs = ", ".join(f"{t:.2f}" for t in v)
        print(f"  {k:30s} {med[k]:7.2f} s  ({gib / med[k]:.3f} GiB/s)   runs: {runs}")
        print(f"      $ {' '.join(cold.command(k))}")
    for text, fn in ratios:
        print(f"  {text}: {fn(med):.3f}")


def throttled(work: Path, size: int, sha: str, rate: float, runs: int, env: dict) -> None:
    with FakeHub({"big.gguf": work / "src.bin"}, rate=rate) as hub:
        cold = Cold(work, hub, size, sha, {**env, "HF_ENDPOINT": hub.url})
        names = ["curl -o", "aria2c -x 8 -s 8", "fetch-models"]
        times = alternate(cold, names, runs)
    report(f"throttled to {rate / 2**20:.0f} MiB/s per connection", cold, times, [
        ("speed-up fetch vs curl -o (goal >= 4)", lambda m: m["curl -o"] / m["fetch-models"]),
        ("ratio fetch / aria2c (goal <= 1.2)", lambda m: m["fetch-models"] / m["aria2c -x 8 -s 8"]),
    ])  # fmt: skip


def unthrottled(work: Path, size: int, sha: str, runs: int, env: dict) -> None:
    with FakeHub({"big.gguf": work / "src.bin"}) as hub:
        cold = Cold(work, hub, size, sha, {**env, "HF_ENDPOINT": hub.url})
        names = ["curl -o", "curl -o + sync FILE", "fetch-models", "fetch-models --connections 1"]
        times = alternate(cold, names, runs)
    report("unthrottled", cold, times, [
        ("ratio fetch / curl -o (goal <= 1.15)", lambda m: m["fetch-models"] / m["curl -o"]),
        ("ratio fetch / curl -o + sync (same durability)",
         lambda m: m["fetch-models"] / m["curl -o + sync FILE"]),
        ("ratio fetch --connections 1 / curl -o", lambda m: m["fetch-models --connections 1"] / m["curl -o"]),
    ])  # fmt: skip


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
    from specsuite.models.fetch import FetchOptions, fetch_models

    inproc = []
    for _ in range(runs):
        t = time.perf_counter()
        fetch_models(
            FetchOptions(models=[e[0] for e in entries], lock=lock, model_dir=models, offline=True, tty=False)
        )
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
    ap.add_argument("--throttled-gib", type=float, default=0.5)
    ap.add_argument("--rate-mib", type=float, default=16.0, help="MiB/s per connection when throttled")
    ap.add_argument("--throttled-runs", type=int, default=3)
    ap.add_argument("--cold-gib", type=float, default=2.0, help="the unthrottled file")
    ap.add_argument("--runs", type=int, default=5, help="unthrottled runs")
    ap.add_argument("--warm-gib", type=float, default=6.0)
    ap.add_argument("--warm-files", type=int, default=3)
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/bench_fetch")
    a = ap.parse_args()
    for tool in ("curl", "aria2c", "sha256sum"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install curl aria2 coreutils)")
    work = Path(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # Our own cache and Hugging Face home: nothing of the machine's takes part, nothing is left in it.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPEC_CACHE_DIR": str(work / "cache"),
           "HF_HOME": str(work / "hf-home")}  # fmt: skip
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "LLAMA_CACHE", "HF_HUB_OFFLINE", "SPEC_HF_CACHE",
                 "SPEC_FETCH_CONNECTIONS", "HF_TOKEN", "HF_TOKEN_PATH"):  # fmt: skip
        env.pop(name, None)
    try:
        if a.throttled_gib > 0:
            size = int(a.throttled_gib * 2**30)
            throttled(
                work, size, random_file(work / "src.bin", size), a.rate_mib * 2**20, a.throttled_runs, env
            )
        if a.cold_gib > 0:
            size = int(a.cold_gib * 2**30)
            unthrottled(work, size, random_file(work / "src.bin", size), a.runs, env)
        (work / "src.bin").unlink(missing_ok=True)
        if a.warm_gib > 0:
            warm(work, int(a.warm_gib * 2**30), a.warm_files, a.warm_runs, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
