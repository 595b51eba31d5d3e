"""One llama-server's life: command line, start, health wait, requests, /metrics, stop.

Modelled on upstream ``tools/server/tests/utils.py`` ``ServerProcess``, with what a regression run needs on
top: an explicit, probe-built command line (no defaults that move between commits), a scrubbed environment
(no ``LLAMA_ARG_*``, an empty ``XDG_CONFIG_HOME`` so no config file applies), its own process group (so a
Ctrl-C or pytest timeout cannot leave a server behind), a log file, and a failure reason on every death.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from . import metrics
from .cases import Case
from .probe import Capabilities

DEFAULT_NGL = "99"
REQUEST_TIMEOUT_S = 600.0  # upstream's DEFAULT_REQUEST_TIMEOUT: a hung server fails instead of stalling CI
STOP_GRACE_S = 10.0
# ngram methods take their draft length (and ngram-mod its minimum) from their own flags, not from
# --spec-draft-n-max; the case's n_max / n_min go there so they mean the same thing for every method.
NGRAM_N_MAX = {
    "ngram-simple": "--spec-ngram-simple-size-m",
    "ngram-map-k": "--spec-ngram-map-k-size-m",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-m",
    "ngram-mod": "--spec-ngram-mod-n-max",
}
NGRAM_N_MIN = {"ngram-mod": "--spec-ngram-mod-n-min"}
_LIVE: set[LlamaServer] = set()


class ServerFailed(Exception):
    """The server died, never became healthy, or a request timed out; ``reason`` is failure.classify's."""

    def __init__(self, reason: str, message: str, log_tail: str = "") -> None:
        super().__init__(f"{message}\n--- last server log lines ---\n{log_tail}" if log_tail else message)
        self.reason = reason
        self.log_tail = log_tail


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_timeout_s(files: list[Path]) -> float:
    """60 s plus 20 s per GiB of model: a 270 MB model starts in seconds, a 40 GiB one needs minutes."""
    gib = sum(f.stat().st_size for f in files if f.exists()) / 2**30
    return 60.0 + 20.0 * gib


def gpu_layers(caps: Capabilities) -> str | None:
    """-ngl value from N_GPU_LAYERS (default 99); None on a CPU-only build, where offload means nothing."""
    if caps.backend == "cpu":
        return None
    return os.environ.get("N_GPU_LAYERS", DEFAULT_NGL)


def _flag(caps: Capabilities, name: str) -> str:
    spelling = caps.flag(name)
    if spelling is None:  # case_missing_reason skips such cases first; reaching here is a harness bug
        raise RuntimeError(f"{caps.binary} has no flag for {name}")
    return spelling


def _spec_args(caps: Capabilities, case: Case, draft: Path | None) -> list[str]:
    args: list[str] = []
    if case.spec_type != "auto":
        args += [_flag(caps, "spec_type"), str(caps.spec_token(case.spec_type))]
    if draft is not None:
        args += [_flag(caps, "draft_model"), str(draft)]
    n_max_flag = NGRAM_N_MAX.get(case.spec_type)
    args += [n_max_flag if n_max_flag in caps.options else _flag(caps, "draft_n_max"), str(case.n_max)]
    if case.n_min is not None:
        n_min_flag = NGRAM_N_MIN.get(case.spec_type)
        args += [n_min_flag if n_min_flag in caps.options else _flag(caps, "draft_n_min"), str(case.n_min)]
    if case.p_min is not None:
        args += [_flag(caps, "draft_p_min"), f"{case.p_min:g}"]
    if case.synth_rates is not None:
        args += [_flag(caps, "synth_rates"), ",".join(f"{r:g}" for r in case.synth_rates)]
    if case.synth_len is not None:
        args += [_flag(caps, "synth_len"), f"{case.synth_len:g}"]
    return args + list(case.server_args)


def build_command(
    caps: Capabilities, target: Path, port: int, case: Case | None = None, draft: Path | None = None
) -> list[str]:
    """The full argv. ``case=None`` is the baseline: the same server with speculation off."""
    ngl = gpu_layers(caps)
    cmd = [caps.binary, "-m", str(target), _flag(caps, "ctx_size"), "1024", _flag(caps, "parallel"), "1"]
    if ngl is not None:
        cmd += [_flag(caps, "n_gpu_layers"), ngl]
        if draft is not None and caps.flag("draft_ngl"):
            cmd += [_flag(caps, "draft_ngl"), ngl]
    cmd += [_flag(caps, "flash_attn"), "on", _flag(caps, "metrics")]
    if caps.flag("fit"):
        cmd += [_flag(caps, "fit"), "off"]
    if "--offline" in caps.options:  # models are local paths; never let the server reach the network
        cmd.append("--offline")
    if caps.backend == "cpu":
        cmd += _no_polling(caps, draft)
    cmd += ["--temp", "0", "--host", "127.0.0.1", "--port", str(port)]
    if case is not None:
        cmd += _spec_args(caps, case, draft)
    return cmd


