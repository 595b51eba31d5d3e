"""A fake ``llama-server`` that really serves HTTP, for runner tests of what a real build cannot do.

It answers the probe from a recorded ``--help`` (tests/data/help/), and when started as a server it listens
on ``--port``, answers /health, /completion, /metrics and /v1/chat/completions with scripted numbers: a
binary that lost a counter, reports zero usage, diverges from its baseline, is slower than plain decoding,
or dies mid-request. Its behaviour is a JSON file written next to it. It stands in for builds of other
llama.cpp commits, which cannot be compiled in test time; the real pinned build is tested alongside it.
"""

from __future__ import annotations

import json
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

HELP_DIR = Path(__file__).resolve().parent / "data" / "help"

DEFAULT: dict[str, Any] = {
    "version": "version: 9999 (build 1, commit abc1234)",
    "drop_types": [],  # spec types removed from the recorded --help
    "drop_options": [],  # options removed from the recorded --help
    "help_subs": [],  # [old, new] replacements in the recorded --help (another build's defaults, say)
    # /metrics exports the spec_decode_* counters (False: a build before b10289, whose counters are only in
    # the responses' timings)
    "spec_metrics": True,
    "devices": "Available devices:\n",  # what --list-devices prints: no GPU
    # per /completion request of a speculative server: (drafted, accepted, drafts, per-position counts)
    "drafted": 12,
    "accepted": 9,
    "drafts": 4,
    "per_pos": [4, 3, 2],  # null: the binary exports no per-position block
    # per speculative /completion request in turn (cycled): {"accepted": a, "per_pos": [...]} replacing the
    # two above, for a server whose counters differ between rounds of the same prompts
    "by_request": None,
    # the first speculative /completion requests of the process, in turn: like by_request but not cycled,
    # before it (a drafter that learns: a fresh server counts differently from a warmed one)
    "first_requests": [],
    "counted_at_start": 0,  # drafted, accepted and drafts already counted when /health first answers
    "spec_ms_per_token": 10.0,  # decode speed of a speculative server
    "base_ms_per_token": 20.0,  # ... and of one without speculation
    # prompt processing (timings.prompt_n: the prompt's characters, prompt_ms: this per one) of a speculative
    # server and of one without; null: no prompt timings in the answers (the prefill is not measured)
    "spec_prompt_ms_per_token": None,
    "base_prompt_ms_per_token": None,
    "ms_cv": 0.0,  # noise: each request's time drawn around the above with this coefficient of variation
    # each request also takes this fraction of its scripted time on the clock, so that throughput measured
    # by the clock (a sweep's aggregate speedups, hence its crossover) follows the scripted speeds too
    "pace": 0.0,
    "diverge": False,  # speculative tokens differ from the baseline's
    "usage": "ok",  # ok | zero | missing
    "die_after_requests": None,  # a speculative server exits after this many /completion requests
    "request_sleep_s": 0.0,  # each speculative /completion takes this long (a run to interrupt)
    "log_lines": [],  # printed to stderr when the server starts (e.g. llama.cpp's offload line)
    "events": None,  # a JSONL file: each start and /completion (its times), with CUDA_VISIBLE_DEVICES
    # a server started with --parallel above 1: these replace the counters above (acceptance that
    # collapses under concurrency, as llama.cpp issue 27117's DFlash)
    "parallel_counters": None,
    # {"np": N, "request": k}: on a speculative server started with --parallel N, the k-th /completion of
    # the process (from 1) answers one token changed (one stream's output differs from np 1's)
    "batch_variant": None,
    # GPU memory as a fake nvidia-smi lists it (fake_nvidia_smi's apps folder): each server writes
    # "pid, MiB" there when it starts and after each /completion; MiB = base + per_request x requests
    "gpu_apps": None,
    "gpu_base_mib": 1000.0,
    "gpu_mib_per_request": 0.0,
    # a model architecture this build does not know (llama.cpp's load error, exit 1): "draft" on a
    # speculative server only (a draft model newer than the build), "target" on every server
    "unknown_arch": None,
    # a build whose default speculates and whose --spec-type adds to it (upstream's #28391): the server
    # started with --spec-type none drafts these counters per request all the same
    "plain_drafts": None,
    # speculation that stops after this many speculative /completion requests of the process (upstream's
    # #27692: spec prefill switched itself off after a few long requests): later ones draft nothing
    "stop_drafting_after": None,
    # a slot restored from its file drafts from an empty draft context (upstream's #28619): the speculative
    # requests after a /slots/0?action=restore accept nothing
    "restore_drops_drafts": False,
    # a speculative server's /completion answer lacks its last N tokens while timings.predicted_n counts
    # them (upstream b9113: the accepted batch that reached n_predict was counted before it was sent)
    "lose_tail": 0,
    # /v1/chat/completions answers HTTP 500 with this message, the server running on (an older build's chat
    # parser refusing the model's output); "SIGABRT": the server aborts on it
    "chat_error": None,
}

