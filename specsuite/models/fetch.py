"""``fetch-models`` and ``verify-models``: bring the files a tier needs into the model folder, verified.

Which files a tier needs comes from the cases (``Case.models``), never from a second list. A run is
pooch's shape: a look at each selected entry and a decision (``models.decide``: cached, verify, from a
shared cache, fetch, generate, assemble, or refuse), which refuses the whole run before anything starts
when ``--frozen`` or ``--offline`` forbid what it would take and sizes the free-space check; then
``models.act`` settles each file not cached, under its own lock. Every file returned has a fresh stamp
with its sha256 (``store.locate`` reads them back cheaply). When one file fails, or on Ctrl-C, the others
stop within about a second, keeping their partial files.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from specsuite.cases.schema import TIERS, load_cases, select_cases, suggest
from specsuite.common import paths, settings
from specsuite.common.argtypes import CommandParser, comma_list, positive_int
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.common.table import render
from specsuite.models import hfcache, stamps, store
from specsuite.models.act import Ctx, FileOutcome, ensure
from specsuite.models.decide import Action, Do, Refusal, decide, look, undo
from specsuite.models.http import Policy
from specsuite.models.hub import endpoint
from specsuite.models.lock import OPTION_HELP, Entry, HfEntry, Lock, load_lock
from specsuite.models.progress import Board, human_size
from specsuite.models.store import Cancelled

DEFAULT_TIER = "smoke"
_CANCELLED = "cancelled"


def _count(value: int | str, flag: str, what: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise UserError(f"{flag} {value!r}: give a whole number of {what}, 1 or more")
    return int(text)


@dataclass(frozen=True)
class FetchOptions:
    """What ``fetch_models`` fetches, where from and how; checked as it is built (UserError, one line).

    The selection is a tier, case names (``methods``) and/or lock names; smoke if none is given. ``offline``
    (or HF_HUB_OFFLINE=1) makes no request at all; ``frozen`` refuses entries not locked yet; ``jobs``
    files are fetched at once and ``connections`` (default SPEC_FETCH_CONNECTIONS, else 8) ranges of a
    large file, each also taken as text from a command line ("4"); ``hf_cache`` (default SPEC_HF_CACHE)
    also puts every Hub file into the hub cache's layout; ``tty`` None asks the terminal."""

    tier: str | None = None
    methods: Sequence[str] | None = None
    models: Sequence[str] | None = None
    lock: str | os.PathLike[str] | None = None
    model_dir: str | os.PathLike[str] | None = None
    cases: str | os.PathLike[str] | None = None
    jobs: int = 4
    connections: int | None = None
    offline: bool = False
    frozen: bool = False
    hf_cache: bool | None = None
    policy: Policy | None = None  # None: Policy.from_env() when the fetch starts
    tty: bool | None = None
    lock_timeout: float = 6 * 3600

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", _count(self.jobs, "--jobs", "files to fetch in parallel"))
        if self.connections is not None:
            conns = _count(self.connections, "--connections", "connections per file")
            object.__setattr__(self, "connections", conns)

    def fetch_policy(self) -> Policy:
        policy = self.policy or Policy.from_env()
        return (
            policy if self.connections is None else dataclasses.replace(policy, connections=self.connections)
        )

    def offline_reason(self) -> str | None:
        """What forbids the network ("--offline", "HF_HUB_OFFLINE=1"), or None."""
        if self.offline:
            return "--offline"
        return f"HF_HUB_OFFLINE={os.environ['HF_HUB_OFFLINE']}" if hfcache.offline() else None


# ---------------------------------------------------------------- selection


def _cases_models(
    lock: Lock, tier: str | None, methods: Sequence[str] | None, cases_path: Path | None
) -> list[str]:
    if tier and tier not in TIERS:
        raise UserError(f"unknown tier {tier!r}; valid tiers: {', '.join(TIERS)}")
    cases = load_cases(cases_path or paths.CASES_FILE, lock_names=lock.names())
    chosen = select_cases(cases, tier) if tier else cases
    if methods:
        valid = {c.name for c in cases}
        unknown = [m for m in methods if m not in valid]
        if unknown:  # the nearest case to the first (a typo), else the cases (schema.suggest)
            raise UserError(f"unknown method(s) {', '.join(unknown)}{suggest(unknown[0], sorted(valid))}")
        chosen = [c for c in chosen if c.name in methods]
    return [name for c in chosen for name in c.models]


