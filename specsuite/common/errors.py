"""The one error type a user should see: a clear message and a non-zero exit, no traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or a missing prerequisite; the message names the thing and what to do.

    The ``specsuite`` command (``cli.entry``, which nox sessions and invoke tasks run) prints it as one
    ``error:`` line and exits with ``code``.
    """

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code