SCRIPT = r"""#!__PYTHON__
import json, os, random, sys, time, signal
from http.server import BaseHTTPRequestHandler, HTTPServer
CONFIG = json.loads(open(__CONFIG__).read())
HELP = open(__HELP__).read()
args = sys.argv[1:]
if args[:1] == ["--help"]:
    for t in CONFIG["drop_types"]:
        HELP = HELP.replace("," + t, "")
    for old, new in CONFIG["help_subs"]:
        HELP = HELP.replace(old, new)
    lines = [l for l in HELP.splitlines() if not any(l.startswith(o) for o in CONFIG["drop_options"])]
    print("\n".join(lines)); sys.exit(0)
if args[:1] == ["--version"]:
    print(CONFIG["version"], file=sys.stderr); sys.exit(0)
if args[:1] == ["--list-devices"]:
    print(CONFIG["devices"]); sys.exit(0)
spec_types = args[args.index("--spec-type") + 1] if "--spec-type" in args else None
spec = spec_types not in (None, "none") or any(
    a in args for a in ("--spec-default", "--spec-draft-model", "--model-draft"))
plain_drafts = not spec and CONFIG["plain_drafts"]  # a default that speculates: counters all the same
if CONFIG["unknown_arch"] == "target" or (CONFIG["unknown_arch"] == "draft" and spec):
    print("0.00.003.775 E llama_model_load: error loading model: unknown model architecture: 'future'",
          file=sys.stderr)
    sys.exit(1)
port = int(args[args.index("--port") + 1])
slots = int(args[args.index("--parallel") + 1]) if "--parallel" in args else 1
state = {"drafted": 0, "accepted": 0, "drafts": 0, "pos": [0] * len(CONFIG["per_pos"] or []), "requests": 0}
state.update({k: CONFIG["counted_at_start"] for k in ("drafted", "accepted", "drafts")})
for line in CONFIG["log_lines"]:
    print(line, file=sys.stderr)
print("fake llama-server: listening, spec=%s argv=%s" % (spec, args), file=sys.stderr, flush=True)

def gpu_memory():
    if CONFIG["gpu_apps"]:
        mib = CONFIG["gpu_base_mib"] + CONFIG["gpu_mib_per_request"] * state["requests"]
        with open(os.path.join(CONFIG["gpu_apps"], str(os.getpid())), "w") as fh:
            fh.write("%d, %d\n" % (os.getpid(), mib))

def event(kind, **more):
    if not CONFIG["events"]:
        return
    line = json.dumps({"kind": kind, "pid": os.getpid(), "spec": spec, "port": port,
                       "model": args[args.index("-m") + 1] if "-m" in args else None,
                       "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
                       "order": os.environ.get("CUDA_DEVICE_ORDER"),
                       "cpus": sorted(os.sched_getaffinity(0)), **more}) + "\n"
    fd = os.open(CONFIG["events"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write of one line: lines of several servers never interleave
    finally:
        os.close(fd)

# what llama-server logs after each request (server-context.cpp print_timing): the decode rate the
# suite's time budget reads
def timing_lines(n, ms):
    head = "slot print_timing: id  0 | task %d | " % state["requests"]
    print(head + "prompt eval time = %10.2f ms / %5d tokens" % (1.0, 3), file=sys.stderr)
    print(head + "       eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)"
          % (ms, n, ms / n, 1000.0 * n / ms), file=sys.stderr, flush=True)

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, code, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Process-Start-Time-Unix", str(START))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/health":
            return self._send(200, {"status": "ok"})
        if self.path == "/metrics":
            if not CONFIG["spec_metrics"]:
                return self._send(200, "# TYPE llamacpp:tokens_predicted_total counter\n"
                                  "llamacpp:tokens_predicted_total %d\n" % state["requests"],
                                  "text/plain; version=0.0.4")
            lines = ["# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
                     "llamacpp:spec_decode_num_draft_tokens_total %d" % state["drafted"],
                     "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
                     "llamacpp:spec_decode_num_accepted_tokens_total %d" % state["accepted"],
                     "# TYPE llamacpp:spec_decode_num_drafts_total counter",
                     "llamacpp:spec_decode_num_drafts_total %d" % state["drafts"]]
            if CONFIG["per_pos"] is not None and state["drafts"]:
                lines.append("# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter")
                name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
                for i, c in enumerate(state["pos"]):
                    lines.append('%s{position="%d"} %d' % (name, i, c))
            return self._send(200, "\n".join(lines) + "\n", "text/plain; version=0.0.4")
        self._send(404, {"error": "not found"})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        n = int(body.get("n_predict") or body.get("max_tokens") or 16)
        text = body.get("prompt") or json.dumps(body.get("messages"))
        tokens = [(sum(map(ord, text)) + i) % 251 for i in range(n)]
        if spec and CONFIG["diverge"]:
            tokens[n // 2] = (tokens[n // 2] + 1) % 251
        variant = CONFIG["batch_variant"]
        if spec and variant and variant["np"] == slots and state["requests"] + 1 == variant["request"]:
            tokens[n // 3] = (tokens[n // 3] + 1) % 251
        ms = n * (CONFIG["spec_ms_per_token"] if spec else CONFIG["base_ms_per_token"])
        if CONFIG["ms_cv"]:
            ms *= max(0.05, random.gauss(1.0, CONFIG["ms_cv"]))
        timings = {"predicted_n": n, "predicted_ms": ms}
        per_prompt_token = CONFIG["spec_prompt_ms_per_token" if spec else "base_prompt_ms_per_token"]
        if per_prompt_token is not None:
            timings.update(prompt_n=len(text), prompt_ms=len(text) * per_prompt_token)
        time.sleep(CONFIG["pace"] * ms / 1000)
        if self.path.startswith("/slots/0?action="):  # save and restore: the slot file's name echoed
            action = self.path.split("=", 1)[1]
            state["restored"] = action == "restore" and CONFIG["restore_drops_drafts"]
            return self._send(200, {"id_slot": 0, "filename": body.get("filename"), "n_" + action + "d": n})
        if self.path == "/completion":
            t0 = time.time()
            state["requests"] += 1
            if spec and CONFIG["die_after_requests"] and state["requests"] > CONFIG["die_after_requests"]:
                print("GGML_ASSERT(fake) failed", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGABRT)
            stop = CONFIG["stop_drafting_after"]
            stopped = stop is not None and state["requests"] > stop
            if plain_drafts or (spec and stopped):
                now = {**CONFIG, **(CONFIG["plain_drafts"] or {}),
                       **({"drafted": 0, "accepted": 0, "drafts": 0, "per_pos": None} if stopped else {})}
                for k in ("drafted", "accepted", "drafts"):
                    state[k] += now[k]
                if now["drafted"]:
                    timings.update(draft_n=now["drafted"], draft_n_accepted=now["accepted"])
            elif spec:
                time.sleep(CONFIG["request_sleep_s"])
                now = dict(CONFIG)
                if state["requests"] <= len(CONFIG["first_requests"]):
                    now.update(CONFIG["first_requests"][state["requests"] - 1])
                elif CONFIG["by_request"]:
                    now.update(CONFIG["by_request"][(state["requests"] - 1) % len(CONFIG["by_request"])])
                if slots > 1 and CONFIG["parallel_counters"]:
                    now.update(CONFIG["parallel_counters"])
                if state.get("restored"):  # an empty draft context: it drafts, and nothing is accepted
                    now.update(accepted=0, per_pos=[0] * len(now["per_pos"] or []))
                for k in ("drafted", "accepted", "drafts"):
                    state[k] += now[k]
                for i, c in enumerate(now["per_pos"] or []):
                    state["pos"][i] += c
                if now["drafted"]:  # as llama-server: the request's own counters when it drafted
                    timings.update(draft_n=now["drafted"], draft_n_accepted=now["accepted"])
            event("completion", t0=t0, t1=time.time())
            timing_lines(n, ms)
            gpu_memory()
            if spec and CONFIG["lose_tail"]:
                tokens = tokens[: n - CONFIG["lose_tail"]]
            return self._send(200, {"tokens": tokens, "content": "x", "timings": timings})
        if self.path == "/v1/chat/completions" and CONFIG["chat_error"] == "SIGABRT":
            print("GGML_ASSERT(fake chat) failed", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGABRT)
        if self.path == "/v1/chat/completions" and CONFIG["chat_error"]:
            return self._send(500, {"error": {"code": 500, "message": CONFIG["chat_error"]}})
        if self.path == "/v1/chat/completions":
            answer = {"choices": [{"message": {"content": "x"}}], "timings": timings}
            if CONFIG["usage"] == "ok":
                answer["usage"] = {"completion_tokens": n, "prompt_tokens": 3, "total_tokens": n + 3}
            elif CONFIG["usage"] == "zero":
                answer["usage"] = {"completion_tokens": 0, "prompt_tokens": 0, "total_tokens": 0}
            timing_lines(n, ms)
            return self._send(200, answer)
        self._send(404, {"error": "not found"})

START = int(time.time())
gpu_memory()
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
HTTPServer.request_queue_size = 64  # one request at a time, but concurrent streams all connect at once
try:  # SO_REUSEADDR and no SO_REUSEPORT, as llama-server binds without --reuse-port (server-http.cpp)
    httpd = HTTPServer(("127.0.0.1", port), H)
except OSError:  # a port another process took: as llama-server says it, and exits 1
    print("srv    start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: %d" % port,
          file=sys.stderr, flush=True)
    sys.exit(1)
event("start", t=time.time())
httpd.serve_forever()
"""


