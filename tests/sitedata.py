"""Histories for the report's tests, built from real runs.

``story()``: the three real synthetic-tier runs (tests/data/results/site-real-*, the real CPU build)
at the first three commits of a real git repository (the llama.cpp mirror stand-in that orders them), then
six runs made from the third one: from the sixth commit on, one case accepts less (a step: the change point),
the eighth run fails another case on a floor, and the last run fails the stepped case as ``drifted`` and a
third case as ``spec_inactive``. Every run is recorded through the history's own ``record_run`` and has
its results folder (results.json, and for the real ones their summary.md; the last one the real logs).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testdata import DATA_ROOT

from specsuite.history.recording import record_run
from specsuite.results.document import decode_run
from specsuite.results.summary import write_summary
from specsuite.results.verdict import verdict

REAL = [DATA_ROOT / "results" / f"site-real-{i}" for i in (1, 2, 3)]
T0 = dt.datetime(2026, 12, 1, 0, 0, tzinfo=dt.timezone.utc)
STEP_CASE, STEP_AT, STEP_FACTOR = "tiny-mtp-random", 5, 0.9
FLOOR_CASE, FLOOR_AT = "tiny-dspark-random", 7
INACTIVE_CASE = "tiny-simple-random"
N_COMMITS = 9
# a sweep (docs/concurrency.md): the real record at np 1, crafted members at np 2 and 4 whose aggregate
# speedups fall with np; from the step commit on, np 2 no longer pays (the crossover moves from 2 to 1)
SWEEP, SWEEP_NPS = "tiny-dflash-fixed", (1, 2, 4)
SWEEP_MEMBERS = tuple(SWEEP if n == 1 else f"{SWEEP}-np{n}" for n in SWEEP_NPS)


def speedups(n: int) -> dict[int, float]:
    """The sweep's aggregate speedup by np in the history's ``n``-th run."""
    return {1: 1.6, 2: 1.2 if n < STEP_AT else 0.9, 4: 0.7}


def sweep(cases: dict[str, Any], n: int) -> None:
    """The sweep's members in the ``n``-th run, the np-1 member its real record."""
    ups = speedups(n)
    crossover = 2 if ups[2] > 1 else 1
    for np_, name in zip(SWEEP_NPS, SWEEP_MEMBERS, strict=True):
        rec = cases[name] = copy.deepcopy(cases[SWEEP]) if np_ > 1 else cases[SWEEP]
        conc = {"parallel": np_, "streams": np_, "speedups": [ups[np_]], "speedup": ups[np_],
                "crossover_np": crossover}  # fmt: skip
        rec.update(name=name, parallel=np_, streams=np_, sweep=SWEEP, concurrency=conc)


def git_commits(repo: Path, n: int) -> list[str]:
    """A real git repository of ``n`` empty commits (fixed dates): their shas, oldest first."""
    repo.mkdir(parents=True, exist_ok=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }  # fmt: skip

    def git(*args: str, when: str | None = None) -> str:
        extra = {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when} if when else {}
        out = subprocess.run(["git", *args], cwd=repo, env={**env, **extra}, check=True, capture_output=True)
        return out.stdout.decode().strip()

    git("init", "-q")
    for i in range(n):
        git("commit", "-q", "--allow-empty", "-m", f"commit {i}", when=f"2026-11-{i + 1:02d}T00:00:00Z")
    return git("rev-list", "--reverse", "HEAD").split()


def real(i: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((REAL[i] / "results.json").read_text())
    return doc


def at(doc: dict[str, Any], commit: str, n: int, run_id: str | None = None) -> dict[str, Any]:
    """A run of ``doc``'s cases at ``commit``, the ``n``-th of the history (its run id and start time)."""
    out = copy.deepcopy(doc)
    started = T0 + dt.timedelta(hours=n)
    out["run_id"] = run_id or f"{started:%Y%m%dT%H%M%SZ}-synthetic"
    out["started"] = started.isoformat(timespec="seconds")
    out["finished"] = (started + dt.timedelta(minutes=3)).isoformat(timespec="seconds")
    out["binary"]["commit"] = commit
    return out


def fail(rec: dict[str, Any], reason: str, message: str) -> None:
    rec.update(status="failed", reason=reason, message=message)


def record(doc: dict[str, Any], db: Path, results: Path, logs_from: Path | None = None) -> Path:
    """Record ``doc`` in the history and write its results folder; the folder."""
    folder = results / doc["run_id"]
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(doc, indent=2))
    if logs_from is not None:
        shutil.copytree(logs_from, folder / "logs")
    assert record_run(decode_run(doc, doc["run_id"]), db) is not None
    return folder


