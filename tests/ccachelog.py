"""What ccache did per compile, read from its stats log (``CCACHE_STATSLOG``): the tests that claim a build
reused another's objects count them instead of timing the build."""

from __future__ import annotations

from pathlib import Path

HITS = {"direct_cache_hit", "preprocessed_cache_hit"}


def outcomes(log: Path) -> dict[str, str]:
    """Source file (as ccache saw it, relative under base_dir) -> "hit" or "miss", the last compile's."""
    out: dict[str, str] = {}
    name = None
    for line in log.read_text().splitlines() if log.exists() else []:
        if line.startswith("# "):
            name = line[2:]
        elif name is not None and line in HITS:
            out[name] = "hit"
        elif name is not None and line == "cache_miss":
            out[name] = "miss"
    return out