def select_entries(
    lock: Lock,
    tier: str | None = None,
    methods: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
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


# ---------------------------------------------------------------- the plan


Plan = list[tuple[Entry, Action]]


def _plan(entries: list[Entry], folder: Path, opts: FetchOptions, offline: str | None) -> Plan:
    """Each entry's first decision, from a look at the disk (stats and stamps: nothing read or asked)."""
    return [(e, decide(e, look(e, folder / e.name), offline=offline, frozen=opts.frozen)) for e in entries]


def _refuse_up_front(plan: Plan, lock: Lock, folder: Path, offline: str | None) -> None:
    """One message for what the options forbid, naming every entry it concerns, before anything starts."""
    frozen = [e.name for e, a in plan if a.refusal is Refusal.FROZEN]
    if frozen:
        raise UserError(
            f"--frozen: not locked yet in {lock.path}: {', '.join(frozen)}; run `specsuite lock-models`"
        )
    missing = [e.name for e, a in plan if a.refusal is Refusal.OFFLINE]
    if offline and missing:
        where = " nor in " + " nor in ".join(str(p) for _, p in hfcache.caches())
        raise UserError(
            f"{offline}: not in {folder}{where}: {', '.join(missing)}; {undo(offline)} to fetch them"
        )


def _missing_bytes(plan: Plan, folder: Path) -> int:
    """Bytes still to write: neither in the folder, nor in a partial, nor linkable from a shared cache."""
    total, dev = 0, folder.stat().st_dev
    for e, a in plan:
        if e.size is None or a.do not in (Do.SHARED, Do.FETCH, Do.GENERATE, Do.ASSEMBLE):
            continue
        if any(c.dev == dev for c in a.candidates):
            continue
        part = store.regular_or_absent(store.part_path(folder / e.name))
        held = min(part.st_blocks * 512, part.st_size) if part is not None else 0  # a parallel one is sparse
        total += e.size - (held if held <= e.size else 0)
    return total


# ---------------------------------------------------------------- many files


def _summary(outcomes: list[FileOutcome], failures: dict[str, str]) -> str:
    rows = [
        [o.entry.name, human_size(o.size), o.entry.source, o.status, f"{o.seconds:.1f} s"] for o in outcomes
    ]
    rows += [
        [name, "-", "-", "CANCELLED" if msg == _CANCELLED else "FAILED", "-"]
        for name, msg in failures.items()
    ]
    return render(("file", "size", "source", "status", "time"), rows)


def _run_all(plan: Plan, ctx: Ctx, jobs: int) -> tuple[list[FileOutcome], dict[str, str]]:
    outcomes: dict[str, FileOutcome] = {}
    failures: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(ensure, e, a, ctx): e for e, a in plan}
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
    order = [e.name for e, _ in plan]
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
    fetch_models(FetchOptions(
        tier=a.tier, methods=a.methods, models=a.models, lock=a.lock, model_dir=a.model_dir, jobs=a.jobs,
        offline=a.offline, frozen=a.frozen, connections=a.connections, hf_cache=a.hf_cache,
    ))  # fmt: skip
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


def fetch_models(opts: FetchOptions) -> dict[str, Path]:
    """Fetch and verify the selected models; returns their paths by lock name. UserError on any failure.

    A file missing from the model folder comes from the Hugging Face cache or LLAMA_CACHE when one of them
    holds it (verified), else from its source. Every returned file has a fresh stamp holding its sha256
    (also for entries not locked yet): read it with ``store.locate``."""
    policy = opts.fetch_policy()
    hf_cache = settings.load().hf_cache if opts.hf_cache is None else opts.hf_cache
    offline = opts.offline_reason()
    lk = load_lock(opts.lock)
    entries = select_entries(
        lk, opts.tier, opts.methods, opts.models, Path(opts.cases) if opts.cases else None
    )
    if not offline and any(isinstance(e, HfEntry) for e in entries):
        endpoint()  # a malformed HF_ENDPOINT is one message before anything starts
    folder = store.ensure_folder(paths.model_dir(opts.model_dir))
    plan = _plan(entries, folder, opts, offline)
    _refuse_up_front(plan, lk, folder, offline)
    if not offline:
        store.check_space(folder, _missing_bytes(plan, folder) + policy.margin, "the selected models")
    board = Board(sum(e.size or 0 for e in entries), tty=opts.tty)
    ctx = Ctx(folder, offline, opts.frozen, policy, board, threading.Event(), opts.lock_timeout, hf_cache)
    try:
        outcomes, failures = _run_all(plan, ctx, opts.jobs)
    finally:
        board.close()
    print(_summary(outcomes, failures), flush=True)
    if failures:
        raise UserError(_failure_message(failures))
    unlocked = [e.name for e in entries if not e.locked]
    if unlocked:
        print(
            f"warning: {len(unlocked)} entr{'y is' if len(unlocked) == 1 else 'ies are'} not locked "
            f"in {lk.path} "
            f"and were checked against the Hub's own size and sha256: {', '.join(unlocked)}. "
            "Run `specsuite lock-models` with Hub access and commit the result.",
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
            + "\nrun `specsuite fetch-models` to replace them"
        )
