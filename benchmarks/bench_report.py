#!/usr/bin/env python3
"""What the history site costs: ``specsuite report`` over a long history, and its pages in headless Chromium.

    python benchmarks/bench_report.py [--runs 10000] [--last 1000] [--repeats 3] [--loads 5] [--workdir DIR]
                                      [--before TREE] [--skip-browser]

1. A history of ``--runs`` runs, each a real synthetic-tier run (tests/data/results/site-real-3: 26
   cases, A-B-B-A speed samples) at its own commit of a real git repository (the mirror that orders them
   by ancestry), acceptance jittered, speed too (each round's speedup and the decode rate by up to 5 %, as
   a GPU's timings spread: the change-point detector's permutation tests run on every speed series), one
   run in 50 with a failing case. ``specsuite report`` of it (``build_site``, the newest ``--last`` runs,
   change points included): cold, into a new folder with no change-point cache, and nightly, after one
   more run was recorded (its page rendered, the others carried over; the cache of the build before);
   medians of ``--repeats``. Each build in a fresh process, as the command runs, timed around
   ``build_site`` (the interpreter's start and specsuite's own imports left out; numpy's and the
   rest the build itself imports counted). Goal: < 5 s. Beside it, the plain tool over the same runs:
   ``history --last N``'s text tables. ``--before TREE``: the same builds of another specsuite checkout
   (main before a change) over a copy of the same history, in the same run.
2. The index, the case page (``--last`` points per chart) and a run page, opened from file:// in headless
   Chromium (Debian's chromium and chromedriver, via selenium): navigation start to the page's own
   "drawn" mark (its charts and tables done), median of ``--loads`` loads each. Goal: < 1 s. Beside it,
   the same page with its scripts left out (the HTML and CSS alone). And each page's weight with
   everything it loads. Goal: < 2 MB for 1 000 runs.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specsuite.common import paths, table
from specsuite.history import recording, schema
from specsuite.history.command import history_command
from specsuite.results.document import Run, load_run

REAL = paths.REPO_ROOT / "tests" / "data" / "results" / "site-real-3"
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
CASE = "tiny-mtp-random"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


def mirror(repo: Path, n: int) -> list[str]:
    """A git repository of ``n`` commits in one line (git fast-import): their shas, oldest first."""
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    stream = []
    for i in range(n):
        when = int((START + dt.timedelta(hours=i)).timestamp())
        msg = f"commit {i}\n"
        stream.append(f"commit refs/heads/main\nmark :{i + 1}\ncommitter b <b@example.invalid> {when} +0000\n"
                      f"data {len(msg)}\n{msg}" + (f"from :{i}\n" if i else "") + "\n")  # fmt: skip
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input="".join(stream).encode(), check=True)
    out = subprocess.run(["git", "rev-list", "--reverse", "main"], cwd=repo, check=True, capture_output=True)
    return out.stdout.decode().split()


def variant(doc: Run, i: int, commit: str, rng: random.Random) -> Run:
    """Run ``i``: its own commit, run id and start; acceptance jittered; one run in 50 fails a case."""
    out = copy.deepcopy(doc)
    out.binary.commit = commit
    out.run_id = f"bench-{i:06d}"
    out.started = (START + dt.timedelta(hours=i)).isoformat(timespec="seconds")
    out.verdict = None
    for rec in out.cases.values():
        if rec.accept_rate is not None:
            rec.accept_rate = round(rec.accept_rate * rng.uniform(0.97, 1.0), 4)
        jitter_speed(rec, rng)
    if i % 50 == 49:
        rec = out.cases[CASE]
        rec.status, rec.reason, rec.message = "failed", "floor", "accept_rate below its floor (benchmark)"
    return out


def jitter_speed(rec: Any, rng: random.Random) -> None:
    """Each round's speedup and the decode rate of one run spread by up to 5 %, as a GPU's timings do."""
    speed = rec.speed
    if speed is None or not speed.speedups:
        return
    speed.speedups = [None if v is None else round(v * rng.uniform(0.95, 1.05), 4) for v in speed.speedups]
    speed.speedup_median = statistics.median(v for v in speed.speedups if v is not None)
    rec.speedup = speed.speedup_median
    if rec.decode_tps is not None:
        rec.decode_tps = round(rec.decode_tps * rng.uniform(0.95, 1.05), 2)


def fill(db: Path, doc: Run, commits: list[str]) -> float:
    rng, t = random.Random(1), time.perf_counter()
    with contextlib.closing(schema.connect(db)) as conn, schema.transaction(conn):
        for i, commit in enumerate(commits):
            recording.insert_run(conn, variant(doc, i, commit, rng))
    return time.perf_counter() - t


def median_s(fn: Callable[[int], object], repeats: int) -> float:
    times = []
    for i in range(repeats):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def weight(page: Path) -> int:
    """The page's bytes and those of every script and stylesheet it loads."""
    import re

    text = page.read_text(encoding="utf-8")
    refs = re.findall(r'<(?:script src|link rel="stylesheet" href)="([^"]+)"', text)
    return page.stat().st_size + sum((page.parent / r).stat().st_size for r in refs)


