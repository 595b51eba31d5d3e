"""Atomic writes: never half a file, never a stray temp file, permissions from the umask untouched."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from specsuite.common import atomic


def test_mode_follows_the_umask_without_changing_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = os.umask(0o027)
    try:
        # Reading the umask means setting it process-wide, which races with threads writing files: never.
        monkeypatch.setattr(os, "umask", lambda *a: pytest.fail("atomic must not touch the process umask"))
        atomic.write_text(tmp_path / "a.txt", "x")
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o640


def test_parallel_writers_leave_one_complete_file(tmp_path: Path) -> None:
    target = tmp_path / "stamp.json"
    texts = [str(i) * 10_000 for i in range(8)]
    threads = [threading.Thread(target=atomic.write_text, args=(target, t)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_text() in texts and os.listdir(tmp_path) == ["stamp.json"]


def test_a_failed_write_leaves_neither_file_nor_temp(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        atomic.write_json(tmp_path / "x.json", {"a": object()})
    assert os.listdir(tmp_path) == []


def test_a_symlink_at_the_temp_name_is_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / ".t.json.feedface0000.tmp").symlink_to(victim)
    names = iter(["feedface0000", "feedface0001"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: next(names))
    atomic.write_text(tmp_path / "t.json", "new")
    assert victim.read_text() == "keep" and (tmp_path / "t.json").read_text() == "new"


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_link_at_the_target_is_replaced_never_written_through(tmp_path: Path, kind: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("not yours\n")
    target = tmp_path / "results.json"
    target.symlink_to(victim) if kind == "symlink" else os.link(victim, target)
    atomic.write_text(target, "{}\n")
    assert victim.read_text() == "not yours\n"
    assert not target.is_symlink() and target.read_text() == "{}\n" and target.stat().st_nlink == 1


def test_first_link_finds_links_at_any_depth_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "logs" / "deep").mkdir(parents=True)
    (tmp_path / "logs" / "deep" / "a.log").write_text("x")
    assert atomic.first_link(tmp_path) is None
    (tmp_path / "logs" / "deep" / "b.log").symlink_to(tmp_path / "elsewhere")  # dangling counts too
    assert atomic.first_link(tmp_path) == (tmp_path / "logs" / "deep" / "b.log", "a symbolic link")
