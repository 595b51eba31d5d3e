"""models.decide as a table: each state of an entry on disk, with the run's options, and the one action it
gets; then ``look`` on a real folder and a real Hugging Face cache layout. No network, nothing written by
the code under test."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from specsuite.common.errors import UserError
from specsuite.models import hfcache, stamps
from specsuite.models.decide import Action, Do, Refusal, Seen, decide, look, origin
from specsuite.models.hfcache import Candidate
from specsuite.models.lock import Entry, GeneratedEntry, HfDatasetEntry, HfEntry, PypiEntry

REV = "0123456789abcdef0123456789abcdef01234567"
SHA, OTHER = "a" * 64, "b" * 64
FINAL = Path("/models/m.gguf")
LOCKED = HfEntry(name="m.gguf", repo="org/repo", revision=REV, path="m.gguf", size=100, sha256=SHA)
UNLOCKED = HfEntry(name="m.gguf", repo="org/repo", revision=REV, path="m.gguf", locked=False)
DATASET = HfDatasetEntry(name="m.gguf", repo="org/repo", revision=REV, path="m.gguf", locked=False)
PYPI = PypiEntry(name="m.gguf", packages=("m-part1==1.0",), size=100, sha256=SHA)
GENERATED = GeneratedEntry(name="m.gguf", recipe="target-llama-fixed", size=100, sha256=SHA)
HUB = "hf:org/repo@" + REV + ":m.gguf"  # what a stamp says an unlocked entry's sha256 was checked against


def _cand(size: int = 100, sha: str | None = SHA, name: str = "blob") -> Candidate:
    return Candidate(Path("/hf") / name, "Hugging Face cache", sha, size, 1)


def _absent(expect: tuple[int, str] | None = (100, SHA), *shared: Candidate) -> Seen:
    return Seen(FINAL, None, expect=expect, shared=shared)


def _present(
    size: int = 100,
    stamp: str | None = None,
    origin: str | None = None,
    expect: tuple[int, str] | None = (100, SHA),
) -> Seen:
    return Seen(FINAL, size, stamp, origin, expect)


ASKED = (100, SHA)  # an unlocked entry once the Hub said what it is
OLD_REV = HUB.replace(REV, "f" * 40)
DATASET_HUB = f"hf:datasets/org/repo@{REV}:m.gguf"
OFF, ENV_OFF = "--offline", "HF_HUB_OFFLINE=1"
# fmt: off
TABLE = [  # (what, entry, seen, offline, frozen, action)
    # a file is there
    ("locked, fresh stamp of its sha256", LOCKED, _present(stamp=SHA), None, False, Do.CACHED),
    ("locked, fresh stamp, offline", LOCKED, _present(stamp=SHA), OFF, False, Do.CACHED),
    ("locked, no stamp", LOCKED, _present(), None, False, Do.VERIFY),
    ("locked, stamp of other bytes", LOCKED, _present(stamp=OTHER), None, False, Do.VERIFY),
    ("locked, wrong size, right stamp", LOCKED, _present(size=7, stamp=SHA), None, False, Do.VERIFY),
    ("locked, no stamp, offline: hashed", LOCKED, _present(), OFF, False, Do.VERIFY),
    ("generated, stamped", GENERATED, _present(stamp=SHA), None, False, Do.CACHED),
    ("pypi, not stamped", PYPI, _present(), None, False, Do.VERIFY),
    ("unlocked, vouched by the Hub", UNLOCKED, _present(stamp=SHA, origin=HUB, expect=None), None, False,
     Do.CACHED),
    ("unlocked, an older fetcher's stamp", UNLOCKED, _present(stamp=SHA, expect=None), None, False, Do.ASK),
    ("unlocked, vouched at another revision", UNLOCKED, _present(stamp=SHA, origin=OLD_REV, expect=None),
     None, False, Do.ASK),
    ("unlocked, the Hub asked", UNLOCKED, _present(stamp=SHA, expect=ASKED), None, False, Do.VERIFY),
    ("unlocked, offline, stamped", UNLOCKED, _present(stamp=SHA, expect=None), ENV_OFF, False, Do.CACHED),
    ("unlocked, offline, no stamp", UNLOCKED, _present(expect=None), OFF, False, Do.REFUSE),
    ("dataset, vouched", DATASET, _present(stamp=SHA, origin=DATASET_HUB, expect=None), None, False,
     Do.CACHED),
    ("dataset, a model's origin", DATASET, _present(stamp=SHA, origin=HUB, expect=None), None, False, Do.ASK),
    # no file
    ("locked, nowhere", LOCKED, _absent(), None, False, Do.FETCH),
    ("locked, in a shared cache", LOCKED, _absent(ASKED, _cand()), None, False, Do.SHARED),
    ("locked, shared of another size", LOCKED, _absent(ASKED, _cand(size=5)), None, False, Do.FETCH),
    ("locked, shared, offline", LOCKED, _absent(ASKED, _cand()), OFF, False, Do.SHARED),
    ("locked, nowhere, offline", LOCKED, _absent(), OFF, False, Do.REFUSE),
    ("locked, shared of another size, offline", LOCKED, _absent(ASKED, _cand(size=5)), OFF, False, Do.REFUSE),
    ("unlocked, the Hub not asked yet", UNLOCKED, _absent(None, _cand()), None, False, Do.ASK),
    ("unlocked, the Hub asked, shared", UNLOCKED, _absent(ASKED, _cand()), None, False, Do.SHARED),
    ("unlocked, the Hub asked, nowhere", UNLOCKED, _absent(ASKED), None, False, Do.FETCH),
    ("unlocked, offline, a snapshot's blob", UNLOCKED, _absent(None, _cand()), OFF, False, Do.SHARED),
    ("unlocked, offline, no blob", UNLOCKED, _absent(None, _cand(sha=None)), OFF, False, Do.REFUSE),
    ("pypi, nowhere", PYPI, _absent(), None, False, Do.ASSEMBLE),
    ("pypi, offline", PYPI, _absent(), OFF, False, Do.REFUSE),
    ("generated, nowhere", GENERATED, _absent(), None, False, Do.GENERATE),
    ("generated, offline", GENERATED, _absent(), ENV_OFF, False, Do.REFUSE),
    # --frozen
    ("frozen, unlocked, absent", UNLOCKED, _absent(None), None, True, Do.REFUSE),
    ("frozen, unlocked, vouched", UNLOCKED, _present(stamp=SHA, origin=HUB, expect=None), None, True,
     Do.REFUSE),
    ("frozen, locked", LOCKED, _absent(), None, True, Do.FETCH),
    ("frozen, locked, cached, offline", LOCKED, _present(stamp=SHA), OFF, True, Do.CACHED),
]
# fmt: on


@pytest.mark.parametrize(
    ("entry", "seen", "offline", "frozen", "do"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_each_state_gets_its_action(
    entry: Entry, seen: Seen, offline: str | None, frozen: bool, do: Do
) -> None:
    got = decide(entry, seen, offline=offline, frozen=frozen)
    assert got.do is do
    assert (got.refusal is not None) == (do is Do.REFUSE) and bool(got.why) == (do is Do.REFUSE)


@pytest.mark.parametrize(
    ("entry", "seen", "offline", "frozen", "refusal", "why"),
    [
        (UNLOCKED, _absent(None), None, True, Refusal.FROZEN,
         "--frozen: m.gguf is not locked yet; run `specsuite lock-models`"),
        (LOCKED, _absent(), "--offline", False, Refusal.OFFLINE,
         "m.gguf is not in /models nor in a shared cache and --offline forbids fetching it; "
         "rerun without --offline"),
        (GENERATED, _absent(), "HF_HUB_OFFLINE=1", False, Refusal.OFFLINE,
         "m.gguf is not in /models and HF_HUB_OFFLINE=1 forbids fetching it; unset HF_HUB_OFFLINE"),
        (UNLOCKED, _present(expect=None), "--offline", False, Refusal.UNCHECKED,
         "/models/m.gguf does not match the lock (not locked and no stamp of an earlier verified fetch); "
         "rerun without --offline to replace it"),
    ],
)  # fmt: skip
def test_a_refusal_says_why_and_what_to_do(
    entry: Entry, seen: Seen, offline: str | None, frozen: bool, refusal: Refusal, why: str
) -> None:
    assert decide(entry, seen, offline=offline, frozen=frozen) == Action(Do.REFUSE, refusal=refusal, why=why)


def test_shared_files_of_another_size_are_passed_over_with_a_note() -> None:
    small, right, other = _cand(size=5, name="small"), _cand(name="right"), _cand(name="other")
    got = decide(LOCKED, _absent((100, SHA), small, right, other), offline=None, frozen=False)
    assert got.do is Do.SHARED and got.candidates == (right, other) and got.expect == (100, SHA)
    assert got.notes == ("m.gguf: ignoring /hf/small (Hugging Face cache): 5 bytes, not 100",)
    fetch = decide(LOCKED, _absent((100, SHA), small), offline=None, frozen=False)
    assert fetch == Action(Do.FETCH, notes=got.notes)  # the note is said before the download too


def test_offline_and_unlocked_only_a_blob_can_say_what_it_is() -> None:
    blob, plain = _cand(sha=OTHER, size=9), _cand(sha=None, name="plain")
    got = decide(UNLOCKED, _absent(None, plain, blob), offline="--offline", frozen=False)
    assert got == Action(Do.SHARED, expect=None, candidates=(blob,))


def test_a_file_to_verify_carries_what_it_must_be() -> None:
    assert decide(LOCKED, _present(), offline=None, frozen=False) == Action(Do.VERIFY, expect=(100, SHA))
    asked = decide(UNLOCKED, _present(expect=(7, OTHER)), offline=None, frozen=False)
    assert asked == Action(Do.VERIFY, expect=(7, OTHER))


def test_origin_names_the_file_at_its_revision() -> None:
    assert origin(LOCKED) == HUB
    assert origin(DATASET) == f"hf:datasets/org/repo@{REV}:m.gguf"
    assert origin(PYPI) is None and origin(GENERATED) is None


# ---------------------------------------------------------------- look, on disk


DATA = b"model bytes" * 100
DATA_SHA = hashlib.sha256(DATA).hexdigest()


def _entry(locked: bool = True) -> HfEntry:
    if not locked:
        return HfEntry(name="m.gguf", repo="org/repo", revision=REV, path="sub/m.gguf", locked=False)
    return HfEntry(name="m.gguf", repo="org/repo", revision=REV, path="sub/m.gguf", size=len(DATA),
                   sha256=DATA_SHA)  # fmt: skip


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache holding the entry as huggingface_hub lays it out: blob and snapshot link."""
    root = tmp_path / "hf"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.delenv("LLAMA_CACHE", raising=False)
    own = root / hfcache.repo_folder("org/repo")
    (own / "blobs").mkdir(parents=True)
    (own / "blobs" / DATA_SHA).write_bytes(DATA)
    snap = own / "snapshots" / REV / "sub" / "m.gguf"
    snap.parent.mkdir(parents=True)
    snap.symlink_to(os.path.relpath(own / "blobs" / DATA_SHA, snap.parent))
    return own / "blobs" / DATA_SHA


