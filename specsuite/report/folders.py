"""A run's results folder, where the site finds it, and what the site copies from it: results.json,
summary.md and the server logs (regular files only, never through a link, each up to a size; logs as text
only: ``.log`` and ``.txt`` files, published under a ``.txt`` name so that any web server sends them as
text/plain), and the bisects that ran on a run's commit (``bisect-*/bisect.json`` beside the runs).

Everything here comes from files a run (or anyone) wrote: a folder whose results.json is not that run's is
not its folder, a log that is a symlink is not copied (it could point at any file of the machine), any
other file of ``logs/`` (an HTML page, a script, an image) is not published (the site would serve it from
its own origin, outside the pages' content-security policy), and a bisect.json of the wrong shape is left
out with one warning line.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsuite.common.errors import UserError
from specsuite.report.data import RunRow, slug
from specsuite.results.document import Run, load_run, run_id_problem

MAX_COPY_BYTES = 16 << 20  # one log or document: a bigger one stays in the run's artifact
MAX_BISECT_BYTES = 4 << 20
_HEX = re.compile(r"[0-9a-f]{7,40}")
COPIED = ("results.json", "summary.md")
LOG_SUFFIXES = (".log", ".txt")  # what a server log is; nothing else of a run's logs/ is published


def published_log(name: str) -> str | None:
    """The name a log of ``logs/`` is published under (safe characters, ending in ``.txt``: a text type on
    every web server), or None for a file that is not a text log."""
    suffix = Path(name).suffix.lower()
    if suffix not in LOG_SUFFIXES:
        return None
    stem = slug(name[: -len(suffix)])
    return f"{stem}{suffix}" if suffix == ".txt" else f"{stem}{suffix}.txt"


def _plain(run_id: str) -> bool:
    """A run id that names a folder (the live runs' shape): never a path, bounded."""
    return run_id_problem(run_id) is None


@dataclass
class Folder:
    """A run's results folder as the site uses it."""

    path: Path
    run: Run
    files: dict[str, str] = field(default_factory=dict)  # what was copied: its name -> href from the run page
    logs: dict[str, str] = field(default_factory=dict)  # "logs/<name>" as records name it -> href
    skipped: list[str] = field(default_factory=list)  # why a file was not copied


def find_folder(root: Path | None, run: RunRow) -> Folder | None:
    """``root/<run_id>`` when its results.json is this run's (same run id and start); else None."""
    if root is None or not _plain(run.run_id):  # a run id is never a path
        return None
    path = root / run.run_id
    try:
        if path.is_symlink() or not (path / "results.json").is_file():
            return None
        doc = load_run(path)
    except OSError:
        return None
    except UserError as exc:
        print(f"warning: report: {exc}; the run page shows the history's record", file=sys.stderr)
        return None
    if doc.run_id != run.run_id or (doc.started and doc.started != run.row.get("started")):
        return None
    return Folder(path, doc)


def folder_stat(root: Path | None, run: RunRow) -> list[Any] | None:
    """What a run's page takes from its results folder, as sizes and times (a page is rendered again when
    they change); None when there is no folder of that name."""
    if root is None or not _plain(run.run_id):
        return None
    path = root / run.run_id
    found: list[Any] = [str(path)]
    try:
        if path.is_symlink():
            return None
        for name in COPIED:
            if (path / name).is_file():
                st = (path / name).stat()
                found.append([name, st.st_size, st.st_mtime_ns])
        if len(found) < 2:  # no results.json
            return None
        logs = path / "logs"
        if logs.is_dir() and not logs.is_symlink():
            for e in sorted(os.scandir(logs), key=lambda e: e.name):
                st = e.stat(follow_symlinks=False)
                found.append([e.name, st.st_size, st.st_mtime_ns])
    except OSError:  # a folder that went away or cannot be read: the page shows the history's record
        return None
    return found


def copy_file(src: Path, dst: Path, limit: int = MAX_COPY_BYTES) -> str | None:
    """Copy a regular file, not through a link, up to ``limit`` bytes; None, or why it was not copied."""
    try:  # O_NONBLOCK: a FIFO's open returns at once (and is refused below) instead of waiting for a writer
        fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        return f"{src.name}: {exc.strerror or exc}"
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            return f"{src.name}: not a regular file"
        if info.st_size > limit:
            return f"{src.name}: {info.st_size} bytes, more than the site carries ({limit})"
        data = fh.read(limit + 1)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "xb") as out:  # a fresh folder: a file there already would be a name collision
        out.write(data)
    return None


