"""invoke tasks for chores around the suite: fetch, lock and verify models, probe a binary, compare runs.

Each task is a thin wrapper over the ``specsuite`` package (the nox sessions call the same code); a
``UserError`` from the package becomes a clean ``Exit`` with its message and no traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from invoke import Collection, Exit, task

from specsuite.errors import UserError

_LOCK = "models.lock to read (default: models.lock at the repository root)"
_DIR = "model folder (default: SPEC_MODEL_DIR, else ~/.cache/specsuite/models)"


def _call(fn: Callable[..., Any], **kwargs: Any) -> Any:
    try:
        return fn(**kwargs)
    except UserError as exc:
        raise Exit(f"error: {exc}", code=exc.code) from None


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


@task(
    help={
        "tier": "smoke, synthetic, compact, nightly or all",
        "methods": "comma list of case names (e.g. mtp,dflash)",
        "models": "comma list of models.lock names",
        "lock": _LOCK,
        "model_dir": _DIR,
        "jobs": "files downloaded in parallel",
        "offline": "use only what is already in the model folder",
        "frozen": "refuse entries whose size and sha256 are not locked yet",
    }
)
def fetch_models(
    c, tier=None, methods=None, models=None, lock=None, model_dir=None, jobs=4, offline=False, frozen=False
):
    """Fetch and verify the models a tier (or a list of cases or models) needs."""
    from specsuite.fetch import fetch_models as run

    _call(
        run,
        tier=tier,
        methods=_csv(methods),
        models=_csv(models),
        lock=lock,
        model_dir=model_dir,
        jobs=int(jobs),
        offline=offline,
        frozen=frozen,
    )


@task(help={"lock": _LOCK, "check": "write nothing; exit non-zero if the lock differs from the Hub"})
def lock_models(c, lock=None, check=False):
    """Fill size and sha256 of every Hub entry from the Hub API at its pinned revision."""
    from specsuite.lockmodels import lock_models as run

    _call(run, lock=lock, check=check)


@task(help={"lock": _LOCK, "model_dir": _DIR, "full": "re-hash every byte instead of trusting stamps"})
def verify_models(c, lock=None, model_dir=None, full=False):
    """Check the model folder against the lock."""
    from specsuite.fetch import verify_models as run

    _call(run, lock=lock, model_dir=model_dir, full=full)


@task(help={"binary": "llama-server to probe (default: LLAMA_SERVER_BIN_PATH, else build/bin/llama-server)"})
def probe(c, binary=None):
    """Show what a llama-server binary can run: each method of the suite, and why not."""
    from specsuite.probe import probe_command as run

    _call(run, binary=binary)


@task(
    help={
        "a": "baseline: a results/<run> folder or a results.json",
        "b": "candidate: a results/<run> folder or a results.json",
        "markdown": "print markdown even on a terminal (default: markdown only when not on a terminal)",
        "plot": "also save per-position acceptance plots next to B's results",
    }
)
def compare(c, a, b, markdown=False, plot=True):
    """Compare two runs case by case; exit non-zero when B falls below a floor."""
    from specsuite.compare import compare_command as run

    code = _call(run, a=a, b=b, markdown=True if markdown else None, plot=plot)
    if code:
        raise Exit(code=code)


@task(help={"out": "folder for the files (default: the model folder)"})
def make_synthetic_models(c, out=None):
    """Write the synthetic tier's tiny generated GGUF models (deterministic, checked against the lock)."""
    from specsuite.synthetic import make_synthetic_models as run

    _call(run, out=out)


ns = Collection(fetch_models, lock_models, verify_models, probe, compare, make_synthetic_models)
