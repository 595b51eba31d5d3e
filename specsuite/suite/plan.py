"""``specsuite plan TIER --shards N [--json]``: a tier split into N shards for N runners, longest first.

The cases of one target are one group (its speculation-off baseline server starts once). A group's
expected duration is the sum of its cases' wall times in the history (each the median of its last runs
that ran to the end, on the device class asked for); a case never measured is estimated from the size of
its models, at the seconds per byte the measured cases took (``DEFAULT_S_PER_GIB`` where none is measured
yet). The groups are packed longest first, each onto the shard with the least expected time so far: LPT,
as SGLang's ``auto_partition`` packs its test files; its longest shard is at most 4/3 - 1/(3N) of the best
possible split (Graham, 1969). Written here because none of pytest-split (it splits by test, not by
group), xdist (it balances one machine's workers at run time) or the Actions matrix (it takes a list it is
given) makes the list; the runners, the workers and the merge are theirs.

``--json`` prints ``{"include": [...]}``, which a workflow's ``strategy.matrix`` takes as it is: one entry
per shard (and per device class with ``--runners``), each with its cases. ``run-tier --shard K/N --plan
FILE`` runs the entry of a saved plan, so that every runner runs the split the plan job made.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsuite.cases.schema import TIERS, Case, load_cases, select_cases
from specsuite.common import atomic, paths
from specsuite.common.argtypes import CommandParser
from specsuite.common.errors import UserError
from specsuite.history import queries
from specsuite.models.lock import load_lock

DEFAULT_S_PER_GIB = 25.0  # a first run on a GPU runner: load, warm-up and rounds of a 4B Q4 target (~60 s)
MIN_CASE_S = 5.0  # a server start and its requests take seconds whatever the model's size
_GIB = 1 << 30
_CLASS = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Group:
    """The cases of one target, in the tier's order, and their expected seconds."""

    target: str
    cases: tuple[str, ...]
    seconds: float
    estimated: int  # how many of its cases have no measured duration


@dataclass
class Shard:
    index: int  # 1-based
    count: int
    groups: list[Group] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def seconds(self) -> float:
        return sum(g.seconds for g in self.groups)

    @property
    def cases(self) -> list[str]:
        return [c for g in self.groups for c in g.cases]


@dataclass(frozen=True)
class Plan:
    tier: str
    device_class: str | None
    shards: list[Shard]
    asked: int  # the shard count asked for (more than the tier has targets: fewer shards)

    @property
    def total(self) -> float:
        return sum(s.seconds for s in self.shards)

    @property
    def ideal(self) -> float:
        return self.total / len(self.shards) if self.shards else 0.0

    @property
    def longest(self) -> float:
        return max((s.seconds for s in self.shards), default=0.0)

    @property
    def bound(self) -> float:
        """No split can be shorter than this: the ideal, or the longest group where that is longer."""
        return max([self.ideal, *(g.seconds for s in self.shards for g in s.groups)])

    def shard(self, index: int) -> Shard:
        return self.shards[index - 1]


def _model_bytes(cases: list[Case]) -> dict[str, int]:
    """Each case's models' size from models.lock (0 where the lock has none)."""
    entries = load_lock().entries if paths.MODELS_LOCK.is_file() else {}
    size = {name: int(getattr(e, "size", None) or 0) for name, e in entries.items()}
    return {c.name: sum(size.get(m, 0) for m in c.models) for c in cases}


def durations(cases: list[Case], measured: dict[str, float]) -> dict[str, float]:
    """Each case's expected seconds: measured, else its models' size at the measured cases' rate."""
    sizes = _model_bytes(cases)
    rates = [measured[c.name] / sizes[c.name] for c in cases if c.name in measured and sizes[c.name]]
    rate = statistics.median(rates) if rates else DEFAULT_S_PER_GIB / _GIB
    return {c.name: measured.get(c.name, max(MIN_CASE_S, sizes[c.name] * rate)) for c in cases}


def groups(cases: list[Case], seconds: dict[str, float], measured: set[str]) -> list[Group]:
    by_target: dict[str, list[Case]] = {}
    for c in cases:
        by_target.setdefault(c.target, []).append(c)
    return [
        Group(
            t,
            tuple(c.name for c in cs),
            sum(seconds[c.name] for c in cs),
            sum(c.name not in measured for c in cs),
        )
        for t, cs in by_target.items()
    ]