def fake_llama(folder: Path, variant: str = "current", **config: Any) -> Path:
    """Write the fake into ``folder`` (a fresh one per behaviour: the probe caches per binary)."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "fake-config.json"
    cfg.write_text(json.dumps({**DEFAULT, **config}))
    exe = folder / "llama-server"
    text = SCRIPT.replace("__PYTHON__", sys.executable).replace("__CONFIG__", repr(str(cfg)))
    exe.write_text(text.replace("__HELP__", repr(str(HELP_DIR / f"{variant}.txt"))))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def gpu_devices(names: list[str]) -> str:
    """What a CUDA build's ``--list-devices`` prints for these GPUs."""
    lines = [f"  CUDA{i}: {n} (143771 MiB, 142000 MiB free)" for i, n in enumerate(names)]
    return f"ggml_cuda_init: found {len(names)} CUDA devices:\nAvailable devices:\n" + "\n".join(lines) + "\n"


SMI = r"""#!/bin/sh
# a fake nvidia-smi: __N__ GPUs, as the driver lists them
case "$1" in
  --query-gpu=index,name,memory.total,uuid) printf '%s' '__ROWS__' ;;
  --query-gpu=driver_version) echo "580.65.06" ;;
  --query-compute-apps=pid,used_memory) cat __APPS__/* 2>/dev/null ;;
  *) echo "| NVIDIA-SMI 580.65.06    Driver Version: 580.65.06      CUDA Version: 13.0     |" ;;
esac
"""


def fake_nvidia_smi(folder: Path, names: list[str], apps: Path | None = None) -> Path:
    """An ``nvidia-smi`` on a folder to put first on PATH: these GPUs, index i named names[i]; its compute
    apps (``--query-compute-apps=pid,used_memory``) are the rows the fake servers write into ``apps``."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{i}, {n}, 143771, GPU-{i:08d}-fake\n" for i, n in enumerate(names))
    exe = folder / "nvidia-smi"
    text = SMI.replace("__N__", str(len(names))).replace("__ROWS__", rows)
    exe.write_text(text.replace("__APPS__", shlex.quote(str(apps or folder / "no-apps"))))
    exe.chmod(0o755)
    return exe