def bare(page: Path, out: Path) -> Path:
    """The same page without its scripts: what the HTML and CSS alone cost the browser."""
    import re

    text = re.sub(r"<script[^>]*>.*?</script>", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = text.replace('<body data-page="', '<body data-ready="1" data-page="')
    out.write_text(text, encoding="utf-8")
    return out


def browser(profile: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (*FLAGS, f"--user-data-dir={profile}", "--window-size=1400,1000"):
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver") or "chromedriver"))


def load_ms(driver: Any, page: Path) -> float:
    """Navigation start to the page's "drawn" mark (or, without scripts, its load event), in ms."""
    driver.get("about:blank")
    driver.get(page.resolve().as_uri())
    for _ in range(200):
        got = driver.execute_script(
            "const m = performance.getEntriesByName('specsuite-drawn');"
            "const n = performance.getEntriesByType('navigation')[0];"
            "return m.length ? m[0].startTime : (n && n.loadEventEnd ? n.loadEventEnd : null);"
        )
        if got:
            return float(got)
        time.sleep(0.02)
    raise RuntimeError(f"{page}: never drawn")


# One build of the site in a fresh process, with whichever specsuite PYTHONPATH gives (this checkout, or
# --before's); the change-point cache where that specsuite has one. Prints what it measured as JSON.
BUILD = """
import json, shutil, sys, time
from pathlib import Path
a = json.loads(sys.argv[1])
from specsuite.report import site
kw = {"last": a["last"]}
if "cache" in site.Sources.__dataclass_fields__:
    kw["cache"] = Path(a["cache"])
    if a["cold"]:
        kw["cache"].unlink(missing_ok=True)
if a["cold"]:
    shutil.rmtree(a["out"], ignore_errors=True)
src = site.Sources(Path(a["db"]), None, Path(a["mirror"]), **kw)
t = time.perf_counter()
b = site.build_site(src, Path(a["out"]))
took = time.perf_counter() - t
print(json.dumps({"s": took, "rendered": b.rendered, "cached": getattr(b, "series_cached", None),
                  "computed": getattr(b, "series_computed", None)}))
"""


def build(tree: Path, db: Path, mirror: Path, out: Path, last: int, cold: bool) -> dict[str, Any]:
    args = {"db": str(db.resolve()), "mirror": str(mirror.resolve()), "out": str(out.resolve()),
            "cache": str(out.parent.resolve() / "changes.json"), "last": last, "cold": cold}  # fmt: skip
    # bytecode written and reused, as an installed package has it (pip compiles at install): a process
    # that recompiled numpy and jinja's modules on every start would be timing the compiler
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree.resolve())
    # in the tree: `python -c` puts its working folder first on sys.path
    done = subprocess.run([sys.executable, "-c", BUILD, json.dumps(args)], env=env, cwd=tree, check=True,
                          capture_output=True, text=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10_000, help="runs in the history (10000)")
    ap.add_argument(
        "--last", type=int, default=1000, help="runs the site shows (1000, the command's default)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="site builds timed (3)")
    ap.add_argument("--loads", type=int, default=5, help="page loads timed per page (5)")
    ap.add_argument("--workdir", type=Path, help="where the temporary history goes (default: $TMPDIR)")
    ap.add_argument("--before", type=Path, metavar="TREE", help="another specsuite checkout to time alike")
    ap.add_argument("--skip-browser", action="store_true", help="no page loads in headless Chromium")
    args = ap.parse_args()
    doc = load_run(REAL)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)  # a new folder, as --workdir's help promises a place
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        commits = mirror(root / "mirror", args.runs + args.repeats)  # the nightly runs' commits too
        git_s = time.perf_counter() - t
        db = root / "history.sqlite"
        fill_s = fill(db, doc, commits[: args.runs])
        print(f"{len(commits)} commits in {git_s:.1f} s; {args.runs} runs x {len(doc.cases)} cases recorded "
              f"in {fill_s:.1f} s; {db.stat().st_size >> 20} MiB")  # fmt: skip
        plain_s = plain(args, db)
        rows = [[f"`history --last {args.last}`: the same runs as text tables", f"{plain_s:.2f} s", "", ""]]
        trees = [("before", args.before)] if args.before else []
        for label, tree in [*trees, ("this checkout", paths.REPO_ROOT)]:
            rows += builds(args, doc, tree, label, root, commits[args.runs :], plain_s)
        if not args.skip_browser:
            rows += loads(args, root / "this checkout" / "site")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"\nmedians: {args.repeats} builds of each kind, {args.loads} loads per page\n")
    print(table.render(["what", "median", "beside", "goal"], rows, markdown=True))
    return 0


