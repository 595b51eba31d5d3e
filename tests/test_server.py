"""llama-server lifecycle against the real CPU build and the real smoke model; no process may outlive a test.

Command-line tests use the recorded ``--help`` of the pinned build (tests/data/help/current.txt).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specsuite import paths
from specsuite.cases import parse_cases
from specsuite.errors import UserError
from specsuite.measure import request_body
from specsuite.probe import Capabilities, parse_help
from specsuite.server import LlamaServer, ServerFailed, _child_env, build_command, free_port

HELP = Path(__file__).parent / "data" / "help" / "current.txt"
SMOKE = "gemma-3-270m-q4_k_m.gguf"


def _caps(backend: str) -> Capabilities:
    options, removed, types = parse_help(HELP.read_text())
    return Capabilities("/b/llama-server", "version: x", "0c1e570", types, options, removed, backend)


def _case(body: str):
    head = 'version = 1\n[[case]]\nname = "c"\ntier = "smoke"\ntarget = "t.gguf"\n'
    return parse_cases(head + textwrap.dedent(body))[0]


def test_command_cpu_build_omits_ngl_and_polls_not(monkeypatch) -> None:
    monkeypatch.setenv("N_GPU_LAYERS", "42")
    case = _case(
        'spec_type = "draft-simple"\ndraft = "t.gguf"\nn_max = 3\nsynth_rates = [0.0, 0.0, 0.0]\n'
        "min_accept_rate = 0.0\nmin_accept_len = 1.0\n"
    )
    cmd = build_command(_caps("cpu"), Path("/m/t.gguf"), 8111, case, Path("/m/t.gguf"))
    assert "--n-gpu-layers" not in cmd and "--spec-draft-ngl" not in cmd
    s = " ".join(cmd)
    for part in (
        "-m /m/t.gguf --ctx-size 1024 --parallel 1",
        "--flash-attn on --metrics --fit off",
        "--poll 0 --spec-draft-poll 0",
        "--temp 0 --host 127.0.0.1 --port 8111",
        "--spec-type draft-simple --spec-draft-model /m/t.gguf --spec-draft-n-max 3",
        "--spec-synth-rates 0,0,0",
    ):
        assert part in s


def test_command_gpu_build_sets_ngl_for_target_and_draft(monkeypatch) -> None:
    monkeypatch.delenv("N_GPU_LAYERS", raising=False)
    case = _case(
        'spec_type = "draft-dflash"\ndraft = "d.gguf"\nn_max = 7\nmin_accept_rate = 0.1\n'
        'min_accept_len = 2.0\np_min = 0.0\nserver_args = ["--x", "1"]\n'
    )
    cmd = build_command(_caps("cuda"), Path("/m/t.gguf"), 8111, case, Path("/m/d.gguf"))
    s = " ".join(cmd)
    assert "--n-gpu-layers 99 --spec-draft-ngl 99" in s and "--poll" not in s
    assert s.endswith("--spec-draft-n-max 7 --spec-draft-p-min 0 --x 1")


def test_command_ngram_length_goes_to_its_own_flags_and_baseline_has_no_spec() -> None:
    case = _case(
        'spec_type = "ngram-mod"\nn_max = 16\nn_min = 4\nmin_accept_rate = 0.1\nmin_accept_len = 1.0\n'
    )
    s = " ".join(build_command(_caps("cpu"), Path("/m/t.gguf"), 1, case))
    assert "--spec-ngram-mod-n-max 16 --spec-ngram-mod-n-min 4" in s and "--spec-draft-n-max" not in s
    base = build_command(_caps("cpu"), Path("/m/t.gguf"), 1)
    assert not [a for a in base if a.startswith("--spec")]


def test_child_env_is_scrubbed(monkeypatch) -> None:
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "99999")
    env = _child_env("/tmp/empty-xdg")
    assert not [k for k in env if k.startswith("LLAMA_ARG_")]
    assert env["XDG_CONFIG_HOME"] == "/tmp/empty-xdg"


# --- the real binary ---------------------------------------------------------------------------------


def _need(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI builds and fetches first)")
    pytest.skip(what)


@pytest.fixture(scope="module")
def real() -> tuple[Capabilities, Path]:
    from specsuite.fetch import fetch_models
    from specsuite.probe import probe

    binary = paths.server_binary()
    if not binary.is_file():
        _need(f"no llama-server at {binary}: run `nox -s build` or set LLAMA_SERVER_BIN_PATH")
    try:
        model = fetch_models(models=[SMOKE], offline=True)[SMOKE]
    except UserError as exc:
        _need(f"smoke model not fetched ({exc}): run `invoke fetch-models --tier smoke`")
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
    srv = LlamaServer(build_command(caps, model, free_port()), tmp_path / "s.log", start_timeout=120)
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
    srv = LlamaServer(build_command(caps, bad, free_port()), tmp_path / "bad.log", start_timeout=60)
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
        build_command(caps, model, free_port()), tmp_path / "t.log", start_timeout=120, request_timeout=0.05
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
        from specsuite.server import LlamaServer
        srv = LlamaServer({build_command(caps, model, free_port())!r}, Path({str(tmp_path / "k.log")!r}),
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
