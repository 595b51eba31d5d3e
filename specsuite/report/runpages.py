"""The run pages: each rendered once, then carried over (hard-linked) from the previous site for as long as
nothing it shows changes: its history row, its results folder and bisects, its configuration change
against the run before it, the generator (templates, assets, version), and which of its baselines have a
page. A nightly site with 1 000 runs renders one.

The site's manifest (``.specsuite-site``, JSON) keeps each run page's stamp and the baselines it links.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from specsuite import __version__
from specsuite.common.errors import UserError
from specsuite.report import data, folders, pages
from specsuite.report.data import Group, RunRow
from specsuite.results.record import CaseRecord

MANIFEST = ".specsuite-site"
# What a run page copies from a results folder, by version: an older site's pages and copies (its HTML
# "logs" among them, before issue 35) are never carried into a site built under newer rules.
PUBLISHING = "2: logs as text only"
_VOLATILE = ("nth", "of_runs", "t")  # the window's columns, not the run's


def generator() -> str:
    """What every page depends on besides its data: this version, the templates and the assets."""
    h = hashlib.sha256(f"{__version__}\0{PUBLISHING}".encode())
    base = resources.files("specsuite.report")
    for part in ("templates", "assets"):
        with resources.as_file(base / part) as folder:
            for path in sorted(
                p for p in Path(folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts
            ):
                h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def read_manifest(site: Path, gen: str) -> dict[str, Any]:
    """The previous site's run pages by slug ({} when it is not there, unreadable, or of another
    generator)."""
    try:
        doc = json.loads((site / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("generator") != gen or not isinstance(doc.get("runs"), dict):
        return {}
    return doc["runs"]


def write_manifest(site: Path, gen: str, runs: dict[str, Any]) -> None:
    doc = {"written_by": "specsuite report; the next one replaces this folder whole", "generator": gen,
           "runs": runs}  # fmt: skip
    (site / MANIFEST).write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # same filesystem (the site is built beside the old one): no bytes copied
    except OSError:
        shutil.copy2(src, dst)


@dataclass
class RunPages:
    """Decides, for each run, whether its page is carried over or rendered; renders the others."""

    root: Path  # the new site
    previous: Path | None  # the old site, when there is one
    gen: str
    slugs: dict[str, str]  # run id -> slug of every run with a page in the new site
    results: Path | None
    bisects: list[folders.Bisect]
    old: dict[str, Any] = field(default_factory=dict)
    configs: dict[str, Any] = field(default_factory=dict)  # run id -> its configuration change (its lines)
    manifest: dict[str, Any] = field(default_factory=dict)
    rendered: int = 0
    with_folder: int = 0

    def stamp(self, run: RunRow, cases: set[str]) -> str:
        row = {k: v for k, v in run.row.items() if k not in _VOLATILE}
        bis = [(b.folder, b.status, b.first_bad) for b in folders.bisects_of(run, cases, self.bisects)]
        said = self.configs.get(run.run_id)  # the history's configuration change: in its first lines
        payload = msgspec.json.encode([self.gen, run.slug, row, folders.folder_stat(self.results, run), bis,
                                       said])  # fmt: skip
        return hashlib.sha256(payload).hexdigest()

    def _carried(self, run: RunRow, stamp: str) -> bool:
        """Link the old page (and its folder of copied files) when nothing it shows changed."""
        old = self.old.get(run.slug)
        if self.previous is None or not isinstance(old, dict) or old.get("stamp") != stamp:
            return False
        links = old.get("baselines")
        if not isinstance(links, dict) or any(self.slugs.get(k) != v for k, v in links.items()):
            return False  # a baseline got or lost its page
        page = self.previous / "runs" / f"{run.slug}.html"
        if not page.is_file() or page.is_symlink():
            return False
        _link_or_copy(str(page), str(self.root / "runs" / page.name))
        files = self.previous / "runs" / run.slug
        if files.is_dir() and not files.is_symlink():
            shutil.copytree(files, self.root / "runs" / run.slug, copy_function=_link_or_copy, symlinks=True)
        self.manifest[run.slug] = old
        self.with_folder += int(bool(old.get("folder")))
        return True

    def _one(
        self,
        run: RunRow,
        records: list[CaseRecord],
        stamp: str,
        render: Callable[[RunRow, list[CaseRecord], folders.Folder | None, list[folders.Bisect]], None],
    ) -> None:
        folder = folders.find_folder(self.results, run)
        if folder is not None:
            folders.copy_folder(folder, self.root / "runs" / run.slug, run.slug)
        bis = folders.bisects_of(run, {r.name for r in records}, self.bisects)
        render(run, records, folder, bis)
        bases = {r.baseline.run_id for r in records if r.baseline is not None and r.baseline.run_id}
        self.manifest[run.slug] = {
            "stamp": stamp,
            "baselines": {b: self.slugs.get(b) for b in bases},
            "folder": folder is not None,
        }
        self.rendered += 1
        self.with_folder += int(folder is not None)

    def write(
        self,
        runs: Iterable[RunRow],
        cases_of: dict[int, set[str]],
        db: Path,
        render: Callable[[RunRow, list[CaseRecord], folders.Folder | None, list[folders.Bisect]], None],
    ) -> None:
        (self.root / "runs").mkdir(parents=True, exist_ok=True)
        stamps = {}
        todo = []
        for run in runs:
            cases = cases_of.get(run.pk, set())
            stamps[run.pk] = self.stamp(run, cases)
            if not self._carried(run, stamps[run.pk]):
                todo.append(run)
        for run, records in data.case_records(db, todo):
            try:
                self._one(run, records, stamps[run.pk], render)
            except (OSError, ValueError, UserError) as exc:  # one run's data or folder: not the whole site
                why = " ".join(str(exc).split())[:300]
                print(
                    f"warning: report: run {run.run_id[:80]!r} left out of the site: {why}", file=sys.stderr
                )
                (self.root / "runs" / f"{run.slug}.html").unlink(missing_ok=True)
                shutil.rmtree(self.root / "runs" / run.slug, ignore_errors=True)


def render_run(w: Any, group: Group, run: RunRow, records: list[CaseRecord], folder: folders.Folder | None,
               bisects: list[folders.Bisect]) -> None:  # fmt: skip
    """One run's page: its summary from the results folder's results.json where found, else the history's."""
    doc = folder.run if folder is not None else data.run_document(run, records)
    doc = pages.restored(doc, w.config_of.get(run.run_id))
    header = pages.run_header(doc, folder, bisects)
    w.page(f"runs/{run.slug}.html", "run.html", "../", page="run", title=f"run {run.run_id}", run=doc,
           group=group, h=header, results_root=str(w.src.results or "none given"),
           data=pages.run_data(doc, group, folder, w.slugs))  # fmt: skip
