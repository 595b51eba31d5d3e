"""nox's posargs reach every session: build's flags are told from the rest by build's own parser."""

from __future__ import annotations

import pytest

from specsuite.common.argtypes import CommandParser
from specsuite.llamacpp import cmake
from specsuite.llamacpp.posargs import split_posargs


def test_build_flags_are_dropped_from_posargs() -> None:
    keep, dropped = split_posargs(
        ["--cpu", "-x", "-DGGML_NATIVE=OFF", "-k", "mtp", "--configure-only", "--cuda", "--cublas-from-wheel"]
    )
    assert keep == ["-x", "-k", "mtp"]
    assert dropped == ["--cpu", "-DGGML_NATIVE=OFF", "--configure-only", "--cuda", "--cublas-from-wheel"]


@pytest.mark.parametrize(
    ("argv", "keep", "dropped"),
    [
        (["-D", "GGML_NATIVE=OFF", "-x"], ["-x"], ["-D", "GGML_NATIVE=OFF"]),  # the value goes with -D
        (["-x", "-D"], ["-x", "-D"], []),  # -D without a value is not build's: pytest says what is wrong
        (["--co", "--cu"], ["--co", "--cu"], []),  # no abbreviations: pytest's --co stays pytest's
        (["--", "-x"], ["--", "-x"], []),  # a separator is never a build flag
        (["--help", "-h", "--cpu"], ["--help", "-h"], ["--cpu"]),  # help is the running command's
        (["--cpu=yes"], ["--cpu=yes"], []),  # build would refuse it: not a build flag
        ([], [], []),
    ],
)
def test_edges(argv: list[str], keep: list[str], dropped: list[str]) -> None:
    assert split_posargs(argv) == (keep, dropped)


def test_a_new_build_option_needs_no_change_here(monkeypatch: pytest.MonkeyPatch) -> None:
    def parser() -> CommandParser:
        p = CommandParser("build", "a build with one more option")
        p.add_argument("--lto", action="store_true")
        p.add_argument("--jobs", type=int)
        return p

    monkeypatch.setattr(cmake, "parser", parser)
    assert split_posargs(["--lto", "--jobs", "3", "--cpu", "-x"]) == (
        ["--cpu", "-x"],
        ["--lto", "--jobs", "3"],
    )
