"""One bisect step: build the commit checked out in the worktree, run the one case on it, judge, record.

``git bisect run`` calls ``specsuite bisect --step <out>/bisect.json`` in the worktree: the parameters come
from that file (written by the bisect before git starts), the verdict goes back as the exit status (0 good,
1 bad, 125 skip) and into ``<out>/step-NN-<commit>/step.json`` next to the step's build log, run log and
results folder. The good and bad endpoints are measured by the same code, in the bisect's own process.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from filelock import FileLock

from specsuite.bisect import git as bisect_git
from specsuite.bisect.build import BuildFailed, load_builder
from specsuite.bisect.judge import Judgement, judge
from specsuite.common import atomic, paths
from specsuite.common.errors import UserError
from specsuite.common.procs import interrupt_on_sigterm, last_line, run_forwarding
from specsuite.llamacpp.identity import short
from specsuite.results.document import load_run

STEP_FILE = "step.json"
STOPPED_FILE = "stopped.txt"  # why the bisect stopped before pinning the commit (a bound reached)
ABORT = 128  # `git bisect run` stops on a status of 128 or more


@dataclass
class Params:
    """What every step needs; stored under "params" in bisect.json."""

    case: str
    metric: str
    rtol: float
    good: str
    bad: str
    tree: str
    out: str
    builder: str
    build_argv: list[str] = field(default_factory=list)
    run_argv: list[str] = field(default_factory=list)  # run-tier options: --allow-cpu, --repeat N
    reference: dict[str, Any] | None = None  # the good commit's case record, once measured
    max_steps: int | None = None  # bisect steps (endpoints not counted) before it stops unpinned
    deadline: float | None = None  # epoch seconds: no step starts after it (the time budget)
    repository: str = ""  # where the commits come from (a link to the first bad one)

    @classmethod
    def load(cls, state: Path) -> Params:
        try:
            return cls(**json.loads(state.read_text(encoding="utf-8"))["params"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(
                f"{state}: not a bisect state file ({exc}); steps are run by `specsuite bisect` itself"
            ) from None


def step_lock(tree: Path) -> str:
    """Held while a step runs, next to the worktree (not in the results): the bisect waits on it before
    `git bisect reset` changes the checkout under a step that is still stopping."""
    return str(tree) + ".step.lock"


@dataclass
class Step:
    label: str  # good, bad, step 1, step 2, ...
    commit: str
    subject: str
    folder: str
    verdict: str
    rule: str
    value: float | None
    detail: str
    build_s: float | None = None
    run_s: float | None = None
    exit_code: int = 125

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_case_command(params: Params, binary: Path, results: Path) -> tuple[list[str], dict[str, str]]:
    """``specsuite run-tier CASE`` on this binary, into this folder, outside the history, no job summary."""
    cmd = [sys.executable, "-m", "specsuite", "run-tier", params.case, "--allow-missing", "--no-history"]
    cmd += params.run_argv
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env.update(LLAMA_SERVER_BIN_PATH=str(binary), SPEC_RESULTS_DIR=str(results))
    return cmd, env


def _progress(label: str, commit: str, what: str) -> None:
    print(f"bisect: {label} {short(commit, 10)}: {what}", flush=True)


Build = Callable[[Path], Path]  # build log -> the binary (BuildFailed: it does not build)


def _build(build: Build, folder: Path, label: str, commit: str) -> tuple[Path | None, float, str]:
    """(binary or None, seconds, why it failed)."""
    _progress(label, commit, f"building (log {folder / 'build.log'})")
    t0 = time.monotonic()
    try:
        return build(folder / "build.log"), time.monotonic() - t0, ""
    except (BuildFailed, UserError) as exc:  # UserError: e.g. not a llama.cpp tree at this commit
        return None, time.monotonic() - t0, str(exc)


def _run(params: Params, folder: Path, label: str, commit: str, binary: Path) -> tuple[Judgement, float]:
    _progress(label, commit, f"running {params.case} (log {folder / 'run.log'})")
    cmd, env = run_case_command(params, binary, folder / "run")
    t0 = time.monotonic()
    log = folder / "run.log"

    def beat() -> None:
        _progress(label, commit, last_line(log)[:120])

    code = run_forwarding(cmd, env=env, cwd=paths.WORK_DIR, log=log, heartbeat=beat)
    seconds = time.monotonic() - t0
    try:
        rec = load_run(folder / "run").cases.get(params.case)
    except UserError:  # run-tier stopped before the suite wrote anything (its last line says why)
        why = f"run-tier exited {code} without a result: {last_line(log)[:300]}"
        return Judgement("skip", "no_result", None, why), seconds
    return judge(rec, params.metric, params.rtol, params.reference, params.good), seconds


def run_step(params: Params, label: str, folder_name: str) -> Step:
    """Build and measure the worktree's HEAD; the Step is also written to its folder's step.json."""
    tree = Path(params.tree)
    commit = bisect_git.head(tree)
    builder = load_builder(params.builder)
    return measure(params, label, folder_name, (commit, bisect_git.subject(tree, commit)),
                   lambda log: builder(tree, log, params.build_argv))  # fmt: skip


def measure(params: Params, label: str, folder_name: str, what: tuple[str, str], build: Build) -> Step:
    """Build ``what`` (its key: a commit or ``bN``, and its subject) with ``build`` and measure the case on
    it; the Step is also written to its folder's step.json."""
    commit, subject = what
    folder = Path(params.out) / f"{folder_name}-{short(commit, 10)}"
    folder.mkdir(parents=True, exist_ok=True)
    _progress(label, commit, repr(subject))
    binary, build_s, failure = _build(build, folder, label, commit)
    if binary is None:
        verdict, run_s = Judgement("skip", "build", None, f"the build failed: {failure}"), None
    else:
        verdict, run_s = _run(params, folder, label, commit, binary)
    step = Step(
        label, commit, subject, folder.name, verdict.verdict, verdict.rule, verdict.value, verdict.detail
    )
    step.build_s, step.run_s = round(build_s, 1), None if run_s is None else round(run_s, 1)
    step.exit_code = verdict.exit_code
    atomic.write_json(folder / STEP_FILE, step.to_dict())
    times = f"build {build_s:.1f} s" + ("" if run_s is None else f", run {run_s:.1f} s")
    value = "" if verdict.value is None else f", {params.metric} {verdict.value:.4f}"
    _progress(
        label, commit, f"{times}{value} -> {verdict.verdict.upper()} ({verdict.rule}: {verdict.detail})"
    )
    return step


