"""The model folder: its layout, the one way a file enters it (verified, then published), and cheap lookups.

Files land flat in the folder. Beside each final file ``NAME`` the store keeps ``.NAME.part`` (bytes so
far), ``.NAME.part.json`` (what the partial is for), ``.NAME.stamp`` (see ``stamps``) and ``.NAME.lock``
(the per-file lock). Every one of them must be a regular file or absent: a symlink or a folder at any of
these names is refused with a message naming it, never followed and never deleted (deleting a link is
harmless, but what it points to is not ours, and the user should see that something planted it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from specsuite.common import atomic, filehash, locks, paths
from specsuite.common.errors import UserError
from specsuite.models import stamps

if TYPE_CHECKING:
    from specsuite.models.lock import Entry

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}
_META_MAX = 1 << 16  # a .part.json holds two numbers and a few ranges; anything bigger is not ours


class Cancelled(Exception):
    """Another file failed or the user pressed Ctrl-C; the partial is kept for a later resume."""


def part_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.part")


def meta_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.part.json")


def lock_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.lock")


def layout(final: Path) -> tuple[Path, ...]:
    """Every path the store uses for one file."""
    return final, part_path(final), meta_path(final), stamps.stamp_path(final), lock_path(final)


# ---------------------------------------------------------------- checks


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise io_error(exc, path.name) from None


def not_regular(path: Path) -> str | None:
    """What a store path is when it exists but is no regular file ("a symbolic link", ...), else None."""
    st = _lstat(path)
    return None if st is None or stat.S_ISREG(st.st_mode) else _kind(st.st_mode)


def regular_or_absent(path: Path) -> os.stat_result | None:
    """``lstat`` of a store path: None if absent, UserError if it exists and is not a regular file."""
    st = _lstat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UserError(
            f"{path} is {_kind(st.st_mode)}, but the model folder keeps only regular files the fetcher "
            "wrote there; nothing was read or written through it. Move it away (removing a link leaves its "
            "target alone), then rerun"
        )
    return st


def check_layout(final: Path) -> None:
    """UserError naming the first path of ``final``'s layout that exists but is not a regular file."""
    for path in layout(final):
        regular_or_absent(path)


