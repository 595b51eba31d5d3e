"""One llama-server's life: start, health wait, requests, /metrics, stop (the command line: command.py).

Modelled on upstream ``tools/server/tests/utils.py`` ``ServerProcess``, with what a regression run needs on
top: a check that the process answering /health is ours (portowner), a scrubbed environment
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
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import requests

from specsuite.common import procs, settings
from specsuite.common.procs import child_env
from specsuite.server import metrics, portowner
from specsuite.server.failure import diagnose

DYING_S = 15.0  # how long a server whose connection broke may take to die (its backtrace, under load)
REQUEST_TIMEOUT_S = 600.0  # upstream's DEFAULT_REQUEST_TIMEOUT: a hung server fails instead of stalling CI
PORT_ATTEMPTS = 3  # a port picked free can be taken before the server binds it: pick another
Command = Callable[[int], list[str]]  # port -> argv
_LIVE: set[LlamaServer] = set()


class ServerFailed(Exception):
    """The server died, never became healthy, or a request timed out; ``reason`` is failure.classify's."""

    def __init__(self, reason: str, message: str, log_tail: str = "") -> None:
        super().__init__(f"{message}\n--- last server log lines ---\n{log_tail}" if log_tail else message)
        self.reason = reason
        self.log_tail = log_tail


