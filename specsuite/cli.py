"""``specsuite <command> …`` (also ``python -m specsuite``): the one front door to every command.

nox sessions and invoke tasks call these commands; each command's options are declared once, here or in
the module that owns the command (build, run-tier, calibrate parse their own arguments). A ``UserError``
becomes one ``error:`` line and its exit code; Ctrl-C becomes ``interrupted`` and 130.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from specsuite.common import procs
from specsuite.common.errors import UserError
from specsuite.suite.tier import fraction, positive_int

Handler = Callable[[list[str]], int]


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _parser(name: str, description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=f"specsuite {name}", description=description, allow_abbrev=False)


_LOCK_HELP = "models.lock to read (default: models.lock at the repository root)"
_DIR_HELP = "model folder (default: SPEC_MODEL_DIR, else <cache>/models)"


def _build(argv: list[str]) -> int:
    from specsuite.build.cmake import main

    return main(argv)


def _run_tier(argv: list[str]) -> int:
    from specsuite.suite.tier import run_tier_command

    return run_tier_command(argv)


def _calibrate(argv: list[str]) -> int:
    from specsuite.tools.calibrate import calibrate_command

    return calibrate_command(argv)


def _probe(argv: list[str]) -> int:
    p = _parser("probe", "What a llama-server binary can run: each case of the suite, and why not.")
    p.add_argument("binary", nargs="?", help="llama-server (default: LLAMA_SERVER_BIN_PATH, else build/bin)")
    a = p.parse_args(argv)
    from specsuite.suite.probe_report import probe_command

    return probe_command(a.binary)


def _fetch(argv: list[str]) -> int:
    p = _parser("fetch-models", "Fetch and verify the models a tier (or a list of cases or models) needs.")
    p.add_argument("--tier", help="smoke, synthetic, compact, nightly or all (default: smoke)")
    p.add_argument("--methods", help="comma list of case names (e.g. mtp,dflash)")
    p.add_argument("--models", help="comma list of models.lock names")
    p.add_argument("--lock", help=_LOCK_HELP)
    p.add_argument("--model-dir", help=_DIR_HELP)
    p.add_argument("--jobs", type=positive_int, default=4, help="files fetched in parallel (default 4)")
    p.add_argument("--offline", action="store_true", help="use only what is already in the model folder")
    p.add_argument(
        "--frozen", action="store_true", help="refuse entries whose size and sha256 are not locked"
    )
    a = p.parse_args(argv)
    from specsuite.models.fetch import fetch_models

    fetch_models(
        tier=a.tier, methods=_csv(a.methods), models=_csv(a.models), lock=a.lock, model_dir=a.model_dir,
        jobs=a.jobs, offline=a.offline, frozen=a.frozen,
    )  # fmt: skip
    return 0


def _verify(argv: list[str]) -> int:
    p = _parser("verify-models", "Check the model folder against the lock.")
    p.add_argument("--lock", help=_LOCK_HELP)
    p.add_argument("--model-dir", help=_DIR_HELP)
    p.add_argument("--full", action="store_true", help="re-hash every byte instead of trusting stamps")
    a = p.parse_args(argv)
    from specsuite.models.fetch import verify_models

    verify_models(lock=a.lock, model_dir=a.model_dir, full=a.full)
    return 0


def _lock(argv: list[str]) -> int:
    p = _parser("lock-models", "Fill size and sha256 of every Hub entry from the Hub at its pinned revision.")
    p.add_argument("--lock", help=_LOCK_HELP)
    p.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the lock differs from the Hub"
    )
    a = p.parse_args(argv)
    from specsuite.models.lockmodels import lock_models

    lock_models(lock=a.lock, check=a.check)
    return 0


def _synthetic(argv: list[str]) -> int:
    p = _parser(
        "make-synthetic-models", "Write the synthetic tier's generated GGUF models, checked against the lock."
    )
    p.add_argument("--out", help="folder for the files (default: the model folder)")
    p.add_argument(
        "--print-lock",
        action="store_true",
        help="print models.lock entries computed from fresh bytes, write nothing",
    )
    a = p.parse_args(argv)
    from specsuite.models.synthetic import generate as synthetic

    if a.print_lock:
        sys.stdout.write(synthetic.lock_block())
    else:
        synthetic.make_synthetic_models(out=a.out)
    return 0


def _compare(argv: list[str]) -> int:
    p = _parser("compare", "Compare two runs case by case; exit 1 when B regresses.")
    p.add_argument(
        "a", help="baseline: a results/<run> folder or a results.json (or --against auto)", nargs="?"
    )
    p.add_argument("b", help="candidate: a results/<run> folder or a results.json")
    p.add_argument(
        "--against", choices=["auto"], help="take A from the history: the candidate's baseline run"
    )
    p.add_argument("--rtol", type=fraction, default=0.05, help="relative drop that counts as a regression")
    p.add_argument("--markdown", action="store_true", help="markdown even on a terminal")
    p.add_argument("--no-plot", action="store_true", help="do not save the per-position plot")
    a = p.parse_args(argv)
    if (a.a is None) == (a.against is None):
        p.error("give two runs A B, or --against auto and one run")
    from specsuite.tools.compare import compare_command

    return compare_command(a=a.a, b=a.b, against=a.against, rtol=a.rtol, markdown=a.markdown or None,
                           plot=not a.no_plot)  # fmt: skip


def _plot(argv: list[str]) -> int:
    p = _parser(
        "plot", "Per-position acceptance of one run, or of A against B, as a PNG next to the last run."
    )
    p.add_argument(
        "runs", nargs="+", metavar="RESULTS", help="one or two results/<run> folders or results.json"
    )
    a = p.parse_args(argv)
    if len(a.runs) > 2:
        p.error("give one or two runs")
    from specsuite.results.plot import plot_runs

    print(plot_runs(a.runs))
    return 0


def _history(argv: list[str]) -> int:
    p = _parser("history", "Runs recorded in the history database: a table per case over commits, or a plot.")
    p.add_argument("--case", help="only this case")
    p.add_argument("--device", help="only this device (name or class)")
    p.add_argument("--last", type=positive_int, help="only the last N runs")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="also draw the trend of each case")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--db", type=Path, help="database (default: SPEC_HISTORY, else <cache>/history.sqlite)")
    a = p.parse_args(argv)
    from specsuite.history.report import history_command

    return history_command(path=a.db, case=a.case, device=a.device, last=a.last, plot=a.plot, as_json=a.json)


def _resolve(argv: list[str]) -> int:
    p = _parser(
        "resolve", "The server flags a front end's speculative mode resolves to for a model, and why."
    )
    p.add_argument("--model", type=Path, required=True, help="the target GGUF")
    p.add_argument("--mode", default="auto", help="auto, mtp, ngram, mtp+ngram, off (or a legacy alias)")
    p.add_argument("--device", choices=["gpu", "cpu"], help="default: what the binary sees (--list-devices)")
    p.add_argument("--binary", help="llama-server to probe (default: LLAMA_SERVER_BIN_PATH, else build/bin)")
    p.add_argument("--mtp-drafter", type=Path, help="a separate MTP drafter GGUF")
    a = p.parse_args(argv)
    from specsuite.common import paths
    from specsuite.server.probe import probe
    from specsuite.server.resolver import caps_from_probe, explain, resolve_for_model

    caps = probe(Path(a.binary) if a.binary else paths.server_binary())
    gpu = (a.device == "gpu") if a.device else caps.backend != "cpu" and bool(caps.gpus)
    res = resolve_for_model(
        a.mode, caps=caps_from_probe(caps), model_path=a.model, gpu=gpu, mtp_draft_path=a.mtp_drafter
    )
    print(f"binary: {caps.binary} ({caps.commit}, {caps.backend}); device: {'gpu' if gpu else 'cpu'}")
    print(explain(res))
    return 0


def _bisect(argv: list[str]) -> int:
    from specsuite.bisect.command import bisect_command

    return bisect_command(argv)


def _bench(argv: list[str]) -> int:
    from specsuite.bench.command import bench_command

    return bench_command(argv)


COMMANDS: dict[str, tuple[Handler, str]] = {
    "build": (_build, "configure and build llama-server (CUDA when possible) into build/bin"),
    "run-tier": (_run_tier, "run a tier of the suite against the built llama-server"),
    "calibrate": (_calibrate, "run a tier N times and write its floors into cases.toml"),
    "probe": (_probe, "what a llama-server binary can run, and why not"),
    "fetch-models": (_fetch, "fetch and verify the models a tier needs"),
    "verify-models": (_verify, "check the model folder against models.lock"),
    "lock-models": (_lock, "fill size and sha256 of Hub entries from the Hub"),
    "make-synthetic-models": (_synthetic, "write the synthetic tier's generated models"),
    "compare": (_compare, "compare two runs (or a run against its history baseline)"),
    "plot": (_plot, "per-position acceptance plot of one or two runs"),
    "history": (_history, "the run history: tables per case over commits, trend plots"),
    "resolve": (_resolve, "the flags a front end's speculative mode resolves to"),
    "bisect": (_bisect, "find the llama.cpp commit that made a case worse"),
    "bench": (_bench, "each speculative mode on one model: speed, speedup, acceptance"),
}


def top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specsuite",
        description="Build llama.cpp's llama-server; run a speculative-decoding regression suite against it.",
        epilog="`specsuite COMMAND --help` shows a command's options.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return p


def entry() -> None:
    """The console script and ``python -m specsuite``."""
    procs.die_with_parent()  # under nox: a killed nox takes this command (and its children) with it
    sys.exit(main())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if not argv or argv[0] not in COMMANDS:
            top_parser().parse_args(argv)  # --help, or one usage error naming the valid commands
            return 2
        handler, _ = COMMANDS[argv[0]]
        return handler(argv[1:])
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
