"""What every command's parser shares: the parser class and the value types its options use.

A bad value is argparse's usage error naming the option (exit 2), raised here as ``ArgumentTypeError``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from specsuite.common import settings


class CommandParser(argparse.ArgumentParser):
    """The parser of ``specsuite NAME``. No abbreviations: the options a command does not know (pytest's,
    build's) must never be taken for abbreviations of its own. It lists the options declared on it in
    ``options`` (argparse keeps them only in private attributes), so help can be read back from here."""

    def __init__(self, name: str, description: str, **kwargs: Any) -> None:
        self.options: list[argparse.Action] = []
        super().__init__(prog=f"specsuite {name}", description=description, allow_abbrev=False, **kwargs)
        self.options.clear()  # argparse's own -h/--help is not an option of the command

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.options.append(action)
        return action

    def option_help(self) -> dict[str, str]:
        """Each documented option's help by its dest, formatted as ``--help`` formats it."""
        return {
            a.dest: a.help % {**vars(a), "prog": self.prog}
            for a in self.options
            if a.help and a.help != argparse.SUPPRESS
        }

    def summary(self) -> str:
        """The description's first line: the command in one line (the rest of it only in ``--help``)."""
        return (self.description or "").partition("\n")[0]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def int_up_to(top: int) -> Callable[[str], int]:
    """A whole number from 1 to ``top``: an upper bound where a typo (an extra zero) would mean days."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > top:
            shown = text if len(text) <= 12 else f"{text[:12]}…"
            raise argparse.ArgumentTypeError(f"{shown} must be <= {top}")
        return value

    return parse


repeat_count = int_up_to(settings.MAX_REPEAT)  # speed rounds: run-tier, bench and bisect --repeat


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be between 0 and 1 (0.05 = 5 %)")
    return value


def comma_list(text: str) -> list[str]:
    """``a, b,,c`` -> ``["a", "b", "c"]``; a list with no name in it is a usage error."""
    items = [v.strip() for v in text.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"{text!r} names nothing: give a comma list, e.g. a,b")
    return items