def lpt(items: list[Group], n: int) -> list[Shard]:
    """Longest first onto the least loaded shard (ties: the lower shard; equal groups: by target name,
    so that every machine computes the same plan from the same history)."""
    shards = [Shard(i + 1, n) for i in range(n)]
    for g in sorted(items, key=lambda g: (-g.seconds, g.target)):
        min(shards, key=lambda s: (s.seconds, s.index)).groups.append(g)
    return shards


def make_plan(
    tier: str,
    n: int,
    *,
    device_class: str | None = None,
    history: Path | None = None,
    cases: list[Case] | None = None,
) -> Plan:
    """The tier (or selector) in ``n`` shards, from the history's durations on ``device_class``.
    ``cases``: the cases to plan (default: the tier's, from cases.toml)."""
    cases = select_cases(load_cases(), tier) if cases is None else cases
    if not cases:
        raise UserError(f"{tier!r} selects no case: nothing to plan")
    try:
        measured = queries.case_durations(history, device_class=device_class)
    except UserError as exc:  # a broken history: the plan stands on model sizes, and says why
        print(f"warning: {exc}; durations estimated from model size", file=sys.stderr)
        measured = {}
    measured = {c.name: measured[c.name] for c in cases if c.name in measured}
    found = groups(cases, durations(cases, measured), set(measured))
    count = min(n, len(found))
    return Plan(tier, device_class, [s for s in lpt(found, count) if s.groups], n)


# --- output ----------------------------------------------------------------------------------------------


def describe(plan: Plan) -> str:
    cases = sum(len(g.cases) for s in plan.shards for g in s.groups)
    estimated = sum(g.estimated for s in plan.shards for g in s.groups)
    where = f" on {plan.device_class}" if plan.device_class else ""
    lines = [
        f"plan: {plan.tier}{where} in {len(plan.shards)} shard(s), {cases} cases "
        f"({cases - estimated} measured in the history, {estimated} estimated from model size)"
    ]
    if len(plan.shards) < plan.asked:
        lines.append(
            f"note: {plan.asked} shards asked, but the cases of one target stay together and "
            f"there are {len(plan.shards)} targets"
        )
    for s in plan.shards:
        lines.append(f"shard {s.label}: {s.seconds:8.1f} s  {', '.join(s.cases)}")
    over = plan.longest / plan.ideal - 1 if plan.ideal else 0.0
    lines.append(
        f"ideal (total {plan.total:.1f} s / {len(plan.shards)}): {plan.ideal:.1f} s; longest shard "
        f"{plan.longest:.1f} s ({over:+.0%}); no split is shorter than {plan.bound:.1f} s"
    )
    return "\n".join(lines)


def folder(device_class: str | None) -> str:
    return device_class or "any"


def entries(plan: Plan, labels: list[str] | None = None) -> list[dict[str, Any]]:
    """The plan's matrix entries: one per shard, with its cases, its expected seconds and (for a
    workflow) its device class, runner labels and a name fit for an artifact or a folder."""
    out = []
    for s in plan.shards:
        entry: dict[str, Any] = {
            "class": plan.device_class or "",
            "folder": folder(plan.device_class),
            "name": f"{folder(plan.device_class)}-{s.index}of{s.count}",
            "tier": plan.tier,
            "shard": s.label,
            "cases": ",".join(s.cases),
            "expected_s": round(s.seconds, 1),
        }
        if labels is not None:
            entry["labels"] = labels
        out.append(entry)
    return out


# --- run-tier --shard: the entry of a plan ----------------------------------------------------------------


def parse_shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise UserError(f"--shard {text!r}: give K/N with 1 <= K <= N (e.g. 2/3: the second of three shards)")
    return int(m.group(1)), int(m.group(2))


