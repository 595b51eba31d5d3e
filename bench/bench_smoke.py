#!/usr/bin/env python3
"""Smoke tier wall time vs a plain script that starts the same servers and sends the same requests.

    python bench/bench_smoke.py [--results DIR]

Runs ``specsuite.tier.run_tier("smoke", ...)`` (fetch check, probe, pytest, baselines, every case, results),
then replays the exact server command lines recorded in its results.json with nothing but subprocess and
requests: start, wait for /health, the same /completion bodies, stop. Goal: tier / plain <= 1.25.
With ``--results DIR`` the tier's own recorded wall_s of an earlier run is used instead of running it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specsuite.measure import PROMPT_SETS, request_body
from specsuite.server import free_port


def _plain_server(cmd: list[str], prompts: str, n_predict: int) -> None:
    cmd = list(cmd)
    port = free_port()
    cmd[cmd.index("--port") + 1] = str(port)
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {' '.join(cmd)}")
            time.sleep(0.05)
        requests.get(f"{url}/metrics", timeout=60)
        for _, text in PROMPT_SETS[prompts]:
            requests.post(
                f"{url}/completion", json=request_body(text, n_predict), timeout=600
            ).raise_for_status()
        requests.get(f"{url}/metrics", timeout=60)
    finally:
        proc.terminate()
        proc.wait()


def plain_replay(doc: dict) -> float:
    """Same servers, same requests as the tier run recorded in ``doc``; returns seconds."""
    from specsuite.cases import load_cases

    cases = {c.name: c for c in load_cases()}
    t0 = time.monotonic()
    for base in doc["baselines"].values():
        _plain_server(base["command"], "seed", 128)
    for name, rec in doc["cases"].items():
        if rec.get("command"):
            _plain_server(rec["command"], cases[name].prompts, cases[name].n_predict)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, help="use this finished smoke run instead of running the tier")
    args = ap.parse_args()
    if args.results:
        run_dir = args.results
        doc = json.loads((run_dir / "results.json").read_text())
        tier_s = float(doc["wall_s"])
        label = "recorded wall_s of the pytest session"
    else:
        from specsuite.tier import run_tier

        run_dir = Path(tempfile.mkdtemp(prefix="bench-smoke-"))
        t0 = time.monotonic()
        code = run_tier("smoke", run_dir, ["-q"])
        tier_s = time.monotonic() - t0
        doc = json.loads((run_dir / "results.json").read_text())
        label = f"run_tier end to end (pytest exit {code})"
    plain_s = plain_replay(doc)
    n_srv = len(doc["baselines"]) + sum(1 for r in doc["cases"].values() if r.get("command"))
    print(f"smoke tier: {tier_s:.1f} s ({label}); results {run_dir}")
    print(f"plain script, same {n_srv} servers and requests: {plain_s:.1f} s")
    print(f"ratio: {tier_s / plain_s:.2f}x (goal <= 1.25x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
