"""What a results document from elsewhere must hold to count as a run: the checks ``history import``,
``merge`` and ``calibrate`` apply before a number of it may judge another run.

A live run's record is made by the runner from one server's counters, so it always holds finite numbers in
their ranges and counters that keep the server's own accounting (``metrics.Delta.sanity_errors``, the same
check a live case fails ``sanity`` on). A document read from a file (an artifact, a shard, a hand-edited
copy) holds whatever was typed into it; these checks refuse what no live run can write: a number that is
not finite, a rate outside [0, 1], a counter that is negative, fractional or beyond any run, counters that
break the server's relations, an unknown status or schema, a start time that is not a time, a run id that
is not a plain name; a rate or a length its own counters do not give (``derived_problems``). Each problem
is one line naming the case and the field.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from typing import Any

import msgspec

from specsuite.cases.schema import MAX_PARALLEL, MAX_TEMPERATURE
from specsuite.common.settings import MAX_REPEAT
from specsuite.llamacpp.identity import HEX_RE
from specsuite.results.document import KNOWN_SCHEMAS, Run, run_id_problem
from specsuite.results.record import CaseRecord, CategoryStats, Np1, SpeedSamples, finite
from specsuite.server.metrics import Delta
from specsuite.server.probe import BACKENDS, plain_text_problem

# A counter of one case in one run: tokens a server drafted or accepted. A trillion is far beyond any run
# (a nightly tier drafts millions) and far inside SQLite's 64-bit INTEGER, so a counter of 2^80 is refused
# here, in one line, instead of overflowing the history's insert.
MAX_COUNT = 10**12
# Another machine's clock may run ahead of this one's; by more than this, a start is in the future.
CLOCK_SKEW = dt.timedelta(hours=1)
_UNIT = ("accept_rate", "pos0_rate", "identical_fraction")
# Linux's largest CPU count (NR_CPUS) is 8192: a pinned CPU's number is below it.
MAX_CPU = 8192
# The parts of a record that hold only amounts, each >= 0: times, speeds, sizes, counts, rates. A negative
# one (or a count beyond any run) in an imported document would be a baseline no live run could beat or
# lose to (a block ratio of -5 makes every later run's overhead a regression; a crossover of 2^80
# overflows the history's integer).
_AMOUNTS = ("blocks", "memory", "prefill", "concurrency", "categories")
# results.json keeps a rate or a length to 4 decimals (measure.outcome), within 0.00005 of what its counters
# give; twice that allows for the float division and still refuses any number a live run could not round
# to (accept_rate 1.0 over 27 accepted of 36 drafted became a baseline no live run could reach).
ROUNDING = 1e-4


def _short(value: Any) -> str:
    """A value as one short piece of a line (a hostile one may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


def parse_time(text: str) -> dt.datetime | None:
    """An ISO 8601 time with its offset, as results.json writes it (``Z`` too, also on Python 3.10)."""
    try:
        when = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _not_finite(value: Any, path: str) -> Iterator[str]:
    """Every NaN or infinity in a plain-data value, by its dotted path (a live document has none: results.json
    writes them as null)."""
    if isinstance(value, float) and not math.isfinite(value):
        yield f"{path} is {value}, not a finite number"
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _not_finite(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _not_finite(v, f"{path}[{i}]")


def _count_problem(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
        return f"{name} {_short(value)} is not a counter (an integer from 0 to {MAX_COUNT})"
    return None


def _counters(
    where: str, drafted: Any, accepted: Any, drafts: Any, per_position: list[Any], *, relations: bool
) -> list[str]:
    """Counters in range, then the server's own relations (the live sanity check, not a copy of it)."""
    named = {"drafted": drafted, "accepted": accepted, "drafts": drafts}
    named.update({f"per_position[{i}]": c for i, c in enumerate(per_position)})
    out = [f"{where}{p}" for k, v in named.items() if (p := _count_problem(k, v)) is not None]
    if out or not relations or None in (drafted, accepted, drafts):
        return out
    delta = Delta(drafted, accepted, drafts, tuple(per_position), per_position_exported=bool(per_position))
    return [f"{where}counter sanity: {e}" for e in delta.sanity_errors()]


def out_of_range(rec: CaseRecord) -> str | None:
    """The first measured number of the record outside what a server can report (None: all in range)."""
    for key in _UNIT:
        if (v := finite(getattr(rec, key))) is not None and not 0 <= v <= 1:
            return f"{key} {v:g} is outside [0, 1]"
    if any((v := finite(r)) is not None and not 0 <= v <= 1 for r in rec.per_position_rate):
        return f"per_position_rate {rec.per_position_rate} has a rate outside [0, 1]"
    length, top = finite(rec.accept_len), rec.n_max + 1 if rec.n_max is not None else math.inf
    if length is not None and not 1 <= length <= top:
        return f"accept_len {length:g} is outside [1, n_max + 1 = {top:g}]"
    return _speed_problem(rec)


def _finite_values(groups: dict[str, list[Any]]) -> Iterator[tuple[str, float]]:
    for key, values in groups.items():
        yield from ((key, v) for v in map(finite, values) if v is not None)


def _speed_problem(rec: CaseRecord) -> str | None:
    """A negative speed or time; a speedup of 0 in a measured record (its tokens were decoded at some
    speed)."""
    sp = rec.speed or SpeedSamples()
    ups = {
        "speedup": [rec.speedup],
        "speed.speedups": sp.speedups,
        "speed.speedup_median": [sp.speedup_median],
    }
    for key, v in _finite_values(ups):
        if v < 0 or (v == 0 and rec.measured):
            return f"{key} {v:g} is not a speed ratio > 0"
    times = {
        "decode_tps": [rec.decode_tps],
        "baseline_decode_tps": [rec.baseline_decode_tps],
        "wall_s": [rec.wall_s],
        "speed.spec_tps": sp.spec_tps,
        "speed.base_tps": sp.base_tps,
    }
    return next((f"{key} {v:g} is negative" for key, v in _finite_values(times) if v < 0), None)


def _amount_problems(value: Any, path: str) -> Iterator[str]:
    """Every negative number, and every integer beyond MAX_COUNT, in a plain-data value, by its path."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not 0 <= value <= MAX_COUNT:
        yield f"{path} {_short(value)} is not an amount (an integer from 0 to {MAX_COUNT})"
    elif isinstance(value, float) and value < 0:
        yield f"{path} {value:g} is negative"
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _amount_problems(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _amount_problems(v, f"{path}[{i}]")


def _text_problems(value: Any, path: str) -> Iterator[str]:
    """Every text of a configuration (keys too) that no binary states: control characters, or longer than
    a --help default is kept (server.probe.stated_default); such text reached the terminal and the site."""
    if isinstance(value, str):
        if (why := plain_text_problem(value)) is not None:
            yield f"{path} {_short(value)} {why}: not a configuration a binary states"
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _text_problems(k, f"{path} key")
            yield from _text_problems(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _text_problems(v, f"{path}[{i}]")


def _added_problems(rec: CaseRecord) -> list[str]:
    """The fields added since the first checks (per-block cost, memory, prefill, concurrency, categories,
    temperature, pinned CPUs, repeats): what a live run writes there, and nothing else."""
    data = msgspec.to_builtins(rec)
    out = [p for key in ("block_ms", "token_ms", "block_ratio", "tokens_per_block", *_AMOUNTS)
           for p in _amount_problems(data.get(key), key)]  # fmt: skip
    out += _text_problems(data.get("config"), "config")
    out += _slots_problem("parallel", rec.parallel) + _slots_problem("streams", rec.streams)
    if not 0 <= rec.temperature <= MAX_TEMPERATURE:
        out.append(f"temperature {rec.temperature:g} is outside [0, {MAX_TEMPERATURE:g}]")
    if rec.cpus is not None and not all(0 <= c < MAX_CPU for c in rec.cpus):
        out.append(f"cpus {_short(rec.cpus)} are not CPU numbers from 0 to {MAX_CPU - 1}")
    if rec.speed is not None and rec.speed.repeat is not None and not 1 <= rec.speed.repeat <= MAX_REPEAT:
        out.append(f"speed.repeat {_short(rec.speed.repeat)} is not a whole number from 1 to {MAX_REPEAT}")
    return out + _concurrency_problems(rec) + _category_problems(rec)


def _slots_problem(key: str, value: int, low: int = 1) -> list[str]:
    ok = low <= value <= MAX_PARALLEL
    return [] if ok else [f"{key} {_short(value)} is not a slot count from {low} to {MAX_PARALLEL}"]


def _concurrency_problems(rec: CaseRecord) -> list[str]:
    conc = rec.concurrency
    if conc is None:
        return []
    out = _slots_problem("concurrency.parallel", conc.parallel)
    out += _slots_problem("concurrency.streams", conc.streams)
    if conc.crossover_np is not None:
        out += _slots_problem("concurrency.crossover_np", conc.crossover_np, low=0)
    for i, r in enumerate(conc.per_request):
        if r.accepted > r.drafted:
            out.append(f"concurrency.per_request[{i}]: accepted {r.accepted} > drafted {r.drafted}")
    np1 = conc.np1 or Np1(source="")
    for key in ("accept_rate", "identical_fraction"):
        if (v := getattr(np1, key)) is not None and v > 1:
            out.append(f"concurrency.np1.{key} {v:g} is outside [0, 1]")
    if np1.accept_len is not None and np1.accept_len < 1:
        out.append(f"concurrency.np1.accept_len {np1.accept_len:g} is below 1")
    return out


def _category_problems(rec: CaseRecord) -> list[str]:
    out = []
    for name, cat in rec.categories.items():
        unit = {"accept_rate": cat.accept_rate, "identical_fraction": cat.identical_fraction}
        out += [
            f"categories.{name}.{k} {v:g} is outside [0, 1]"
            for k, v in unit.items()
            if v is not None and v > 1
        ]
        if any(r is not None and r > 1 for r in cat.per_position_rate):
            out.append(f"categories.{name}.per_position_rate has a rate above 1")
        if None not in (cat.drafted, cat.accepted) and cat.accepted > cat.drafted:  # type: ignore[operator]
            out.append(f"categories.{name}: accepted {cat.accepted} > drafted {cat.drafted}")
    return out


def _against(
    field: str, stated: float | None, given: float | None, how: str, source: str = "counters"
) -> list[str]:
    """A stated number against what its counters give (None: the counters give none). A null is not
    stated: records that measured nothing, and schema 1's missing pos0_rate, hold null."""
    if stated is None or (given is not None and abs(stated - given) <= ROUNDING):
        return []
    gives = "none" if given is None else f"{round(given, 4):g}"
    return [f"{field} {stated:g} disagrees with its {source}: {how} = {gives}"]


def _delta(c: CaseRecord | CategoryStats) -> Delta | None:
    """The record's counters as the live run's ``Delta``, whose arithmetic gave its rates (None: no
    counters recorded, so they give no rate)."""
    if c.drafted is None or c.accepted is None:
        return None
    return Delta(c.drafted, c.accepted, c.drafts, tuple(c.per_position), bool(c.per_position))


def _given_positions(c: CaseRecord | CategoryStats, d: Delta | None) -> list[float] | None:
    """The per-position rates the counters give: each count over the drafts, none without counts; None
    where there are counts and no drafts to divide them by (no live run records that)."""
    if not c.per_position:
        return []
    return d.per_position_rate if d is not None and c.drafts is not None else None


def _position_problems(field: str, c: CaseRecord | CategoryStats, given: list[float] | None) -> list[str]:
    if not c.per_position_rate or given is None:
        return []
    if len(c.per_position_rate) != len(given):  # a live run writes one rate per count
        return [
            f"{field} has {len(c.per_position_rate)} rates; its counters (per_position "
            f"{_short(c.per_position)}) give {len(given)}"
        ]
    return [
        p
        for i, (r, g) in enumerate(zip(c.per_position_rate, given, strict=True))
        for p in _against(f"{field}[{i}]", r, g, f"per_position[{i}] {c.per_position[i]} / drafts {c.drafts}")
    ]


def _null(value: int | None) -> str:
    return "null" if value is None else str(value)


def _rate_problems(c: CaseRecord | CategoryStats, prefix: str = "") -> list[str]:
    """accept_rate, accept_len and the per-position rates against the counters they come from, by the live
    run's arithmetic (``metrics.Delta``, which ``measure.outcome.counter_numbers`` rounds for a case and a
    category)."""
    d = _delta(c)
    counts = f"accepted {_null(c.accepted)} / "
    out = _against(
        f"{prefix}accept_rate",
        c.accept_rate,
        None if d is None else d.accept_rate,
        f"{counts}drafted {_null(c.drafted)}",
    )
    out += _against(
        f"{prefix}accept_len",
        c.accept_len,
        None if d is None else d.accept_len,
        f"1 + {counts}drafts {_null(c.drafts)}",
    )
    return out + _position_problems(f"{prefix}per_position_rate", c, _given_positions(c, d))


def derived_problems(rec: CaseRecord) -> list[str]:
    """Every number of the record that its own counters (or its prompts) give, against what they give: the
    gates and the floors read the stated numbers, a stated number off its counters is no measurement."""
    out = _rate_problems(rec)
    if (given := _given_positions(rec, _delta(rec))) is not None:  # pos0_rate: the first position's rate
        how = f"per_position[0] {rec.per_position[0]} / drafts {rec.drafts}" if given else "per_position []"
        out += _against("pos0_rate", rec.pos0_rate, given[0] if given else None, how)
    for name, cat in rec.categories.items():
        out += _rate_problems(cat, f"categories.{name}.")
    return out + _identical_problems(rec)


def _identical_problems(rec: CaseRecord) -> list[str]:
    """identical_fraction against the prompts' own verdicts (schema 1 and hand-made records list none)."""
    verdicts = [p.identical for p in rec.prompts]
    if not verdicts or None in verdicts:
        return []
    same = sum(map(bool, verdicts))
    how = f"{same} of {len(verdicts)} identical"
    return _against("identical_fraction", rec.identical_fraction, same / len(verdicts), how, "prompts")


def record_problems(rec: CaseRecord) -> list[str]:
    """Why this case record cannot be a live run's (empty: it can).

    A record that failed ``sanity`` is the one a live run writes with counters that break the server's
    relations (and so with rates beyond 1): its counters are checked as counters only, and such a record
    is never a baseline (``CaseRecord.measured``)."""
    out = list(_not_finite(msgspec.to_builtins(rec), ""))
    if rec.n_max is not None and rec.n_max < 1:
        out.append(f"n_max {rec.n_max} is not a draft length >= 1")
    if out:  # a NaN makes every range below meaningless
        return out
    out += _added_problems(rec)
    if out:
        return out
    insane = rec.status == "failed" and rec.reason == "sanity"
    out += _counters("", rec.drafted, rec.accepted, rec.drafts, rec.per_position, relations=not insane)
    for i, r in enumerate(rec.rounds):
        out += _counters(
            f"rounds[{i}]: ", r.drafted, r.accepted, r.drafts, r.per_position, relations=not insane
        )
    why = _speed_problem(rec) if insane else out_of_range(rec)
    if out or why is not None:
        return out if why is None else [*out, why]
    return derived_problems(rec)  # the derived numbers only of a record whose counters are counters


def header_problems(run: Run) -> list[str]:
    """Why the run's own fields (not its cases) cannot be a live run's."""
    out = [] if run.schema in KNOWN_SCHEMAS else [f"schema {run.schema} is not one this specsuite reads "
                                                  f"({', '.join(map(str, KNOWN_SCHEMAS))})"]  # fmt: skip
    if (why := run_id_problem(run.run_id)) is not None:
        out.append(why)
    started = parse_time(run.started) if run.started is not None else None
    finished = parse_time(run.finished) if run.finished is not None else None
    if started is None:
        out.append(
            f"started {_short(run.started)} is not an ISO 8601 time with an offset (2026-12-01T10:00:00Z)"
        )
    elif started > dt.datetime.now(dt.timezone.utc) + CLOCK_SKEW:
        out.append(f"started {run.started} is in the future: no run has started then")
    if run.finished is not None and finished is None:
        out.append(f"finished {_short(run.finished)} is not an ISO 8601 time with its offset")
    elif started is not None and finished is not None and finished < started:
        out.append(f"finished {run.finished} is before started {run.started}")
    header = msgspec.to_builtins(msgspec.structs.replace(run, cases={}))
    out += _not_finite(header, "")
    out += _text_problems(header.get("config"), "config")
    if (wall := finite(run.wall_s)) is not None and wall < 0:
        out.append(f"wall_s {wall:g} is negative")
    return out + binary_problems(run)


def binary_problems(run: Run) -> list[str]:
    """The binary's fields a summary, the history and the headline show, of the shapes a live run writes
    (``llamacpp.info.problem`` checks the build record they come from): a commit of hex digits, a build
    number, a backend the probe can name."""
    b, out = run.binary, []
    if b.commit is not None and not HEX_RE.fullmatch(b.commit):
        out.append(f"binary.commit {_short(b.commit)} is not a git commit (7 to 40 hex digits)")
    if b.build is not None and not (isinstance(b.build, int) and 0 <= b.build <= 10**7):
        out.append(f"binary.build {_short(b.build)} is not a build number")
    if b.backend is not None and b.backend not in BACKENDS:
        out.append(f"binary.backend {_short(b.backend)} is not one of {', '.join(BACKENDS)}")
    return out


def run_problems(run: Run) -> list[str]:
    """Every reason this document cannot be a live run's, one line each; empty when it can."""
    out = header_problems(run)
    for name, rec in run.cases.items():
        out += [f"case {name!r}: {p}" for p in record_problems(rec)]
    return out
