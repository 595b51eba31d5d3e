"""uPlot, vendored from the npm registry at a pinned version: the files in the package are the ones the
manifest names, byte for byte, and (where npm reaches its registry) the ones in that version's tarball."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

VENDOR = Path(__file__).resolve().parents[2] / "specsuite" / "report" / "assets" / "vendor"
MANIFEST = json.loads((VENDOR / "vendor.json").read_text())["uplot"]


def test_the_vendored_files_are_the_manifests() -> None:
    assert {p.name for p in VENDOR.iterdir()} == {"vendor.json", *MANIFEST["files"]}
    for name, entry in MANIFEST["files"].items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == entry["sha256"], name
    assert MANIFEST["license"] == "MIT" and "The MIT License" in (VENDOR / "uPlot.LICENSE").read_text()
    assert MANIFEST["tarball"] == f"uplot-{MANIFEST['version']}.tgz"
    assert (
        (VENDOR / "uPlot.iife.min.js")
        .read_text()
        .startswith(f"/*! https://github.com/leeoniya/uPlot (v{MANIFEST['version']}) */")
    )


@pytest.mark.slow
def test_they_come_from_the_pinned_npm_tarball(tmp_path: Path) -> None:
    """npm pack of the pinned version: its sha256 and npm's integrity are the manifest's, and each vendored
    file is that tarball's file."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the tarball check needs `npm pack`")
    spec = f"uplot@{MANIFEST['version']}"
    done = subprocess.run([npm, "pack", spec, "--pack-destination", str(tmp_path)], capture_output=True,
                          text=True, timeout=180)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"npm pack {spec} failed (no registry here?): {done.stderr.strip()[-300:]}")
    tarball = tmp_path / MANIFEST["tarball"]
    blob = tarball.read_bytes()
    assert hashlib.sha256(blob).hexdigest() == MANIFEST["tarball_sha256"]
    assert "sha512-" + base64.b64encode(hashlib.sha512(blob).digest()).decode() == MANIFEST["npm_integrity"]
    with tarfile.open(tarball) as tar:
        for name, entry in MANIFEST["files"].items():
            member = tar.extractfile(entry["from"])
            assert member is not None and member.read() == (VENDOR / name).read_bytes(), name
