"""results/<run-id>/results.json: one run, typed (``Run``), written by ``RunResults``, read by ``load_run``.

``RunResults`` holds the run and its ``CaseRecord``s from the first case on and rewrites results.json
atomically after every case (so an interrupted run still leaves a valid file with the cases it finished).
Readers (compare, calibrate, plot, bisect, the history, the summary) get the same typed ``Run`` back from
``load_run``: schema 1 and 2 documents alike, unknown keys dropped, a value of the wrong shape one error
naming the file and the field.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import socket
import stat
import time
from pathlib import Path
from typing import Any

import msgspec

from specsuite.common import atomic, declared, paths
from specsuite.common.errors import UserError
from specsuite.llamacpp.identity import Identity
from specsuite.results.config import RunConfig
from specsuite.results.names import names_phrase
from specsuite.results.record import CaseRecord, decode_record

SCHEMA = 2
KNOWN_SCHEMAS = (1, 2)
_MAX_RESULTS_BYTES = 64 << 20
# A run id names a results folder and a page of the site: a plain file name, as the suite makes them
# (``<UTC time>-<selector>``, ``-<random>`` when that was taken): no path, no control character, bounded.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def run_id_problem(run_id: str) -> str | None:
    """Why ``run_id`` is not a run id the suite would make (None: it is one)."""
    if not run_id:
        return "no run_id: a run is entered once by its id, and this one has none"
    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        shown = run_id if len(run_id) <= 60 else f"{run_id[:60]}... ({len(run_id)} characters)"
        return (
            f"run_id {shown!r} is not a plain name (letters, digits, '.', '_', '-', no '..', at most 128 "
            "characters, as the suite names its runs)"
        )
    return None


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def new_run_id(selector: str) -> str:
    return f"{_stamp()}-{re.sub(r'[^a-z0-9_-]+', '_', selector.lower()).strip('_') or 'run'}"


_STAMPED = re.compile(r"\d{8}T\d{6}Z-")


def run_id_for(folder: Path) -> str:
    """The id of a run that writes into ``folder``: its name when the suite named it (``claim_results_dir``:
    unique by its mkdir), else the time and the name: a folder the user gives (SPEC_RESULTS_DIR), perhaps
    to every run, must not give every run one id (a history holds one run per id). Always a plain name."""
    name = folder.name
    if _STAMPED.match(name) and run_id_problem(name) is None:
        return name
    plain = re.sub(r"[^A-Za-z0-9._-]+", "_", name).replace("..", "_").strip("._-")[:100]
    return f"{_stamp()}-{plain or 'run'}"


def claim_results_dir(selector: str, fix: str = "set SPEC_RESULTS_DIR to a writable folder") -> Path:
    """A new results folder ``results/<run-id>`` that is this run's alone: its name (the run id) is made
    with ``mkdir`` without ``exist_ok``, which one process wins, so two runs started in the same second
    never share a folder or an id; the one that lost takes the name with a random part added."""
    try:
        paths.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {paths.RESULTS_DIR}: {exc.strerror or exc}; {fix}") from None
    base = new_run_id(selector)
    for attempt in range(100):
        folder = paths.RESULTS_DIR / (base if attempt == 0 else f"{base}-{secrets.token_hex(3)}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise UserError(
                f"cannot create the results folder {folder}: {exc.strerror or exc}; {fix}"
            ) from None
        return folder
    raise UserError(f"cannot claim a results folder {base}-* in {paths.RESULTS_DIR}: 100 names taken; {fix}")


def check_results_dir(folder: Path, fix: str, other: str) -> None:
    """Whether ``folder`` can be made and written (a UserError ending in ``fix`` if not) and, reused, holds
    no link (``other``: the alternative to removing it), creating nothing: a command refused later (bad
    input found after this check) leaves no empty folder behind."""
    folder = Path(folder).absolute()
    existing = next(p for p in (folder, *folder.parents) if os.path.lexists(p))
    if not existing.is_dir():
        raise UserError(f"cannot create the results folder {folder}: {existing} is not a folder; {fix}")
    if not os.access(existing, os.W_OK | os.X_OK):
        verb = "write into" if existing == folder else "create"
        raise UserError(f"cannot {verb} the results folder {folder}: permission denied; {fix}")
    if existing == folder:
        refuse_links(folder, other)


def make_results_dir(folder: Path, fix: str = "set SPEC_RESULTS_DIR to a writable folder") -> None:
    """Create a results folder (and its parents); one UserError, ending in ``fix``, when that is impossible
    or when the folder (an existing one, reused) cannot be written."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the results folder {folder}: {exc.strerror or exc}; {fix}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"cannot write into the results folder {folder}: permission denied; {fix}")
    refuse_links(folder)