def builds(
    args: argparse.Namespace, doc: Run, tree: Path, label: str, root: Path, nightly: list[str], plain_s: float
) -> list[list[str]]:
    """The site cold (a new folder, no cache), then after each of ``nightly`` commits' runs, built by the
    specsuite in ``tree`` over its own copy of the history."""
    folder = root / label
    folder.mkdir()
    db = folder / "history.sqlite"
    shutil.copyfile(root / "history.sqlite", db)
    out = folder / "site"
    colds = [build(tree, db, root / "mirror", out, args.last, cold=True) for _ in range(args.repeats)]
    assert colds[-1]["rendered"] == min(args.runs, args.last) and (out / "index.html").is_file()
    rng, nights = random.Random(3), []
    for i, commit in enumerate(nightly):  # a nightly run: one more run recorded, then the site again
        recording.record_run(variant(doc, args.runs + i, commit, rng), db)
        nights.append(build(tree, db, root / "mirror", out, args.last, cold=False))
        assert nights[-1]["rendered"] == 1
    ordered = "ancestry" if "in ancestry order" in (out / "index.html").read_text() else "time"
    what = f"{args.runs} runs stored, the last {args.last} x {len(doc.cases)} cases shown, {ordered} order"

    def series(b: dict[str, Any]) -> str:
        return (
            "" if b["computed"] is None else f"; {b['computed']} speed series computed, {b['cached']} cached"
        )

    cold_s, night_s = statistics.median(b["s"] for b in colds), statistics.median(b["s"] for b in nights)
    beside = f"x `history --last {args.last}`"
    return [
        [f"`specsuite report` ({label}), cold: {what}{series(colds[-1])}", f"{cold_s:.2f} s",
         f"{cold_s / plain_s:.2f} {beside}", "< 5 s"],
        [f"`specsuite report` ({label}), nightly: one run more than the site has{series(nights[-1])}",
         f"{night_s:.2f} s", f"{night_s / plain_s:.2f} {beside}", "< 5 s"],
    ]  # fmt: skip


def plain(args: argparse.Namespace, db: Path) -> float:
    """The plain tool over the same runs: ``history --last N``'s text tables (median seconds)."""
    kw = {"path": db, "case": None, "device": None, "last": args.last, "plot": None, "as_json": False}
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        return median_s(lambda _: history_command(**kw), args.repeats)


def loads(args: argparse.Namespace, out: Path) -> list[list[str]]:
    """The index, a case page and a run page in headless Chromium, beside their HTML alone."""
    group = next((out / "cases").iterdir()).name
    pages = {
        "index": out / "index.html",
        f"case page, {args.last} runs": out / "cases" / group / f"{CASE}.html",
        "run page, 26 cases": out / "runs" / f"bench-{args.runs - 1:06d}.html",
    }
    rows = []
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(Path(profile))
        try:
            for label, page in pages.items():
                stripped = bare(page, page.with_name(f"bare-{page.name}"))
                load_ms(driver, page), load_ms(driver, stripped)  # untimed: the first load reads the disk
                full = statistics.median(load_ms(driver, page) for _ in range(args.loads))
                plain_ms = statistics.median(load_ms(driver, stripped) for _ in range(args.loads))
                mb = weight(page) / 1e6
                rows.append([f"load in headless Chromium: {label} ({mb:.2f} MB with its scripts and styles)",
                             f"{full:.0f} ms", f"{full / plain_ms:.2f} x the HTML alone ({plain_ms:.0f} ms)",
                             "< 1 s; < 2 MB"])  # fmt: skip
        finally:
            driver.quit()
    return rows


if __name__ == "__main__":
    sys.exit(main())