@dataclass
class Story:
    db: Path
    results: Path
    mirror: Path
    commits: list[str]
    run_ids: list[str]

    @property
    def step_commit(self) -> str:
        return self.commits[STEP_AT]


def story(tmp: Path) -> Story:
    mirror = tmp / "mirror"
    commits = git_commits(mirror, N_COMMITS)
    db, results = tmp / "history.sqlite", tmp / "results"
    ids = []
    for n, commit in enumerate(commits):
        doc = at(real(min(n, 2)), commit, n)
        cases = doc["cases"]
        sweep(cases, n)
        if n >= STEP_AT:
            rec = cases[STEP_CASE]
            rec["accept_rate"] = round(rec["accept_rate"] * STEP_FACTOR, 4)
            rec["accept_len"] = round(rec["accept_len"] * STEP_FACTOR, 4)
        if n == FLOOR_AT:
            fail(
                cases[FLOOR_CASE],
                "floor",
                f"accept_rate 0.2001 < floor {cases[FLOOR_CASE]['floors']['min_accept_rate']}",
            )
            cases[FLOOR_CASE]["accept_rate"] = 0.2001
        if n == N_COMMITS - 1:
            why = f"accept_rate drifted -10.0 % over the last runs; first commit after it: {commits[STEP_AT]}"
            fail(cases[STEP_CASE], "drifted", why)
            fail(
                cases[INACTIVE_CASE],
                "spec_inactive",
                "the server drafted no token: speculative decoding never ran",
            )
        if n >= 3:  # crafted: the verdict and the history line are the report's to compute, not copied
            doc.pop("verdict", None)
            doc.pop("history", None)
        folder = record(doc, db, results, REAL[2] / "logs" if n == N_COMMITS - 1 else None)
        if n < 3:
            shutil.copy(REAL[n] / "summary.md", folder / "summary.md")
        ids.append(doc["run_id"])
    bisect(results, commits)
    return Story(db, results, mirror, commits, ids)


def bisect(results: Path, commits: list[str]) -> None:
    """A bisect of the stepped case over the story's commits, as ``specsuite bisect`` writes bisect.json,
    and a folder whose bisect.json is not one."""
    steps = [
        {"label": label, "commit": commits[i], "subject": f"commit {i}", "verdict": verdict, "rule": rule,
         "value": value, "detail": "", "folder": f"{label}-{commits[i][:10]}", "build_s": 1.0, "run_s": 1.0,
         "exit_code": 0}
        for label, i, verdict, rule, value in [
            ("good", STEP_AT - 1, "good", "reference", 0.4775),
            ("bad", N_COMMITS - 1, "bad", "relative", 0.4297),
            ("step 1", STEP_AT + 1, "bad", "relative", 0.4297),
            ("step 2", STEP_AT, "bad", "relative", 0.4297),
        ]
    ]  # fmt: skip
    doc = {
        "status": "found",
        "headline": f"first bad commit {commits[STEP_AT]} 'commit {STEP_AT}' ({STEP_CASE}, accept_rate, rtol "
        "0.05; 2 bisect steps)",
        "first_bad": {"commit": commits[STEP_AT], "subject": f"commit {STEP_AT}"},
        "candidates": [],
        "params": {"case": STEP_CASE, "metric": "accept_rate", "rtol": 0.05, "good": commits[STEP_AT - 1],
                   "bad": commits[-1], "tree": "/nowhere", "out": "/nowhere", "builder": "x",
                   "build_argv": [], "run_argv": [], "reference": None},
        "tested": steps,
    }  # fmt: skip
    (results / "bisect-20261201T090000Z-tiny-mtp-random").mkdir()
    (results / "bisect-20261201T090000Z-tiny-mtp-random" / "bisect.json").write_text(json.dumps(doc))
    (results / "bisect-broken").mkdir()
    (results / "bisect-broken" / "bisect.json").write_text('{"status": "found"}')


HOSTILE = '</script><script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


