"""nox's posargs: the arguments after ``--`` reach every session of one invocation
(``nox -s build test_smoke -- --cpu -x``), so each command drops the build's flags and keeps the rest.

Which flags are the build's is asked of build's own parser, one token at a time (with the value after it
for ``-D NAME=VALUE``), so a new build option needs no change here.
"""

from __future__ import annotations

import argparse

from specsuite.llamacpp import cmake


def split_posargs(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the rest, dropped build flags), each in the order given."""
    build = cmake.parser()
    build.exit_on_error = False  # a token build rejects (``-D`` without its value) raises instead of exiting
    keep: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(argv):
        n = _build_tokens(build, argv[i : i + 2])
        (dropped if n else keep).extend(argv[i : i + (n or 1)])
        i += n or 1
    return keep, dropped


def _build_tokens(build: argparse.ArgumentParser, window: list[str]) -> int:
    """How many tokens at the front of ``window`` are one build option: 0, 1 (a flag) or 2 (``-D VALUE``).
    Tokens are asked one by one, so two flags build refuses together (``--cpu --cuda``) are still its own."""
    if not window[0].startswith("-") or window[0] in ("--", "-h", "--help"):  # a value, a separator, or
        return 0  # the help every command has (build's parser would print its own and exit)
    for n in (1, 2):
        try:
            _, unknown = build.parse_known_args(window[:n])
        except argparse.ArgumentError:
            continue  # the option wants the next token as its value
        return n if not unknown else 0
    return 0
