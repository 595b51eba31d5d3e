"""A run of the suite from start to verdict, around ``runner.run_case``: open and finish an Engine.

open: options from the environment, the binary's probe (a binary that is not a speculative llama-server is
refused), the GPU gate (GPU tiers refuse a CPU build or a machine without a GPU), the results header.
finish: the verdict (once), results.json, the history record, bench.json, summary.md (its first lines say
what weakens a green).
The suite's pytest plugin (``plugin``), which ``specsuite run-tier`` runs, goes through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from specsuite import __version__
from specsuite.cases.schema import TIERS, Case, is_gpu_selection
from specsuite.common import git, paths, settings
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file, sha256_text
from specsuite.llamacpp import info as buildinfo
from specsuite.llamacpp import source
from specsuite.llamacpp.identity import Identity
from specsuite.measure import observe
from specsuite.measure.engine import Engine
from specsuite.results import crossover
from specsuite.results.benchjson import write_bench_json
from specsuite.results.document import (
    Binary,
    BinarySource,
    Device,
    Harness,
    Run,
    RunOptions,
    RunResults,
    claim_results_dir,
)
from specsuite.results.merge import not_run
from specsuite.results.summary import write_summary
from specsuite.results.verdict import Verdict, verdict
from specsuite.server import gpus, workers
from specsuite.server.device import device_info
from specsuite.server.probe import Capabilities, handed, probe
from specsuite.server.workers import Place
from specsuite.suite import gate
from specsuite.suite.vintage import Vintage


def check_device(caps: Capabilities, cases: list[Case], allow_cpu: bool) -> None:
    """GPU tiers measure GPU floors: refuse a CPU build, or a GPU build that sees no GPU (--list-devices)."""
    if allow_cpu or not is_gpu_selection(cases):
        return
    if caps.backend == "cpu":
        why = "it is a CPU build"
    elif not caps.gpus:
        why = f"it is a {caps.backend or 'unknown'} build but --list-devices shows no GPU"
    else:
        return
    tiers = ", ".join(sorted({c.tier for c in cases if c.gpu}))
    raise UserError(
        f"{caps.binary}: {why}, and the selected cases are GPU tier ({tiers}) "
        "with floors measured on GPUs. Build with `specsuite build --cuda` on a machine with a visible GPU, "
        "or pass -- --allow-cpu (SPEC_ALLOW_CPU=1) to run them anyway, flagged in the summary."
    )


# What a run leaves in its folder from its start on (results.json and logs/ when its session opens,
# summary.md when it ends): a folder holding any of them holds a run.
RUN_MARKS = ("results.json", "summary.md", "logs")


def earlier_run(folder: Path) -> str | None:
    """Why ``folder`` (SPEC_RESULTS_DIR: the run's own folder) cannot take this run: it holds one already,
    whose files the next run's would overwrite and whose server logs would stay beside the new ones (a
    1-case results.json beside 83 logs). None: it is new, empty, or holds no run."""
    found = [name for name in RUN_MARKS if (folder / name).exists() or (folder / name).is_symlink()]
    if not found:
        return None
    return (
        f"the results folder {folder} already holds a run ({', '.join(found)}); SPEC_RESULTS_DIR is the "
        "folder of one run: give it a new folder, or unset it (each run then gets results/<run-id>/)"
    )


def harness_info(folder: Path) -> dict[str, Any]:
    """The harness commit, and whether tracked files differ from it: a run from a dirty tree (edited cases,
    prompts or code) must not pass for one of that commit. An installed wheel has no commit: its version."""
    commit = source.git_head(folder) if paths.IN_CHECKOUT else None
    status = git.run(["status", "--porcelain", "--untracked-files=no"], folder) if commit else None
    dirty = None if status is None or status.returncode else bool(status.stdout.strip())
    return {"commit": commit, "dirty": dirty, "version": __version__}


def binary_info(caps: Capabilities) -> Binary:
    """The binary's identity (``llamacpp.identity``): its build's record (a build-info.json that describes
    this binary, ``info.for_binary``) over what its ``--version`` says, since a tree without git builds a
    binary that says ``commit unknown``. A binary nothing names is refused in one line saying how to name
    it."""
    sha = sha256_file(Path(caps.binary))
    info = buildinfo.for_binary(Path(caps.binary), sha) or {}
    ident = Identity.from_dict(info.get("identity")) or Identity(
        info.get("commit") or caps.commit, caps.build, None, "build-info.json" if info else "--version"
    )
    if ident.key is None:
        said = caps.version_text.splitlines()[0] if caps.version_text else "nothing"
        raise UserError(
            f"{caps.binary}: which llama.cpp this is is unknown: its --version names no commit or build "
            f"({said!r}) and no build-info.json describes it. Build it with `specsuite build` from its "
            "tree (LLAMA_CPP_DIR=...), which names it by git, by LLAMA_CPP_BUILD=N / LLAMA_CPP_COMMIT=HASH, "
            "or by the tree's content hash"
        )
    built_from = info.get("source") or {}
    return Binary(
        path=caps.binary,
        sha256=sha,
        commit=ident.commit,
        build=ident.build,
        tree_sha256=ident.tree_sha256 if ident.commit is None and ident.build is None else None,
        backend=info.get("backend") or caps.backend,
        version_text=caps.version_text,
        source=BinarySource(
            kind=built_from.get("kind"),
            mirror=_mirror(built_from),
            requirement=built_from.get("requirement") if built_from.get("kind") == "pypi-build" else None,
            sdist_sha256=built_from.get("sha256") if built_from.get("kind") == "pypi-build" else None,
            index=built_from.get("index"),
            origin=ident.origin or None,
        ),
    )


def _mirror(built_from: dict[str, Any]) -> str | None:
    """The git checkout whose ancestry orders this build's commit: a LLAMA_CPP_REF build's mirror, a
    LLAMA_CPP_DIR checkout; none for a tree without git (its build number orders it)."""
    if built_from.get("kind") == "ref" and built_from.get("repository"):
        return str(source.mirror_path(paths.cache_dir(), built_from["repository"]))
    if built_from.get("kind") == "dir" and built_from.get("path") and built_from.get("commit"):
        return str(built_from["path"])
    return None


def new_run(caps: Capabilities, options: settings.Settings, *, tier: str, selector: str) -> Run:
    """The run's header: what was measured, with what, on what, and how it is judged."""
    binary = binary_info(caps)
    return Run(
        tier=tier,
        selector=selector,
        harness=msgspec.convert(harness_info(paths.REPO_ROOT), Harness),
        cases_sha256=sha256_text(paths.CASES_FILE.read_text(encoding="utf-8")),
        binary=binary,
        config=observe.run_config(caps.binary, binary.sha256, binary.backend, caps.defaults),
        device=msgspec.convert(device_info(caps), Device),
        options=msgspec.convert(options.run_options(), RunOptions),
    )


