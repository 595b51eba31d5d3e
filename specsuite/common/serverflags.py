"""llama-server's flags as the suite names them: every spelling of each across llama.cpp versions, and the
flags the harness owns (a case's ``server_args`` may not give them).

Here, below ``cases`` and ``server``, because both need it: the probe looks the spellings up in a binary's
``--help``, and cases.toml's validation refuses an owned flag before any server starts.
"""

from __future__ import annotations

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


# --- speculative flags ------------------------------------------------------------------------------------
# The one definition of a speculative flag: an option of llama-server is speculative when one of its
# spellings, as the binary's own --help lists them together, names speculation: ``--spec-*`` (every
# speculative option's current spelling at the pin: --spec-type, --spec-draft-threads, --spec-ngram-*,
# --spec-synth-*, --spec-default) or ``draft`` (the legacy spellings, which --help lists beside the current
# ones: -md/--model-draft, -td/--threads-draft, -ctkd/--cache-type-k-draft, --draft-max). So -td is
# speculative because its entry also says --spec-draft-threads. The speculation-off baseline of a case is the
# case's command without these flags (suite.command.without_speculation), nothing else removed or added.
SPECULATIVE_PREFIXES = ("--spec-", "--no-spec-")


def speculative_spelling(flag: str) -> bool:
    """Whether one spelling (``--flag`` or ``--flag=value``) names speculation by itself."""
    name = flag.split("=", 1)[0]
    return name.startswith(SPECULATIVE_PREFIXES) or (name.startswith("-") and "draft" in name)


def speculative_option(spellings: tuple[str, ...] | list[str]) -> bool:
    """Whether an option (all spellings of one --help entry) is speculative: any spelling names it."""
    return any(speculative_spelling(s) for s in spellings)
