#!/usr/bin/env python3
"""Build-time benchmark: ``python -m specsuite build --cpu`` from an empty build folder against plain
``cmake`` + ``ninja`` of the same tree with the same flags, side by side in one run, then the no-op rebuild.

    python benchmarks/bench_build.py [--repeats N] [--noop-runs M]

Goals (issue 2): full-build ratio specsuite / plain <= 1.05; no-op rebuild < 10 s. ccache is disabled for
both sides (CCACHE_DISABLE=1) so that neither reuses the other's objects, and the builds go to a
temporary cache (sharing only the unpacked source), so the per-user build folders are not touched; the
specsuite runs do publish to build/bin, as the real command does. The runs alternate which side goes
first, so a change in machine load hits both. Each full build takes minutes: run one benchmark at a time.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from specsuite.common import paths  # noqa: E402
from specsuite.llamacpp import cmake as build  # noqa: E402 - after the path set-up above
from specsuite.llamacpp import toolchain  # noqa: E402


def timed(cmd: list[str], env: dict[str, str], log: Path) -> float:
    with log.open("a") as fh:
        fh.write(f"$ {shlex.join(cmd)}\n")
        fh.flush()
        start = time.monotonic()
        res = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False, cwd=REPO)
        seconds = time.monotonic() - start
    if res.returncode != 0:
        sys.exit(f"failed (exit {res.returncode}): {shlex.join(cmd)}; see {log}")
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=1, help="full builds per side (default 1: ~5 min each)")
    ap.add_argument("--noop-runs", type=int, default=3, help="no-op rebuilds to time (default 3)")
    args = ap.parse_args()

    # A cache of its own (fresh build keys, nobody else's build folder is touched) that shares the
    # unpacked pinned source with the per-user cache, so no download is timed.
    bench_cache = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    (paths.cache_dir() / "llama.cpp").mkdir(parents=True, exist_ok=True)
    (bench_cache / "llama.cpp").symlink_to(paths.cache_dir() / "llama.cpp")
    os.environ.update(CCACHE_DISABLE="1", SPEC_CACHE_DIR=str(bench_cache))  # here and in the children
    for var in ("LLAMA_CPP_DIR", "LLAMA_CPP_REF", "SPEC_CMAKE_ARGS"):
        os.environ.pop(var, None)  # the pinned source with the default flags
    env = dict(os.environ)
    try:
        return bench(args, env, bench_cache)
    finally:
        shutil.rmtree(bench_cache, ignore_errors=True)  # removes the link, not the shared source


def bench(args: argparse.Namespace, env: dict[str, str], bench_cache: Path) -> int:
    cmake, ninja = toolchain.ensure_build_tools()
    plan = build.make_plan(build.parser().parse_known_args(["--cpu"])[0], env)
    jobs = str(build.jobs())
    ours = [sys.executable, "-m", "specsuite", "build", "--cpu"]
    log = Path(tempfile.mkdtemp(prefix="bench-build-")) / "bench.log"
    print(f"source: {plan.source.path}\nflags:  {shlex.join(plan.flags)}\njobs:   {jobs}\nlog:    {log}")
    print(f"load average at start: {os.getloadavg()}", flush=True)

    def run_ours() -> float:
        shutil.rmtree(plan.build_dir, ignore_errors=True)  # empty build folder for this key
        return timed(ours, env, log)

    def run_plain() -> float:
        tmp = Path(tempfile.mkdtemp(prefix="plain-", dir=bench_cache))
        try:
            configure = [cmake.path, "-S", str(plan.source.path), "-B", str(tmp), *plan.flags]
            configure.insert(1, f"-DCMAKE_MAKE_PROGRAM={ninja.path}")
            return timed(configure, env, log) + timed(
                [ninja.path, "-C", str(tmp), "-j", jobs, "llama-server"], env, log
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    samples: dict[str, list[float]] = {"specsuite": [], "plain": []}
    for i in range(args.repeats):
        order = [("plain", run_plain), ("specsuite", run_ours)]
        for name, fn in order if i % 2 else reversed(order):  # specsuite last on even rounds
            seconds = fn()
            samples[name].append(seconds)
            print(f"round {i + 1}: {name:9s} full build {seconds:7.1f} s", flush=True)
    if not build.is_configured(plan.build_dir):
        run_ours()  # the no-op needs a built folder
    noop = [timed(ours, env, log) for _ in range(args.noop_runs)]

    ours_med, plain_med = statistics.median(samples["specsuite"]), statistics.median(samples["plain"])
    print()
    print(
        f"full build, median of {args.repeats}: specsuite {ours_med:.1f} s, "
        f"plain cmake+ninja {plain_med:.1f} s"
    )
    print(f"ratio specsuite / plain: {ours_med / plain_med:.3f} (goal <= 1.05)")
    print(f"no-op rebuild, median of {len(noop)}: {statistics.median(noop):.2f} s (goal < 10 s); runs {noop}")
    print(f"samples: {samples}")
    print(
        f"commands: {shlex.join(ours)}  vs  cmake -S <src> -B <tmp> <same flags> && ninja -C <tmp> -j {jobs}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
