"""llama-server's flags as the suite names them: every spelling of each across llama.cpp versions, the
flags the harness owns, and the only flags a case's ``server_args`` may add (``CASE_FLAGS``).

Here, below ``cases`` and ``server``, because both need it: the probe looks the spellings up in a binary's
``--help``, and cases.toml's validation refuses an owned flag before any server starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    "seed": ("--seed", "-s"),
    "spec_default": ("--spec-default",),
}
# ngram methods take their draft length (and ngram-mod its minimum) from their own flags, not from
# --spec-draft-n-max; a case's n_max / n_min go there so they mean the same thing for every method.
NGRAM_N_MAX = {
    "ngram-simple": "--spec-ngram-simple-size-m",
    "ngram-map-k": "--spec-ngram-map-k-size-m",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-m",
    "ngram-mod": "--spec-ngram-mod-n-max",
}
NGRAM_N_MIN = {"ngram-mod": "--spec-ngram-mod-n-min"}

# The batching, context and KV-cache flags whose defaults a run records beside every speculative flag's
# (server.probe reads them from --help; results.config compares them between commits): a default that
# moves under a case changes what it measures as surely as --spec-draft-p-min does (llama.cpp #17017 stopped
# defaulting to several slots with a draft; #28633: a KV type flash attention has no kernel for). Canonical
# key (the current spelling) -> every spelling. Recorded, not admitted: a case may set only those that
# CASE_FLAGS below lists (the harness owns --parallel, --ctx-size, --flash-attn, --fit, --poll, -ngl).
CONFIG_FLAGS: dict[str, tuple[str, ...]] = {
    "--batch-size": ("--batch-size", "-b"),
    "--ubatch-size": ("--ubatch-size", "-ub"),
    "--parallel": ("--parallel", "-np"),
    "--cont-batching": ("--cont-batching", "-cb"),
    "--kv-unified": ("--kv-unified", "-kvu"),
    "--ctx-size": ("--ctx-size", "-c"),
    "--flash-attn": ("--flash-attn", "-fa"),
    "--cache-type-k": ("--cache-type-k", "-ctk"),
    "--cache-type-v": ("--cache-type-v", "-ctv"),
    "--threads": ("--threads", "-t"),
    "--threads-batch": ("--threads-batch", "-tb"),
    "--fit": ("--fit", "-fit"),
    "--poll": ("--poll",),
    "--cache-reuse": ("--cache-reuse",),
    "--ctx-checkpoints": ("--ctx-checkpoints", "-ctxcp", "--swa-checkpoints"),
    "--swa-full": ("--swa-full",),
    "--n-gpu-layers": ("--n-gpu-layers", "-ngl", "--gpu-layers"),
}
# Speculative flags are every option whose name says so (new ones are recorded as they appear); these are
# the prefixes, and the canonical key of a renamed one is its FLAG_SPELLINGS entry's current spelling.
SPEC_FLAG_PREFIXES = ("--spec-", "--draft")


def config_key(names: list[str] | tuple[str, ...]) -> str | None:
    """The canonical key of a ``--help`` entry with these names when its default is part of a run's
    configuration (a speculative, batching or KV-cache flag), else None. One flag keeps one key across
    renames: ``--draft-p-min`` (older) and ``--spec-draft-p-min`` are both ``--spec-draft-p-min``."""
    renamed = [s for s in FLAG_SPELLINGS.values() if s[0].startswith(SPEC_FLAG_PREFIXES)]
    for spellings in (*renamed, *CONFIG_FLAGS.values()):
        if any(n in spellings for n in names):
            return spellings[0]
    longs = [n for n in names if n.startswith("--")]
    return next((n for n in longs if n.startswith(SPEC_FLAG_PREFIXES)), None)


# What the harness sets on every server (the command builder's flags, the mode resolver's) or what would
# load another model, reach the network or move the server off the address the harness talks to: a case
# giving one would run something other than what results.json records. llama.cpp takes the last of a
# repeated flag, so the harness also puts its own flags after a case's server_args.
_OWNED_GROUPS: dict[str, tuple[str, ...]] = {
    **{name.replace("_", " "): spellings for name, spellings in FLAG_SPELLINGS.items()},
    "ngram draft length": (*NGRAM_N_MAX.values(), *NGRAM_N_MIN.values(), "--spec-ngram-mod-n-match"),
    "model": ("-m", "--model"),
    "model from the network": (
        "-mu",
        "--model-url",
        "-hf",
        "-hfr",
        "--hf-repo",
        "-hff",
        "--hf-file",
        "-hft",
        "--hf-token",
        "-dr",
        "--docker-repo",
        "-hfd",
        "-hfrd",
        "--hf-repo-draft",
        "--spec-draft-hf",
        "--models-dir",
        "--models-preset",
    ),
    "address": ("--host", "--port", "--reuse-port", "--api-prefix", "--ssl-key-file", "--ssl-cert-file"),
    "access": ("--api-key", "--api-key-file"),
    "offline": ("--offline",),
    "log file": ("--log-file",),
    "temperature": ("--temp", "--temperature"),
    "polling": ("--poll", "--spec-draft-poll", "--poll-draft"),
    # what each slot's context is: the harness sizes --ctx-size by --parallel so that every slot holds the
    # np-1 case's context; a unified KV cache would let one slot take all of it (docs/concurrency.md)
    "slot context": ("-kvu", "-no-kvu", "--kv-unified", "--kv-unified-per-slot"),
}
OWNED: dict[str, str] = {flag: what for what, flags in _OWNED_GROUPS.items() for flag in flags}
# A mode case's server_args are the user's extra arguments, which the front end's resolver reads: a user who
# sets the spec type or a draft length there decides it (the resolver then emits nothing of its own), so
# such a case may give these; the model, address and measurement stay the harness's.
USER_SPEC_CHOICES = frozenset(
    {"spec type", "draft n max", "draft n min", "draft p min", "ngram draft length", "spec default"}
)


def owned_flag(arg: str) -> tuple[str, str] | None:
    """(the flag, what the harness sets with it) when ``arg`` gives an owned flag: any spelling, its
    ``--flag=value`` form or its ``--no-`` negation; None for anything else (values included)."""
    flag = arg.split("=", 1)[0] if arg.startswith("-") else ""
    for candidate in (flag, flag.replace("--no-", "--", 1) if flag.startswith("--no-") else ""):
        if candidate in OWNED:
            return flag, OWNED[candidate]
    return None


@dataclass(frozen=True)
class CaseFlag:
    """A flag a case's ``server_args`` may add: its spellings, how many values follow it, and why a case may
    give it (what it changes, and why that leaves the comparison with the baseline fair)."""

    spellings: tuple[str, ...]
    values: int
    why: str
    mode_only: bool = False  # the user's own choice a front end's resolver reads (a ``mode`` case only)


# The flags a case may add to llama-server's command line; everything else is refused when cases.toml is
# read, with one line naming the case and the flag. An allowlist, not a list of refused flags: llama-server
# grows flags that load files (--lora, --mmproj, --chat-template-file), serve files (--path, --media-path),
# write them (--slot-save-path) or reach the network (--rpc, --mmproj-url), and a refused list always
# misses the next one. Every entry is sampling-neutral: it changes how fast the same tokens come, or how
# the case speculates, never which model answers, on which address, or what is measured. To let cases
# use another flag, add it here with its reason (docs/hostile-inputs.md says how); the spellings are those
# of the pinned build's --help (all of them: llama.cpp takes any).
CASE_FLAGS: tuple[CaseFlag, ...] = (
    CaseFlag(("-t", "--threads"), 1, "CPU threads for generation: speed only (cases.toml pins 1 on CPU)"),
    CaseFlag(("-tb", "--threads-batch"), 1, "CPU threads for the prompt: speed only"),
    CaseFlag(("-b", "--batch-size"), 1, "logical batch size: how the prompt is cut, speed and memory only"),
    CaseFlag(("-ub", "--ubatch-size"), 1, "physical batch size: speed and memory only"),
    CaseFlag(
        ("-ctk", "--cache-type-k"),
        1,
        "the target's KV cache type for K: a memory/speed trade a case "
        "measures (identical_fraction says whether tokens changed)",
    ),
    CaseFlag(("-ctv", "--cache-type-v"), 1, "the target's KV cache type for V: as --cache-type-k"),
    CaseFlag(
        ("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"),
        1,
        "the draft's KV cache type for K: what the drafter keeps, judged by acceptance",
    ),
    CaseFlag(("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"), 1, "the draft's KV cache type for V"),
    CaseFlag(
        ("--spec-draft-threads", "-td", "--threads-draft"), 1, "CPU threads of the draft model: speed only"
    ),
    CaseFlag(
        ("--spec-draft-threads-batch", "-tbd", "--threads-batch-draft"), 1, "the draft's prompt threads"
    ),
    CaseFlag(("-sm", "--split-mode"), 1, "how a case with gpus > 1 splits the model: layout, not tokens"),
    CaseFlag(("--spec-draft-p-split",), 1, "the draft tree's split probability: how a case speculates"),
    # the ngram drafters' lookup lengths and hit counts (their draft lengths are n_max / n_min: the harness's)
    CaseFlag(("--spec-ngram-simple-size-n",), 1, "ngram-simple's lookup length (<= its draft length)"),
    CaseFlag(("--spec-ngram-simple-min-hits",), 1, "ngram-simple's hits before it drafts"),
    CaseFlag(("--spec-ngram-map-k-size-n",), 1, "ngram-map-k's lookup length"),
    CaseFlag(("--spec-ngram-map-k-min-hits",), 1, "ngram-map-k's hits before it drafts"),
    CaseFlag(("--spec-ngram-map-k4v-size-n",), 1, "ngram-map-k4v's lookup length"),
    CaseFlag(("--spec-ngram-map-k4v-min-hits",), 1, "ngram-map-k4v's hits before it drafts"),
    # the server's life over many requests: how it makes room at the context limit and what it keeps between
    # requests. Upstream's bugs live there (#21815: the n-gram map speculators abort under --context-shift;
    # #27852: ngram-cache state leaks from one request into the next), and a user reproducing a report
    # gives these; the speculation-off server gets them too, so the comparison stays like for like.
    CaseFlag(("--context-shift",), 0, "shift the context at its limit (#21815's trigger)"),
    CaseFlag(("--no-context-shift",), 0, "stop at the context limit (the default, said explicitly)"),
    CaseFlag(("--keep",), 1, "the prompt tokens a context shift keeps"),
    CaseFlag(("--cache-reuse",), 1, "reuse cached prompt chunks by KV shifting"),
    CaseFlag(("-cram", "--cache-ram"), 1, "the prompt cache's size in MiB"),
    CaseFlag(("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), 1, "context checkpoints per slot"),
    CaseFlag(("-cms", "--checkpoint-min-step"), 1, "the spacing of context checkpoints in tokens"),
    CaseFlag(("--swa-full",), 0, "a full-size SWA cache"),
    # a mode case's server_args are the user's extra arguments, read by the front end's resolver: a user who
    # sets the spec type or a draft length there decides it (USER_SPEC_CHOICES, owned by the harness else)
    *(
        CaseFlag(spellings, 0 if what == "spec default" else 1, f"a mode case: the user's {what}", True)
        for what, spellings in _OWNED_GROUPS.items()
        if what in USER_SPEC_CHOICES
    ),
)
ALLOWED: dict[str, CaseFlag] = {flag: entry for entry in CASE_FLAGS for flag in entry.spellings}


def server_args_problem(args: tuple[str, ...], mode_case: bool) -> str | None:
    """Why ``args`` (a case's server_args) may not go on a server's command line, in one line naming the
    flag; None when every flag is in ``CASE_FLAGS`` (with its values)."""
    i = 0
    while i < len(args):
        arg = args[i]
        entry = ALLOWED.get(arg)
        if entry is None or (entry.mode_only and not mode_case):
            return _refusal(arg)
        values = args[i + 1 : i + 1 + entry.values]
        if len(values) < entry.values or any(_flag_like(v) for v in values):
            got = f"got {values[-1][:60]!r}" if values else "it is the last item"
            return f"{arg!r} takes {entry.values} value(s) as the next item(s) of the list ({got})"
        i += 1 + entry.values
    return None


def _flag_like(value: str) -> bool:
    """A value that reads as a flag (``-m``, ``--path``), not as a negative number (``-1``)."""
    return value.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", value)


def _refusal(arg: str) -> str:
    if (found := owned_flag(arg)) is not None:
        flag, what = found
        return (
            f"{flag!r} is a flag the harness sets ({what}) on every server it starts; remove it (a case may "
            "add flags, never change the model, address or measurement)"
        )
    if not arg.startswith("-"):
        return f"{arg[:60]!r} is not a flag (a value must follow the flag it belongs to)"
    return (
        f"{arg[:60]!r} is not a flag a case may add: server_args take only the sampling-neutral flags of "
        "common/serverflags.py CASE_FLAGS (threads, batch sizes, cache types, speculative tuning); give the "
        "value of a flag as its own item"
    )


# --- speculative flags ------------------------------------------------------------------------------------
# The one definition of a speculative flag: an option of llama-server is speculative when one of its
# spellings, as the binary's own --help lists them together, names speculation: ``--spec-*`` (every
# speculative option's current spelling at the pin: --spec-type, --spec-draft-threads, --spec-ngram-*,
# --spec-synth-*, --spec-default) or ``draft`` (the legacy spellings, which --help lists beside the current
# ones: -md/--model-draft, -td/--threads-draft, -ctkd/--cache-type-k-draft, --draft-max). So -td is
# speculative because its entry also says --spec-draft-threads. The speculation-off baseline of a case is the
# case's command without these flags (measure.plain.without_speculation), nothing else removed or added.
SPECULATIVE_PREFIXES = ("--spec-", "--no-spec-")


def speculative_spelling(flag: str) -> bool:
    """Whether one spelling (``--flag`` or ``--flag=value``) names speculation by itself."""
    name = flag.split("=", 1)[0]
    return name.startswith(SPECULATIVE_PREFIXES) or (name.startswith("-") and "draft" in name)


def speculative_option(spellings: tuple[str, ...] | list[str]) -> bool:
    """Whether an option (all spellings of one --help entry) is speculative: any spelling names it."""
    return any(speculative_spelling(s) for s in spellings)
