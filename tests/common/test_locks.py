"""Waiting for a lock out loud: who holds it (from the kernel's table), then when it is ours."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from lockholder import holding, release

from specsuite.common import locks

LINUX = pytest.mark.skipif(not locks.PROC_LOCKS.exists(), reason="the kernel's lock table is Linux's")


@LINUX
def test_the_holder_is_named_from_the_kernels_table(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    lock.touch()
    assert locks.holders(lock) == []
    with holding(lock) as proc:
        assert locks.holders(lock) == [proc.pid]
        who = locks.describe(locks.holders(lock))
        # the interpreter by its file name, then its arguments
        assert who.startswith(f"pid {proc.pid} ({Path(sys.executable).name} -c ") and who.endswith(")")


def test_a_table_line_of_a_waiter_or_another_file_is_not_a_holder(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    lock.touch()
    st = os.stat(lock)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    table = tmp_path / "locks"
    table.write_text(
        f"1: FLOCK  ADVISORY  WRITE 101 {ident} 0 EOF\n"
        f"1: -> FLOCK  ADVISORY  WRITE 102 {ident} 0 EOF\n"  # a process waiting for it
        f"2: FLOCK  ADVISORY  READ  103 {ident} 0 EOF\n"
        f"3: POSIX  ADVISORY  WRITE 104 {ident} 120 120\n"  # SQLite's write lock byte in a -shm file
        f"4: FLOCK  ADVISORY  WRITE 105 {ident}0 0 EOF\n"  # another inode
        f"5: POSIX  ADVISORY  WRITE 0 {ident} 0 EOF\n"  # a holder in another PID namespace
    )
    assert locks.holders(lock, table=table) == [101, 104, 0]
    assert locks.holders(lock, offset=120, table=table) == [101, 104, 0]
    assert locks.holders(lock, offset=121, table=table) == [101, 0]
    assert locks.describe([0]).startswith("a process in another PID namespace")
    assert locks.describe([]) == "another process"


@LINUX
def test_a_wait_is_said_at_once_with_its_holder_and_again_when_over(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    notes: list[str] = []
    got = threading.Event()

    def wait() -> None:
        with locks.held(lock, "the thing", note=notes.append):
            got.set()

    with holding(lock) as proc:
        waiter = threading.Thread(target=wait)
        waiter.start()
        # the line comes before the lock is ours, while the other process still holds it
        for _ in range(600):
            if notes:
                break
            threading.Event().wait(0.05)
        assert not got.is_set()
        assert notes[0].startswith(f"waiting for the thing: pid {proc.pid} (") and notes[0].endswith(
            f" holds {lock}"
        )
        release(proc)
        waiter.join(timeout=60)
    assert got.is_set() and len(notes) == 2 and notes[1].startswith("got the thing after waiting ")


def test_a_free_lock_is_taken_without_a_word(tmp_path: Path) -> None:
    notes: list[str] = []
    with locks.held(tmp_path / "x.lock", "the thing", note=notes.append):
        pass
    assert notes == []
