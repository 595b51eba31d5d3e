#!/usr/bin/env python3
"""One smoke case's decoding on a busy (or idle) CPU machine, by how llama-server's threads wait.

    python benchmarks/bench_busy.py [--threads N] [--env NAME=VALUE ...] [--case ngram-simple]

Starts the case's speculation-off server and then its own server, each with the command line the suite
builds for it (``measure.argv``, ``measure.plain``), and sends each the case's prompts one after another,
``n_predict`` tokens each (the smoke tier's: three prompts of 128 tokens), as the cold pass does. Prints one
JSON line: for each server the seconds to /health, the seconds for the prompts and the tokens decoded,
with the load average before. ``--threads N`` adds ``--threads N`` to both command lines; ``--env`` sets a
variable in both servers' environment (``GOMP_SPINCOUNT=1000``, ``OMP_WAIT_POLICY=PASSIVE``). Without
``--env`` the servers get this process's environment as it is, GOMP_SPINCOUNT and OMP_WAIT_POLICY removed:
libgomp's default, what the suite's servers had before ``measure.engine.CPU_SPIN``.

The machine's load is whatever it is (the script adds none): run it next to other work, or as the only
work (``chrt -f 10`` gives it the CPUs ahead of every ordinary process, near an idle machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specsuite.cases.schema import load_cases, select_cases
from specsuite.common import paths
from specsuite.measure.argv import server_command
from specsuite.measure.engine import OMP_WAITS
from specsuite.measure.outcome import request_body
from specsuite.measure.plain import plain_of
from specsuite.server.probe import probe
from specsuite.server.process import free_port


def timed(cmd: list[str], env: dict[str, str], prompts: list[str], n_predict: int) -> dict[str, float]:
    """Seconds to /health, seconds for the prompts, tokens decoded, of one server of ``cmd``."""
    port = free_port()
    cmd = [*cmd]
    cmd[cmd.index("--port") + 1] = str(port)
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
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
        t1 = time.monotonic()
        tokens = 0
        for text in prompts:
            answer = requests.post(f"{url}/completion", json=request_body(text, n_predict), timeout=3600)
            answer.raise_for_status()
            tokens += answer.json()["timings"]["predicted_n"]
        return {"start_s": round(t1 - t0, 2), "prompts_s": round(time.monotonic() - t1, 2), "tokens": tokens}
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", default="ngram-simple", help="a CPU case (default: ngram-simple, smoke)")
    p.add_argument("--threads", type=int, help="--threads N on both servers' command lines")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="in both servers' env")
    a = p.parse_args()
    caps = probe(paths.server_binary())
    [case] = select_cases(load_cases(), a.case)
    target = paths.model_dir() / case.target
    draft = paths.model_dir() / case.draft if case.draft else None
    extra = ["--threads", str(a.threads)] if a.threads else []

    def spec(port: int) -> list[str]:
        cmd = server_command(caps, target, port, case, draft)
        return [cmd[0], *extra, *cmd[1:]]

    env = {k: v for k, v in os.environ.items() if k not in OMP_WAITS}
    env.update(kv.split("=", 1) for kv in a.env)
    load = os.getloadavg()
    prompts = [text for _, text in case.prompt_texts]
    base = plain_of(caps, spec, target).command(0)
    out = {
        "case": case.name,
        "threads": a.threads,
        "env": a.env,
        "load_before": [round(x, 2) for x in load],
        "baseline": timed(base, env, prompts, case.n_predict),
        "case_server": timed(spec(0), env, prompts, case.n_predict),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