def hostile_run(db: Path, results: Path, n: int = 0) -> dict[str, Any]:
    """A results.json whose every text field tries to inject script, and whose log is a symlink out."""
    doc = at(real(0), "d" * 40, n, run_id="hostile-run")
    rec = doc["cases"].pop("tiny-mtp-fixed")
    rec.update(name=HOSTILE, status="failed", reason=HOSTILE, message=HOSTILE, target=HOSTILE)
    rec.update(command=["llama-server", HOSTILE], log="logs/../../../../etc/passwd", warnings=[HOSTILE])
    doc["cases"] = {HOSTILE: rec, **dict(list(doc["cases"].items())[:1])}
    doc["device"] = {"name": HOSTILE, "class": HOSTILE}
    doc["binary"]["backend"] = HOSTILE
    doc["tier"] = doc["host"] = HOSTILE
    doc["models"] = {HOSTILE: {"sha256": HOSTILE, "size": 1}}
    folder = record(doc, db, results)
    (folder / "logs").mkdir()
    os.symlink("/etc/passwd", folder / "logs" / "passwd.log")
    (folder / "logs" / f"{'x' * 10}.log").write_text("a real log line\n")
    return doc


# A drift and a slowdown (issue 36): one case accepts 3 % less a commit over four consecutive commits (four
# change points that the site shows as one span), another keeps its counters and loses 3 % of its speedup a
# commit over six commits (-16.7 %: the index's speedup sparkline must show it), ending below 1.0 while it
# passes (no speed floor: the page says so).
DRIFT_CASE, DRIFT_FROM, DRIFT_STEPS = "tiny-mtp-random", 5, 4
SPEED_CASE, SPEED_FROM, SPEED_STEPS, SPEED_START = "tiny-mtp-fixed", 6, 6, 1.15
DRIFT_COMMITS = 12


def steps_at(n: int, first: int, steps: int) -> int:
    """How many 3 % steps run ``n`` has taken of a change of ``steps`` commits from commit ``first``."""
    return min(max(n - first + 1, 0), steps)


def drift_doc(commit: str, n: int) -> dict[str, Any]:
    doc = at(real(2), commit, n)
    rec = doc["cases"][DRIFT_CASE]
    f = 0.97 ** steps_at(n, DRIFT_FROM, DRIFT_STEPS)
    rec["accept_rate"], rec["accept_len"] = round(rec["accept_rate"] * f, 4), round(rec["accept_len"] * f, 4)
    speed = doc["cases"][SPEED_CASE]
    up = round(SPEED_START * 0.97 ** steps_at(n, SPEED_FROM, SPEED_STEPS), 4)
    speed["speedup"] = up
    speed["speed"].update(speedups=[up] * 4, speedup_median=up, speedup_spread=0.0)
    doc.pop("verdict", None)
    doc.pop("history", None)
    return doc


def drift_story(tmp: Path) -> Story:
    mirror = tmp / "mirror"
    commits = git_commits(mirror, DRIFT_COMMITS)
    db, results = tmp / "history.sqlite", tmp / "results"
    ids = []
    for n, commit in enumerate(commits):
        doc = drift_doc(commit, n)
        record(doc, db, results)
        ids.append(doc["run_id"])
    return Story(db, results, mirror, commits, ids)


# The morning (issue 51): what changed since the last run. Five runs of the real synthetic tier at five
# commits; the fourth fails RED_BEFORE (a floor) and STILL_RED (spec_inactive) and reproduces KNOWN_CASE's
# upstream bug; the fifth (the newest) fixes RED_BEFORE, fails NEW_RED (a floor) and STILL_RED again, still
# reproduces KNOWN_CASE's bug, no longer shows FIXED_CASE's, has NOT_BUILT cases its build predates, and its
# binary's --spec-draft-p-min default moved (the CONFIGURATION CHANGED line, as the gate writes it into its
# results.json and as the history keeps it). A second device class has one green run.
RED_BEFORE, NEW_RED, STILL_RED = "tiny-dspark-random", "tiny-eagle3-random", "tiny-simple-random"
KNOWN_CASE, FIXED_CASE = "tiny-dflash-random", "tiny-auto-mtp"
NOT_BUILT = ("tiny-dspark-fixed", "tiny-dspark-n8", "tiny-dspark-p05", "tiny-dspark-detect")
KNOWN_BUG = {"issue": 21815, "title": "the n-gram map speculators abort under --context-shift",
             "reason": "crashed"}  # fmt: skip