def _no_polling(caps: Capabilities, draft: Path | None) -> list[str]:
    """On a CPU build, busy-wait polling (default level 50) makes the target's and the draft's thread pools
    starve each other on a few shared cores: measured 4.4 vs 46.8 tokens/s for draft-simple on 2 cores."""
    args = ["--poll", "0"] if "--poll" in caps.options else []
    if draft is not None and "--spec-draft-poll" in caps.options:
        args += ["--spec-draft-poll", "0"]
    return args


def _child_env(config_home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env["XDG_CONFIG_HOME"] = config_home
    return env


def _die_with_parent() -> None:
    """In the child: new process group, and SIGKILL when the test process dies (even by SIGKILL)."""
    os.setpgrp()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LlamaServer:
    """A llama-server process. Use as a context manager, or call start()/stop() in a finally."""

    def __init__(
        self,
        command: list[str],
        log_path: Path,
        *,
        start_timeout: float = 60.0,
        request_timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.command = command
        self.port = int(command[command.index("--port") + 1])
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        self.start_timeout = start_timeout
        self.request_timeout = request_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._config_home: str | None = None
        self._http = requests.Session()

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._config_home = tempfile.mkdtemp(prefix="specsuite-xdg-")
        with open(self.log_path, "wb") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_env(self._config_home),
                preexec_fn=_die_with_parent,
            )
        _LIVE.add(self)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise self._failure(f"llama-server exited with code {self.proc.returncode} while starting")
            with contextlib.suppress(requests.RequestException):
                if self._http.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.05)
        raise self._failure(f"llama-server not healthy within {self.start_timeout:.0f} s", timed_out=True)

    def stop(self) -> int | None:
        """SIGTERM to the process group, wait, then SIGKILL; returns the exit code. Safe to call twice."""
        proc, self.proc = self.proc, None
        rc = None
        if proc is not None:
            rc = _terminate_group(proc)
        _LIVE.discard(self)
        self._http.close()
        if self._config_home:
            shutil.rmtree(self._config_home, ignore_errors=True)
            self._config_home = None
        return rc

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # --- requests --------------------------------------------------------------------------------------

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            res = self._http.post(f"{self.base_url}{path}", json=body, timeout=self.request_timeout)
        except requests.Timeout:
            raise self._failure(
                f"POST {path} got no answer within {self.request_timeout:.0f} s", timed_out=True
            ) from None
        except requests.RequestException as exc:
            raise self._failure(f"POST {path} failed: {exc}") from None
        if res.status_code != 200:
            raise self._failure(
                f"POST {path} returned HTTP {res.status_code}: {res.text[:300]}", reason="runtime_error"
            )
        return res.json()

    def metrics(self) -> metrics.Snapshot:
        try:
            res = self._http.get(f"{self.base_url}/metrics", timeout=self.request_timeout)
        except requests.RequestException as exc:
            raise self._failure(f"GET /metrics failed: {exc}") from None
        if res.status_code != 200:
            raise self._failure(
                f"GET /metrics returned HTTP {res.status_code} (started without --metrics?)",
                reason="runtime_error",
            )
        return metrics.parse(res.text, res.headers.get("Process-Start-Time-Unix"))

    # --- failures --------------------------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def _failure(self, message: str, *, timed_out: bool = False, reason: str | None = None) -> ServerFailed:
        from .failure import classify

        rc = self.proc.poll() if self.proc is not None else None
        if rc is None and timed_out:
            self.stop()  # a hung server is stopped before its log is read, so the log is complete
        reason = reason or classify(rc, self.log_text(), timed_out=timed_out and rc is None)
        return ServerFailed(reason, f"{message} [{reason}]", self.log_tail())


def _terminate_group(proc: subprocess.Popen[bytes]) -> int | None:
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=wait)
    return proc.poll()


@atexit.register
def _stop_all() -> None:
    """Last resort: a KeyboardInterrupt or an error outside the fixtures still stops every server."""
    for server in list(_LIVE):
        server.stop()
