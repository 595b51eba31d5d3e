"""The llama-server command line of a case, from the probe. Its speculation-off server runs the same command
without the speculative flags (``measure.plain``), so the speedup compares like with like.

Every flag comes from the binary's own ``--help`` (probe.Capabilities), looked up with ``require_flag`` /
``require_type``: a flag or type the binary lacks raises ``MissingFlag`` here, while building the command, so
the skip or failure reason of a case (``binary_no_<what>``) is always exactly what the command could not be
built with. Nothing is left to server defaults that move between commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specsuite.cases.schema import CTX_SIZE, DETECT, Case
from specsuite.common import settings
from specsuite.common.serverflags import NGRAM_N_MAX, NGRAM_N_MIN
from specsuite.server.probe import Capabilities, MissingFlag

SEED = "42"  # upstream's ServerProcess passes --seed 42; requests carry the same seed


def runs_on_cpu(caps: Capabilities) -> bool:
    """A CPU build, or a GPU build that sees no GPU (``--list-devices`` lists none: ggml falls back to the
    CPU, ``ggml_cuda_init: failed to initialize CUDA``): it gets the CPU build's command line, so that its run
    is the CPU build's run. A binary too old for ``--list-devices`` (backend unknown) keeps the GPU flags."""
    return caps.backend == "cpu" or (caps.backend is not None and not caps.gpus)


def gpu_layers(caps: Capabilities) -> str | None:
    """-ngl value from N_GPU_LAYERS (default 99); None where it runs on the CPU (offload means nothing)."""
    if runs_on_cpu(caps):
        return None
    return str(settings.load().n_gpu_layers)


def _own_flag(caps: Capabilities, flag: str, fallback: str) -> str:
    """An ngram family's own flag when the binary has it, else the generic draft flag."""
    return flag if flag in caps.options else caps.require_flag(fallback)


def spec_args(caps: Capabilities, case: Case, draft: Path | None) -> list[str]:
    """The speculative part of a case with a fixed configuration (spec_type or spec_default)."""
    if case.spec_default:
        return [caps.require_flag("spec_default")]
    args: list[str] = []
    if case.spec_type != (DETECT,):
        tokens = ",".join(caps.require_type(t) for t in case.spec_type)
        args += [caps.require_flag("spec_type"), tokens]
    if draft is not None:
        args += [caps.require_flag("draft_model"), str(draft)]
    single = case.spec_type[0] if len(case.spec_type) == 1 else None
    if case.n_max is not None:
        args += [_own_flag(caps, NGRAM_N_MAX.get(single or "", ""), "draft_n_max"), str(case.n_max)]
    if case.n_min is not None:
        args += [_own_flag(caps, NGRAM_N_MIN.get(single or "", ""), "draft_n_min"), str(case.n_min)]
    if case.p_min is not None:
        args += [caps.require_flag("draft_p_min"), f"{case.p_min:g}"]
    if case.synth_rates is not None:
        args += [caps.require_flag("synth_rates"), ",".join(f"{r:g}" for r in case.synth_rates)]
    if case.synth_len is not None:
        args += [caps.require_flag("synth_len"), f"{case.synth_len:g}"]
    return args


def server_command(
    caps: Capabilities,
    target: Path,
    port: int,
    case: Case | None = None,
    draft: Path | None = None,
    resolved: Sequence[str] | None = None,
    ctx_size: int | None = None,
    parallel: int | None = None,
) -> list[str]:
    """The full argv. ``case=None`` is the baseline: the same server with speculation off (``ctx_size``:
    a slot's context, the case's; default upstream's). ``resolved``: the flags the mode resolver chose for
    a ``mode`` case (instead of the case's fixed configuration). ``parallel``: the slots (default the
    case's, else 1).

    A case's ``server_args`` come first: llama.cpp takes the last of a repeated flag, so the harness's own
    flags (cases.toml refuses them in server_args anyway) always win."""
    ngl = gpu_layers(caps)
    extra = list(case.server_args) if case is not None else []
    ctx = ctx_size or (case.ctx_size if case is not None else CTX_SIZE)
    cmd = [caps.binary, *extra, "-m", str(target), *slot_args(caps, _slots(case, parallel), ctx)]
    if ngl is not None:
        cmd += [caps.require_flag("n_gpu_layers"), ngl]
        if case is not None:  # as upstream: the draft (or MTP head) is offloaded like the target
            cmd += [caps.require_flag("draft_ngl"), ngl]
    cmd += [caps.require_flag("flash_attn"), "on", caps.require_flag("metrics")]
    if caps.flag("fit"):  # --fit on (the default) resizes ctx and offload to free VRAM: not reproducible
        cmd += [caps.require_flag("fit"), "off"]
    if "--offline" in caps.options:  # models are local paths; never let the server reach the network
        cmd.append("--offline")
    # As upstream's test helper (tools/server/tests/utils.py passes both by default): no /slots endpoint,
    # the built-in chat templates. Neither touches /completion, where the counters and speed come from.
    cmd += [flag for flag in ("--no-slots", "--no-jinja") if flag in caps.options]
    if runs_on_cpu(caps):
        cmd += _no_polling(caps, draft)
    cmd += ["--temp", "0", caps.require_flag("seed"), SEED, "--host", "127.0.0.1", "--port", str(port)]
    if resolved is not None:
        cmd += _known(caps, resolved)
    elif case is not None:
        cmd += spec_args(caps, case, draft)
    return cmd


def _slots(case: Case | None, parallel: int | None) -> int:
    return parallel if parallel is not None else case.parallel if case is not None else 1


def slot_args(caps: Capabilities, parallel: int, per_slot: int = CTX_SIZE) -> list[str]:
    """``--ctx-size`` and ``--parallel``: llama-server divides the context among its slots (without a
    unified KV cache, which the harness never turns on: tools/server/server-context.cpp n_ctx_slot), so
    the context grows with the slots and each slot holds ``per_slot``, as the np-1 case's one slot does."""
    return [
        caps.require_flag("ctx_size"),
        str(per_slot * parallel),
        caps.require_flag("parallel"),
        str(parallel),
    ]


def _known(caps: Capabilities, flags: Sequence[str]) -> list[str]:
    """The resolver's flags, each checked against the binary (e.g. --spec-default is newer than MTP)."""
    for flag in flags:
        if flag.startswith("--") and flag not in caps.options:
            raise MissingFlag(
                caps.binary, f"option {flag}", f"binary_no_{flag.removeprefix('--').replace('-', '_')}"
            )
    return list(flags)


def _no_polling(caps: Capabilities, draft: Path | None) -> list[str]:
    """On the CPU, busy-wait polling (default level 50) makes the target's and the draft's thread pools
    starve each other on a few shared cores: measured 4.4 vs 46.8 tokens/s for draft-simple on 2 cores."""
    args = ["--poll", "0"] if "--poll" in caps.options else []
    if draft is not None and "--spec-draft-poll" in caps.options:
        args += ["--spec-draft-poll", "0"]
    return args


def missing_reason(caps: Capabilities, case: Case) -> str | None:
    """``binary_no_<what>`` when the binary cannot run the case, from building its command for real.

    A ``mode`` case needs only what the resolver's answer needs; that is decided at run time from the
    model's metadata, so here it needs just a command line without speculation."""
    placeholder = Path("/nonexistent")
    try:
        server_command(
            caps, placeholder, 0, case, placeholder if case.draft else None, () if case.mode else None
        )
    except MissingFlag as exc:
        return exc.reason
    return None
