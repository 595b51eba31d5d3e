"""``specsuite bench --model NAME [--modes …] [--repeat N]``: every speculative mode on one model.

Each mode is resolved as front ends resolve it (resolver.py, from the probe and the GGUF metadata) and
measured on its own server (bench_measure.py): decode tokens/s per round from the server's timings, the
acceptance from the /metrics delta, the speedup over ``off``. The answer (bench_report.py, bench_plot.py):
a markdown table, printed and saved as bench.md, bench.json with every number, bench.png, and whether
``auto`` picked the fastest mode. Exit 0 when every configuration was measured, 1 when one failed (its row
says why), 2 on bad input, 130 on Ctrl-C or SIGTERM (the rows so far written, marked interrupted).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specsuite.bench.measure import BenchInterrupted, ModeRun, Workload, measure_modes, resolve_modes
from specsuite.bench.plot import NO_MATPLOTLIB, plot_bench
from specsuite.bench.report import BenchContext, document, markdown
from specsuite.cases.schema import CTX_SIZE, parse_case_file, read_text
from specsuite.common import atomic, errors, paths, procs
from specsuite.common.argtypes import CommandParser, int_up_to, repeat_count
from specsuite.common.errors import UserError
from specsuite.llamacpp.identity import short
from specsuite.llamacpp.posargs import split_posargs
from specsuite.models.fetch import FetchOptions, fetch_models
from specsuite.models.gguf import check_models
from specsuite.models.lock import load_lock
from specsuite.models.store import StoredModel, locate
from specsuite.results.document import check_results_dir, new_run_id, utc_now
from specsuite.server.probe import probe
from specsuite.server.resolver import Resolution, canonicalize_spec_mode

DEFAULT_MODES = "auto,off,ngram,mtp,mtp+ngram"
DEFAULT_REPEAT = 3
# canonicalize_spec_mode turns any unknown string into "auto" (a front end's safe fallback); a bench
# must refuse a typo instead, so only these spellings may mean auto.
AUTO_SPELLINGS = ("auto", "default")
# Generated models speak the synthetic tier's byte-level tokenizer; their cases use 32 tokens per request.
GENERATED = ("synthetic", 32)
HUB_OR_PYPI = ("seed", 128)


@dataclass(frozen=True)
class BenchOptions:
    model: str
    modes: list[str]
    repeat: int
    prompts: str | None
    n_predict: int | None
    out: Path | None
    drafter: str | None = None


def parser() -> CommandParser:
    p = CommandParser(
        "bench",
        "Each speculative mode on one model: speed, speedup over off, acceptance.\n"
        "Decode tokens/s is the median and spread over the repeats; the report says whether auto picked "
        "the fastest mode.",
    )
    p.add_argument("--model", required=True, help="a models.lock name (fetched and verified first)")
    p.add_argument("--modes", default=DEFAULT_MODES, help=f"comma list of modes (default {DEFAULT_MODES})")
    p.add_argument(
        "--repeat",
        type=repeat_count,
        default=DEFAULT_REPEAT,
        help="timed rounds per mode (3; at most 100)",
    )
    p.add_argument(
        "--prompts", help="a prompt set of cases.toml (default: synthetic for generated models, else seed)"
    )
    p.add_argument(
        "--n-predict",
        type=int_up_to(CTX_SIZE),
        help=f"tokens per request (default: 32 generated, else 128; at most {CTX_SIZE}, the context)",
    )
    p.add_argument("--mtp-drafter", metavar="NAME", help="a separate MTP drafter (a models.lock name)")
    p.add_argument("--out", type=Path, help="output folder (default: results/bench-<run id>/)")
    return p


def parse_modes(text: str) -> list[str]:
    """The resolver's canonical name of each mode, in the given order, each once; UserError on a typo."""
    modes: list[str] = []
    for raw in (m.strip() for m in text.split(",")):
        canon = canonicalize_spec_mode(raw)
        if canon is None or (canon == "auto" and raw.lower() not in AUTO_SPELLINGS):
            raise UserError(
                f"--modes: unknown mode {raw!r}; valid: auto, off, ngram, mtp, mtp+ngram, ngram-simple "
                "(or the legacy names default, draft-mtp, ngram-mod)"
            )
        if canon not in modes:
            modes.append(canon)
    return modes


def options(argv: list[str]) -> BenchOptions:
    rest, dropped = split_posargs(argv)  # nox hands the build flags to every session
    if dropped:
        print(f"note: build flags {' '.join(dropped)} are for `specsuite build`; ignored here")
    a = parser().parse_args(rest)
    return BenchOptions(a.model, parse_modes(a.modes), a.repeat, a.prompts, a.n_predict, a.out, a.mtp_drafter)


def _prompt_set(name: str) -> tuple[tuple[str, str], ...]:
    # bench sends inline texts only: a dataset-backed set's file belongs to a tier's cases
    sets = {n: s for n, s in parse_case_file(read_text()).prompt_sets.items() if s.dataset is None}
    if name not in sets:
        raise UserError(
            f"--prompts {name!r} is not an inline prompt set of {paths.CASES_FILE}; valid: {', '.join(sets)}"
        )
    return tuple((p.id, p.text) for p in sets[name].prompts)


