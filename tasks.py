"""invoke tasks for chores around the suite: fetch, lock and verify models, probe, compare, history, resolve.

Each task is a thin wrapper over the ``specsuite`` command (the nox sessions call the same one): its options
become the command's arguments, so every option is checked in one place; a failure becomes a clean
``Exit`` with the command's message and exit code, Ctrl-C an ``interrupted`` line and 130.
"""

from __future__ import annotations

from typing import Any

from invoke import Collection, Exit, task

from specsuite.cli import main

_LOCK = "models.lock to read (default: models.lock at the repository root)"
_DIR = "model folder (default: SPEC_MODEL_DIR, else ~/.cache/specsuite/models)"


def _run(command: str, *positional: str | None, **options: Any) -> None:
    argv = [command, *(p for p in positional if p is not None)]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value not in (None, False, ""):
            argv += [flag, str(value)]
    code = main(argv)
    if code:
        raise Exit(code=code)


@task(
    help={
        "tier": "smoke, synthetic, compact, nightly or all",
        "methods": "comma list of case names (e.g. mtp,dflash)",
        "models": "comma list of models.lock names",
        "lock": _LOCK,
        "model_dir": _DIR,
        "jobs": "files downloaded in parallel (default 4)",
        "offline": "use only what is already in the model folder",
        "frozen": "refuse entries whose size and sha256 are not locked yet",
    }
)
def fetch_models(c, tier=None, methods=None, models=None, lock=None, model_dir=None, jobs=None, offline=False,
                 frozen=False):  # fmt: skip
    """Fetch and verify the models a tier (or a list of cases or models) needs."""
    _run("fetch-models", tier=tier, methods=methods, models=models, lock=lock, model_dir=model_dir, jobs=jobs,
         offline=offline, frozen=frozen)  # fmt: skip


@task(help={"lock": _LOCK, "check": "write nothing; exit non-zero if the lock differs from the Hub"})
def lock_models(c, lock=None, check=False):
    """Fill size and sha256 of every Hub entry from the Hub API at its pinned revision."""
    _run("lock-models", lock=lock, check=check)


@task(help={"lock": _LOCK, "model_dir": _DIR, "full": "re-hash every byte instead of trusting stamps"})
def verify_models(c, lock=None, model_dir=None, full=False):
    """Check the model folder against the lock."""
    _run("verify-models", lock=lock, model_dir=model_dir, full=full)


@task(help={"binary": "llama-server to probe (default: LLAMA_SERVER_BIN_PATH, else build/bin/llama-server)"})
def probe(c, binary=None):
    """Show what a llama-server binary can run: each case of the suite, and why not."""
    _run("probe", binary)


@task(
    help={
        "a": "baseline: a results/<run> folder or a results.json (omit with --against auto)",
        "b": "candidate: a results/<run> folder or a results.json",
        "against": "auto: take the baseline from the run history (the relative gate's rule)",
        "rtol": "relative drop that counts as a regression (default 0.05)",
        "markdown": "print markdown even on a terminal (default: markdown only when not on a terminal)",
        "no_plot": "do not save the per-position acceptance plot next to B's results",
    }
)
def compare(c, b, a=None, against=None, rtol=None, markdown=False, no_plot=False):
    """Compare two runs case by case (or a run against its history baseline); non-zero when B regresses."""
    _run("compare", a, b, against=against, rtol=rtol, markdown=markdown, no_plot=no_plot)


@task(
    help={"out": "folder for the files (default: the model folder)", "print_lock": "print lock entries only"}
)
def make_synthetic_models(c, out=None, print_lock=False):
    """Write the synthetic tier's tiny generated GGUF models (deterministic, checked against the lock)."""
    _run("make-synthetic-models", out=out, print_lock=print_lock)


@task(
    help={
        "case": "only this case",
        "device": "only this device (name or class)",
        "last": "only the last N runs",
        "plot": "also draw the trend of each case into this PNG",
        "json": "print the rows as JSON",
    }
)
def history(c, case=None, device=None, last=None, plot=None, json=False):
    """The run history: a table per case over llama.cpp commits, or a trend plot."""
    _run("history", case=case, device=device, last=last, plot=plot, json=json)


@task(
    help={
        "model": "the target GGUF",
        "mode": "auto (default), mtp, ngram, mtp+ngram, off, or a legacy alias",
        "device": "gpu or cpu (default: what the binary sees)",
        "binary": "llama-server to probe (default: build/bin/llama-server)",
        "mtp_drafter": "a separate MTP drafter GGUF",
    }
)
def resolve(c, model, mode=None, device=None, binary=None, mtp_drafter=None):
    """Print the server flags a front end's speculative mode resolves to for a model, and why."""
    _run("resolve", model=model, mode=mode, device=device, binary=binary, mtp_drafter=mtp_drafter)


ns = Collection(
    fetch_models, lock_models, verify_models, probe, compare, make_synthetic_models, history, resolve
)
