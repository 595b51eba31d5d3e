"""The caches a runner already keeps (huggingface_hub's and llama.cpp's), and Hugging Face's variables.

Locations follow huggingface_hub (its ``constants.py``): ``HF_HOME`` (default
``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``), the hub cache ``HF_HUB_CACHE`` (else the
older ``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``), the token file ``HF_TOKEN_PATH`` (default
``$HF_HOME/token``), ``HF_HUB_OFFLINE``. llama.cpp's ``LLAMA_CACHE`` uses the same layout since llama.cpp
PR 20775 (hub-docs ``local-cache.md``): ``models--ORG--NAME/blobs/<sha256>`` (an LFS file's blob is named by
the sha256 of its bytes), ``snapshots/<commit>/<path>`` (a relative link to the blob), ``refs/<branch>`` (a
commit), and ``<cache>/.locks/models--ORG--NAME/<blob>.lock``.

A file found there enters the model folder only after its size and sha256 matched (hashed once, then
stamped like any stored file), by hard link or reflink where the filesystems allow, else by copy; files of
these caches are only ever read. ``add`` (``--hf-cache``) puts a verified model into the hub cache's
layout, as huggingface_hub would: a new blob, the snapshot link at the pinned revision, ``refs/main`` when
the repository has none.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specsuite.common import filehash, locks
from specsuite.common.errors import UserError
from specsuite.models import store
from specsuite.models.store import Cancelled

_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int); fcntl.FICLONE arrives only with Python 3.12
_BLOCK = 8 << 20


def is_true(value: str | None) -> bool:
    """huggingface_hub's reading of a boolean variable."""
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def offline() -> bool:
    return is_true(os.environ.get("HF_HUB_OFFLINE"))


