"""A reason for every server that exited, never became healthy, or served without drafting.

The patterns are the server's own log strings at the pinned commit (file:line in the vendored tree):
a new llama.cpp that rewords one of them degrades to the next rule, at worst to ``server_exited``.
Every function here is pure: the reason depends only on the arguments, so a case never inherits the
reason of the case before it.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

# (reason, substrings) in priority order: the first rule with a matching log line wins. Order matters
# where one failure logs several lines, e.g. an unknown draft architecture also logs "failed to load
# draft model", and a draft context that does not fit also logs "failed to create MTP context".
RULES: tuple[tuple[str, tuple[str | re.Pattern[str], ...]], ...] = (
    ("port_in_use", ("couldn't bind HTTP server socket",)),  # server-http.cpp:517: another process has it
    # The front end's rule (seeds/frontend-mtp-handling.txt): binary_outdated only for an unknown-architecture
    # abort, "which proves the prebuilt predates the model"; an update is the fix.
    ("binary_outdated", ("unknown model architecture",)),  # src/llama-model.cpp:371
    # A refused argument proves no age: the flag or type may be newer than the binary, or removed from it
    # (a removed flag's stub fails with "the argument has been removed"), or misspelled in cases.toml.
    (
        "bad_argument",
        (
            "error while handling argument",  # common/arg.cpp: a bad value, a removed flag, an unknown type
            "unknown speculative type",  # common/speculative.cpp:2256 (older layouts print it alone)
            "error: invalid argument:",  # common/arg.cpp:827: a flag the binary does not know
        ),
    ),
    (
        "out_of_memory",
        (
            "out of memory",  # cudaGetErrorString(cudaErrorMemoryAllocation), std::bad_alloc texts
            "cudaMalloc failed",  # ggml-cuda.cu:888
            # ggml-backend.cpp:2467, ggml-alloc.c:941, llama-context.cpp:684/2574, llama-kv-cache.cpp:288;
            # not the DEBUG lines "failed to allocate graph, reserving" / "... host buffer for async uploads"
            re.compile(r"failed to allocate (?!host buffer for async)(?:\S+ )?(?:buffer|compute|output)"),
            "unable to allocate",  # llama-model.cpp:1870 (weights buffer)
            "not enough space in the buffer",  # ggml-alloc.c:81
            "std::bad_alloc",
            "insufficient memory",  # ggml.c:378 (ggml_aligned_malloc)
        ),
    ),
    (
        "spec_init_failed",
        (
            "failed to initialize speculative decoding context",  # server-context.cpp:1244
            "speculative decoding not supported by this context",  # server-context.cpp:1223
            "synthetic acceptance requires an initialized speculative",  # server-context.cpp:1264
            "failed to create MTP context",  # server-context.cpp:1123, speculative.cpp:2552
            "failed to load draft model",  # server-context.cpp:1118, speculative.cpp:2544
        ),
    ),
    (
        "runtime_error",
        (
            "CUDA error",  # ggml-cuda.cu:105 (ggml_cuda_error), then GGML_ABORT
            "ROCm error",
            "GGML_ASSERT",
            "failed to initialize the context",  # llama-context.cpp:3899
            "failed to create context with model",  # common/common.cpp:1305
            "failed to create_context with model",  # server-context.cpp:1091
            "error loading model",  # src/llama.cpp:375 (bad or truncated GGUF, missing tensor)
            "failed to load model",  # server-context.cpp:1086, common/common.cpp:1346
            "decode() failed",  # server-context.cpp:2872
            "terminate called after throwing",
        ),
    ),
)

SPEC_DROPPED = dict(RULES)["spec_init_failed"]

# The front end's document says llama-server aborts with this when draft-mtp is forced on a model without
# heads (seeds/frontend-mtp-handling.txt); the pinned build never prints it (measured: it warns "failed to
# measure the memory of the extra model, fitting without it" under --fit on, then exits 1 with "failed to
# create MTP context", a spec_init_failed line). Kept as the weakest evidence, for builds that print the
# document's line: only for a server that then died with no stronger line, never above a RULES line.
MTP_FIT_WARNING = "failed to measure MTP context memory"

# Fatal signals as a shell reports them (128 + N) when the server was started through one.
_SHELL_SIGNALS = {
    128 + s for s in (signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGKILL, signal.SIGSEGV)
}

REASONS = {
    "port_in_use": "another process held the server's port; the run picks another one and retries",
    "binary_outdated": "the binary predates the model's architecture: build a newer one",
    "bad_argument": "the server refused an argument (unknown, removed or misspelled flag, type or value)",
    "spec_init_failed": "the speculative context could not be created, or the server dropped speculation",
    "out_of_memory": "an allocation failed (weights, KV cache or compute buffers)",
    "runtime_error": "the server failed at run time (backend error, assertion, context or model load)",
    "crashed": "the server was killed by a signal",
    "timeout": "the server did not become healthy or answer in time",
    "server_exited": "the server exited; see the log tail",
    "spec_inactive": "the server ran but drafted nothing",
}


@dataclass(frozen=True)
class Diagnosis:
    reason: str
    evidence: str | None  # the log line that decided it, if any


def _hit(line: str, needle: str | re.Pattern[str]) -> bool:
    return needle in line if isinstance(needle, str) else needle.search(line) is not None


# Errors the server logs and recovers from: --fit probes a draft context without its target first
# (llama-context.cpp:159, "... requires ctx_other to be set (this warning is normal during memory fitting)").
_BENIGN = ("this warning is normal during memory fitting",)


def _first_match(log_text: str, needles: tuple[str | re.Pattern[str], ...]) -> str | None:
    for line in log_text.splitlines():
        if any(b in line for b in _BENIGN):
            continue
        if any(_hit(line, n) for n in needles):
            return line.strip()
    return None


def diagnose(returncode: int | None, log_text: str, timed_out: bool = False) -> Diagnosis:
    """Reason and the log line behind it. Log evidence first: a CUDA error also ends in SIGABRT."""
    for reason, needles in RULES:
        if (line := _first_match(log_text, needles)) is not None:
            return Diagnosis(reason, line)
    if timed_out:
        return Diagnosis("timeout", None)
    # A clean exit, or a SIGKILL from outside (ours, the OOM killer), is not the MTP context's doing.
    died = returncode not in (None, 0, -signal.SIGKILL, 128 + signal.SIGKILL)
    if died and (line := _first_match(log_text, (MTP_FIT_WARNING,))) is not None:
        return Diagnosis("spec_init_failed", line)
    if returncode is not None and (returncode < 0 or returncode in _SHELL_SIGNALS):
        signum = -returncode if returncode < 0 else returncode - 128
        where = f" at {at}" if (at := abort_line(log_text)) else ""
        return Diagnosis("crashed", f"killed by signal {_signal_name(signum)}{where}")
    return Diagnosis("server_exited", None if returncode is None else f"exit status {returncode}")


# ggml_abort's line (ggml.c: "%s:%d: %s", file, line, message), what GGML_ABORT and GGML_ASSERT print before
# the SIGABRT: the source path as the compiler saw it, cut to llama.cpp's own folders
_ABORT = re.compile(r"(?:^|[\s/])((?:common|src|ggml|tools)/[\w./+-]+\.(?:c|cc|cpp|cu|h|hpp)):(\d+): (.+)")


def abort_line(log_text: str) -> str | None:
    """The last abort line of a log (``common/ngram-map.cpp:242: map.idx_last_check > cur_len: 253 > 128``),
    the place and message a crash names; None when the server printed none."""
    found = None
    for line in _ANSI.sub("", log_text).splitlines():
        if (m := _ABORT.search(line)) is not None:
            found = f"{m[1]}:{m[2]}: {m[3].strip()[:300]}"
    return found


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def classify(returncode: int | None, log_text: str, timed_out: bool = False) -> str:
    """One of binary_outdated, bad_argument, spec_init_failed, out_of_memory, runtime_error, crashed,
    timeout, server_exited, for a server that exited (``returncode``) or never became healthy
    (``timed_out``)."""
    return diagnose(returncode, log_text, timed_out).reason


def spec_inactive_reason(log_text: str) -> str:
    """For a healthy server that drafted nothing: ``spec_init_failed`` if its log says speculation was
    dropped, else ``spec_inactive``."""
    return "spec_init_failed" if _first_match(log_text, SPEC_DROPPED) else "spec_inactive"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log_tail(text: str, n: int = 40) -> str:
    """The last ``n`` non-empty lines, colour codes removed, for failure messages and summary.md."""
    lines = [ln for ln in _ANSI.sub("", text).splitlines() if ln.strip()]
    return "\n".join(lines[-n:])
