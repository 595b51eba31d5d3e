"""``specsuite report [--out DIR] [--device D]``: the history as a static site, from the history database and
the results folders it knows; no server, no network, opens from ``file://``."""

from __future__ import annotations

from pathlib import Path

from specsuite.common import paths
from specsuite.common.argtypes import CommandParser
from specsuite.common.errors import UserError
from specsuite.history import schema
from specsuite.history.ancestry import default_mirror
from specsuite.history.command import existing_db
from specsuite.report.data import LAST
from specsuite.report.site import Sources, build_site


def default_out() -> Path:
    return paths.RESULTS_DIR / "site"


def default_cache() -> Path:
    """Where the change points of each series are kept between builds (``history.changecache``)."""
    return paths.cache_dir() / "report" / "changes.json"


def parser() -> CommandParser:
    p = CommandParser(
        "report",
        "The history as a static site: a table per device class and backend, a page per case over commits, "
        "a page per run.",
    )
    p.add_argument("--out", type=Path, help="the site's folder, replaced whole (default results/site)")
    p.add_argument("--device", help="only this device (name or class)")
    p.add_argument(
        "--last",
        type=int,
        default=LAST,
        metavar="N",
        help=f"the newest N runs of each device class and backend (default {LAST}; 0: all)",
    )
    p.add_argument(
        "--results",
        type=Path,
        metavar="DIR",
        help="where the runs' results folders are (default results/): their logs, summaries and bisects "
        "go into the site",
    )
    p.add_argument("--db", type=existing_db, help="the history database (default: the one `history` reads)")
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    db = Path(a.db) if a.db is not None else schema.default_path()
    results = Path(a.results) if a.results is not None else paths.RESULTS_DIR
    if a.last < 0:
        raise UserError(f"--last {a.last}: give a number of runs, or 0 for all")
    src = Sources(db, results, default_mirror(), a.device, a.last, default_cache())
    built = build_site(src, a.out or default_out())
    if not built.runs:
        print(f"no runs recorded yet in {db}: the site says so (every suite run records itself when it ends)")
    print(
        f"report: {built.runs} runs on {built.groups} device class(es), {built.case_pages} case pages, "
        f"{built.run_folders} results folders found -> {built.out / 'index.html'}"
    )
    if built.series_cached or built.series_computed:
        print(
            f"change points: {built.series_computed} noisy series computed, {built.series_cached} unchanged "
            f"since a build before (from {default_cache()})"
        )
    return 0
