"""``replay.json``: a replay's plan and how far it got, rewritten whole after every step, so that the same
command run again resumes where it stopped (a build done is not built or run again; one whose compile
failed stays failed; one whose run was cut short is run again).

The folder is named by what is replayed (tier, builds, options: ``folder_name``), so running the same
command again finds it; ``--out`` names another. A replay holds a lock on its folder for its whole life
(``claim``), so two replays never write one folder.

A replay.json may have been edited by hand or copied from elsewhere: ``load`` checks it as strictly as
what the replay writes (``problems``), since what it holds is trusted afterwards (each entry's build is
looked up in ``builds``, its results folder read into the story).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import msgspec

from specsuite.common import atomic, locks
from specsuite.common.errors import UserError
from specsuite.llamacpp.builds import MAX_BUILDS

STATE_FILE = "replay.json"
LOCK_FILE = ".replay.lock"  # the running replay's flock (``claim``): no part of its state
PENDING, DONE, BUILD_FAILED, RUN_FAILED = "pending", "done", "build_failed", "run_failed"
STATUSES = (PENDING, DONE, BUILD_FAILED, RUN_FAILED)
FINAL = (DONE, BUILD_FAILED)  # not tried again on resume
MAX_STATE_BYTES = 16 * 2**20  # 200 builds (builds.MAX_BUILDS) write some 100 kB
MIN_BUILD, MAX_BUILD = 2, 9_999_999  # what --builds takes (identity.parse_build)
MAX_SECONDS = 1e7  # a build's or a run's seconds (116 days): more is no measurement
MAX_EXIT = 255  # run-tier's exit status: 0 to 255, or minus the signal that killed it


class Entry(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One build of the replay."""

    build: int
    status: str = PENDING
    binary: str | None = None
    build_s: float | None = None  # configure and ninja (a cached build: seconds)
    run_s: float | None = None
    results: str | None = None  # the run's folder (results.json, summary.md)
    run_id: str | None = None
    headline: str | None = None  # the run's verdict line
    exit_code: int | None = None  # run-tier's
    message: str = ""  # why a build or run failed

    @property
    def key(self) -> str:
        return f"b{self.build}"


class Replay(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tier: str
    builds: list[int]
    run_argv: list[str] = []
    build_argv: list[str] = []
    index: str = ""
    started: str = ""
    entries: list[Entry] = []

    def entry(self, build: int) -> Entry:
        return next(e for e in self.entries if e.build == build)

    def same_plan(self, other: Replay) -> bool:
        return (self.tier, self.builds, self.run_argv, self.build_argv) == (
            other.tier,
            other.builds,
            other.run_argv,
            other.build_argv,
        )


def folder_name(tier: str, builds: list[int], run_argv: list[str], build_argv: list[str]) -> str:
    """``replay-synthetic-b9113-b11434-<8 hex>``: one folder per plan, found again by the same command."""
    blob = json.dumps([tier, builds, run_argv, build_argv]).encode()
    what = re.sub(r"[^A-Za-z0-9_.-]+", "_", tier)[:40]  # a tier, or case names
    return f"replay-{what}-b{builds[0]}-b{builds[-1]}-{hashlib.sha256(blob).hexdigest()[:8]}"


def load(out: Path) -> Replay | None:
    """The replay saved in ``out`` (None: none is), checked (``problems``); one UserError naming the file
    and its first problem."""
    path = out / STATE_FILE
    if not path.is_file():
        return None
    replay = _decode(path)
    problem = next(problems(replay, out.resolve()), None)  # the replay writes its paths resolved
    if problem is not None:
        raise UserError(f"{path}: {problem}; {_fix(out)}")
    return replay


def _decode(path: Path) -> Replay:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_STATE_BYTES + 1)  # a hostile file may be any size: no more is read
        if len(data) > MAX_STATE_BYTES:
            raise msgspec.DecodeError(f"more than {MAX_STATE_BYTES // 2**20} MiB")
        return msgspec.json.decode(data, type=Replay)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UserError(f"{path}: not a replay's state ({exc}); {_fix(path.parent)}") from None


def _fix(out: Path) -> str:
    return f"correct it, give another --out, or remove {out} to start the replay over"