def read_plan(path: Path) -> list[dict[str, Any]]:
    """The entries of a saved ``plan --json``; one UserError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{path}: cannot read it as a plan ({exc}); save `specsuite plan ... --json`"
        ) from None
    found: Any = data.get("include") if isinstance(data, dict) else None
    ok = isinstance(found, list) and all(
        isinstance(e, dict) and isinstance(e.get("shard"), str) and isinstance(e.get("cases"), str)
        for e in found
    )
    if not ok:
        raise UserError(
            f"{path}: not a plan (no include list of shards with cases); save `specsuite plan ... --json`"
        )
    return list(found)


def shard_entry(
    found: list[dict[str, Any]], tier: str, shard: str, device_class: str | None
) -> dict[str, Any]:
    """The entry of ``shard`` for this tier and device class: the one of that class, else the one that names
    no class (it fits any); with ``device_class`` None, the one entry of that shard whatever its class."""
    k, n = parse_shard(shard)
    label = f"{k}/{n}"
    fits = [e for e in found if e["shard"] == label and e.get("tier", tier) == tier]
    if device_class is not None:
        fits = [e for e in fits if e.get("class") == device_class] or [e for e in fits if not e.get("class")]
    if len(fits) != 1:
        have = sorted({f"{e['shard']} ({e.get('tier')}, {e.get('class') or 'any class'})" for e in found})
        raise UserError(
            f"the plan has no shard {label} of {tier} for device class {device_class or 'any'}; it has: "
            f"{', '.join(have) or 'nothing'}"
        )
    return fits[0]


def write_plan(path: Path, found: list[dict[str, Any]]) -> None:
    atomic.write_json(path, {"include": found})


# --- the command -----------------------------------------------------------------------------------------


def _classes(
    text: str | None, labels: str | None, shards: int
) -> list[tuple[str | None, list[str] | None, int]]:
    """--runners: [{"class", "runs-on", "shards"}...], or the one class of --runs-on (or none)."""
    if not text:
        return [(None, _labels(labels, "--runs-on") if labels else None, shards)]
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UserError(f"--runners: not JSON ({exc})") from None
    if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
        raise UserError(
            '--runners: give a JSON list such as [{"class": "nvidia-h200", "runs-on": '
            '["self-hosted", "h200"], "shards": 2}]'
        )
    out: list[tuple[str | None, list[str] | None, int]] = []
    for d in data:
        cls = str(d.get("class") or "")
        if cls and not _CLASS.fullmatch(cls):
            raise UserError(f"--runners: class {cls!r} is not a device class (a-z, 0-9, '.', '_', '-')")
        n = d.get("shards", shards)
        if not isinstance(n, int) or not 1 <= n <= 256:
            raise UserError(f"--runners: class {cls or 'any'!r}: shards {n!r} is not a number from 1 to 256")
        out.append((cls or None, _labels(json.dumps(d.get("runs-on")), f"class {cls or 'any'}: runs-on"), n))
    if len({c for c, _, _ in out}) != len(out):
        raise UserError("--runners: a device class is named twice")
    return out


def _labels(text: str, what: str) -> list[str]:
    try:
        labels = json.loads(text)
    except ValueError:
        labels = None
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) and x for x in labels):
        raise UserError(
            f'{what}: give the runner labels as a JSON list, e.g. ["self-hosted", "linux", "gpu"]'
        )
    return labels


def parser() -> CommandParser:
    p = CommandParser(
        "plan", "Split a tier into shards for several runners, longest first, from the history."
    )
    p.add_argument("tier", metavar="TIER", help=f"a tier ({', '.join(TIERS)}) or a comma list of case names")
    p.add_argument("--shards", type=int, default=1, help="how many runners share the tier (default 1)")
    p.add_argument("--device-class", help="durations of this device class only (default: any)")
    p.add_argument("--json", action="store_true", help="print the strategy.matrix of a workflow")
    p.add_argument(
        "--runners",
        metavar="JSON",
        help='device classes: [{"class": ..., "runs-on": [labels], "shards": N}, ...]',
    )
    p.add_argument("--runs-on", metavar="JSON", help="runner labels of the one class (without --runners)")
    p.add_argument("--out", type=Path, help="also write the --json plan to this file")
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    if not 1 <= a.shards <= 256:
        raise UserError(f"--shards {a.shards}: give a number from 1 to 256")
    found: list[dict[str, Any]] = []
    for cls, labels, n in _classes(a.runners, a.runs_on, a.shards):
        plan = make_plan(a.tier, n, device_class=cls or a.device_class)
        found += entries(plan, labels)
        print(describe(plan), file=sys.stderr if a.json else sys.stdout)
    if a.out:
        write_plan(a.out, found)
    if a.json:
        print(json.dumps({"include": found}))
    return 0
