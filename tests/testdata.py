"""Where the tests' recorded data lives (help texts, server logs, results of real runs)."""

from pathlib import Path

DATA_ROOT = Path(__file__).resolve().parent / "data"