def free_port(ports: range | None = None) -> int:
    """A port nothing listens on: the first free one of ``ports`` (a worker's own range, so that two
    workers of one run never pick the same port between the check and the bind), else the kernel's pick."""
    for port in [*(ports or ()), 0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError("no free port on 127.0.0.1")


def start_timeout_s() -> float:
    """``SPEC_START_TIMEOUT_S``, else 1800 s (upstream's ``server.start(timeout_seconds=1800)``): a 41 GiB
    target on a cold page cache loads for minutes."""
    return settings.load().start_timeout_s


def _child_env(config_home: str, extra: dict[str, str]) -> dict[str, str]:
    return {**child_env(), **extra, "XDG_CONFIG_HOME": config_home}


def _new_file(path: Path) -> BinaryIO:
    """``path`` as a new, empty file: what was there (an earlier run's log, or a link planted in a reused
    results folder) is unlinked, never written through (O_EXCL|O_NOFOLLOW, as the model store)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o666), "wb")


def _die_with_parent() -> None:
    """In the child: its own process group, and SIGKILL when the test process dies (even by SIGKILL)."""
    os.setpgrp()
    procs.die_with_parent(signal.SIGKILL)


class LlamaServer:
    """A llama-server process. Use as a context manager, or call start()/stop() in a finally."""

    def __init__(
        self,
        command: list[str],
        log_path: Path,
        *,
        start_timeout: float | None = None,
        request_timeout: float = REQUEST_TIMEOUT_S,
        env: dict[str, str] | None = None,
        cpus: frozenset[int] | None = None,
    ) -> None:
        self.command = command
        self.env = dict(env or {})  # on top of ours (scrubbed): which GPUs the server sees
        self.cpus = cpus  # the CPUs its threads may run on (None: any)
        self.port = int(command[command.index("--port") + 1])
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        self.start_timeout = start_timeout_s() if start_timeout is None else start_timeout
        self.request_timeout = request_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._config_home: str | None = None
        self._http = requests.Session()
        self.answered = 0  # POSTs answered: how far a step is (suite.progress counts them), never judged
        self._count = threading.Lock()  # concurrent streams answer at once

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._config_home = tempfile.mkdtemp(prefix="specsuite-xdg-")
        setup = _die_with_parent if self.cpus is None else self._prepare_pinned
        _LIVE.add(self)
        try:
            # the child keeps its own copy of the log's descriptor; an interrupt that came while it was
            # forked is raised as the block ends, with the child kept in self.proc, so it is stopped below
            with _new_file(self.log_path) as log, procs.signals_held():
                self.proc = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=_child_env(self._config_home, self.env),
                    preexec_fn=procs.in_child(setup),
                )
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _prepare_pinned(self) -> None:
        """In the child: as ``_die_with_parent``, and every thread it starts on ``cpus`` (inherited)."""
        _die_with_parent()
        os.sched_setaffinity(0, self.cpus or ())

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            procs.raise_if_dropped()
            if self.proc is not None and self.proc.poll() is not None:
                raise self._failure(f"llama-server exited with code {self.proc.returncode} while starting")
            with contextlib.suppress(requests.RequestException):
                if self._http.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    self._check_ours()
                    return
            time.sleep(0.05)
        raise self._failure(f"llama-server not healthy within {self.start_timeout:.0f} s", timed_out=True)

    def _check_ours(self) -> None:
        """A 200 on /health only counts when our child owns the listening socket (see portowner)."""
        assert self.proc is not None
        if portowner.owns_port(self.proc.pid, self.port) is False:
            raise self._failure(
                f"port {self.port} answered /health, but the listener is not our llama-server "
                f"(pid {self.proc.pid}): another process took the port",
                reason="port_in_use",
            )

    def stop(self) -> int | None:
        """SIGKILL to the process group, then wait for it to exit (as upstream's harness waits); returns the
        exit code, None if it outlived the wait. Safe to call twice.

        Why no SIGTERM and grace: nothing the server would do on a clean shutdown is measured (its numbers are
        read before), a server stuck in a speculative loop can ignore SIGTERM for its whole grace, and the
        wait after SIGKILL is what matters: the next server starts only once this one's port, memory and
        threads are gone, so both sides of a comparison start on the same idle machine."""
        proc, self.proc = self.proc, None
        rc = None
        try:
            if proc is not None:
                rc = procs.stop_group(proc)  # SIGKILL is sent before any wait an interrupt could cut short
        finally:  # a second Ctrl-C or SIGTERM while stopping still removes the config folder
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
    def pid(self) -> int | None:
        """The server process's id while it runs (its memory is read by pid: server.memory)."""
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # --- requests --------------------------------------------------------------------------------------

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._post(self._http, path, body)

    @contextlib.contextmanager
    def connection(self) -> Iterator[Callable[[str, dict[str, Any]], dict[str, Any]]]:
        """``post`` over a connection of its own, for one of several concurrent streams of requests.

        One ``requests.Session`` shared by concurrent threads stalled a request by 5 s (llama-server's
        HTTP keep-alive timeout) in 6 of 10 fresh servers given 8 concurrent requests (np 1, pinned CPU
        build); a session per stream, as separate clients have, stalled none of 10."""
        http = requests.Session()
        try:
            yield lambda path, body: self._post(http, path, body)
        finally:
            http.close()

    def _post(self, http: requests.Session, path: str, body: dict[str, Any]) -> dict[str, Any]:
        procs.raise_if_dropped()
        try:
            res = http.post(f"{self.base_url}{path}", json=body, timeout=self.request_timeout)
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
        try:
            answer: Any = res.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise self._failure(
                f"POST {path} answered something that is not a JSON object", reason="runtime_error"
            )
        with self._count:
            self.answered += 1
        return answer

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.post("/v1/chat/completions", body)

    def props(self) -> dict[str, Any]:
        """``GET /props`` (what the server says it runs with); {} when it answers nothing usable."""
        try:
            res = self._http.get(f"{self.base_url}/props", timeout=self.request_timeout)
            answer = res.json() if res.status_code == 200 else None
        except (requests.RequestException, ValueError):
            return {}
        return answer if isinstance(answer, dict) else {}

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
        try:
            return metrics.parse(res.text, res.headers.get("Process-Start-Time-Unix"))
        except metrics.MetricsError as exc:
            raise ServerFailed("metrics", f"GET /metrics: {exc}") from None

    # --- failures --------------------------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def _dying(self) -> int | None:
        """A server whose connection broke is usually dying: an abort runs ggml's backtrace (gdb attached
        for a second or more) before the SIGABRT, and a crash read before it ends reads as a server that
        merely exited. Its exit status within DYING_S, else None (it lives on: the failure is the
        request's)."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=DYING_S)
        except subprocess.TimeoutExpired:
            return None

    def _failure(self, message: str, *, timed_out: bool = False, reason: str | None = None) -> ServerFailed:
        rc = self.proc.poll() if self.proc is not None else None
        if rc is None and timed_out:
            self.stop()  # a hung server is stopped before its log is read, so the log is complete
        elif rc is None and reason is None and self.proc is not None:
            rc = self._dying()
        why = None
        if reason is None:  # the log decides, and its deciding line (an abort's file:line) is named with it
            found = diagnose(rc, self.log_text(), timed_out=timed_out and rc is None)
            reason, why = found.reason, found.evidence
        return ServerFailed(reason, f"{message} [{reason}{f': {why}' if why else ''}]", self.log_tail())


@atexit.register
def _stop_all() -> None:
    """Last resort: a KeyboardInterrupt or an error outside the fixtures still stops every server."""
    for server in list(_LIVE):
        server.stop()


def start_server(
    command: Command,
    log: Path,
    *,
    env: dict[str, str] | None = None,
    ports: range | None = None,
    cpus: frozenset[int] | None = None,
) -> LlamaServer:
    """Start a server on a free port (of ``ports`` when given); another port when a foreign process took
    the first one. ``env``: added to the server's environment (CUDA_VISIBLE_DEVICES); ``cpus``: the CPUs
    it runs on (None: any)."""
    for attempt in range(PORT_ATTEMPTS):
        srv = LlamaServer(command(free_port(ports)), log, env=env, cpus=cpus)
        try:
            srv.start()
            return srv
        except ServerFailed as exc:
            if exc.reason != "port_in_use" or attempt == PORT_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