def problems(replay: Replay, out: Path) -> Iterator[str]:
    """What no replay writes, first things first: its builds (each once, lowest first, build numbers),
    then each entry (one per build, a known status, its results folder its own run's in ``out``, seconds
    and exit status in range, one-line texts: the story prints them as lines)."""
    known = set(replay.builds)  # sets: a hostile file may list a million builds
    if not replay.tier:
        yield "tier is empty"
    if not 0 < len(replay.builds) <= MAX_BUILDS or replay.builds != sorted(known):
        yield f"builds {_short(replay.builds)} are not 1 to {MAX_BUILDS} builds, lowest first, each once"
    if bad := [b for b in replay.builds if not MIN_BUILD <= b <= MAX_BUILD]:
        yield f"builds: {_short(bad[0])} is not a build number ({MIN_BUILD} to {MAX_BUILD})"
    seen: set[int] = set()
    for e in replay.entries:
        if e.build not in known:
            yield f"entry {_key(e)}: not one of its builds ({_short(replay.builds)})"
        elif e.build in seen:
            yield f"entry {_key(e)}: a second entry for {_key(e)}"
        seen.add(e.build)
        yield from (f"entry {_key(e)}: {p}" for p in _entry_problems(e, out))
    if missing := [b for b in replay.builds if b not in seen]:
        yield f"b{missing[0]} has no entry (each build has one)"


def _entry_problems(e: Entry, out: Path) -> Iterator[str]:
    if e.status not in STATUSES:
        yield f"status {_short(e.status)} is not one of {', '.join(STATUSES)}"
    if (e.status == DONE) != (e.results is not None):
        yield (
            f"status {e.status!r} without its results folder"
            if e.results is None
            else f"results of a run whose status is {e.status!r} (only a done run has them)"
        )
    if e.results is not None and not _own_run(e, Path(e.results), out):
        yield f"results {_short(e.results)} is not a run folder of its own ({out / e.key}/{e.key}-run-N)"
    for name, secs in (("build_s", e.build_s), ("run_s", e.run_s)):
        if secs is not None and not (math.isfinite(secs) and 0 <= secs <= MAX_SECONDS):
            yield f"{name} {_short(secs)} is not seconds from 0 to {MAX_SECONDS:.0e}"
    if e.exit_code is not None and not -MAX_EXIT <= e.exit_code <= MAX_EXIT:
        yield f"exit_code {_short(e.exit_code)} is not an exit status (-{MAX_EXIT} to {MAX_EXIT})"
    texts = {"message": e.message, "headline": e.headline, "run_id": e.run_id, "binary": e.binary}
    for name, text in texts.items():
        if text is not None and ("\n" in text or "\r" in text):
            yield f"{name} holds a line break"


def _own_run(e: Entry, path: Path, out: Path) -> bool:
    """``path`` is ``out/bN/bN-run-K``, as ``command._run`` names it, and no other folder: the story reads
    it (a ``..`` or a folder elsewhere would put another run in this replay's story)."""
    return path.parent == out / e.key and re.fullmatch(rf"{e.key}-run-[0-9]{{1,6}}", path.name) is not None


def _key(e: Entry) -> str:
    return e.key if MIN_BUILD <= e.build <= MAX_BUILD else _short(e.build)


def _short(value: object) -> str:
    """A value as a short piece of a line (a hand-edited one may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:50]}... ({len(text)} characters)"


def save(out: Path, replay: Replay) -> None:
    atomic.write_bytes(out / STATE_FILE, msgspec.json.format(msgspec.json.encode(replay), indent=2))


def resume(out: Path, fresh: Replay, old: Replay | None) -> Replay:
    """``old`` (the replay saved in ``out``) when it is this plan, its builds done so far kept, else
    ``fresh``; a folder holding another plan, or other files, is refused."""
    if old is None:
        if out.exists() and any(p.name != LOCK_FILE for p in out.iterdir()):
            raise UserError(f"--out {out} holds other files and no {STATE_FILE}; give a new or empty folder")
        return fresh
    if not old.same_plan(fresh):
        raise UserError(
            f"{out} holds another replay (tier {old.tier}, builds "
            f"{', '.join(f'b{b}' for b in old.builds)}, options {old.run_argv + old.build_argv}); give "
            "another --out, or the same arguments to resume it"
        )
    for e in old.entries:
        if e.status not in FINAL:
            e.status = PENDING
    return old


@contextlib.contextmanager
def claim(out: Path) -> Iterator[None]:
    """The replay's lock on its folder (``out/.replay.lock``, a flock the kernel drops with the process),
    held while the body runs; UserError at once when another process holds it.

    Refused, not waited for: a replay runs for hours, and one started beside it (the same command in a
    second terminal, a CI job retried) could add nothing but a wait of hours to find the work done; the
    line names the holder, so the user can wait for it, stop it, or give another --out."""
    from filelock import FileLock, Timeout  # 70 ms to import: only where a replay starts

    path = out / LOCK_FILE
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise UserError(
            f"another replay ({locks.describe(locks.holders(path))}) is writing into {out}; let it finish "
            "(the same command then resumes where it got), or give another --out"
        ) from None
    try:
        yield
    finally:
        lock.release()