def reference_record(folder: Path, case: str) -> dict[str, Any]:
    """The good endpoint's record of the case, as bisect.json keeps it for every step to judge against."""
    return msgspec.to_builtins(load_run(folder / "run").cases[case])


def over_budget(params: Params, n: int) -> str | None:
    """Why step ``n`` must not run: the step bound or the time budget reached; None when it may."""
    if params.max_steps is not None and n > params.max_steps:
        return f"--max-steps {params.max_steps} reached"
    if params.deadline is not None and time.time() >= params.deadline:
        return "the time budget (--budget-min) reached"
    return None


def step_command(state: Path) -> int:
    """The step ``git bisect run`` calls: 0 good, 1 bad, 125 skip; ABORT (git stops) when the step itself
    broke, since any other status from 1 to 127 would read as "bad"; KeyboardInterrupt gives 130."""
    interrupt_on_sigterm()  # the bisect stopping: end like Ctrl-C, lock released
    try:
        params = Params.load(state)
        with FileLock(step_lock(Path(params.tree))):
            n = 1 + sum(1 for p in Path(params.out).glob("step-*") if p.is_dir())
            if (why := over_budget(params, n)) is not None:
                atomic.write_text(Path(params.out) / STOPPED_FILE, why)
                _progress(f"step {n}", bisect_git.head(Path(params.tree)), f"not run: {why}")
                return ABORT  # git stops; the bisect reports the range left
            return run_step(params, f"step {n}", f"step-{n:02d}").exit_code
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return ABORT
    except Exception:  # a bug here must stop the bisect, not call the commit bad
        traceback.print_exc()
        return ABORT


def _order(folder: Path) -> tuple[int, str]:
    kind = folder.name.split("-")[0]
    return ({"good": 0, "bad": 1}.get(kind, 2), folder.name)


def load_steps(out: Path) -> list[dict[str, Any]]:
    """Every finished step of a bisect in the order they ran: good, bad, step 1, step 2, ..."""
    found = []
    for folder in sorted((p for p in out.iterdir() if p.is_dir()), key=_order):
        try:
            found.append(json.loads((folder / STEP_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # interrupted before its verdict
    return found
