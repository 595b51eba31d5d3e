"""Where the tests' recorded data lives (help texts, server logs, results of real runs)."""

from pathlib import Path

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
