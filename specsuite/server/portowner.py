"""Who listens on a loopback TCP port: the answer to "is it our llama-server that said /health 200?".

A port picked free can be taken by another process before our server binds it; that process may answer HTTP
200 on /health (another llama-server, any web server). Linux tells who owns a listening socket: the socket's
inode is in /proc/net/tcp{,6}, and the owner's /proc/<pid>/fd links to ``socket:[inode]``. No library reads
that without pulling in psutil for one question, so it is read here directly.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str] | None:
    """Socket inodes listening on ``port`` (any address), or None where /proc/net/tcp is not readable."""
    found: set[str] = set()
    readable = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                found.add(cols[9])
    return found if readable else None


def owns_port(pid: int, port: int, proc: Path = Path("/proc")) -> bool | None:
    """True if process ``pid`` holds a socket listening on ``port``; False if another process does or
    nobody listens; None where /proc cannot tell (not Linux)."""
    inodes = listening_inodes(port, proc)
    if inodes is None:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    fd_dir = proc / str(pid) / "fd"
    with contextlib.suppress(OSError):
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                if os.readlink(fd_dir / fd) in wanted:
                    return True
    return False
