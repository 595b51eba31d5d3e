"""``specsuite <command> …`` (also ``python -m specsuite``): the one front door to every command.

Each command lives in the module that owns its concern, which declares its options (``parser()``, a
``CommandParser``) and runs it (``main(argv) -> int``); this module only names those modules and
dispatches to them. A command's module is imported when it runs (cli is the top layer, so this is dispatch,
not a hidden cycle): one command never pays for another's imports. A ``UserError`` becomes one ``error:``
line and its exit code; Ctrl-C becomes ``interrupted`` and 130; an OSError one ``error:`` line and 2; any
other exception is a bug: its traceback, one ``internal error`` line and 3 (the codes: common.errors).
nox sessions and invoke tasks call these commands; the tasks take their help from the same parsers
(``task_help``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from typing import Any

from specsuite.common import errors, procs
from specsuite.common.argtypes import CommandParser
from specsuite.common.errors import UserError

# name -> the module that owns the command ("module:prefix" where a module owns two: prefix_parser,
# prefix_main). `specsuite --help` lists them in this order.
COMMANDS: dict[str, str] = {
    "build": "specsuite.llamacpp.cmake",
    "run-tier": "specsuite.suite.tier",
    "plan": "specsuite.suite.plan",
    "merge": "specsuite.suite.shards",
    "calibrate": "specsuite.tools.calibrate",
    "probe": "specsuite.suite.probe_report",
    "fetch-models": "specsuite.models.fetch",
    "verify-models": "specsuite.models.fetch:verify",
    "lock-models": "specsuite.models.lockmodels",
    "make-synthetic-models": "specsuite.models.synthetic.generate",
    "compare": "specsuite.tools.compare",
    "plot": "specsuite.results.plot",
    "history": "specsuite.history.command",
    "changes": "specsuite.history.changes_command",
    "report": "specsuite.report.command",
    "resolve": "specsuite.server.resolver",
    "bisect": "specsuite.bisect.command",
    "suspects": "specsuite.suspects.command",
    "replay": "specsuite.replay.command",
    "bench": "specsuite.bench.command",
    "gpu-check": "specsuite.tools.gpucheck",
}


def _attr(name: str, what: str) -> Any:
    module, _, prefix = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), f"{prefix}_{what}" if prefix else what)


def command_parser(name: str) -> CommandParser:
    """The parser of ``specsuite NAME``, from the module that owns the command."""
    parser: CommandParser = _attr(name, "parser")()
    return parser


def task_help(name: str) -> dict[str, str]:
    """invoke's ``help=`` for the task that runs ``specsuite NAME``: each option's help, by its dest."""
    return command_parser(name).option_help()


def top_parser(summaries: bool = False) -> argparse.ArgumentParser:
    """``specsuite COMMAND``; with ``summaries`` each command's one line (its module is imported for it)."""
    p = argparse.ArgumentParser(
        prog="specsuite",
        description="Build llama.cpp's llama-server; run a speculative-decoding regression suite against it.",
        epilog="`specsuite COMMAND --help` shows a command's options.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        line = command_parser(name).summary().replace("%", "%%") if summaries else None
        sub.add_parser(name, help=line, add_help=False)
    return p


def entry() -> None:
    """The console script and ``python -m specsuite``."""
    procs.die_with_parent()  # under nox: a killed nox takes this command (and its children) with it
    sys.exit(main())


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (common.errors: 0 green, 1 no, 2 bad input, 3 a bug, 130 stopped)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if not argv or argv[0] not in COMMANDS:
            # --help lists the commands; anything else is one usage error naming the valid ones
            top_parser(summaries=argv[:1] in (["-h"], ["--help"])).parse_args(argv)
            return errors.BAD_INPUT
        code: int = _attr(argv[0], "main")(argv[1:])
        return code
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else errors.BAD_INPUT
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return errors.INTERRUPTED
    except OSError as exc:  # a folder or file the environment refuses: what and why, not where in the code
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return errors.BAD_INPUT
    except Exception as exc:  # a bug: its traceback for the report, then one line saying so
        traceback.print_exc()
        print(f"internal error (a bug in specsuite): {type(exc).__name__}: {exc}", file=sys.stderr)
        return errors.INTERNAL
