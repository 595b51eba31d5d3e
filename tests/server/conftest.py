"""Fixtures of the server tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another process's socket listens on (bound without SO_REUSEPORT, as most programs bind)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]