P_MIN = "--spec-draft-p-min"
# a suspects line as the suspects finder writes one into a run's history note (issue 50)
SUSPECTS = f"suspects for {NEW_RED}: common/speculative.cpp +12 -3 in common_speculative_draft_simple()"
MORNING_COMMITS = 5
OTHER_CLASS = "nvidia-h200"


def _config(p_min: str) -> dict[str, Any]:
    return {"defaults": {P_MIN: p_min, "--spec-draft-n-max": "16"}, "build": None}


def _known(rec: dict[str, Any], state: str) -> None:
    rec["known_bug"] = {**KNOWN_BUG, "state": state}
    if state == "present":
        named = f"llama.cpp #{KNOWN_BUG['issue']} ({KNOWN_BUG['title']})"
        said = f"known bug, still present: {named}: [crashed] POST /completion failed"
        rec.update(status="known_bug", reason="crashed", message=said)


def morning_doc(commits: list[str], n: int, before: str = "") -> dict[str, Any]:
    """The ``n``-th run of the morning story (its results.json); ``before``: the run id before it."""
    from specsuite.results import config

    doc = at(real(min(n, 2)), commits[n], n)
    doc.pop("verdict", None)
    doc["config"] = _config("0.75" if n < MORNING_COMMITS - 1 else "0.00")
    cases = doc["cases"]
    if n == MORNING_COMMITS - 2:
        fail(cases[RED_BEFORE], "floor", "accept_rate 0.2001 < floor 0.25")
        fail(cases[STILL_RED], "spec_inactive", "the server drafted no token: speculative decoding never ran")
        _known(cases[KNOWN_CASE], "present")
        _known(cases[FIXED_CASE], "present")
    if n == MORNING_COMMITS - 1:
        fail(cases[NEW_RED], "floor", "accept_rate 0.1000 < floor 0.25")
        fail(cases[STILL_RED], "spec_inactive", "the server drafted no token: speculative decoding never ran")
        _known(cases[KNOWN_CASE], "present")
        _known(cases[FIXED_CASE], "fixed")
        for name in NOT_BUILT:  # as run-tier records a case the binary cannot run: no numbers
            cases[name].update(status="not_in_build", reason="binary_no_dspark", speed=None, speedup=None,
                               message="llama-server cannot run this case: no dspark", accept_rate=None,
                               accept_len=None, pos0_rate=None, per_position_rate=[], per_position=[],
                               drafted=None, accepted=None, drafts=None, decode_tps=None,
                               baseline_decode_tps=None, identical_fraction=None)  # fmt: skip
        was = config.RunConfig(defaults=_config("0.75")["defaults"])
        now = config.RunConfig(defaults=doc["config"]["defaults"])
        changes = config.changes((was, None), (now, None), (commits[n - 1], commits[n]))
        # the failed case's baseline was the run before: it failed under the change (as the gate records it)
        cases[NEW_RED]["baseline"] = {"commit": commits[n - 1], "run_id": before, "config_changes": changes}
        base = f"{commits[n - 1][:12]} (run {before})"
        doc["history"] = {"line": None, "recorded": True, "config_base": base, "config_changes": changes,
                          "suspects": [SUSPECTS]}  # fmt: skip
    else:
        doc.pop("history", None)
    return doc


def morning_story(tmp: Path) -> Story:
    mirror = tmp / "mirror"
    commits = git_commits(mirror, MORNING_COMMITS)
    db, results = tmp / "history.sqlite", tmp / "results"
    ids = []
    for n in range(MORNING_COMMITS):
        doc = morning_doc(commits, n, ids[-1] if ids else "")
        folder = record(doc, db, results)
        ids.append(doc["run_id"])
    run = decode_run(doc, doc["run_id"])
    write_summary(run, verdict(run), folder)  # the newest run's summary.md, as the suite writes it
    other = at(real(2), commits[0], 0, run_id="h200-run")
    other.pop("verdict", None)
    other.pop("history", None)
    other["device"] = {"name": "NVIDIA H200", "class": OTHER_CLASS}
    other["binary"]["backend"] = "cuda"
    record(other, db, results)
    return Story(db, results, mirror, commits, ids)
