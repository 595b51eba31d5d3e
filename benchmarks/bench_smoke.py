#!/usr/bin/env python3
"""Smoke tier wall time vs a plain script that starts the same servers and sends the same requests.

    python benchmarks/bench_smoke.py [--results DIR]

Runs ``specsuite run-tier smoke --no-history`` (probe, fetch check, pytest, every case, results, summary),
then replays the exact server command lines recorded in its results.json with nothing but subprocess and
requests, in the tier's order: the baseline server of the target started once and kept; per case its
server, /metrics, the cold pass (the prompts), /metrics, the warm-up request, one round (each prompt on
the baseline and the speculative server back to back), /metrics, the chat request; stop. Goal: tier /
plain <= 1.25. With ``--results DIR`` the tier's recorded wall_s is used.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specsuite.cases.schema import load_cases
from specsuite.measure.outcome import WARMUP_N_PREDICT, chat_body, request_body
from specsuite.server.process import free_port


class Plain:
    """A server with nothing around it: Popen, /health polling, terminate."""

    def __init__(self, cmd: list[str]) -> None:
        cmd = list(cmd)
        port = free_port()
        cmd[cmd.index("--port") + 1] = str(port)
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            try:
                if requests.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited: {' '.join(cmd)}")
            time.sleep(0.05)

    def completion(self, text: str, n: int) -> None:
        requests.post(f"{self.url}/completion", json=request_body(text, n), timeout=600).raise_for_status()

    def get(self, path: str) -> None:
        requests.get(f"{self.url}{path}", timeout=60).raise_for_status()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def plain_replay(doc: dict) -> float:
    """Same servers, same requests as the tier run recorded in ``doc``; returns seconds."""
    cases = {c.name: c for c in load_cases()}
    t0 = time.monotonic()
    (base_rec,) = doc["baselines"].values()  # the smoke tier has one target
    base = Plain(base_rec["command"])
    base.completion(cases["ngram-mod"].prompt_texts[0][1], WARMUP_N_PREDICT)  # the tier warms it up too
    for name, rec in doc["cases"].items():
        if not rec.get("command"):
            continue
        case = cases[name]
        spec = Plain(rec["command"])
        spec.get("/metrics")
        for _, text in case.prompt_texts:  # the cold pass, counted by /metrics
            spec.completion(text, case.n_predict)
        spec.get("/metrics")
        spec.completion(case.prompt_texts[0][1], WARMUP_N_PREDICT)
        for _, text in case.prompt_texts:  # one round, each prompt's two requests back to back
            for srv in (base, spec):
                srv.completion(text, case.n_predict)
        spec.get("/metrics")
        requests.post(f"{spec.url}/v1/chat/completions", json=chat_body(case.prompt_texts[0][1]), timeout=600)
        spec.stop()
    base.stop()
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, help="use this finished smoke run instead of running the tier")
    args = ap.parse_args()
    if args.results:
        run_dir = args.results
        tier_s = float(json.loads((run_dir / "results.json").read_text())["wall_s"])
        label = "recorded wall_s of the run"
    else:
        run_dir = Path(tempfile.mkdtemp(prefix="bench-smoke-"))
        cmd = [sys.executable, "-m", "specsuite", "run-tier", "smoke", "--no-history", "-q"]
        t0 = time.monotonic()
        env = {**os.environ, "SPEC_RESULTS_DIR": str(run_dir)}
        code = subprocess.call(cmd, env=env, stdout=subprocess.DEVNULL)
        tier_s = time.monotonic() - t0
        label = f"`specsuite run-tier smoke` end to end (exit {code})"
    doc = json.loads((run_dir / "results.json").read_text())
    plain_s = plain_replay(doc)
    n_srv = len(doc["baselines"]) + sum(1 for r in doc["cases"].values() if r.get("command"))
    print(f"smoke tier: {tier_s:.1f} s ({label}); results {run_dir}")
    print(f"plain script, same {n_srv} servers and requests: {plain_s:.1f} s")
    print(f"ratio: {tier_s / plain_s:.2f}x (goal <= 1.25x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