def copy_folder(folder: Folder, dest: Path, href: str) -> None:
    """results.json, summary.md and logs/* of the run into ``dest`` (the run's own folder of the site);
    ``href``: that folder seen from the run's page."""
    for name in COPIED:
        if (folder.path / name).exists():
            _copy(folder, folder.path / name, dest / name, name, f"{href}/{name}", folder.files)
    logs = folder.path / "logs"
    if logs.is_symlink() or not logs.is_dir():
        return
    for entry in sorted(os.scandir(logs), key=lambda e: e.name):
        if entry.is_symlink():  # it could point at any file of the machine: never published
            folder.skipped.append(f"logs/{entry.name}: a symlink (not followed)")
            continue
        if entry.is_dir():
            continue
        safe = published_log(entry.name)
        if safe is None:  # served from the site's origin, an HTML file's script would run there
            folder.skipped.append(f"logs/{entry.name}: not a text log (only .log and .txt are published)")
            continue
        if f"{href}/logs/{safe}" in folder.logs.values():  # x.log and x.log.txt both publish as x.log.txt
            folder.skipped.append(f"logs/{entry.name}: its published name is another log's ({safe})")
            continue
        _copy(
            folder,
            Path(entry.path),
            dest / "logs" / safe,
            f"logs/{entry.name}",
            f"{href}/logs/{safe}",
            folder.logs,
        )


def _copy(folder: Folder, src: Path, dst: Path, key: str, href: str, into: dict[str, str]) -> None:
    why = copy_file(src, dst)
    if why is None:
        into[key] = href
    else:
        folder.skipped.append(why)


# --- bisects ---------------------------------------------------------------------------------------------


@dataclass
class Bisect:
    """A bisect's result as bisect.json holds it (what the run page shows)."""

    folder: str
    status: str
    headline: str
    case: str
    metric: str
    good: str
    bad: str
    first_bad: str | None
    subject: str | None
    tested: list[dict[str, Any]]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _bisect(path: Path) -> Bisect | None:
    if path.parent.is_symlink() or path.is_symlink() or path.stat().st_size > MAX_BISECT_BYTES:
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    params, first = doc["params"], doc.get("first_bad") or {}
    tested = [
        {k: s.get(k) for k in ("label", "commit", "verdict", "rule", "value", "subject")}
        for s in doc.get("tested") or []
        if isinstance(s, dict)
    ]
    return Bisect(
        folder=path.parent.name,
        status=_text(doc.get("status")),
        headline=_text(doc.get("headline")),
        case=_text(params["case"]),
        metric=_text(params.get("metric")),
        good=_text(params["good"]).lower(),
        bad=_text(params["bad"]).lower(),
        first_bad=_text(first.get("commit")) or None,
        subject=_text(first.get("subject")) or None,
        tested=tested,
    )


def bisects(root: Path | None) -> list[Bisect]:
    """Every ``<root>/*/bisect.json`` that reads as a bisect's result (one warning for each that does not)."""
    if root is None or not root.is_dir():
        return []
    out = []
    for path in sorted(root.glob("*/bisect.json")):
        try:
            found = _bisect(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            print(f"warning: report: {path} is not a bisect result ({exc}); left out", file=sys.stderr)
            continue
        if found is not None and _HEX.fullmatch(found.bad):
            out.append(found)
    return out


def bisects_of(run: RunRow, cases: set[str], found: list[Bisect]) -> list[Bisect]:
    """The bisects whose bad commit is this run's and whose case is one of its cases."""
    commit = run.commit.lower()
    return [b for b in found if b.case in cases and (commit.startswith(b.bad) or b.bad.startswith(commit))]