def refuse_links(folder: Path, other: str = "or set SPEC_RESULTS_DIR to a new folder") -> None:
    """A reused results folder may hold no link: junit.xml (pytest's), the server logs and the folders
    above them are opened by path, and a planted link would have them write outside the folder."""
    if (found := atomic.first_link(folder)) is not None:
        link, kind = found
        raise UserError(
            f"the results folder {folder} holds a link: {link} ({kind}), and a run writes only files of "
            f"its own there; remove it {other}"
        )


class Harness(msgspec.Struct, kw_only=True):
    commit: str | None = None
    dirty: bool | None = None
    version: str | None = None


class BinarySource(msgspec.Struct, kw_only=True):
    kind: str | None = None  # "pinned-sdist", "dir", "ref", "pypi-build"
    mirror: str | None = None  # the git checkout whose ancestry orders commits
    # a PyPI build (kind pypi-build): the sdist it came from, the sha256 the index stated and the bytes had
    requirement: str | None = None
    sdist_sha256: str | None = None
    index: str | None = None
    origin: str | None = None  # where the identity came from: git, LLAMA_CPP_BUILD, the sdist, --version


class Binary(msgspec.Struct, kw_only=True):
    path: str | None = None
    sha256: str | None = None
    commit: str | None = None  # the llama.cpp commit, when anything names it
    build: int | None = None  # upstream's build number (bN), when anything names it
    tree_sha256: str | None = None  # the content hash of the tree it was built from, when no commit is known
    backend: str | None = None
    version_text: str | None = None
    source: BinarySource = msgspec.field(default_factory=BinarySource)

    @property
    def key(self) -> str | None:
        """What the history and every reader call this binary: the commit, else ``b<N>``, else the tree's
        content hash (``llamacpp.identity``)."""
        return Identity(self.commit, self.build, self.tree_sha256).key


class Device(msgspec.Struct, kw_only=True):
    name: str | None = None
    device_class: str | None = msgspec.field(default=None, name="class")
    driver: str | None = None
    cuda: str | None = None


class RunOptions(msgspec.Struct, kw_only=True):
    """How the run judged its cases (common.settings.Settings.run_options)."""

    strict: bool = True
    repeat: int | None = None  # --repeat / SPEC_REPEAT; None: each tier's own (cases.schema.TIER_REPEAT)
    allow_cpu: bool = False
    history: bool = True
    rtol: float = 0.05
    block_rtol: float = 0.2
    drift_window: int = 10
    speed: bool = True  # False: cases ran side by side on a CPU build (--workers): acceptance only


class ModelRef(msgspec.Struct, kw_only=True):
    sha256: str | None = None
    size: int | None = None


class ServerRef(msgspec.Struct, kw_only=True):
    command: list[str] = []
    log: str | None = None


