"""Signals down the chain and children that die with their parent, with real processes and real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specsuite.common import paths, procs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc")

# A child that writes one line per signal it gets into a file, then lingers (for the parent to wait on).
CHILD = textwrap.dedent("""
    import signal, sys, time
    out = open(sys.argv[1], "a", buffering=1)
    def seen(s, f):
        out.write(signal.Signals(s).name + "\\n")
        if s == signal.SIGTERM:
            sys.exit(0)
    signal.signal(signal.SIGTERM, seen)
    signal.signal(signal.SIGINT, seen)
    out.write("ready\\n")
    time.sleep(float(sys.argv[2]))
""")


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "parent.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(paths.REPO_ROOT)!r})\n" + textwrap.dedent(body))
    return path


def _wait_for(path: Path, text: str, seconds: float = 20.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}: {path.read_text() if path.exists() else '-'}")


def test_nox_forwarder_passes_sigterm_to_the_child_and_winds_down(tmp_path) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    log = tmp_path / "child.log"
    parent = _script(
        tmp_path,
        f"""
        import subprocess
        from specsuite.common import procs
        procs.install_forwarder()
        child = subprocess.Popen([sys.executable, {str(tmp_path / "child.py")!r}, {str(log)!r}, "60"])
        try:
            child.wait()
        except KeyboardInterrupt:
            child.wait(timeout=30)  # what nox does: wait for the child to finish its cleanup
            print("parent interrupted; child exit", child.returncode, flush=True)
        """,
    )
    proc = subprocess.Popen([sys.executable, str(parent)], stdout=subprocess.PIPE, text=True)
    _wait_for(log, "ready")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert "parent interrupted; child exit 0" in out
    assert log.read_text().splitlines() == ["ready", "SIGTERM"]


def test_run_forwarding_passes_a_burst_of_sigint_on_once_then_raises(tmp_path) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    log = tmp_path / "child.log"
    parent = _script(
        tmp_path,
        f"""
        from specsuite.common import procs
        try:
            procs.run_forwarding([sys.executable, {str(tmp_path / "child.py")!r}, {str(log)!r}, "3"])
        except KeyboardInterrupt:  # after the child has finished: never taken for a failed child
            print("interrupted after the child finished", flush=True)
        """,
    )
    proc = subprocess.Popen([sys.executable, str(parent)], stdout=subprocess.PIPE, text=True)
    _wait_for(log, "ready")
    proc.send_signal(signal.SIGINT)  # a terminal Ctrl-C reaches run-tier twice: from the tty and from nox
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert "interrupted after the child finished" in out
    assert log.read_text().splitlines() == ["ready", "SIGINT"]


# Sends this process a SIGINT from inside the fork hooks CPython runs around a fork with a preexec_fn (as
# logging's is): the instant at which a real Ctrl-C used to be dropped ("Exception ignored in ...").
SIGINT_WHILE_FORKING = "os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))"


def test_a_sigint_while_run_forwarding_forks_its_child_is_passed_on_not_lost(tmp_path) -> None:
    parent = _script(
        tmp_path,
        f"""
        import os, signal
        from specsuite.common import procs
        {SIGINT_WHILE_FORKING}
        try:
            code = procs.run_forwarding(["sleep", "60"])
            print("the interrupt was lost; the child ran to its end", code, flush=True)
        except KeyboardInterrupt:
            print("interrupted after the child finished", flush=True)
        """,
    )
    out = subprocess.run([sys.executable, str(parent)], capture_output=True, text=True, timeout=50).stdout
    assert out == "interrupted after the child finished\n"  # the child got it too: not 60 s of sleep


def test_a_child_dies_with_its_parent_even_on_sigkill(tmp_path) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    log = tmp_path / "child.log"
    parent = _script(
        tmp_path,
        f"""
        from specsuite.common import procs
        procs.run_forwarding([sys.executable, {str(tmp_path / "child.py")!r}, {str(log)!r}, "60"])
        """,
    )
    proc = subprocess.Popen([sys.executable, str(parent)])
    _wait_for(log, "ready")
    proc.kill()  # no handler, no finally: only the kernel's parent-death signal can reach the child
    proc.wait()
    assert _wait_for(log, "SIGTERM").splitlines() == ["ready", "SIGTERM"]


def test_children_are_read_from_proc() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in procs.children()
        assert procs.children(os.getpid(), Path("/nonexistent")) == []
    finally:
        child.kill()
        child.wait()


def test_child_env_drops_the_tokens_and_llama_args(monkeypatch):
    """Build tools, pip, probes and servers all get this one environment: no token, no LLAMA_ARG_*."""
    env = {"HF_TOKEN": "a", "HUGGING_FACE_HUB_TOKEN": "b", "HF_ENDPOINT": "http://x", "PATH": "/bin",
           "LLAMA_ARG_CTX_SIZE": "9"}  # fmt: skip
    assert procs.child_env(env) == {"HF_ENDPOINT": "http://x", "PATH": "/bin"}
    monkeypatch.setenv("SPEC_X", "k")
    monkeypatch.setenv("LLAMA_ARG_N_GPU_LAYERS", "0")
    own = procs.child_env()
    assert own["SPEC_X"] == "k" and "LLAMA_ARG_N_GPU_LAYERS" not in own


def test_stop_group_ends_the_whole_group() -> None:
    import subprocess

    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True)
    assert procs.stop_group(proc, grace_s=5.0) is not None
    assert proc.poll() is not None


def test_sigterm_as_interrupt_raises_keyboard_interrupt_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    signal_name = f"signal {int(signal.SIGTERM)}"
    with pytest.raises(KeyboardInterrupt, match=signal_name), procs.sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs at the next bytecode: never reached
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drops it makes
def test_a_dropped_interrupt_is_kept_only_inside_sigterm_as_interrupt() -> None:
    class Finalized:
        def __del__(self) -> None:
            raise KeyboardInterrupt("signal 2")  # what a handler run inside a finalizer raises

    before = sys.unraisablehook
    procs.raise_if_dropped()  # nothing dropped: nothing raised
    with procs.sigterm_as_interrupt():
        Finalized()
        with pytest.raises(KeyboardInterrupt, match=r"KeyboardInterrupt\('signal 2'\) dropped in "):
            procs.raise_if_dropped()
        procs.raise_if_dropped()  # once per drop
        Finalized()
    assert sys.unraisablehook is before
    procs.raise_if_dropped()  # the block's own drop ended with it: nothing left for a later caller
