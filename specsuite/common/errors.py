"""The one error type a user should see, and the exit codes every command follows (defined here, once).

A CI must tell "the answer is no" (a regression) from "the question was wrong" (bad input) and from "the
tool broke" (a bug): each has its own code, the same for every ``specsuite`` command, nox-free invoke task
and the suite's pytest run. README.md lists them.
"""

from __future__ import annotations

OK = 0  # green: the run passed, no regression, the command did what it was asked
FAILED = 1  # the answer is no: a failed case or regression, a lock that differs, an unstable calibration…
BAD_INPUT = 2  # bad input or usage: one ``error:`` line naming the thing and what to do
INTERNAL = 3  # an internal error (a bug in specsuite, or a child that died without an answer)
INTERRUPTED = 130  # Ctrl-C or SIGTERM: what was measured is written, temporary folders are removed
EXIT_CODES = {
    OK: "green: the run passed, no regression, the command did what it was asked",
    FAILED: "a failed case or a regression (and each command's own no: see its --help)",
    BAD_INPUT: "bad input or usage: one error line naming the thing and what to do",
    INTERNAL: "an internal error: a bug, or a child (pytest, a build) that ended without an answer",
    INTERRUPTED: "interrupted (Ctrl-C or SIGTERM): what was measured is reported",
}


class UserError(Exception):
    """Bad input or a missing prerequisite; the message names the thing and what to do.

    The ``specsuite`` command (``cli.entry``, which nox sessions and invoke tasks run) prints it as one
    ``error:`` line and exits with ``code``: BAD_INPUT, or FAILED where the message is the command's "no"
    (a lock that differs from the Hub, a bisect whose endpoints do not bracket a regression).
    """

    def __init__(self, message: str, code: int = BAD_INPUT) -> None:
        if code not in (FAILED, BAD_INPUT):
            raise ValueError(f"a UserError exits {FAILED} or {BAD_INPUT}, not {code}")
        super().__init__(message)
        self.code = code