class HistoryNote(msgspec.Struct, kw_only=True):
    """The history's part in a run: which baselines judged which cases, and whether the run was recorded.

    The parts (``basis``, ``used``, ``missing``, ``problem``) are kept as well as the ``line`` they make, so
    that the runs of several workers or shards merge into one note (``merged``)."""

    line: str | None = None  # the summary's history line (the baselines used)
    recorded: bool | None = None
    warning: str | None = None
    basis: str | None = None  # "nearest ancestor, <class>/<backend>, rtol 5%"
    used: dict[str, list[str]] = {}  # baseline "commit (run id)" -> the cases judged against it
    missing: list[str] = []  # cases with no baseline
    # why each has none (history.baseline.why_none: "only higher builds than b9113 measured it (b9246)")
    missing_why: dict[str, list[str]] = {}
    problem: str | None = None  # the history could not be read: no relative gate
    broken: list[str] = []  # "<case> at run <id>": a baseline candidate whose stored record was unreadable
    # the binary's configuration against the run before this one on its setup (history.previous_config):
    # "b9113 (run <id>)", and what differs (results.config.changes); named even where no case had a baseline
    config_base: str | None = None
    config_changes: list[str] = []
    # the upstream changes that touch what each red, fixed or moved case exercises (suspects.runlines)
    suspects: list[str] = []

    def render(self) -> str:
        if self.problem:
            return f"history unreadable, no relative gate: {self.problem}"
        total = sum(map(len, self.used.values())) + len(self.missing)  # the cases the gate judged
        parts = [f"{base} for {names_phrase(names, total)}" for base, names in self.used.items()]
        gaps = [f"{why} for {names_phrase(names, total)}" for why, names in self.missing_why.items()]
        if not self.used and len(self.missing_why) == 1:  # one reason for every case: no list of names
            gaps = list(self.missing_why)
        if self.missing and not self.missing_why:  # a note written before the reasons were kept
            gaps = [f"no usable earlier record for {names_phrase(self.missing, total)}"]
        if self.broken:
            parts.append(f"broken history record(s) skipped: {', '.join(self.broken)}")
        if not parts and not gaps:
            return f"baseline ({self.basis}): none yet: no case was judged"
        body = "; ".join(parts + gaps) if parts else f"none yet: {'; '.join(gaps)}"
        return f"baseline ({self.basis}): {body}"

    def merged(self, other: HistoryNote) -> HistoryNote:
        """This note and another part's of the same run: the baselines and gaps of both."""
        if self.basis is None or other.basis is None:  # a part without a gate: its line says why
            return self if self.basis is None else other
        note = HistoryNote(basis=self.basis, used=_joined(self.used, other.used),
                           missing=[*self.missing, *other.missing],
                           missing_why=_joined(self.missing_why, other.missing_why),
                           problem=self.problem or other.problem,
                           broken=[*self.broken, *other.broken], config_base=self.config_base,
                           config_changes=self.config_changes)  # fmt: skip
        note.line = note.render()
        return note


def _joined(a: dict[str, list[str]], b: dict[str, list[str]]) -> dict[str, list[str]]:
    """Two parts' cases by key (a baseline, a reason), ``a``'s first."""
    out = {k: list(v) for k, v in a.items()}
    for key, names in b.items():
        out.setdefault(key, []).extend(names)
    return out


class Run(msgspec.Struct, kw_only=True):
    """One run as results.json stores it (schema 2; schema 1 reads into the same shape)."""

    schema: int = SCHEMA
    run_id: str = ""
    tier: str | None = None
    selector: str | None = None
    started: str | None = None
    finished: str | None = None
    wall_s: float | None = None
    host: str | None = None
    verdict: str | None = None
    harness: Harness | None = None
    cases_sha256: str | None = None
    binary: Binary = msgspec.field(default_factory=Binary)
    config: RunConfig | None = None  # the binary's defaults and build options (results.config)
    device: Device | None = None
    gpu: Any = None  # schema 1: null, a name, a list of names, or {name}
    options: RunOptions | None = None
    models: dict[str, ModelRef] = {}
    baselines: dict[str, ServerRef] = {}
    history: HistoryNote | None = None  # absent when the run kept no history (--no-history)
    shard: str | None = None  # "K/N": shard K of a plan of N (run-tier --shard); `merge` joins them
    planned: list[str] = []  # every case of the run the shards or workers are parts of
    parts: list[str] = []  # a merged run: the run ids of its shards
    cases: dict[str, CaseRecord] = {}

    @property
    def device_name(self) -> str:
        """Schema 2's device.name; schema 1's 'gpu' (null, a name or a list), else cpu."""
        if self.device is not None and self.device.name:
            return self.device.name
        gpu = self.gpu[0] if isinstance(self.gpu, list) and self.gpu else self.gpu
        gpu = gpu.get("name") if isinstance(gpu, dict) else gpu
        return str(gpu) if gpu else "cpu"

    @property
    def device_class(self) -> str | None:
        return self.device.device_class if self.device is not None else None

    @property
    def run_options(self) -> RunOptions:
        return self.options or RunOptions()


