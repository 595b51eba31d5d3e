"""The site, built whole and swapped in: pages into a fresh folder beside ``--out``, then one rename.

A reader of the old site sees it until the new one is complete. ``--out`` is replaced only when it is a site
this command wrote (it holds ``.specsuite-site``) or an empty folder: never a folder of something else, and
never through a symlink.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment

from specsuite.common.errors import UserError
from specsuite.history.ancestry import default_mirror
from specsuite.history.changecache import SplitCache
from specsuite.history.changes import ChangePoint, ConfigChange
from specsuite.report import data, events, folders, morning, pages, runpages
from specsuite.report.data import Group, RunRow
from specsuite.report.render import environment

MARKER = runpages.MANIFEST


@dataclass
class Built:
    out: Path
    runs: int
    groups: int
    case_pages: int
    run_folders: int  # runs whose results folder was found (their logs are in the site)
    rendered: int = 0  # run pages rendered (the others carried over from the previous site)
    series_cached: int = 0  # noisy series whose change points came from the cache
    series_computed: int = 0  # ... that were computed (new, or changed since)


@dataclass
class Sources:
    """Where the site's data comes from."""

    db: Path
    results: Path | None  # the folder holding results/<run-id> folders and bisect-* folders
    mirror: Path | None  # the llama.cpp mirror that orders commits (None: ancestry.default_mirror())
    device: str | None = None
    last: int = data.LAST  # runs per device class and backend (0: all)
    cache: Path | None = None  # the change-point cache file (history.changecache); None: none kept


def _check_out(out: Path) -> None:
    if out.is_symlink():
        raise UserError(f"--out {out}: a symlink; give the folder itself")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: a file, not a folder; give a folder for the site")
    if out.is_dir() and not (out / MARKER).is_file() and any(out.iterdir()):
        raise UserError(
            f"--out {out}: a folder that holds something else; give a new or empty folder, or a site this "
            "command wrote (it replaces it whole)"
        )


