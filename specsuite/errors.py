"""The one error type a user should see: a clear message and a non-zero exit, no traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or a missing prerequisite; the message names the thing and what to do.

    nox sessions turn it into ``session.error(msg)``, invoke tasks into ``Exit(msg, code)``.
    """

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code
