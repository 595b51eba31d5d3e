"""Failure reasons from exit status and server log: recorded failures replayed, and the real CPU build."""

from __future__ import annotations

import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from fakeserver import FAILURE_DIR, failing_binary, hanging_binary, real_binary

from specsuite.server import failure

# (recorded log, exit status of the real run, expected reason); see tests/data/failures/README.md.
EXITED = [
    ("unknown-arch.log", 1, "binary_outdated"),
    ("truncated-model.log", 1, "runtime_error"),
    ("mtp-no-heads.log", 1, "spec_init_failed"),
    ("spec-init-exit.log", 1, "spec_init_failed"),
    ("oom-compute-buffers.log", 1, "out_of_memory"),
    ("thread-limit-abort.log", -6, "runtime_error"),
    ("segv.log", -11, "crashed"),
    ("cuda-error.log", -6, "runtime_error"),
    ("cuda-oom.log", 1, "out_of_memory"),
]


def _run(cmd: list[str], timeout: float = 30) -> tuple[int | None, str, bool]:
    """Run like the suite runs a server: capture the log, note a timeout, never leave the child behind."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out, False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return None, out, True


@pytest.mark.parametrize(("log", "status", "reason"), EXITED)
def test_recorded_failure(tmp_path, log, status, reason):
    rc, text, timed_out = _run([str(failing_binary(tmp_path / "llama-server", log, status))])
    assert rc == status and not timed_out
    assert failure.classify(rc, text, timed_out) == reason


def test_hung_server_is_a_timeout(tmp_path):
    rc, text, timed_out = _run([str(hanging_binary(tmp_path / "llama-server"))], timeout=1)
    assert timed_out and "initializing" in text
    assert failure.classify(rc, text, timed_out) == "timeout"


def test_benign_fit_error_line_does_not_decide():
    # "failed to initialize the context: ... normal during memory fitting" is logged by a healthy server.
    text = (FAILURE_DIR / "healthy-fit-warning.log").read_text()
    assert failure.classify(None, text, timed_out=True) == "timeout"
    assert failure.classify(-9, text) == "crashed"
    assert failure.classify(0, text) == "server_exited"


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        ("spec-init-serving.log", "spec_init_failed"),  # logged the failure, kept serving
        ("healthy-fit-warning.log", "spec_inactive"),  # nothing in the log: it just drafted nothing
        ("mtp-no-heads.log", "spec_init_failed"),
    ],
)
def test_spec_inactive_reason(log, reason):
    assert failure.spec_inactive_reason((FAILURE_DIR / log).read_text()) == reason


# Hand-written from the front end's document, which quotes "failed to measure MTP context memory" as
# llama-server's abort on forced MTP without heads; the pinned build prints other lines (mtp-no-heads.log).
MTP_FIT = (
    "0.00.000.817 I srv  llama_server: initializing ...\n"
    "0.00.006.559 W srv    load_model: [spec] failed to measure MTP context memory: "
    "failed to create llama_context from model\n"
)
SERVING = "0.00.120.000 I srv  llama_server: server is listening on http://127.0.0.1:8080\n"
CUDA = (
    "0.00.200.000 E ggml_cuda_error: CUDA error: an illegal memory access was encountered\n"
    "0.00.200.001 E   current device: 0, in function ggml_backend_cuda_synchronize at ggml-cuda.cu:2742\n"
)


def test_mtp_fit_warning_then_healthy_is_not_spec_init_failed():
    assert failure.spec_inactive_reason(MTP_FIT + SERVING) == "spec_inactive"
    assert failure.classify(0, MTP_FIT + SERVING) == "server_exited"  # stopped cleanly after serving
    assert failure.classify(-9, MTP_FIT + SERVING) == "crashed"  # killed from outside
    assert failure.classify(None, MTP_FIT, timed_out=True) == "timeout"


@pytest.mark.parametrize("returncode", [1, -6, 134])
def test_mtp_fit_warning_then_death_is_spec_init_failed(returncode):
    died = MTP_FIT + "0.00.008.000 I srv    operator(): cleaning up before exit...\n"
    verdict = failure.diagnose(returncode, died)
    assert verdict.reason == "spec_init_failed" and failure.MTP_FIT_WARNING in (verdict.evidence or "")


def test_mtp_fit_warning_never_outranks_a_later_error():
    verdict = failure.diagnose(-6, MTP_FIT + SERVING + CUDA)
    assert verdict.reason == "runtime_error" and "CUDA error" in (verdict.evidence or "")
    load = "E llama_model_load: error loading model: missing tensor\n"
    oom = "E ggml_backend_cuda_buffer_type_alloc_buffer: cudaMalloc failed\n"
    assert failure.classify(1, MTP_FIT + load) == "runtime_error"
    assert failure.classify(1, MTP_FIT + oom) == "out_of_memory"


def test_evidence_is_the_deciding_line():
    verdict = failure.diagnose(1, (FAILURE_DIR / "oom-compute-buffers.log").read_text())
    assert verdict.reason == "out_of_memory"
    assert "insufficient memory (attempted to allocate 196.64 MB)" in verdict.evidence
    assert failure.diagnose(-11, "").evidence == "killed by signal SIGSEGV"
    assert failure.diagnose(3, "").evidence == "exit status 3"


def test_order_of_calls_never_matters():
    logs = {name: (FAILURE_DIR / name).read_text() for name, _, _ in EXITED}
    forward = [failure.classify(rc, logs[n]) for n, rc, _ in EXITED]
    backward = [failure.classify(rc, logs[n]) for n, rc, _ in reversed(EXITED)][::-1]
    assert forward == backward == [reason for _, _, reason in EXITED]
    # A clean log right after a failing one gets no inherited reason.
    assert failure.classify(1, logs["unknown-arch.log"]) == "binary_outdated"
    assert failure.classify(1, "0.00.000.7 I srv  llama_server: initializing ...") == "server_exited"


@pytest.mark.parametrize(
    ("returncode", "reason"), [(-9, "crashed"), (134, "crashed"), (139, "crashed"), (1, "server_exited")]
)
def test_exit_status_alone(returncode, reason):
    assert failure.classify(returncode, "") == reason


def test_every_reason_is_described():
    produced = {reason for _, _, reason in EXITED} | {"timeout", "server_exited", "spec_inactive"}
    assert produced <= set(failure.REASONS)


def test_log_tail():
    text = "\x1b[31mred\x1b[0m\n\n" + "\n".join(f"line {i}" for i in range(100)) + "\n"
    assert failure.log_tail(text, 3) == "line 97\nline 98\nline 99"
    assert failure.log_tail("\x1b[31mred\x1b[0m\n", 5) == "red"


# --- the real CPU build --------------------------------------------------------------------------------


def _gguf(path: Path, arch: str, tensors: dict[str, np.ndarray]) -> Path:
    writer = gguf.GGUFWriter(path, arch)
    writer.add_uint32(f"{arch}.block_count", 1)
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _serve(binary: Path, *args: str) -> tuple[int | None, str, bool]:
    return _run(
        [str(binary), "--port", "0", "--host", "127.0.0.1", "-t", "1", "-c", "256", *args], timeout=60
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("arch", "args", "reason"),
    [
        pytest.param("specsuite-future-arch", (), "binary_outdated", id="unknown-architecture"),
        # a llama model with its weights missing: the loader fails ("missing tensor"), not the architecture
        pytest.param("llama", (), "runtime_error", id="broken-model"),
        # a refused argument proves no age (the front end's rule keeps binary_outdated for the architecture)
        pytest.param("llama", ("--spec-type", "draft-lilicorr"), "bad_argument", id="unknown-spec-type"),
        pytest.param("llama", ("--draft-max", "3"), "bad_argument", id="removed-flag"),
        pytest.param("llama", ("--no-such-flag",), "bad_argument", id="unknown-flag"),
    ],
)
def test_real_build_failures(tmp_path, arch, args, reason):
    model = _gguf(tmp_path / "m.gguf", arch, {"token_embd.weight": np.zeros((8, 4), np.float32)})
    rc, text, timed_out = _serve(real_binary(), "-m", str(model), *args)
    assert rc not in (None, 0), text
    assert failure.classify(rc, text, timed_out) == reason


def test_a_crash_names_its_abort_line() -> None:
    """The pinned build's abort under --context-shift with ngram-map-k (upstream's #21815), as its log has it
    (tests/data/failures/ngram-map-ctx-shift.log, cut from a real run): the place and message, not only the
    signal."""
    log = (FAILURE_DIR / "ngram-map-ctx-shift.log").read_text()
    found = failure.diagnose(-6, log)
    assert found == failure.Diagnosis(
        "crashed",
        "killed by signal SIGABRT at common/ngram-map.cpp:242: common_ngram_map_draft: map.idx_last_check > "
        "cur_len: 246 > 128",
    )
    assert failure.abort_line("no abort here\n") is None
