"""The git side of a bisect: commits in the llama.cpp mirror, one stable worktree per repository, git bisect.

The mirror is source.py's (``<cache>/llama.cpp/git``, or ``git-<hash>`` for another LLAMA_CPP_REPO: a bare
full-history clone per remote). The worktree lives at
``<cache>/bisect/<hash of the repository>/llama.cpp`` and is reused by every bisect of that repository, so
its build folder beside it (build.build_place) is reused too and ninja rebuilds only what a checkout changed;
its first build takes from ccache every object a ``nox -s build`` of the same files made. One
bisect per worktree at a time: ``exclusive`` holds its lock for the whole command.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from specsuite.common import git, locks
from specsuite.common.errors import UserError
from specsuite.common.procs import run_forwarding
from specsuite.llamacpp import source

# `git bisect log` lines (stable since git 2.x): the verdict, or the candidates left when only skips remain
_FIRST_BAD = re.compile(r"^# first bad commit: \[([0-9a-f]{40})\] ?(.*)$", re.M)
_POSSIBLE = re.compile(r"^# possible first bad commit: \[([0-9a-f]{40})\] ?(.*)$", re.M)
# git writes one for every mark, those of `bisect start` too
_MARK = re.compile(r"^# (good|bad): \[([0-9a-f]{40})\]", re.M)


@dataclass(frozen=True)
class BisectEnd:
    """What ``git bisect log`` says at the end: the first bad commit, or the candidates skips left open."""

    first_bad: str | None
    candidates: list[str]


def mirror(cache: Path, repository: str) -> Path:
    """The llama.cpp mirror, cloned once (full history) when the cache has none."""
    root = cache / "llama.cpp"
    root.mkdir(parents=True, exist_ok=True)
    path = source.mirror_path(cache, repository)  # one per remote: a changed LLAMA_CPP_REPO is another clone
    with locks.held(root / "git.lock", f"the llama.cpp mirror {path}"):
        if not (path / "HEAD").exists():
            print(f"bisect: cloning {repository} into {path} (full history, once)", flush=True)
        source.ensure_mirror(path, repository)
    return path


def resolve_commit(mirror_dir: Path, ref: str, repository: str, flag: str) -> str:
    """The full hash of ``--good``/``--bad``; fetches the mirror when the commit is not there yet."""
    source.check_ref(ref, f"{flag} ")
    with locks.held(mirror_dir.parent / "git.lock", f"the llama.cpp mirror {mirror_dir}"):
        return source.resolve_ref(mirror_dir, ref, repository, what=f"{flag} ")


def check_range(mirror_dir: Path, good: str, bad: str) -> int:
    """The number of commits in good..bad; UserError unless --good is a proper ancestor of --bad."""
    if good == bad:
        raise UserError(f"--good and --bad are the same commit {good[:12]}; give two different commits")
    res = git.run(["merge-base", "--is-ancestor", good, bad], mirror_dir)
    if res.returncode == 1:
        raise UserError(
            f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}: bisect needs a good commit earlier "
            "in the bad commit's history (swap them, or pick the good one from `git log BAD`)"
        )
    if res.returncode != 0:
        raise UserError(f"git merge-base failed in {mirror_dir}: {res.stderr.strip()[-400:]}")
    return count(mirror_dir, good, bad)


def history(mirror_dir: Path, good: str, bad: str) -> list[str]:
    """good, then every commit of good..bad oldest first: the order of the report's rows."""
    return [good, *git.output(["rev-list", "--reverse", f"{good}..{bad}"], mirror_dir).split()]


def subject(repo: Path, commit: str) -> str:
    return git.output(["log", "-1", "--format=%s", commit], repo)


def head(tree: Path) -> str:
    return git.output(["rev-parse", "HEAD"], tree)


def tree_path(cache: Path, repository: str) -> Path:
    digest = hashlib.sha256(repository.encode()).hexdigest()[:16]
    return cache / "bisect" / digest / "llama.cpp"  # named as build.build_place wants it


@contextmanager
def exclusive(tree: Path) -> Iterator[None]:
    """One bisect per worktree: a second one is refused at once, naming the lock."""
    tree.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(tree) + ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise UserError(
            f"another bisect of this repository is running (lock {lock.lock_file}); wait for it to end"
        ) from None
    try:
        yield
    finally:
        lock.release()


def worktree(tree: Path, mirror_dir: Path, commit: str) -> Path:
    """The stable worktree (added on first use, or again when the mirror was re-cloned), at ``commit``,
    with no bisect left over from a bisect run that was killed."""
    ok = (tree / ".git").is_file() and git.run(["rev-parse", "--git-dir"], tree).returncode == 0
    if not ok:
        with locks.held(mirror_dir.parent / "git.lock", f"the llama.cpp mirror {mirror_dir}"):
            source.add_worktree(mirror_dir, tree, commit)
    reset(tree)
    checkout(tree, commit)
    return tree


def checkout(tree: Path, commit: str) -> None:
    git.output(["checkout", "--quiet", "--detach", "--force", commit], tree)


def active(tree: Path) -> bool:
    return (tree / ".git").is_file() and git.run(["bisect", "log"], tree).returncode == 0


def reset(tree: Path) -> None:
    """End any bisect in the worktree (no-op when none is running)."""
    if active(tree):
        git.output(["bisect", "reset"], tree)


def start(tree: Path, bad: str, good: str) -> str:
    """``git bisect start BAD GOOD``; its output (git checks out the first commit to test)."""
    return git.output(["bisect", "start", bad, good], tree)


def log(tree: Path) -> str:
    res = git.run(["bisect", "log"], tree)
    return res.stdout if res.returncode == 0 else ""


def outcome(log_text: str) -> BisectEnd:
    found = _FIRST_BAD.search(log_text)
    return BisectEnd(found.group(1) if found else None, [m.group(1) for m in _POSSIBLE.finditer(log_text)])


def range_left(log_text: str) -> tuple[str, str] | None:
    """(the last good, the last bad) a stopped bisect had marked: the first bad commit is after the one and
    at or before the other. None before both were marked."""
    last: dict[str, str] = {}
    for m in _MARK.finditer(log_text):
        last[m.group(1)] = m.group(2)
    return (last["good"], last["bad"]) if len(last) == 2 else None


def count(mirror_dir: Path, good: str, bad: str) -> int:
    return int(git.output(["rev-list", "--count", f"{good}..{bad}"], mirror_dir))


def bisect_run(tree: Path, step_cmd: list[str], env: Mapping[str, str]) -> int:
    """``git bisect run STEP``: git checks out each commit to test and reads the step's exit status."""
    cmd = ["git", "bisect", "run", *step_cmd]
    return run_forwarding(cmd, env=env, cwd=tree)
