#!/usr/bin/env python3
"""Resident memory of real llama-server processes over many repeated requests: what a healthy server
grows by, which is what the ``memory_growth`` threshold (suite/resources.py) must stay clear of.

    LLAMA_SERVER_BIN_PATH=build/bin/llama-server python benchmarks/bench_memory.py [--passes 30] [CASE...]

For each case (default: the synthetic tier's, and its targets without speculation) the server is started
with the suite's own command line, as a run starts it; then the cold pass, the warm-up request and
``--passes`` passes of the case's prompts, resident memory read from /proc/<pid>/status after each pass.
Printed per server: peak (VmHWM), RSS after the first warmed pass, after the last, their difference over
the requests between (the suite's growth rule), and the largest step between two passes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specsuite.cases.schema import load_cases, select_cases
from specsuite.common import paths, table
from specsuite.measure.argv import server_command
from specsuite.measure.outcome import run_prompts
from specsuite.measure.streams import warm_up
from specsuite.server.memory import Sampler
from specsuite.server.probe import probe
from specsuite.server.process import Command, start_server


def measure(
    command: Command, prompts: tuple[tuple[str, str], ...], n_predict: int, passes: int, log: Path
) -> list[str]:
    srv = start_server(command, log)
    try:
        assert srv.pid is not None
        mem = Sampler(srv.pid)
        done = 0
        run_prompts(srv.post, prompts, n_predict)
        warm_up(srv.connection, prompts)
        done += len(prompts) + 1
        steps = []
        for _ in range(passes):
            run_prompts(srv.post, prompts, n_predict)
            done += len(prompts)
            mem.sample(done)
            if len(mem.samples) > 1:
                a, b = mem.samples[-2].rss_mib, mem.samples[-1].rss_mib
                steps.append((b or 0) - (a or 0))
        growth, reqs = mem.growth("rss_mib")
        first, last = mem.samples[0].rss_mib, mem.samples[-1].rss_mib
    finally:
        srv.stop()
    per_req = f"{growth * 1024 / reqs:.1f}" if growth is not None and reqs else "–"
    return [f"{mem.peak_mib}", f"{first}", f"{last}", f"{growth}", str(reqs), per_req, f"{max(steps):.2f}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*", help="case names (default: the synthetic tier)")
    ap.add_argument("--passes", type=int, default=30, help="passes of the prompts after the warm-up")
    args = ap.parse_args()
    caps = probe(paths.server_binary())
    cases = select_cases(load_cases(), ",".join(args.cases) or "synthetic")
    folder, logs = paths.model_dir(), Path(tempfile.mkdtemp(prefix="bench-memory-"))
    header = (
        "server",
        "peak MiB",
        "RSS warmed",
        "RSS last",
        "growth MiB",
        "requests",
        "KiB/request",
        "max step MiB",
    )
    rows, targets = [], {}
    for case in cases:
        if case.mode or case.synth_rates or case.synth_len:
            continue
        target, draft = folder / case.target, folder / case.draft if case.draft else None
        command = lambda port, t=target, c=case, d=draft: server_command(caps, t, port, c, d)  # noqa: E731
        rows.append(
            [case.name, *measure(command, case.prompt_texts, case.n_predict, args.passes, logs / case.name)]
        )
        targets.setdefault(case.target, (target, case))
    for name, (target, case) in targets.items():
        command = lambda port, t=target: server_command(caps, t, port)  # noqa: E731
        rows.append(
            [
                f"baseline {name}",
                *measure(command, case.prompt_texts, case.n_predict, args.passes, logs / name),
            ]
        )
    load = os.getloadavg()
    print(
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {caps.binary} ({caps.commit}), "
        f"{args.passes} passes, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(table.render(header, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
