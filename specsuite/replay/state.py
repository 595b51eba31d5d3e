"""``replay.json``: a replay's plan and how far it got, rewritten whole after every step, so that the same
command run again resumes where it stopped (a build done is not built or run again; one whose compile
failed stays failed; one whose run was cut short is run again).

The folder is named by what is replayed (tier, builds, options: ``folder_name``), so running the same
command again finds it; ``--out`` names another.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import msgspec

from specsuite.common import atomic
from specsuite.common.errors import UserError

STATE_FILE = "replay.json"
PENDING, DONE, BUILD_FAILED, RUN_FAILED = "pending", "done", "build_failed", "run_failed"
FINAL = (DONE, BUILD_FAILED)  # not tried again on resume


class Entry(msgspec.Struct, kw_only=True):
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


class Replay(msgspec.Struct, kw_only=True):
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
    path = out / STATE_FILE
    if not path.is_file():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=Replay)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UserError(
            f"{path}: not a replay's state ({exc}); give another --out, or remove the folder to start over"
        ) from None


def save(out: Path, replay: Replay) -> None:
    atomic.write_bytes(out / STATE_FILE, msgspec.json.format(msgspec.json.encode(replay), indent=2))


def resume(out: Path, fresh: Replay, old: Replay | None) -> Replay:
    """``old`` (the replay saved in ``out``) when it is this plan, its builds done so far kept, else
    ``fresh``; a folder holding another plan, or other files, is refused."""
    if old is None:
        if out.exists() and any(out.iterdir()):
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
