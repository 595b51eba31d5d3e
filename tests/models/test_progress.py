"""Progress: bars on a terminal, throttled plain lines otherwise."""

from __future__ import annotations

import io

from specsuite.models.progress import Board, human_size


def test_plain_lines_are_throttled():
    out = io.StringIO()
    board = Board(300, tty=False, interval=3600, stream=out)
    f = board.file("m.gguf", 300)
    for _ in range(3):
        f.advance(100)
    f.close()
    board.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # the first block, then the closing line; nothing in between within the interval
    assert lines[-1].startswith("m.gguf: 100.0%  300 B / 300 B") and "(total 300 B / 300 B)" in lines[-1]


def test_bars_on_a_terminal_and_restart():
    out = io.StringIO()
    board = Board(200, tty=True, stream=out)
    f = board.file("m.gguf", 200)
    f.advance(150)
    f.set(0)  # the download started over
    f.advance(200)
    f.note("m.gguf: retry 1/4")
    assert board.done == 200 and board.bar.n == 200
    f.close()
    board.close()
    assert "m.gguf: retry 1/4" in out.getvalue() and "total" in out.getvalue()


def test_unlocked_file_learns_its_size():
    board = Board(100, tty=True, stream=io.StringIO())
    f = board.file("u.gguf", 0)
    f.resize(50)
    assert board.total == 150 and board.bar.total == 150 and f.bar.total == 50
    f.close()
    board.close()


def test_human_size():
    assert [human_size(n) for n in (0, 1023, 1024, 300_000, 253_113_024, 50 << 30)] == [
        "0 B", "1023 B", "1.0 KiB", "293.0 KiB", "241.4 MiB", "50.0 GiB"]  # fmt: skip
