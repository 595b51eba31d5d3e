#!/usr/bin/env python3
"""Speculative decoding under concurrent requests on the real CPU build, outside the suite's cases.

    python benchmarks/bench_concurrency.py [--cases A,B] [--nps 1,4,8] [--runs 4] [--requests 8]
                                           [--n-predict 128]

For each synthetic case (its target, draft, n_max and server_args from cases.toml) and each number of slots:
``--runs`` fresh servers, each given ``--requests`` greedy requests at once (one per prompt, each on its
own connection: measure.streams), and the same on the speculation-off server of the same command. Printed
per run: the /metrics counters (drafted/accepted/drafts), whether every request's tokens equal np 1's and
the no-spec server's, whether each request's own counters equal np 1's, aggregate tokens/s of both and
their ratio; then per case and np whether the counters repeated over the runs. A server that dies is a row
that says so (DFlash at np 8 aborts in common_batch::get_sub_batch on the pinned build, some runs).

The binary is LLAMA_SERVER_BIN_PATH, else build/bin/llama-server; the models are the synthetic tier's
(``invoke fetch-models --tier synthetic`` writes them). Speeds on the tiny models measure overhead more
than compute (docs/concurrency.md); the tokens and counters are the point.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specsuite.cases.schema import Case, load_cases  # noqa: E402
from specsuite.common import paths  # noqa: E402
from specsuite.measure.argv import server_command  # noqa: E402
from specsuite.measure.outcome import Completion, request_body  # noqa: E402
from specsuite.measure.streams import Pass  # noqa: E402
from specsuite.models.store import locate  # noqa: E402
from specsuite.server.probe import Capabilities, probe  # noqa: E402
from specsuite.server.process import LlamaServer, ServerFailed, start_server  # noqa: E402

PROMPTS = [
    ("fox", "Hello world, the quick brown fox"),
    ("count", "1 2 3 4 5 6 7 8"),
    ("the", "the the the"),
    ("abc", "abc def ghi"),
    ("once", "Once upon a time"),
    ("xyz", "x y z x y z"),
    ("quick", "quick quick quick"),
    ("down", "99 98 97 96"),
]
SPECULATIVE = ("--spec-type", "--spec-draft-model", "--spec-draft-n-max", "--spec-draft-poll")


@dataclass
class Measured:
    counters: tuple[int, int, int] | None
    done: Pass | None
    failed: str | None = None

    def tokens(self) -> dict[str, tuple[int, ...]]:
        return {c.id: c.tokens for c in self.done.completions} if self.done else {}

    def own(self) -> dict[str, tuple[int, int]]:
        return {c.id: (c.draft_n, c.draft_n_accepted) for c in self.done.completions} if self.done else {}


def without_speculation(argv: list[str]) -> list[str]:
    """The case's command with its speculative flags (each with its value) left out."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in SPECULATIVE:
            skip = True
        else:
            out.append(arg)
    return out


def measure(
    caps: Capabilities, case: Case, np_: int, spec: bool, logs: Path, n: int, n_predict: int
) -> Measured:
    """``n`` requests at once on a fresh server, before any other request (as the suite's cold pass)."""
    found = locate(case.models)
    target, draft = found[case.target].path, found[case.draft].path if case.draft else None

    def command(port: int) -> list[str]:
        argv = server_command(caps, target, port, case, draft, parallel=np_)
        return argv if spec else without_speculation(argv)

    log = logs / f"{case.name}-np{np_}-{'spec' if spec else 'base'}.log"
    try:
        srv = start_server(command, log)
    except ServerFailed as exc:
        return Measured(None, None, f"did not start: {exc.reason}")
    try:
        done = _one_each(srv, PROMPTS[:n], n_predict)
        m = srv.metrics()
        return Measured((m.drafted, m.accepted, m.drafts), done)
    except ServerFailed as exc:
        return Measured(None, None, f"died: {exc.reason} ({log})")
    finally:
        srv.stop()


def _one_each(srv: LlamaServer, prompts: list[tuple[str, str]], n_predict: int) -> Pass:
    """Every prompt at once, each on its own connection, sent once: the issue's measurement."""

    def send(item: tuple[int, tuple[str, str]]) -> Completion:
        s, (pid, text) = item
        with srv.connection() as post:
            t0 = time.perf_counter()
            body = post("/completion", request_body(text, n_predict))
            return Completion.from_response(pid, body, s, (time.perf_counter() - t0) * 1000.0)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        done = list(pool.map(send, enumerate(prompts)))
    return Pass(done, time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases", default="tiny-simple-random,tiny-mtp-random,tiny-dflash-random,tiny-dspark-random"
    )
    ap.add_argument("--nps", default="1,4,8", help="slot counts, comma separated (default 1,4,8)")
    ap.add_argument("--runs", type=int, default=4, help="fresh servers per case and np (default 4)")
    ap.add_argument("--requests", type=int, default=8, help="concurrent requests, up to 8 (default 8)")
    ap.add_argument("--n-predict", type=int, default=128, help="tokens per request (default 128)")
    args = ap.parse_args()
    caps = probe(paths.server_binary())
    by_name = {c.name: c for c in load_cases()}
    nps = [int(x) for x in args.nps.split(",")]
    logs = Path(tempfile.mkdtemp(prefix="bench-concurrency-"))
    head = ("case", "np", "run", "drafted/accepted/drafts", "tokens = np 1", "tokens = no spec",
            "own counters = np 1", "spec tok/s", "no-spec tok/s", "ratio")  # fmt: skip
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name in args.cases.split(","):
        case, ref = by_name[name], None
        for np_ in nps:
            seen: Counter[tuple[int, int, int]] = Counter()
            for run in range(1, args.runs + 1):
                spec = measure(caps, case, np_, True, logs, args.requests, args.n_predict)
                base = measure(caps, case, np_, False, logs, args.requests, args.n_predict)
                ref = ref or spec
                if spec.failed or base.failed or spec.done is None or base.done is None:
                    print(f"| {name} | {np_} | {run} | {spec.failed or base.failed} | | | | | | |")
                    continue
                seen[spec.counters or (0, 0, 0)] += 1
                s, b = spec.done.aggregate_tps or 0.0, base.done.aggregate_tps or 0.0
                print(
                    f"| {name} | {np_} | {run} | {'/'.join(map(str, spec.counters or ()))} | "
                    f"{spec.tokens() == ref.tokens()} | {spec.tokens() == base.tokens()} | "
                    f"{spec.own() == ref.own()} | {s:.0f} | {b:.0f} | {s / b if b else float('nan'):.2f} |"
                )
            sets = f"{len(seen)} distinct counter set(s) over {sum(seen.values())} runs"
            print(f"| {name} | {np_} | all | {sets} | | | | | | |")
    print(f"logs: {logs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