@dataclass(frozen=True)
class Shape:
    """Where a run's cases run: one shard of a plan or all of them; one worker or several (``part``: this
    worker's name, its results a part of the run's); ``planned``: every case of the whole run."""

    shard: str | None = None
    planned: tuple[str, ...] = ()
    part: str | None = None


def _place(
    caps: Capabilities, cases: list[Case], options: settings.Settings, out: Path, part: str | None
) -> Place:
    """This process's GPUs and ports: its own place when it is one of several workers."""
    found = gpus.available(caps)
    lay = workers.layout(gpus.select(options.gpus, found) if found.gpus else found, cases, options.workers)
    return workers.claim(lay, out / "parts") if part else workers.first(lay)


def open_session(
    selector: str, cases: list[Case], results_dir: Path | None = None, shape: Shape | None = None
) -> Engine:
    """Probe the binary, refuse what cannot give a meaningful answer, and start the results document."""
    options = settings.load()
    shape = shape or Shape(planned=tuple(c.name for c in cases))
    caps = handed(paths.server_binary(), options.probed)  # run-tier probed it and checked the device
    if caps is None:  # a bare pytest, or a binary rebuilt since
        caps = probe(paths.server_binary())
        check_device(caps, cases, options.allow_cpu)
    tier = selector if selector in TIERS else ",".join(sorted({c.tier for c in cases}))
    out = Path(results_dir or options.results_dir or claim_results_dir(selector))
    run = new_run(caps, options, tier=tier, selector=selector)
    run.shard, run.planned = shape.shard, list(shape.planned)
    file = f"parts/{shape.part}.json" if shape.part else "results.json"
    results = RunResults(out, run, file=file)
    session = Engine(
        caps, results, options, place=_place(caps, cases, options, out, shape.part), part=shape.part
    )
    vintage = Vintage.of(run, history=not options.no_history)
    session.vintage, session.older_than_pin = vintage.judge, vintage.older
    if not options.no_history:
        gate.install(session)
    results.save()
    return session


def finish_session(session: Engine, unstarted: Sequence[str] = ()) -> Verdict | None:
    """Stop the baseline server; a worker's part is saved as it is (the run's controller merges the parts
    and judges the run); a whole run is judged once (``finish_run``). ``unstarted``: the cases an
    interrupted run never reached, recorded as such (its verdict names them)."""
    session.close()
    for name in unstarted:
        session.results.add_case(
            not_run(name, "the run was interrupted before this case started", interrupted=True)
        )
    if session.part:
        session.results.save()
        return None
    session.verdict = finish_run(session.results, session.options)
    return session.verdict


def recordable(run: Run) -> bool:
    """A shard is recorded by `merge`, as part of its run; an acceptance-only run measured no speed, and
    would stand as a baseline without one (the verdict's attention lines say so)."""
    return not run.shard and run.run_options.speed


def finish_run(results: RunResults, options: settings.Settings) -> Verdict:
    """Judge a finished run once: the history record, the verdict, results.json, bench.json, summary.md."""
    run = results.run
    crossover.annotate(run.cases.values())  # before the record: the history keeps each sweep's crossover
    if not options.no_history:
        gate.name_suspects(run)  # before the record: results.json keeps them with the history's note
    if not options.no_history and recordable(run):
        gate.record(run)  # first: whether it was recorded is part of the verdict's attention lines
    found = verdict(run)
    run.verdict = found.headline
    results.save()
    write_bench_json(run, results.dir / "bench.json")
    write_summary(run, found, results.dir)
    return found
