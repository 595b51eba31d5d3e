"""``lock-models``: fill or refresh size and sha256 of every hf entry from the Hub at its pinned revision.

One ``paths-info`` call per (repo, revision) answers for all its files (lfs.size, lfs.oid). Commits are
immutable, so drift means the lock was edited by hand, the repository was rewritten, or HF_ENDPOINT points
at another server: ``--check`` reports it and writes nothing.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

from specsuite.common.argtypes import CommandParser
from specsuite.common.errors import UserError
from specsuite.models import hub
from specsuite.models.http import Policy
from specsuite.models.lock import OPTION_HELP, HfEntry, load_lock, set_locked, write_lock


def _describe(e: HfEntry, size: int, sha: str) -> str:
    if not e.locked:
        return f"{e.name}: not locked -> {size} bytes, sha256 {sha}"
    return f"{e.name}: {e.size} bytes, sha256 {e.sha256} -> {size} bytes, sha256 {sha}"


def parser() -> CommandParser:
    p = CommandParser(
        "lock-models", "Fill size and sha256 of every Hub entry from the Hub at its pinned revision."
    )
    p.add_argument("--lock", help=OPTION_HELP)
    p.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the lock differs from the Hub"
    )
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    lock_models(lock=a.lock, check=a.check)
    return 0


def lock_models(
    *, lock: str | os.PathLike[str] | None = None, check: bool = False, policy: Policy | None = None
) -> int:
    """Lock every hf entry; returns the number of entries that changed (or would, with ``check``).

    Requests follow the fetcher's retry policy (``policy``, default from the SPEC_FETCH_* variables)."""
    lk = load_lock(lock)
    policy = policy or Policy.from_env()
    groups: dict[tuple[str, str, str], list[HfEntry]] = defaultdict(list)
    for e in lk.entries.values():
        if isinstance(e, HfEntry):  # hf-dataset entries too: another kind of repository, the same lock
            groups[(e.repo, e.revision, e.repo_type)].append(e)
    drift: list[tuple[HfEntry, int, str]] = []
    with hub.session() as sess:
        for (repo, revision, kind), entries in groups.items():
            wanted = [e.path for e in entries]
            metas = hub.paths_info(sess, repo, revision, wanted, kind, policy=policy)
            for e in entries:
                meta = metas[e.path]
                if (e.size, e.sha256) != (meta.size, meta.sha256):
                    drift.append((e, meta.size, meta.sha256))
    for e, size, sha in drift:
        print(_describe(e, size, sha))
    if check:
        if drift:
            raise UserError(
                f"{lk.path} differs from the Hub for {len(drift)} entr{'y' if len(drift) == 1 else 'ies'} "
                "(listed above); run `specsuite lock-models` and review the change",
                code=1,
            )
        print(f"{lk.path}: all {sum(map(len, groups.values()))} hf entries match the Hub")
        return 0
    for e, size, sha in drift:
        set_locked(lk, e.name, size, sha)
    if drift:
        write_lock(lk)
    print(f"{lk.path}: {len(drift)} entr{'y' if len(drift) == 1 else 'ies'} updated", file=sys.stderr)
    return len(drift)