def _model_defaults(model: str, drafter: str | None) -> tuple[str, int]:
    """(prompt set, n_predict) for a lock name; UserError naming the valid ones when it is not there."""
    lock = load_lock()
    for flag, name in (("--model", model), ("--mtp-drafter", drafter)):
        if name is not None and name not in lock.entries:
            raise UserError(f"{flag} {name!r} is not in {lock.path}; valid: {', '.join(lock.entries)}")
    return GENERATED if lock.entries[model].source == "generated" else HUB_OR_PYPI


def main(argv: list[str]) -> int:
    """The bench; Ctrl-C or SIGTERM (a runner cancelling the job: the same path as run-tier's) stops its
    server, writes the rows so far marked interrupted, and goes on to cli as KeyboardInterrupt (exit 130)."""
    with procs.sigterm_as_interrupt():
        try:
            ctx, plans, work, out = _prepare(options(argv))
        except KeyboardInterrupt:
            print("bench: interrupted before any mode was measured: no report written", flush=True)
            raise
        return _measure(ctx, plans, work, out)


def _prepare(opts: BenchOptions) -> tuple[BenchContext, list[tuple[str, Resolution]], Workload, Path]:
    """Everything before the first server: the models fetched and checked, each mode resolved."""
    set_name, n_predict = _model_defaults(opts.model, opts.drafter)
    set_name = opts.prompts or set_name
    prompts = _prompt_set(set_name)
    run_id = new_run_id(opts.model)
    out = (opts.out or paths.RESULTS_DIR / f"bench-{run_id}").resolve()
    caps = probe(paths.server_binary())  # a missing binary is one clear error, before any download
    # before any server, not after an hour of them
    check_results_dir(out, "give --out a writable folder", "or give --out a new folder")
    found = _fetch([opts.model, *([opts.drafter] if opts.drafter else [])])
    stored, target = found[opts.model], found[opts.model].path
    drafter = found[opts.drafter] if opts.drafter else None
    if drafter is not None:
        _check_drafter(target, drafter)
    drafter_path = drafter.path if drafter else None
    gpu = caps.backend != "cpu" and bool(caps.gpus)
    plans = resolve_modes(opts.modes, caps, target, gpu, drafter_path)
    work = Workload(
        caps, target, prompts, opts.n_predict or n_predict, opts.repeat, out / "logs", drafter_path
    )
    ctx = BenchContext(
        run_id=run_id,
        model=opts.model,
        sha256=stored.sha256,
        binary=caps.binary,
        commit=caps.commit,
        backend=caps.backend,
        gpu=gpu,
        prompts=set_name,
        n_prompts=len(prompts),
        n_predict=work.n_predict,
        repeat=work.repeat,
        drafter=opts.drafter,
        drafter_sha256=drafter.sha256 if drafter else None,
    )
    return ctx, plans, work, out


def _measure(ctx: BenchContext, plans: list[tuple[str, Resolution]], work: Workload, out: Path) -> int:
    """Every mode measured, then the reports; interrupted: the rows so far reported, then re-raised."""
    started = utc_now()
    try:
        runs = measure_modes(plans, work, _say)
    except BenchInterrupted as stop:
        write_reports(ctx, stop.runs, out, started)
        done = sum(1 for r in stop.runs if r.measurement.ok and not r.shares_with)
        _say(
            f"bench: interrupted while measuring {stop.mode}; bench.md and bench.json hold the {done} "
            "configuration(s) measured before it"
        )
        raise
    write_reports(ctx, runs, out, started)
    return errors.OK if all(r.measurement.ok for r in runs) else errors.FAILED


def _say(line: str) -> None:
    print(line, flush=True)


def _fetch(models: list[str]) -> dict[str, StoredModel]:
    """Fetch and verify the models (a no-op when their stamps are fresh); their verified files."""
    fetch_models(FetchOptions(models=models, tty=False))
    return locate(models)


def _check_drafter(target: Path, drafter: StoredModel) -> None:
    """A drafter without MTP heads would fail every MTP mode's server the same way: one error, before any."""
    try:
        for warning in check_models(["draft-mtp"], target, drafter.path):
            print(f"warning: {warning}")
    except UserError as exc:
        raise UserError(f"--mtp-drafter {drafter.name}: {exc}") from None


def write_reports(ctx: BenchContext, runs: list[ModeRun], out: Path, started: str) -> None:
    """bench.md (also printed), bench.json, bench.png; without matplotlib one note instead of the PNG."""
    text = markdown(ctx, runs)
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "bench.md", text)
    atomic.write_json(out / "bench.json", document(ctx, runs, started, utc_now()))
    title = (
        f"{ctx.model}: llama.cpp {short(ctx.commit or '?', 7)} ({ctx.backend}, {'GPU' if ctx.gpu else 'CPU'})"
    )
    png = plot_bench(runs, title, out / "bench.png")
    print(text)
    if png is None:
        print(NO_MATPLOTLIB)
    print(f"results: {out} (bench.md, bench.json{', bench.png' if png else ''}, logs/)")
