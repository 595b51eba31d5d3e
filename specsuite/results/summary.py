"""summary.md: the verdict and what weakens it, the history line, the binary, and one row per case; and
its copy in ``$GITHUB_STEP_SUMMARY`` (a job summary on Actions)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specsuite.common import atomic, table
from specsuite.common.table import markdown_code, markdown_text
from specsuite.llamacpp.identity import short
from specsuite.results import config
from specsuite.results.crossover import crossovers
from specsuite.results.document import Binary, Run
from specsuite.results.names import SHOWN, all_but
from specsuite.results.record import CaseRecord, is_finite
from specsuite.results.verdict import Verdict

SUMMARY_COLUMNS = (
    "case", "status", "reason", "accept rate (floor)", "accept len (floor)", "speedup (floor)",
    "ms per block (x plain token, tokens)", "identical", "counters vs baseline",
)  # fmt: skip


def _vs(value: Any, floor: Any, fmt: str = ".4f") -> str:
    if not is_finite(value):
        return "–"
    return f"{value:{fmt}}" + (f" (≥ {floor:{fmt}})" if is_finite(floor) else "")


def _row(r: CaseRecord) -> list[str]:
    fl = r.floors
    return [
        r.name,
        str(r.status),
        r.reason or "",
        _vs(r.accept_rate, fl.get("min_accept_rate")),
        _vs(r.accept_len, fl.get("min_accept_len")),
        _vs(r.speedup, fl.get("min_speedup"), ".3f") + (" IMPLAUSIBLE" if r.implausible_speed else ""),
        block_cell(r),
        _vs(r.identical_fraction, fl.get("min_identical_fraction"), ".2f"),
        counters(r),
    ]


def block_cell(r: CaseRecord) -> str:
    """Per-block overhead: milliseconds per verification block, what it costs in plain decode steps (the
    baseline's ms per token), and tokens per block; – where nothing was drafted or timed."""
    if not is_finite(r.block_ms) or not is_finite(r.block_ratio):
        return "–"
    tokens = f", {r.tokens_per_block:.2f}" if is_finite(r.tokens_per_block) else ""
    return f"{r.block_ms:.3f} ({r.block_ratio:.2f}x{tokens})"


def counters(r: CaseRecord) -> str:
    """The acceptance counters against the baseline's, exactly, or ``nondeterministic`` (its own rounds
    disagreed: no exact comparison); empty without a baseline."""
    if r.nondeterministic:
        return "nondeterministic"
    return (r.baseline.counters or "") if r.baseline is not None else ""


def drift_lines(run: Run) -> list[str]:
    """One line per drifted case: the metric, how much, and the first commit after the change point."""
    out = []
    for r in run.cases.values():
        if (d := r.drift) is not None:
            p = "exact counters" if d.p_value is None else f"p = {d.p_value:.3g}"
            out.append(
                f"DRIFTED {r.name}: {d.metric} {d.change * 100:+.1f} % over the last {d.runs} runs; first "
                f"commit after the change point `{short(d.after_commit, 12)}` (run {d.after_run_id}), last "
                "before "
                f"it `{short(d.before_commit, 12)}`; {d.mean_before:.4f} -> {d.mean_after:.4f} ({p})"
            )
    return out


def _config_changes(r: CaseRecord) -> list[str]:
    return [*(r.baseline.config_changes if r.baseline else []), *(r.drift.config_changes if r.drift else [])]


def config_lines(run: Run, failed: bool, show: Callable[[str], str] = str) -> list[str]:
    """The configuration changes since the baseline, one line per set of changes with the cases that
    share it: those of failed cases (``failed``; their likely cause, named first), or of the others.
    What the run's own line says already (``run_config_line``) is not said again. ``show``: how a change
    is written (``markdown_text`` in summary.md: a change holds the binary's own --help text)."""
    groups: dict[tuple[str, ...], list[CaseRecord]] = {}
    said = set(_run_changes(run))
    for r in run.cases.values():
        found = [c for c in _config_changes(r) if _bare(c) not in said]
        if (r.status == "failed") == failed and found:
            groups.setdefault(tuple(dict.fromkeys(found)), []).append(r)
    head = "CONFIGURATION CHANGED under" if failed else "configuration differs from the baseline under"
    return [
        f"{head} {_cases(recs, failed, list(run.cases))}: {config.summary_line(list(map(show, changes)))}"
        for changes, recs in groups.items()
    ]


def _cases(recs: list[CaseRecord], failed: bool, everyone: list[str]) -> str:
    """The cases a line is about: a few by name (a failed one with its reason), many counted."""
    if failed and len(recs) <= SHOWN:
        return ", ".join(f"{r.name} ({r.reason})" for r in recs)
    return all_but([r.name for r in recs], everyone)


def run_config_line(run: Run, show: Callable[[str], str] = str) -> list[str]:
    """The binary's configuration against the run before it on this setup, when it differs: the likely
    cause of whatever changed, named first even where no case had a baseline to compare with; with the
    failed cases whose own baselines saw those changes. ``show``: as in ``config_lines``."""
    what = _run_changes(run)
    if not what or run.history is None:
        return []
    hit = [
        r
        for r in run.cases.values()
        if r.status == "failed" and set(map(_bare, _config_changes(r))) & set(what)
    ]
    under = f"; failed under it: {_cases(hit, True, list(run.cases))}" if hit else ""
    since, changed = show(str(run.history.config_base)), config.summary_line(list(map(show, what)))
    return [f"CONFIGURATION CHANGED since {since}: {changed}{under}"]


def _bare(change: str) -> str:
    """A change without its ``between A and B``."""
    return change.rsplit(" between ", 1)[0]


def _run_changes(run: Run) -> list[str]:
    """The run-level changes without their ``between A and B`` (the line names the run before)."""
    note = run.history
    return [_bare(c) for c in note.config_changes] if note is not None else []


def _spread(r: CaseRecord, metric: str) -> str:
    got = [(name, v) for name, c in r.categories.items() if is_finite(v := getattr(c, metric))]
    if not got:
        return f"{metric} –"
    (lo_name, lo), (hi_name, hi) = min(got, key=lambda x: x[1]), max(got, key=lambda x: x[1])
    return f"{metric} {lo:.4f} ({lo_name}) to {hi:.4f} ({hi_name})"


def category_lines(run: Run) -> list[str]:
    """One line per case with prompt categories: the spread of its acceptance across them."""
    spreads = {r.name: (len(r.categories), _spread(r, "accept_rate"), _spread(r, "accept_len"))
               for r in run.cases.values() if r.categories}  # fmt: skip
    return [f"categories of {name} ({n}): {rate}; {length}" for name, (n, rate, length) in spreads.items()]


def crossover_lines(run: Run) -> list[str]:
    """One line per sweep: up to which np speculation beats plain decoding on aggregate tokens/s."""
    found = crossovers(run.cases.values())
    if found and not run.run_options.speed:
        return ["crossover: not measured (acceptance only: cases shared the cores)"]
    return [f"crossover {c.line()}" for c in found]


def suspect_lines(run: Run, show: Callable[[str], str] = str) -> list[str]:
    """The upstream changes that touch what each red, fixed or moved case exercises, since its baseline's
    build (named when the run ends: suspects.runlines)."""
    return [show(line) for line in run.history.suspects] if run.history is not None else []


def first_lines(run: Run, v: Verdict, show: Callable[[str], str] = str) -> list[tuple[bool, str]]:
    """The lines under the headline, as (loud, line): what summary.md lists first (loud ones in bold) and
    the site's run page and index show the same way. ``show``: as in ``config_lines``."""
    loud = [*run_config_line(run, show), *config_lines(run, True, show), *suspect_lines(run, show),
            *drift_lines(run), *v.attention]  # fmt: skip
    out = [(True, line) for line in loud]
    if run.history is not None and run.history.line:
        out.append((False, show(run.history.line)))
    out += [(False, line) for line in config_lines(run, False, show)]
    out += [(False, c) for c in crossover_lines(run)]
    if run.parts:
        out.append((False, f"merged from {len(run.parts)} shard(s): {', '.join(run.parts)}"))
    return out


def summary_markdown(run: Run, v: Verdict) -> str:
    b = run.binary
    lines = [f"### specsuite {run.tier} run `{run.run_id}`: {v.headline}", ""]
    md = markdown_text  # text from the binary or its build record: shown as text, never as markup
    lines += [f"- **{line}**" if loud else f"- {line}" for loud, line in first_lines(run, v, md)]
    lines += [
        "",
        f"binary: {markdown_code(str(b.path))} llama.cpp {markdown_code(str(b.key))}{_build_note(b)} backend "
        f"{markdown_code(str(b.backend))} on {md(run.device_name)}; wall {run.wall_s} s",
        "",
        table.render(SUMMARY_COLUMNS, [_row(r) for r in run.cases.values()], markdown=True),
    ]
    if rows := [_resource_row(r) for r in run.cases.values() if r.memory or r.prefill]:
        lines += ["", table.render(RESOURCE_COLUMNS, rows, markdown=True)]
    if cats := category_lines(run):
        lines += ["", *[f"- {c}" for c in cats]]
    return "\n".join(lines) + "\n"


def _build_note(b: Binary) -> str:
    """What the key leaves out: the build number beside a commit, where the identity came from."""
    said = [f"b{b.build}"] if b.build is not None and b.commit else []
    said += [f"from {markdown_text(b.source.origin)}"] if b.source.origin else []
    return f" ({', '.join(said)})" if said else ""


RESOURCE_COLUMNS = (
    "case", "peak RSS MiB (baseline)", "growth MiB / requests", "GPU MiB (baseline)", "TTFT ms (baseline)",
    "prompt tok/s (baseline)", "decode tok/s (baseline)",
)  # fmt: skip


def _pair(value: Any, base: Any, fmt: str) -> str:
    if not is_finite(value):
        return "–"
    return f"{value:{fmt}}" + (f" ({base:{fmt}})" if is_finite(base) else "")


def _resource_row(r: CaseRecord) -> list[str]:
    """Memory and prefill beside decode speed: the case's server, the baseline's in parentheses."""
    m, p = r.memory, r.prefill
    growth = f"{m.growth_mib:+.2f} / {m.growth_requests}" if m and is_finite(m.growth_mib) else "–"
    return [
        r.name,
        _pair(m.peak_rss_mib, m.base_peak_rss_mib, ".1f") if m else "–",
        growth,
        _pair(m.gpu_peak_mib, m.base_gpu_peak_mib, ".0f") if m else "–",
        _pair(p.ttft_ms, p.base_ttft_ms, ".2f") if p else "–",
        _pair(p.prompt_tps, p.base_prompt_tps, ".1f") if p else "–",
        _pair(r.decode_tps, r.baseline_decode_tps, ".1f"),
    ]


def write_summary(run: Run, v: Verdict, results_dir: Path) -> Path:
    """summary.md (the suite writes it once, when its session ends)."""
    out = Path(results_dir) / "summary.md"
    atomic.write_text(out, summary_markdown(run, v))
    return out


def append_step_summary(summary: Path) -> None:
    """Append a run's summary.md to $GITHUB_STEP_SUMMARY, when set (a job summary on Actions)."""
    append_text(summary.read_text(encoding="utf-8") + "\n")


def append_text(text: str) -> None:
    """Append markdown to $GITHUB_STEP_SUMMARY, when set.

    The job summary is a copy: one that cannot be written is a warning, never the run's verdict."""
    if target := os.environ.get("GITHUB_STEP_SUMMARY"):
        try:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            why = f"GITHUB_STEP_SUMMARY={target}: cannot append the summary ({exc.strerror or exc})"
            print(f"warning: {why}", file=sys.stderr)
