"""Where the tests' recorded data lives (help texts, server logs, results of real runs), and shards cut
from a real run."""

from pathlib import Path

import msgspec

from specsuite.common import paths
from specsuite.common.filehash import sha256_text
from specsuite.results.document import encode, load_run

DATA_ROOT = Path(__file__).resolve().parent / "data"


def as_history_run(run: Path, commit: str, started: str) -> dict:
    """A recorded run's results.json as a run the history can hold: one commit, start time, device class,
    backend and cases.toml hash (the identity the relative gate matches a baseline by)."""
    import json

    d = json.loads((run / "results.json").read_text())
    source = {"kind": None, "mirror": None}
    d.update(
        schema=2, started=started, cases_sha256="c" * 64, device={"name": "cpu", "class": "cpu-x86-64"},
        binary={**d["binary"], "commit": commit, "backend": "cpu", "source": source},
    )  # fmt: skip
    return d


def write_shards(root: Path, n: int = 3, skip: tuple[int, ...] = (), history: bool = True) -> list[str]:
    """A real smoke run (smoke-real-cal-1) cut into ``n`` shard folders under ``root`` (results.json and a
    log per case), as ``run-tier --shard`` writes them; the case names in order. ``skip``: shards that never
    reported. ``history``: whether the shards ran with the history on (the real run did not: calibration).
    They name this checkout's cases.toml, as a run of it does (merge plans from it)."""
    run = load_run(DATA_ROOT / "results" / "smoke-real-cal-1")
    run.options = msgspec.structs.replace(run.run_options, history=history)
    run.cases_sha256 = sha256_text(paths.CASES_FILE.read_text(encoding="utf-8"))
    names = list(run.cases)
    for k in range(n):
        if k + 1 in skip:
            continue
        mine = {m: run.cases[m] for m in names[k::n]}
        for rec in mine.values():
            rec.log = f"logs/{rec.name}.log"
        shard = msgspec.structs.replace(
            run, run_id=f"shard-{k + 1}", shard=f"{k + 1}/{n}", planned=names, cases=mine
        )
        folder = root / f"shard-{k + 1}"
        (folder / "logs").mkdir(parents=True)
        (folder / "results.json").write_bytes(encode(shard))
        for rec in mine.values():
            (folder / "logs" / f"{rec.name}.log").write_text(f"log of {rec.name} in shard {k + 1}\n")
    return names
