"""Build llama-server at the commit checked out in the bisect worktree, without publishing it.

The source is the worktree (``LLAMA_CPP_DIR``), so build.make_plan keys one build folder by its path and the
flags: every step of every bisect of a repository reuses it, and ninja rebuilds what the checkout changed
(through ccache when it is installed, as ``nox -s build`` does). The binary is used where ninja left it:
``build/bin/llama-server`` (the user's published binary) is never touched, not even on a failed build,
which is why build.configure/compile_target (they unpublish on failure) are not used. A builder is any
``(tree, log, build_argv) -> binary`` callable named ``module:function``; the tests use a fake one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from specsuite.cases.schema import Case
from specsuite.common.errors import UserError
from specsuite.llamacpp import cmake as build
from specsuite.llamacpp import inplace, toolchain
from specsuite.llamacpp.inplace import BuildFailed, load_builder  # BuildFailed: the step exits 125

DEFAULT_BUILDER = "specsuite.bisect.build:build_commit"
Builder = Callable[[Path, Path, list[str]], Path]
__all__ = ["BuildFailed", "build_commit", "load_builder", "parse_build_argv", "preflight"]


def parse_build_argv(build_argv: list[str]) -> list[str]:
    """The build flags bisect passes on (--cpu, --cuda, --cublas-from-wheel, -DNAME=VALUE); UserError else."""
    args, unknown = build.parser().parse_known_args(build_argv)
    if unknown:
        raise UserError(
            f"unknown arguments {' '.join(unknown)}: bisect takes --good, --bad, --case, --metric, --rtol, "
            "--repeat, --allow-cpu, --out and the build's flags (--cpu, --cuda, -DNAME=VALUE)"
        )
    if args.configure_only:
        raise UserError("--configure-only means no binary: bisect needs one at every step; drop it")
    return build_argv


def _env(tree: Path) -> dict[str, str]:
    """The worktree as the source, no LLAMA_CPP_REF; the build's own tool environment (build.tool_env: no
    Hub tokens, ccache's cache where ``nox -s build`` keeps it)."""
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_REF"}
    return build.tool_env({**env, "LLAMA_CPP_DIR": str(tree)})


def plan(tree: Path, build_argv: list[str]) -> build.Plan:
    return build.make_plan(build.parser().parse_args(build_argv), _env(tree))


def preflight(tree: Path, build_argv: list[str], case: Case, allow_cpu: bool) -> build.Plan:
    """Before the first build: build tools and ccache present (installed where missing, as ``specsuite
    build`` does: this venv may not be the build's), the backend decided and able to run the case."""
    toolchain.ensure_build_tools()
    _, ccache_note = toolchain.ensure_ccache()
    p = plan(tree, build_argv)
    for note in [*([ccache_note] if ccache_note else []), *p.notes]:
        print(f"bisect: build: {note}", flush=True)
    if case.gpu and p.backend == "cpu" and not allow_cpu:
        raise UserError(
            f"--case {case.name} is a GPU case ({case.tier} tier) but the build would be CPU "
            f"({p.notes[0] if p.notes else 'no CUDA'}); add --cuda to require CUDA, or --allow-cpu"
        )
    print(f"bisect: build folder {p.build_dir} (reused by every step)", flush=True)
    return p


def build_commit(tree: Path, log: Path, build_argv: list[str]) -> Path:
    """Configure once, then ninja llama-server in the worktree's build folder (``llamacpp.inplace``); the
    binary's path, its build-info.json beside its ``bin/`` folder."""
    binary, _ = inplace.build(plan(tree, build_argv), log, lambda line: print(f"bisect: {line}", flush=True))
    return binary
