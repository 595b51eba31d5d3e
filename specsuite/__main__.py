"""``python -m specsuite <command> …``: the entry the nox sessions call inside their venvs."""

from __future__ import annotations

import sys

from .errors import UserError

USAGE = "usage: python -m specsuite {build,run-tier,calibrate,probe,fetch-models} [args…]"


def _dispatch(cmd: str, args: list[str]) -> int:
    # Imports are lazy so that one command's dependencies never slow or break another.
    if cmd == "build":
        from .build import build_command

        return build_command(args)
    if cmd == "run-tier":
        from .tier import run_tier_command

        return run_tier_command(args)
    if cmd == "calibrate":
        from .calibrate import calibrate_command

        return calibrate_command(args)
    if cmd == "probe":
        from .probe import probe_command

        probe_command(binary=args[0] if args else None)
        return 0
    if cmd == "fetch-models":
        from .fetch import fetch_models_cli

        return fetch_models_cli(args)
    raise UserError(f"unknown command {cmd!r}\n{USAGE}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        return _dispatch(argv[0], argv[1:])
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