def hf_home() -> Path:
    if env := os.environ.get("HF_HOME"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "huggingface"


def hub_cache() -> Path:
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(env).expanduser() if env else hf_home() / "hub"


def caches() -> list[tuple[str, Path]]:
    """(label, folder) of each cache to look in: the hub cache, then LLAMA_CACHE when it is another one."""
    out = [("Hugging Face cache", hub_cache())]
    if (llama := os.environ.get("LLAMA_CACHE")) and Path(llama).expanduser() != out[0][1]:
        out.append(("LLAMA_CACHE", Path(llama).expanduser()))
    return out


def read_token_file() -> str | None:
    """The token huggingface_hub saved (``hf auth login``): the file at HF_TOKEN_PATH, else $HF_HOME/token."""
    path = Path(os.environ.get("HF_TOKEN_PATH") or hf_home() / "token").expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(
            f"cannot read the Hugging Face token file {path} ({exc.__class__.__name__}); fix it, or set "
            "HF_TOKEN instead"
        ) from None
    return text.replace("\r", "").replace("\n", "").strip() or None


def repo_folder(repo: str, repo_type: str = "model") -> str:
    """huggingface_hub's folder of a repository: ``models--ORG--NAME`` (``datasets--`` for a dataset)."""
    return f"{repo_type}s--" + repo.replace("/", "--")


# ---------------------------------------------------------------- looking up a file


@dataclass(frozen=True)
class Candidate:
    path: Path  # the file itself (links resolved)
    label: str  # which cache: "Hugging Face cache" or "LLAMA_CACHE"
    sha256: str | None  # the name of its blob, when it has one: what the cache says the bytes hash to
    size: int
    dev: int  # its filesystem: a hard link into the model folder needs the same one


def _regular(path: Path) -> tuple[Path, os.stat_result] | None:
    with contextlib.suppress(OSError):
        real = path.resolve(strict=True)
        st = real.stat()
        if stat.S_ISREG(st.st_mode):
            return real, st
    return None


def _blob_name(path: Path) -> str | None:
    name = path.name
    return (
        name
        if path.parent.name == "blobs" and len(name) == 64 and all(c in "0123456789abcdef" for c in name)
        else None
    )


def candidates(
    repo: str, revision: str, path: str, sha256: str | None, repo_type: str = "model"
) -> list[Candidate]:
    """Files of the shared caches that may hold this file, cheapest first, each once.

    With ``sha256`` (locked, or reported by the Hub): the repository's blob of that name, its snapshot at
    ``revision``, then a blob of that name in any other repository (the same bytes). Without: the snapshot
    at ``revision`` only, which names the blob (its sha256) huggingface_hub wrote for it.
    """
    seen: set[tuple[int, int]] = set()
    out: list[Candidate] = []
    for label, root in caches():
        own = root / repo_folder(repo, repo_type)
        paths = [own / "snapshots" / revision / path]
        if sha256:
            paths.insert(0, own / "blobs" / sha256)
            with contextlib.suppress(OSError):
                paths += [
                    p / "blobs" / sha256
                    for p in sorted(root.iterdir())
                    if p.name.startswith("models--") and p != own
                ]
        for p in paths:
            found = _regular(p)
            if found is None or (found[1].st_dev, found[1].st_ino) in seen:
                continue
            real, st = found
            seen.add((st.st_dev, st.st_ino))
            out.append(Candidate(real, label, _blob_name(real), st.st_size, st.st_dev))
    return out


# ---------------------------------------------------------------- bringing one into the model folder


def _hardlink(src: Path, final: Path) -> bool:
    try:
        os.link(src, store.part_path(final))
    except OSError:  # another filesystem, hard links refused (fs.protected_hardlinks), a planted name
        return False
    return True


def _reflink(src: Path, final: Path) -> bool:
    """A copy-on-write clone (btrfs, XFS, bcachefs): shares the blocks, copies nothing."""
    if not sys.platform.startswith("linux"):
        return False
    with store.new_part(final) as out, open(src, "rb") as f:
        try:
            fcntl.ioctl(out.fileno(), _FICLONE, f.fileno())
        except OSError:
            return False
    return True


def _copy(src: Path, final: Path, advance: Callable[[int], None]) -> str:
    """Copy ``src`` into the partial, hashing it on the way (one read); the sha256 of what was copied."""
    import hashlib

    h = hashlib.sha256()
    buf = memoryview(bytearray(_BLOCK))
    with store.new_part(final) as out, open(src, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(buf[:n])
            out.write(buf[:n])
            advance(n)
    return h.hexdigest()


def enter(
    cand: Candidate,
    final: Path,
    *,
    size: int,
    sha256: str,
    origin: str | None,
    advance: Callable[[int], None],
    cancel: threading.Event | None = None,
) -> tuple[str | None, str]:
    """Bring ``cand`` in as ``final`` if it has ``sha256``: (how, sha256 found); how is None on a mismatch.

    The caller holds ``final``'s lock. The candidate is only read; a partial made of it is removed when it
    does not match (unlinking a hard link leaves the other name alone).
    """

    def step(n: int) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        advance(n)

    store.discard_partial(final)
    try:
        how = (
            "hard link" if _hardlink(cand.path, final) else "reflink" if _reflink(cand.path, final) else None
        )
        if how is None:
            how, got = "copy", _copy(cand.path, final, step)
        else:
            got = filehash.sha256_file(store.part_path(final), progress=step)
    except OSError as exc:
        store.discard_partial(final)
        raise store.io_error(exc, final.name) from None
    except BaseException:
        store.discard_partial(final)
        raise
    if got != sha256 or os.lstat(store.part_path(final)).st_size != size:
        store.discard_partial(final)
        return None, got
    store.publish(final, size=size, sha256=sha256, got=got, what=f"from {cand.path}", origin=origin,
                  fix="Something changed it while it was read; rerun")  # fmt: skip
    return how, got


# ---------------------------------------------------------------- adding one to the hub cache


def _put_blob(final: Path, blob: Path, size: int) -> str:
    """The blob for ``final``: already there, else a hard link to it, else a copy (renamed into place)."""
    try:
        st: os.stat_result | None = blob.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        return "already there" if stat.S_ISREG(st.st_mode) and st.st_size == size else "left alone (not ours)"
    blob.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(final, blob)
        return "hard link"
    except FileExistsError:
        return "already there"
    except OSError:
        pass
    import shutil  # only for a copy

    tmp = blob.with_name(f"{blob.name}.{os.urandom(4).hex()}.incomplete")  # huggingface_hub's own suffix
    try:
        shutil.copyfile(final, tmp, follow_symlinks=False)
        os.chmod(tmp, 0o644)
        os.replace(tmp, blob)
    finally:
        tmp.unlink(missing_ok=True)
    return "copy"


def _link_snapshot(folder: Path, revision: str, path: str, blob: Path) -> None:
    snap = folder / "snapshots" / revision / path
    target = os.path.relpath(blob, snap.parent)
    if snap.is_symlink() and os.readlink(snap) == target:
        return
    if snap.exists() and not snap.is_symlink():
        return  # a copy huggingface_hub made where links are not allowed: leave it
    snap.parent.mkdir(parents=True, exist_ok=True)
    tmp = snap.with_name(f".{snap.name}.{os.urandom(4).hex()}.tmp")
    os.symlink(target, tmp)
    os.replace(tmp, snap)  # replaces a link to another blob, never writes through it


def add(
    final: Path, *, repo: str, revision: str, path: str, sha256: str, size: int, repo_type: str = "model"
) -> str:
    """Put the verified ``final`` into the hub cache's layout; one line saying what was done."""
    import filelock

    root = hub_cache()
    name = repo_folder(repo, repo_type)
    folder = root / name
    blob = folder / "blobs" / sha256
    try:
        (root / ".locks" / name).mkdir(parents=True, exist_ok=True)
        lock = root / ".locks" / name / f"{sha256}.lock"  # huggingface_hub's own lock of the blob
        with locks.held(lock, f"the Hugging Face cache's blob {blob}", timeout=600):
            made = _put_blob(final, blob, size)
            _link_snapshot(folder, revision, path, blob)
            refs = folder / "refs" / "main"
            if not refs.exists() and not refs.is_symlink():
                refs.parent.mkdir(parents=True, exist_ok=True)
                with open(refs, "x", encoding="utf-8") as f:
                    f.write(revision)
    except (OSError, filelock.Timeout) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(
            f"{final.name}: cannot add it to the Hugging Face cache {root} ({why}); fix that folder's "
            "permissions or point HF_HUB_CACHE elsewhere, or drop --hf-cache / SPEC_HF_CACHE"
        ) from None
    if made == "left alone (not ours)":
        return f"{final.name}: {blob} exists but is not this file; left alone"
    return f"{final.name}: in the Hugging Face cache as {blob} ({made})"


def present(repo: str, revision: str, path: str, sha256: str, size: int, repo_type: str = "model") -> bool:
    """True if ``add`` has nothing left to do (no lock taken, a few lstat calls)."""
    folder = hub_cache() / repo_folder(repo, repo_type)
    blob, snap = folder / "blobs" / sha256, folder / "snapshots" / revision / path
    with contextlib.suppress(OSError):
        st = blob.lstat()
        return (
            stat.S_ISREG(st.st_mode)
            and st.st_size == size
            and os.readlink(snap) == os.path.relpath(blob, snap.parent)
            and (folder / "refs" / "main").exists()
        )
    return False
