#!/usr/bin/env python3
"""Two real llama.cpp commits through the suite: what the configuration record and `specsuite changes` say.

    python benchmarks/bench_two_commits.py [--work DIR] [--pinned BINARY] [--build-only]

llama-cpp-python 0.3.35 and 0.3.36 on PyPI vendor two llama.cpp commits (4df29be and 0c1e570, the pin).
This builds 0.3.35's llama-server for the CPU (its sdist downloaded with pip, unpacked, configured with the
flags of the pinned build and compiled with ccache: beside its tree, as the suite's own build does, so the
objects of every file the two commits share come from the cache), then runs the synthetic tier with it and
with the pinned build (``--pinned``, default the suite's binary) into one history of its own, and prints
both summaries' first lines, the configuration diff between the two runs and `specsuite changes`.
Everything goes under ``--work`` (default build/two-commits); a second invocation reuses the build.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specsuite.common import paths
from specsuite.common.filehash import sha256_file
from specsuite.common.pip import pip_download
from specsuite.llamacpp import cmake, source, toolchain
from specsuite.results.config import changes
from specsuite.results.document import load_run

REQUIREMENT, FILENAME = "llama-cpp-python==0.3.35", "llama_cpp_python-0.3.35.tar.gz"


def sdist_tree(work: Path) -> Path:
    """0.3.35's vendor/llama.cpp, downloaded and unpacked once."""
    tree = work / "src" / "llama_cpp_python-0.3.35" / "vendor" / "llama.cpp"
    if tree.is_dir():
        return tree
    tarball = work / "sdist" / FILENAME
    if not tarball.is_file():
        pip_download([REQUIREMENT], tarball.parent, binary=False, check="Check access to PyPI.")
    print(f"sdist: {tarball.name} {tarball.stat().st_size} bytes sha256 {sha256_file(tarball)}", flush=True)
    with tarfile.open(tarball) as tar:
        source.safe_extract(tar, work / "src")
    source.check_tree(tree, FILENAME)
    return tree


def build(tree: Path) -> Path:
    """The CPU llama-server of ``tree``, with the pinned build's flags, beside the tree (ccache base_dir)."""
    binary = tree.parent / "build-cpu" / "bin" / "llama-server"
    if binary.is_file():
        return binary
    cmake_tool, ninja = toolchain.ensure_build_tools()
    toolchain.ensure_ccache()
    env = cmake.tool_env()
    compiler_path, _ = toolchain.find_compiler(env)
    flags = [*cmake.BASE_FLAGS, *cmake.ccache_flags(env, False)]
    flags += cmake.amx_flags(compiler_path, [], [])
    env["CCACHE_BASEDIR"] = str(tree.parent)
    folder = tree.parent / "build-cpu"
    configure = [
        cmake_tool.path,
        "-S",
        str(tree),
        "-B",
        str(folder),
        f"-DCMAKE_MAKE_PROGRAM={ninja.path}",
        *flags,
    ]
    compile_ = [ninja.path, "-C", str(folder), "-j", str(cmake.jobs()), cmake.TARGET]
    stats = ["ccache", "--print-stats"]
    before = subprocess.run(stats, env=env, capture_output=True, text=True, check=False).stdout
    t0 = time.monotonic()
    for cmd in (configure, compile_):
        print(f"build: {shlex.join(cmd)}", flush=True)
        subprocess.run(cmd, env=env, check=True)
    after = subprocess.run(stats, env=env, capture_output=True, text=True, check=False).stdout
    print(f"build: {time.monotonic() - t0:.0f} s; ccache {_hits(before, after)}", flush=True)
    return binary


def _hits(before: str, after: str) -> str:
    """Direct and preprocessed hits and misses of this build, from `ccache --print-stats` before and after."""

    def stat(text: str, key: str) -> int:
        line = next((ln for ln in text.splitlines() if ln.startswith(key + "\t")), f"{key}\t0")
        return int(line.split("\t")[1])

    keys = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")
    return ", ".join(f"{k} {stat(after, k) - stat(before, k)}" for k in keys)


def run_tier(binary: Path, work: Path, name: str) -> Path:
    out = work / "results" / name
    env = {
        **os.environ,
        "LLAMA_SERVER_BIN_PATH": str(binary),
        "SPEC_HISTORY": str(work / "history.sqlite"),
        "SPEC_RESULTS_DIR": str(out),
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    subprocess.run(
        [sys.executable, "-m", "specsuite", "run-tier", "synthetic"],
        env=env,
        cwd=paths.REPO_ROOT,
        capture_output=True,
        check=False,
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=paths.BUILD_DIR / "two-commits")
    ap.add_argument(
        "--pinned", type=Path, default=None, help="the pinned build (default: the suite's binary)"
    )
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args()
    work = args.work.absolute()
    older = build(sdist_tree(work))
    print(subprocess.run([str(older), "--version"], capture_output=True, text=True).stderr.strip())
    if args.build_only:
        return 0
    (work / "history.sqlite").unlink(missing_ok=True)
    load = os.getloadavg()
    now = dt.datetime.now(dt.timezone.utc)
    print(f"{now:%Y-%m-%d %H:%M} UTC, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    runs = [run_tier(older, work, "0.3.35"), run_tier(args.pinned or paths.server_binary(), work, "0.3.36")]
    for out in runs:
        print(
            f"\n== {out.name}: summary.md, first lines\n"
            + "\n".join((out / "summary.md").read_text().splitlines()[:4])
        )
    a, b = (load_run(out) for out in runs)
    print("\n== configuration diff (results.config.changes, run level)")
    for line in changes((a.config, None), (b.config, None), (a.binary.commit or "?", b.binary.commit or "?")):
        print(f"- {line}")
    print("\n== specsuite changes")
    db = work / "history.sqlite"
    subprocess.run(
        [sys.executable, "-m", "specsuite", "changes", "--db", str(db)], cwd=paths.REPO_ROOT, check=False
    )
    print("\n== cases whose status differs")
    for name in sorted(set(a.cases) | set(b.cases)):
        ra, rb = a.cases.get(name), b.cases.get(name)
        sa = f"{ra.status} {ra.reason or ''}".strip() if ra else "absent"
        sb = f"{rb.status} {rb.reason or ''}".strip() if rb else "absent"
        if sa != sb:
            print(f"- {name}: {sa} -> {sb}")
    print(json.dumps({"older": str(runs[0]), "newer": str(runs[1])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
