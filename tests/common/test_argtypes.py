"""Every command's parser: value types with usage errors that name the bad value, and options read back."""

from __future__ import annotations

import argparse

import pytest

from specsuite.common.argtypes import CommandParser, comma_list, fraction, positive_int


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        (positive_int, "3", 3),
        (fraction, "0.05", 0.05),
        (comma_list, " mtp, dflash,,", ["mtp", "dflash"]),
    ],
)
def test_good_values(kind, text: str, expected) -> None:
    assert kind(text) == expected


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        (positive_int, "abc", "'abc' is not a whole number"),
        (positive_int, "0", "0 must be >= 1"),
        (positive_int, "2.5", "'2.5' is not a whole number"),
        (fraction, "x", "'x' is not a number"),
        (fraction, "1", "1.0 must be between 0 and 1"),
        (fraction, "nan", "nan must be between 0 and 1"),
        (comma_list, " , ", "' , ' names nothing"),
    ],
)
def test_bad_values(kind, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        kind(text)


def _parser() -> CommandParser:
    p = CommandParser("demo", "One line for the list.\nThe rest only in --help.")
    p.add_argument("run", help="a run")
    p.add_argument("--jobs", type=positive_int, default=4, help="files at once (default %(default)s, 100%%)")
    p.add_argument("--secret", help=argparse.SUPPRESS)
    p.add_argument("--quiet", action="store_true")
    return p


def test_options_are_read_back_as_help_formats_them() -> None:
    p = _parser()
    assert p.prog == "specsuite demo"
    assert p.option_help() == {"run": "a run", "jobs": "files at once (default 4, 100%)"}
    assert p.summary() == "One line for the list."
    assert "files at once (default 4, 100%)" in p.format_help()


def test_no_abbreviations(capsys: pytest.CaptureFixture[str]) -> None:
    args, rest = _parser().parse_known_args(["r", "--job", "2"])
    assert (args.jobs, rest) == (4, ["--job", "2"])
    with pytest.raises(SystemExit):
        _parser().parse_args(["r", "--jobs", "0"])
    assert "argument --jobs: 0 must be >= 1" in capsys.readouterr().err