def ensure_folder(folder: Path, what: str = "model folder") -> Path:
    """Create ``folder`` if needed; UserError (never a traceback) when it cannot be, or is not a folder."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        pass  # a file (or a link to one) at that name: reported below
    except OSError as exc:
        raise UserError(
            f"cannot create the {what} {folder}: {exc.strerror}; choose another with --model-dir / "
            "SPEC_MODEL_DIR (or --out), or fix its permissions"
        ) from None
    if not folder.is_dir():
        raise UserError(f"the {what} {folder} exists but is not a folder; give a folder path")
    return folder


def io_error(exc: OSError, name: str) -> UserError:
    """One line for an OS error on a store path: which file, what happened, what to do."""
    where = exc.filename or name
    if exc.errno in _DISK_FULL:
        return UserError(
            f"disk full while writing {name} ({where}): {exc.strerror}; free space there or use "
            "--model-dir / SPEC_MODEL_DIR on a bigger disk, then rerun (a partial file is kept and resumed)"
        )
    return UserError(
        f"{name}: {exc.strerror} ({where}); the model folder must be a writable folder of regular files: "
        "fix its permissions or point --model-dir / SPEC_MODEL_DIR elsewhere"
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_space(folder: Path, need: int, what: str) -> None:
    free = shutil.disk_usage(folder).free
    if free < need:
        raise UserError(
            f"not enough free space in {folder} for {what}: need {_gib(need)} (missing bytes plus margin), "
            f"have {_gib(free)}; free some space or point --model-dir / SPEC_MODEL_DIR at a bigger disk"
        )


# ---------------------------------------------------------------- partial files


def open_part(final: Path, *, new: bool, write: bool = True) -> IO[bytes]:
    """The partial file for reading (and writing), never through a link; ``new`` creates it (O_EXCL)."""
    part = part_path(final)
    flags = (os.O_RDWR if write else os.O_RDONLY) | _NOFOLLOW | (os.O_CREAT | os.O_EXCL if new else 0)
    try:
        fd = os.open(part, flags, 0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EEXIST, errno.EISDIR):
            regular_or_absent(part)  # names the link or folder planted there
        raise io_error(exc, final.name) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device opened without following
        os.close(fd)
        regular_or_absent(part)
    return os.fdopen(fd, "r+b" if write else "rb")


def discard_partial(final: Path) -> None:
    """Remove the partial and its description (unlinking never follows a link)."""
    for p in (part_path(final), meta_path(final)):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def new_part(final: Path, expect: dict[str, int | str] | None = None) -> IO[bytes]:
    """A fresh, empty partial (any old one discarded); ``expect`` is recorded for a later resume."""
    discard_partial(final)
    if expect is not None:
        write_meta(final, expect)
    return open_part(final, new=True)


def write_meta(final: Path, meta: Mapping[str, object]) -> None:
    """Record what the partial is for (and, for a parallel download, which ranges it holds)."""
    atomic.write_json(meta_path(final), meta, indent=None)


def read_meta(final: Path) -> dict[str, object] | None:
    """What a kept partial is for, or None when absent or unreadable (then it is not resumed)."""
    try:
        fd = os.open(meta_path(final), os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(_META_MAX)
    with contextlib.suppress(ValueError):
        data = json.loads(raw)
        return data if isinstance(data, dict) else None
    return None


# ---------------------------------------------------------------- the one way in


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(
    final: Path,
    *,
    size: int,
    sha256: str,
    got: str | None = None,
    what: str,
    fix: str,
    origin: str | None = None,
) -> None:
    """Make ``final``'s partial the final file if it is ``size`` bytes with ``sha256``; else discard it.

    ``got`` is the sha256 computed while writing (else the partial is hashed here). Publishing is fsync,
    atomic rename, fsync of the folder, stamp (with ``origin``: what the sha256 was checked against). A
    mismatch removes the partial and raises one UserError saying what was expected, what was got (``what``
    describes the bytes) and what to do (``fix``). The partial is only read: it may be a hard link to a
    file of a shared cache, which is never modified.
    """
    part = part_path(final)
    try:
        with open_part(final, new=False, write=False) as f:
            have = os.fstat(f.fileno()).st_size
            if got is None:
                got = filehash.sha256_file(part)
            if (have, got) == (size, sha256):
                os.fsync(f.fileno())
        if (have, got) != (size, sha256):
            discard_partial(final)
            raise UserError(
                f"{final.name} {what} is {have} bytes, sha256 {got}, but {size} bytes, sha256 {sha256} "
                f"were expected; nothing was published and the bytes were discarded. {fix}"
            )
        regular_or_absent(final)  # a folder or link at the final name is refused, not replaced
        os.replace(part, final)
        fsync_dir(final.parent)
        with contextlib.suppress(FileNotFoundError):
            meta_path(final).unlink()
        stamps.write_stamp(final, sha256, origin)
    except OSError as exc:
        raise io_error(exc, final.name) from None


# ---------------------------------------------------------------- per-file lock


@contextlib.contextmanager
def file_lock(
    final: Path,
    *,
    timeout: float,
    note: Callable[[str], None] = print,
    cancel: threading.Event | None = None,
    poll: float = 1.0,
    note_every: float = 30.0,
) -> Iterator[None]:
    """Hold ``.NAME.lock`` while other fetchers sharing the folder wait; Cancelled once ``cancel`` is set."""
    import filelock  # a fetcher's dependency; lookups never lock

    regular_or_absent(lock_path(final))
    lock = filelock.FileLock(str(lock_path(final)))
    waited, next_note = 0.0, 0.0
    while True:
        try:
            lock.acquire(timeout=min(poll, max(0.0, timeout - waited)))
            break
        except filelock.Timeout:
            who = locks.describe(locks.holders(lock.lock_file))
            waited += poll
            if waited >= timeout:
                raise UserError(
                    f"{final.name}: {who} has held {lock.lock_file} for {waited:.0f} s; "
                    "if no other fetch is running, delete that file and rerun"
                ) from None
            if cancel is not None and cancel.is_set():
                raise Cancelled() from None
            if waited >= next_note:  # at once, then every note_every seconds
                next_note += note_every
                note(f"{final.name}: waiting for {who}, which is fetching it ({waited:.0f} s so far)")
        except OSError as exc:
            raise io_error(exc, final.name) from None
    try:
        yield
    finally:
        lock.release()


# ---------------------------------------------------------------- lookups for the suite


@dataclass(frozen=True)
class StoredModel:
    """A verified file of the model folder: its lock name, path, size and the sha256 its stamp vouches for."""

    name: str
    path: Path
    size: int
    sha256: str


def _stored(folder: Path, entry: Entry) -> StoredModel | str:
    """The stored model for a lock entry, or why not."""
    final = folder / entry.name
    for path in (final, stamps.stamp_path(final)):
        if kind := not_regular(path):
            return f"{path} is {kind}, not a regular file (move it away)"
    st = _lstat(final)
    if st is None:
        return "missing (not fetched)"
    sha = stamps.read_stamp(final)
    if sha is None:
        return "no fresh stamp (never verified, or changed since it was)"
    if entry.locked and (st.st_size, sha) != (entry.size, entry.sha256):
        return (
            f"verified as {st.st_size} bytes, sha256 {sha}, but the lock says {entry.size} bytes, "
            f"sha256 {entry.sha256}"
        )
    return StoredModel(entry.name, final, st.st_size, sha)


def locate(
    names: list[str],
    *,
    lock: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
) -> dict[str, StoredModel]:
    """The verified files for lock names, from their stamps alone: no hashing, no network, no locking.

    A file counts when it is a regular file with a fresh stamp whose sha256 is the locked one (for a
    ``locked = false`` entry, any fresh stamp: the fetcher checked it against the Hub). Anything else is
    one UserError listing every bad name with the reason, ending with the command that fixes it.
    """
    from specsuite.models.lock import load_lock  # defers tomlkit: a stamp check reads no lock

    lk = load_lock(lock)
    folder = paths.model_dir(model_dir)
    found: dict[str, StoredModel] = {}
    bad: list[str] = []
    for name in names:
        entry = lk.entries.get(name)
        got = f"not in {lk.path}" if entry is None else _stored(folder, entry)
        if isinstance(got, StoredModel):
            found[name] = got
        else:
            bad.append(f"{name}: {got}")
    if bad:
        given = (("--lock", lock), ("--model-dir", model_dir))
        where = "".join(f" {flag} {value}" for flag, value in given if value)
        raise UserError(
            f"models not ready in {folder}:\n  " + "\n  ".join(bad) + "\nfetch and verify them with "
            f"`specsuite fetch-models --models {','.join(n for n in names if n not in found)}{where}`"
        )
    return found
