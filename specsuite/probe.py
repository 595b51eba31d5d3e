"""What a llama-server binary can run: spec types, flag spellings, commit and backend, from its ``--help``.

Upstream has renamed speculative types and flags more than once (``mtp`` -> ``draft-mtp``, ``--draft-max`` ->
``--spec-draft-n-max``, ``-ngld`` -> ``--spec-draft-ngl``) and keeps removed flags as stubs whose help says
"the argument has been removed". The suite builds every command line from this probe, so an old or new
binary is skipped with a reason (``binary_no_<method>``) instead of dying on an unknown flag.

The help layout is llama.cpp's ``common_arg::to_string`` (``common/arg.cpp``): an option starts in column 0,
its description starts in column 40 (on the same line when the names fit in 37 columns, else on the next).
No library parses that; the parser below is the smallest one that follows those two rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import atomic, paths
from .errors import UserError

SCHEMA = 1  # bump when the cached fields change; older cache files are then ignored
HELP_COLUMN = 40  # common_arg::to_string: n_leading_spaces
REMOVED_MARKER = "the argument has been removed"
_TIMEOUT_S = 60

# Canonical flag name -> spellings in order of preference (current first, legacy after).
FLAG_SPELLINGS: dict[str, tuple[str, ...]] = {
    "spec_type": ("--spec-type",),
    "draft_model": ("--spec-draft-model", "--model-draft", "-md"),
    "draft_n_max": ("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft"),
    "draft_n_min": ("--spec-draft-n-min", "--draft-min", "--draft-n-min"),
    "draft_p_min": ("--spec-draft-p-min", "--draft-p-min"),
    "draft_ngl": ("--spec-draft-ngl", "--n-gpu-layers-draft", "--gpu-layers-draft", "-ngld"),
    "synth_len": ("--spec-synth-len",),
    "synth_rates": ("--spec-synth-rates",),
    "fit": ("--fit", "-fit"),
    "metrics": ("--metrics",),
    "flash_attn": ("--flash-attn", "-fa"),
    "n_gpu_layers": ("--n-gpu-layers", "--gpu-layers", "-ngl"),
    "ctx_size": ("--ctx-size", "-c"),
    "parallel": ("--parallel", "-np"),
}

# Canonical spec type (pinned commit) -> older names of the same method.
LEGACY_TOKENS: dict[str, tuple[str, ...]] = {"draft-mtp": ("mtp",)}

# Spec types that need no support from the binary: "auto" passes no --spec-type, "none" is the baseline.
ALWAYS_AVAILABLE = frozenset({"auto", "none"})


def method_name(spec_type: str) -> str:
    """Short method name used in skip reasons: the ``draft-`` prefix dropped (``draft-dspark`` -> ``dspark``,
    ``draft-mtp`` -> ``mtp``), except ``draft-simple``, kept whole because ``simple`` alone would be
    ambiguous with ``ngram-simple``; every other type (``ngram-mod`` …) is its own name."""
    if spec_type.startswith("draft-") and spec_type != "draft-simple":
        return spec_type.removeprefix("draft-")
    return spec_type


def strict() -> bool:
    """``SPEC_STRICT=1`` (the workflow sets it for the pinned commit): a missing method fails, not skips."""
    return os.environ.get("SPEC_STRICT", "").strip().lower() in {"1", "true", "yes", "on"}


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

    def spec_token(self, spec_type: str) -> str | None:
        """The binary's own token for a canonical spec type (``draft-mtp`` -> ``draft-mtp`` or ``mtp``).

        ``auto`` and ``none`` come back unchanged (``auto`` means: pass no ``--spec-type``)."""
        if spec_type in ALWAYS_AVAILABLE:
            return spec_type
        for token in (spec_type, *LEGACY_TOKENS.get(spec_type, ())):
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

    def missing_reason(self, spec_type: str) -> str | None:
        """``binary_no_<method>`` when this binary cannot run the spec type, else None."""
        if self.spec_token(spec_type) is None or (
            spec_type not in ALWAYS_AVAILABLE and self.flag("spec_type") is None
        ):
            return f"binary_no_{method_name(spec_type)}"
        return None


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


def parse_commit(version_text: str) -> str | None:
    """Short hash: ``version: 0.5.0-dev (build 1, commit 0c1e570)``, older ``version: 4000 (0c1e570)``."""
    m = re.search(r"\bcommit ([0-9a-f]{6,40})\b", version_text) or re.search(
        r"version: \S+ \(([0-9a-f]{6,40})\)", version_text
    )
    return m.group(1) if m else None


_DEVICE_RE = re.compile(r"^\s+(([A-Za-z]+)\d*: .*)$", re.MULTILINE)
_BACKENDS = ("cuda", "rocm", "vulkan", "metal", "sycl")


def parse_devices(list_devices_out: str) -> tuple[str | None, tuple[str, ...]]:
    """(backend, device lines) from ``--list-devices`` output (stdout and stderr together).

    A CUDA build on a machine without a GPU lists no device but logs ``ggml_cuda_init: failed …``."""
    if "Available devices:" not in list_devices_out:
        return None, ()
    found = _DEVICE_RE.findall(list_devices_out.split("Available devices:", 1)[1])
    kinds = [kind.lower() for _, kind in found]
    kinds += [k for k in _BACKENDS if f"ggml_{k}_init" in list_devices_out.lower()]
    backend = next((k for k in kinds if k in _BACKENDS), "cpu")
    return backend, tuple(line.strip() for line, _ in found)


# --- running the binary ---------------------------------------------------------------------------------


def _run(binary: Path, arg: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}  # no hidden config
    try:
        proc = subprocess.run(
            [str(binary), arg],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_TIMEOUT_S,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"{binary} {arg} did not finish within {_TIMEOUT_S} s; is it a llama-server?"
        ) from None
    except OSError as exc:
        raise UserError(
            f"cannot run {binary}: {exc.strerror or exc}; rebuild it with `nox -s build`"
        ) from None
    return proc.returncode, proc.stdout, proc.stderr


def _probe_uncached(binary: Path) -> Capabilities:
    rc, out, err = _run(binary, "--help")
    if rc != 0 or "--help" not in out + err:
        tail = "\n".join((out + err).strip().splitlines()[-5:])
        raise UserError(f"{binary} --help failed (exit {rc}); is it a llama-server?\n{tail}")
    options, removed, types = parse_help(out if "--help" in out else err)
    _, vout, verr = _run(binary, "--version")
    version_text = (vout + verr).strip()
    backend, devices = None, ()
    if "--list-devices" in options:
        _, dout, derr = _run(binary, "--list-devices")
        backend, devices = parse_devices(dout + derr)
    return Capabilities(
        str(binary), version_text, parse_commit(version_text), types, options, removed, backend, devices
    )


# --- cache ---------------------------------------------------------------------------------------------


def _cache_key(binary: Path) -> dict[str, object]:
    st = binary.stat()
    return {"schema": SCHEMA, "path": str(binary), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _cache_file(key: dict[str, object]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return paths.cache_dir() / "probe" / f"{digest}.json"


def _to_json(caps: Capabilities) -> dict[str, object]:
    data = asdict(caps)
    for k, v in data.items():
        if isinstance(v, (frozenset, tuple)):
            data[k] = sorted(v) if isinstance(v, frozenset) else list(v)
    return data


def _from_json(data: dict) -> Capabilities:
    return Capabilities(
        binary=data["binary"],
        version_text=data["version_text"],
        commit=data["commit"],
        spec_types=frozenset(data["spec_types"]),
        options=frozenset(data["options"]),
        removed=frozenset(data["removed"]),
        backend=data["backend"],
        devices=tuple(data["devices"]),
    )


def _load_cached(file: Path, key: dict[str, object]) -> Capabilities | None:
    try:
        data = json.loads(file.read_text())
        return _from_json(data["caps"]) if data.get("key") == key else None
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, half-written by an old version, or corrupt: probe again


def _store(file: Path, key: dict[str, object], caps: Capabilities) -> None:
    atomic.write_json(file, {"key": key, "caps": _to_json(caps)}, indent=1)


def probe(binary: Path) -> Capabilities:
    """Capabilities of a llama-server, cached per (resolved path, size, mtime_ns) under cache_dir()/probe/."""
    binary = Path(binary).expanduser()
    if not binary.is_file():
        raise UserError(
            f"llama-server not found at {binary}; build it with `nox -s build` "
            "or point LLAMA_SERVER_BIN_PATH at one"
        )
    binary = binary.resolve()
    key = _cache_key(binary)
    file = _cache_file(key)
    caps = _load_cached(file, key)
    if caps is None:
        caps = _probe_uncached(binary)
        _store(file, key, caps)
    return caps


# --- table ---------------------------------------------------------------------------------------------


def case_missing_reason(caps: Capabilities, case: object) -> str | None:
    """Why this binary cannot run a case: its spec type or a flag it needs (``binary_no_synth_rates``)."""
    spec_type = getattr(case, "spec_type", "auto")
    if reason := caps.missing_reason(spec_type):
        return reason
    needs = {
        "draft_model": getattr(case, "draft", None),
        "draft_n_max": getattr(case, "n_max", None) if spec_type.startswith("draft-") else None,
        "draft_n_min": getattr(case, "n_min", None),
        "draft_p_min": getattr(case, "p_min", None),
        "synth_rates": getattr(case, "synth_rates", None),
        "synth_len": getattr(case, "synth_len", None),
    }
    for flag, value in needs.items():
        if value is not None and caps.flag(flag) is None:
            return f"binary_no_{flag}"
    return None


@dataclass(frozen=True)
class _Row:
    name: str
    spec_type: str


def canonical_type(token: str) -> str:
    """The pinned commit's name for a binary's own spec type token (``mtp`` -> ``draft-mtp``)."""
    return next((canon for canon, old in LEGACY_TOKENS.items() if token in old), token)


def _rows(caps: Capabilities, cases: Iterable[object] | None) -> list[tuple[str, ...]]:
    if cases is None:  # no cases.toml yet: one row per type the binary lists
        cases = [_Row(t, t) for t in sorted({canonical_type(t) for t in caps.spec_types} - {"none"})]
    rows = []
    for case in cases:
        spec_type = getattr(case, "spec_type", "auto")
        reason = case_missing_reason(caps, case)
        token = caps.spec_token(spec_type) or "-"
        name, tier = getattr(case, "name", spec_type), getattr(case, "tier", "-")
        rows.append((name, tier, spec_type, token, "no" if reason else "yes", reason or ""))
    return rows


def print_table(caps: Capabilities, cases: Iterable[object] | None) -> None:
    """Binary, commit and backend, then one row per case (or per spec type when ``cases`` is None)."""
    print(f"binary:  {caps.binary}")
    first = caps.version_text.splitlines()[0] if caps.version_text else "?"
    print(f"version: {first.removeprefix('version: ')}")
    print(f"commit:  {caps.commit or '?'}")
    print(f"backend: {caps.backend or '?'}" + (f" ({'; '.join(caps.devices)})" if caps.devices else ""))
    print(f"spec types: {', '.join(sorted(caps.spec_types)) or '(none: no --spec-type flag)'}")
    header = ("method", "tier", "spec type", "token", "runs", "why not")
    body = _rows(caps, cases)
    rows = [header, *body]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    if any(row[4] == "no" for row in body):
        print("methods marked 'no' are skipped with that reason; SPEC_STRICT=1 makes them fail")


def _suite_cases() -> list[object] | None:
    """The suite's cases, or None while cases.toml (or its parser) is not there yet."""
    if not paths.CASES_FILE.is_file():
        return None
    try:
        from .cases import load_cases  # lazy: the suite module is optional for a probe
    except ImportError:
        return None
    return load_cases()


def probe_command(binary: str | None = None) -> None:
    """``invoke probe`` / ``python -m specsuite probe [BINARY]``: print what the binary can run."""
    path = Path(binary) if binary else paths.server_binary()
    print_table(probe(path), _suite_cases())