def test_look_at_a_missing_file_finds_the_shared_copies(tmp_path: Path, hub_cache: Path) -> None:
    final = tmp_path / "m.gguf"
    seen = look(_entry(), final)
    assert (seen.size, seen.stamp, seen.expect) == (None, None, (len(DATA), DATA_SHA))
    assert [(c.path, c.sha256, c.size) for c in seen.shared] == [(hub_cache, DATA_SHA, len(DATA))]
    assert look(_entry(), final, skip={hub_cache}).shared == ()  # tried once: not again
    assert decide(_entry(), seen, offline=None, frozen=False).do is Do.SHARED
    assert list(tmp_path.iterdir()) == [tmp_path / "hf"]  # looking wrote nothing


def test_look_at_an_unlocked_entry_before_and_after_the_hub_was_asked(
    tmp_path: Path, hub_cache: Path
) -> None:
    entry, final = _entry(locked=False), tmp_path / "m.gguf"
    before = look(entry, final)
    assert before.expect is None and [c.sha256 for c in before.shared] == [DATA_SHA]  # the snapshot's blob
    assert look(entry, final, (len(DATA), DATA_SHA)).expect == (len(DATA), DATA_SHA)


def test_look_at_a_present_file_reads_its_stamp_and_no_cache(tmp_path: Path, hub_cache: Path) -> None:
    final = tmp_path / "m.gguf"
    final.write_bytes(DATA)
    assert look(_entry(), final) == Seen(final, len(DATA), None, None, (len(DATA), DATA_SHA))
    stamps.write_stamp(final, DATA_SHA, origin(_entry()))
    seen = look(_entry(locked=False), final)
    assert (seen.stamp, seen.origin, seen.shared) == (DATA_SHA, origin(_entry()), ())
    assert decide(_entry(locked=False), seen, offline=None, frozen=False).do is Do.CACHED
    final.write_bytes(DATA + b"!")  # changed since it was stamped: the stamp is stale
    assert look(_entry(), final).stamp is None


def test_look_refuses_a_link_in_the_layout(tmp_path: Path) -> None:
    (tmp_path / ".m.gguf.stamp").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UserError, match=r"\.m\.gguf\.stamp is a symbolic link"):
        look(_entry(), tmp_path / "m.gguf")