def _publish(staging: Path, out: Path) -> None:
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{secrets.token_hex(4)}")
        os.rename(out, old)
    os.rename(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def build_site(src: Sources, out: Path, changes: Sequence[ChangePoint] | None = None) -> Built:
    """Write the site for the history ``src.db`` into ``out``; ``changes``: the change points to mark
    (default: the history's own, ``data.change_points``)."""
    out = Path(out).absolute()
    _check_out(out)
    mirror = src.mirror if src.mirror is not None else default_mirror()
    src = dataclasses.replace(src, mirror=mirror)
    runs = data.load_runs(src.db, src.device, src.last)
    cache = SplitCache(src.cache) if src.cache is not None else None
    if changes is None:
        changes = data.change_points(src.db, src.device, mirror, runs, cache) if runs else []
        if cache is not None:
            cache.save()
    configs = data.configuration_changes(src.db, src.device, mirror, runs) if runs else []
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(out.parent / f".{out.name}.tmp-{secrets.token_hex(4)}")
        staging.mkdir()
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create the site there ({exc.strerror or exc})") from None
    try:
        previous = out if (out / MARKER).is_file() else None
        writer = _Writer(src, staging, runs)
        writer.configs = configs
        writer.config_of = {c.after_run_id: c for c in configs}
        built = _write(writer, changes, previous)
        _publish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    built.out = out
    if cache is not None:
        built.series_cached, built.series_computed = cache.hits, cache.misses
    return built


class _Writer:
    def __init__(self, src: Sources, root: Path, runs: list[RunRow]) -> None:
        self.src, self.root, self.runs = src, root, runs
        self.env: Environment = environment()
        self.common = {
            "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "source": src.db.name,
        }
        self.groups = data.groups(runs, src.mirror)
        self.group_of = {run.pk: g for g in self.groups.values() for run in g.runs}
        self.slugs = {run.run_id: run.slug for run in runs}
        self.configs: Sequence[ConfigChange] = []  # the configuration changes to mark on case pages
        self.config_of: dict[str, ConfigChange] = {}  # ... by the run id after the change (its first lines)
        self.sweeps: dict[int, dict[str, list[data.Member]]] = {}  # each run's sweeps, by np

    def page(self, rel: str, template: str, root: str, **context: Any) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        ctx = {**self.common, "root": root, "charts": False, "data": None, **context}
        path.write_text(self.env.get_template(template).render(ctx), encoding="utf-8")


def _copy_assets(root: Path) -> None:
    with resources.as_file(resources.files("specsuite.report") / "assets") as assets:
        shutil.copytree(assets, root / "assets", ignore=shutil.ignore_patterns("*.json", "__pycache__"))


def _write(w: _Writer, changes: Sequence[ChangePoint], previous: Path | None) -> Built:
    _copy_assets(w.root)
    cases_of: dict[int, set[str]] = {}
    for p in data.points(w.src.db, w.runs):
        w.group_of[p.run.pk].series.setdefault(p.case, []).append(p)
        cases_of.setdefault(p.run.pk, set()).add(p.case)
    gen = runpages.generator()
    rp = runpages.RunPages(w.root, previous, gen, w.slugs, w.src.results, folders.bisects(w.src.results))
    rp.old = runpages.read_manifest(previous, gen) if previous is not None else {}
    rp.configs = dict(w.config_of)
    rp.write(
        w.runs, cases_of, w.src.db, lambda run, *rest: runpages.render_run(w, w.group_of[run.pk], run, *rest)
    )
    for group in w.groups.values():
        position = {run.pk: i for i, run in enumerate(group.runs)}
        for series in group.series.values():
            series.sort(key=lambda p: position[p.run.pk])
    latest = [
        next((p for p in reversed(s) if p.per_position_rate), s[-1])
        for g in w.groups.values()
        for s in g.series.values()
    ]
    data.baselines(w.src.db, latest)  # the per-position chart compares the latest run with its baseline
    w.sweeps = data.sweeps(w.src.db, w.runs)
    n_pages = 0
    index = []
    by_case: dict[tuple[str, str, str], list[ChangePoint]] = {}
    for c in changes:
        by_case.setdefault((c.case, c.device_class, c.backend), []).append(c)
    for group in w.groups.values():
        rows = [
            _case_page(w, group, name, by_case.get((name, *group.key), [])) for name in _case_order(group)
        ]
        n_pages += len(rows)
        index.append(_index_group(group, rows))
    labels = [m.label for m in data.METRICS]
    since = morning.mornings(list(w.groups.values()), w.src.db, w.src.results, w.configs)
    w.page("index.html", "index.html", "", page="index", title="history", groups=index, labels=labels,
           spark_runs=pages.SPARK_RUNS, device=w.src.device, since=since)  # fmt: skip
    runpages.write_manifest(w.root, gen, rp.manifest)
    return Built(w.root, len(w.runs), len(w.groups), n_pages, rp.with_folder, rp.rendered)


def _case_order(group: Group) -> list[str]:
    """The latest run's order (cases.toml's), then cases it did not run, by name."""
    latest = [name for name, s in group.series.items() if s[-1].run is group.runs[-1]]
    return latest + sorted(set(group.series) - set(latest))


def _case_page(w: _Writer, group: Group, case: str, mine: Sequence[ChangePoint]) -> dict[str, Any]:
    series = group.series[case]
    rows = [events.change_row(span, series) for span in events.spans(events.located(series, mine))]
    ours = [c for c in w.configs if (c.device_class, c.backend) == (group.device_class, group.backend)]
    configs = [events.config_row(i, c) for i, c in events.located(series, ours)]
    kind, words = pages.point_status(series[-1])
    note = "none in this history"
    found = pages.case_data(group, case, series, rows, configs, w.sweeps)
    context = {
        "page": "case",
        "title": case,
        "case": case,
        "group": group,
        "n": len(series),
        "charts": True,
        "metrics": [m.shown() for m in data.METRICS],
        "latest": {
            "kind": kind,
            "status": words,
            "message": pages.first_line(series[-1].message),
            "speed_note": pages.speed_note(series[-1]),
        },
        "changes": rows,
        "changes_note": note,
        "configs": configs,
        "data": found,
        "by_np": found["by_np"] is not None,  # a sweep's member: its speedup-by-np chart
    }
    w.page(pages.case_href(group, case), "case.html", "../../", **context)
    return pages.index_row(group, case, series, rows)


def _index_group(group: Group, rows: list[dict[str, Any]]) -> dict[str, Any]:
    latest = group.runs[-1]
    return {
        "slug": group.slug,
        "device_class": group.device_class,
        "backend": group.backend,
        "ordered_by": group.ordered_by,
        "n_runs": len(group.runs),
        "of_runs": latest.of_runs,
        "n_commits": len({r.commit for r in group.runs}),
        "latest": {
            "run_id": latest.run_id,
            "href": f"runs/{latest.slug}.html",
            "commit": latest.commit,
            "started": latest.started,
        },
        "rows": sorted(rows, key=lambda r: r["rank"]),  # failures first, each part in the latest run's order
    }
