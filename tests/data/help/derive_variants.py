"""Derive the non-current ``--help`` fixtures from ``current.txt`` (recorded from the pinned CPU build).

Run once by hand (``python tests/data/help/derive_variants.py``); the outputs are committed, so a test
never depends on this script. Each variant changes only the speculative options, written in the exact
layout of llama.cpp's ``common_arg::to_string`` (names padded to column 40, help wrapped at 70 columns),
with texts taken from older upstream help output and docs (see README.md next to this file).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
COL = 40


def entry(names: list[str], hint: str, text: str, env: str | None = None) -> str:
    """One option as common_arg::to_string prints it."""
    head = names[0] if len(names) == 1 else (names[0] + ", ").ljust(7) + ", ".join(names[1:])
    head += f" {hint}" if hint else ""
    lines = textwrap.wrap(text, 70) + ([f"(env: {env})"] if env else [])
    first = head + "\n" + " " * COL if len(head) > COL - 3 else head.ljust(COL)
    return first + ("\n" + " " * COL).join(lines) + "\n"


def entries_of(help_text: str) -> list[str]:
    """Split a help text into blocks: one per option, section headers and blank lines kept as blocks."""
    blocks: list[str] = []
    for line in help_text.splitlines(keepends=True):
        starts = line.startswith("-") and not line.startswith("-----")
        if blocks and not starts and line.startswith(" "):
            blocks[-1] += line
        else:
            blocks.append(line)
    return blocks


def first_name(block: str) -> str:
    return block.split()[0].rstrip(",") if block.startswith("-") and not block.startswith("-----") else ""


def edit(help_text: str, drop: set[str], replace: dict[str, str], after: dict[str, str] | None = None) -> str:
    out = []
    for block in entries_of(help_text):
        name = first_name(block)
        if name in drop:
            continue
        out.append(replace.get(name, block))
        if after and name in after:
            out.append(after[name])
    return "".join(out)


NGRAMS = "ngram-cache|ngram-simple|ngram-map-k|ngram-map-k4v|ngram-mod"
SPEC_TYPES_POST_RENAME = f"[none|draft-simple|draft-mtp|{NGRAMS}]"
SPEC_TYPES_LEGACY = f"[none|mtp|{NGRAMS}]"
NGL_HELP = (
    "max. number of draft model layers to store in VRAM, "
    "either an exact number, 'auto', or 'all' (default: auto)"
)
SPEC_TYPE_HELP = "comma-separated list of types of speculative decoding to use (default: none)"


def post_rename(cur: str) -> str:
    """After the --spec-draft-* rename, before EAGLE-3/DFlash/DSpark and synthetic acceptance."""
    spec = entry(["--spec-type"], SPEC_TYPES_POST_RENAME, SPEC_TYPE_HELP, "LLAMA_ARG_SPEC_TYPE")
    return edit(cur, {"--spec-synth-len", "--spec-synth-rates"}, {"--spec-type": spec})


def legacy(cur: str) -> str:
    """Before the rename: MTP is ``mtp``, draft length is --draft-max, draft layers are -ngld."""
    new_names = {
        "--spec-draft-model": entry(
            ["-md", "--model-draft"],
            "FNAME",
            "draft model for speculative decoding (default: unused)",
            "LLAMA_ARG_MODEL_DRAFT",
        ),
        "--spec-draft-ngl": entry(
            ["-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"],
            "N",
            NGL_HELP,
            "LLAMA_ARG_N_GPU_LAYERS_DRAFT",
        ),
        "--spec-draft-n-max": entry(
            ["-draft", "--draft-n", "--draft-max"],
            "N",
            "number of tokens to draft for speculative decoding (default: 16)",
            "LLAMA_ARG_DRAFT_MAX",
        ),
        "--spec-draft-n-min": entry(
            ["--draft-min", "--draft-n-min"],
            "N",
            "minimum number of draft tokens to use for speculative decoding (default: 0)",
            "LLAMA_ARG_DRAFT_MIN",
        ),
        "--spec-draft-p-min": entry(
            ["--draft-p-min"],
            "P",
            "minimum speculative decoding probability (greedy) (default: 0.75)",
            "LLAMA_ARG_DRAFT_P_MIN",
        ),
        "--spec-type": entry(
            ["--spec-type"],
            SPEC_TYPES_LEGACY,
            "type of speculative decoding to use when no draft model is provided (default: none)",
        ),
    }
    removed_later = {
        "--draft",
        "--draft-min",
        "--spec-synth-len",
        "--spec-synth-rates",
        "--spec-ngram-size-n",
        "--spec-ngram-size-m",
        "--spec-ngram-min-hits",
    }
    return edit(cur, removed_later, new_names)


def removal_stubs(cur: str) -> str:
    """A newer binary whose legacy aliases and two flags the suite uses became removal stubs."""
    ngl = entry(
        ["--spec-draft-ngl"],
        "N",
        NGL_HELP,
        "LLAMA_ARG_SPEC_DRAFT_NGL",
    )
    ngl_stub = entry(
        ["-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"],
        "N",
        "the argument has been removed. use --spec-draft-ngl",
    )
    rates_stub = entry(
        ["--spec-synth-rates"], "P0,P1,...", "the argument has been removed. use --spec-synth-len"
    )
    fit_stub = entry(
        ["-fit", "--fit"], "[on|off]", "the argument has been removed. memory fitting is always on"
    )
    return edit(
        cur,
        set(),
        {"--spec-draft-ngl": ngl, "--spec-synth-rates": rates_stub, "-fit": fit_stub},
        after={"--spec-draft-ngl": ngl_stub},
    )


def minimal() -> str:
    """A binary from before speculative decoding reached the server: no --spec-type, no draft flags."""
    return "----- common params -----\n\n" + "".join(
        [
            entry(["-h", "--help", "--usage"], "", "print usage and exit"),
            entry(["--version"], "", "show version and build info"),
            entry(
                ["-c", "--ctx-size"],
                "N",
                "size of the prompt context (default: 4096, 0 = loaded from model)",
                "LLAMA_ARG_CTX_SIZE",
            ),
            entry(
                ["-ngl", "--gpu-layers", "--n-gpu-layers"],
                "N",
                "number of layers to store in VRAM",
                "LLAMA_ARG_N_GPU_LAYERS",
            ),
            entry(
                ["-fa", "--flash-attn"],
                "",
                "enable Flash Attention (default: disabled)",
                "LLAMA_ARG_FLASH_ATTN",
            ),
            entry(
                ["-np", "--parallel"],
                "N",
                "number of parallel sequences to decode (default: 1)",
                "LLAMA_ARG_N_PARALLEL",
            ),
            entry(
                ["--metrics"],
                "",
                "enable prometheus compatible metrics endpoint (default: disabled)",
                "LLAMA_ARG_ENDPOINT_METRICS",
            ),
        ]
    )


def main() -> None:
    cur = (HERE / "current.txt").read_text()
    (HERE / "post-rename.txt").write_text(post_rename(cur))
    (HERE / "legacy.txt").write_text(legacy(cur))
    (HERE / "removal-stubs.txt").write_text(removal_stubs(cur))
    (HERE / "minimal.txt").write_text(minimal())


if __name__ == "__main__":
    main()