class RunResults:
    """The run being measured, written to ``<dir>/results.json`` (``file``) on every change.

    A worker of a parallel run writes its part to ``<dir>/parts/<worker>.json`` instead, its logs to the
    run's own ``logs/``; ``timed=False`` keeps the run's times as they are (a merged run's are its parts')."""

    def __init__(
        self, results_dir: Path, run: Run, *, file: str = "results.json", timed: bool = True
    ) -> None:
        self.dir = Path(results_dir)
        self.logs = self.dir / "logs"
        make_results_dir(self.dir)
        self.file = file
        self.timed = timed
        make_results_dir(self.logs)
        self._t0 = time.monotonic()
        self.run = run
        run.run_id = run.run_id or run_id_for(self.dir)
        run.started = run.started or utc_now()
        run.host = run.host or socket.gethostname()

    @property
    def path(self) -> Path:
        return self.dir / self.file

    def rel(self, path: Path) -> str:
        return str(Path(path).relative_to(self.dir)) if Path(path).is_relative_to(self.dir) else str(path)

    def add_model(self, name: str, sha256: str, size: int) -> None:
        self.run.models[name] = ModelRef(sha256=sha256, size=size)

    def add_plain_server(self, key: str, command: list[str], log: str) -> None:
        """A speculation-off server of the run (results.json keeps them under ``baselines``: its name
        since schema 1)."""
        self.run.baselines[key] = ServerRef(command=command, log=log)
        self.save()

    def add_case(self, record: CaseRecord) -> None:
        self.run.cases[record.name] = record
        self.save()

    def save(self) -> None:
        if self.timed:
            self.run.finished = utc_now()
            self.run.wall_s = round(time.monotonic() - self._t0, 2)
        atomic.write_bytes(self.path, encode(self.run))


def encode(run: Run) -> bytes:
    """results.json's bytes: indented JSON, NaN and infinities as null (strict JSON has neither)."""
    return msgspec.json.format(msgspec.json.encode(run), indent=2) + b"\n"


# --- reading -------------------------------------------------------------------------------------------


def results_file(path: str | Path) -> Path:
    """A results/<run> folder or a results.json file -> the results.json path."""
    path = Path(path)
    return path / "results.json" if path.is_dir() else path


def _top_level(path: Any, data: Any) -> tuple[str, int]:
    return "", 0


def decode_run(data: Any, label: str) -> Run:
    """A results document (parsed JSON) as a ``Run``; one UserError naming ``label`` and the field."""
    if not isinstance(data, dict):
        raise UserError(f"{label}: not a specsuite results.json (not a JSON object)")
    cases = data.get("cases")
    if not isinstance(cases, dict) or not all(isinstance(c, dict) for c in cases.values()):
        raise UserError(f"{label}: not a specsuite results.json (no 'cases' table of case records)")
    header = {k: v for k, v in data.items() if k != "cases" and v is not None}
    run = declared.convert(header, Run, label, entry=_top_level)
    run.cases = {str(n): decode_record(str(n), c, label) for n, c in cases.items()}
    return run


def read_document(file: Path, limit: int | None = None) -> bytes:
    """A results document's bytes: a regular file only, at most ``limit`` bytes (64 MiB) read. A device
    (/dev/zero, whose size reads 0) or a FIFO (which blocks the open until a writer comes) is refused at
    once."""
    limit = _MAX_RESULTS_BYTES if limit is None else limit
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO's open returns, never blocks
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise UserError(
                f"{file}: not a regular file (a device, FIFO or socket); give a results.json file"
            )
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UserError(f"{file}: more than {limit} bytes is too big for a results.json")
    return data


def load_run(path: str | Path) -> Run:
    """Read one run's results.json; UserError naming the file when it is missing or not a suite result."""
    file = results_file(path)
    try:
        data = json.loads(read_document(file).decode("utf-8"))
    except FileNotFoundError:
        raise UserError(
            f"{path}: no results.json there (give a results/<run> folder or its results.json)"
        ) from None
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON and bad UTF-8 alike
        raise UserError(f"{file}: cannot read it as a JSON results file ({exc})") from None
    try:
        msgspec.json.encode(data)  # JSON may escape half a character (\ud800); no file can store that text
    except UnicodeEncodeError:
        raise UserError(
            f"{file}: holds text that is not Unicode (an unpaired \\ud800-\\udfff escape)"
        ) from None
    try:
        return decode_run(data, str(file))
    except UserError as exc:
        raise UserError(f"{exc}: not a results.json the suite wrote (give a results/<run> folder)") from None
