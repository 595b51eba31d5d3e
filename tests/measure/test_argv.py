"""The llama-server command line of a case, built from the recorded ``--help`` of the pinned build.

Every flag comes from the probe: a flag or type the binary lacks raises MissingFlag while the command is
built, and that is the case's skip or failure reason (``missing_reason``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from casetext import HEAD
from testdata import DATA_ROOT

from specsuite.cases.schema import parse_case_file
from specsuite.measure.argv import missing_reason, server_command
from specsuite.server.probe import Capabilities, MissingFlag, parse_help

HELP = DATA_ROOT / "help" / "current.txt"


H100 = ("CUDA0: NVIDIA H100 80GB HBM3 (81007 MiB, 80468 MiB free)",)


def _caps(backend: str, drop: tuple[str, ...] = (), devices: tuple[str, ...] | None = None) -> Capabilities:
    """The pinned build's capabilities; a GPU backend sees an H100 unless ``devices`` says otherwise."""
    options, removed, types = parse_help(HELP.read_text())
    devices = (H100 if backend != "cpu" else ()) if devices is None else devices
    return Capabilities(
        "/b/llama-server", "version: x", "0c1e570", types - set(drop), options - set(drop), removed, backend,
        devices,
    )  # fmt: skip


def _case(body: str):
    head = HEAD + '[[case]]\nname = "c"\ntier = "smoke"\ntarget = "t.gguf"\n'
    return parse_case_file(head + textwrap.dedent(body)).cases[0]


def test_command_cpu_build_omits_ngl_and_polls_not(monkeypatch) -> None:
    monkeypatch.setenv("N_GPU_LAYERS", "42")
    case = _case(
        'spec_type = "draft-simple"\ndraft = "t.gguf"\nn_max = 3\nsynth_rates = [0.0, 0.0, 0.0]\n'
        "min_accept_rate = 0.0\nmin_accept_len = 1.0\n"
    )
    cmd = server_command(_caps("cpu"), Path("/m/t.gguf"), 8111, case, Path("/m/t.gguf"))
    assert "--n-gpu-layers" not in cmd and "--spec-draft-ngl" not in cmd
    s = " ".join(cmd)
    for part in (
        "-m /m/t.gguf --ctx-size 1024 --parallel 1",
        "--flash-attn on --metrics --fit off --offline --no-slots --no-jinja",
        "--poll 0 --spec-draft-poll 0",
        "--temp 0 --seed 42 --host 127.0.0.1 --port 8111",
        "--spec-type draft-simple --spec-draft-model /m/t.gguf --spec-draft-n-max 3",
        "--spec-synth-rates 0,0,0",
    ):
        assert part in s


def test_command_of_a_cuda_build_without_a_gpu_is_the_cpu_builds(monkeypatch) -> None:
    """ggml_cuda_init failed, the binary runs on the CPU: no offload, no polling, as the CPU build."""
    monkeypatch.delenv("N_GPU_LAYERS", raising=False)
    case = _case(
        'spec_type = "draft-simple"\ndraft = "d.gguf"\nn_max = 3\n'
        "min_accept_rate = 0.0\nmin_accept_len = 1.0\n"
    )
    fallback = server_command(_caps("cuda", devices=()), Path("/m/t.gguf"), 1, case, Path("/m/d.gguf"))
    assert fallback == server_command(_caps("cpu"), Path("/m/t.gguf"), 1, case, Path("/m/d.gguf"))
    assert "--poll" in fallback and "--n-gpu-layers" not in fallback
    unknown = server_command(_caps(None, devices=()), Path("/m/t.gguf"), 1, case, Path("/m/d.gguf"))  # type: ignore[arg-type]
    assert "--n-gpu-layers" in unknown and "--poll" not in unknown  # too old to say: GPU flags kept


def test_upstreams_no_slots_and_no_jinja_only_where_the_binary_has_them() -> None:
    for case in (
        None,
        _case('spec_type = "ngram-mod"\nn_max = 8\nmin_accept_rate = 0.5\nmin_accept_len = 2.0\n'),
    ):
        assert {"--no-slots", "--no-jinja"} <= set(server_command(_caps("cpu"), Path("/m/t.gguf"), 1, case))
        old = _caps("cpu", drop=("--no-slots", "--no-jinja"))  # a binary from before the two switches
        assert not {"--no-slots", "--no-jinja"} & set(server_command(old, Path("/m/t.gguf"), 1, case))


def test_command_gpu_build_sets_ngl_for_target_and_draft(monkeypatch) -> None:
    monkeypatch.delenv("N_GPU_LAYERS", raising=False)
    case = _case(
        'spec_type = "draft-dflash"\ndraft = "d.gguf"\nn_max = 7\nmin_accept_rate = 0.1\n'
        'min_accept_len = 2.0\np_min = 0.0\nserver_args = ["-ub", "64"]\n'
    )
    cmd = server_command(_caps("cuda"), Path("/m/t.gguf"), 8111, case, Path("/m/d.gguf"))
    s = " ".join(cmd)
    assert "--n-gpu-layers 99 --spec-draft-ngl 99" in s and "--poll" not in s
    assert s.startswith("/b/llama-server -ub 64 -m /m/t.gguf") and s.endswith(
        "--spec-draft-n-max 7 --spec-draft-p-min 0"
    )


def test_command_ngram_length_goes_to_its_own_flags_and_baseline_has_no_spec() -> None:
    case = _case(
        'spec_type = "ngram-mod"\nn_max = 16\nn_min = 4\nmin_accept_rate = 0.1\nmin_accept_len = 1.0\n'
    )
    s = " ".join(server_command(_caps("cpu"), Path("/m/t.gguf"), 1, case))
    assert "--spec-ngram-mod-n-max 16 --spec-ngram-mod-n-min 4" in s and "--spec-draft-n-max" not in s
    base = server_command(_caps("cpu"), Path("/m/t.gguf"), 1)
    assert not [a for a in base if a.startswith("--spec")]


def test_gpu_build_offloads_the_draft_of_every_speculative_case_as_upstream(monkeypatch) -> None:
    monkeypatch.delenv("N_GPU_LAYERS", raising=False)
    mtp = _case('spec_type = "draft-mtp"\nn_max = 3\nmin_accept_rate = 0.1\nmin_accept_len = 1.0\n')
    s = " ".join(server_command(_caps("cuda"), Path("/m/t.gguf"), 1, mtp))
    assert "--n-gpu-layers 99 --spec-draft-ngl 99" in s  # no draft file: the MTP head is the "draft"
    base = " ".join(server_command(_caps("cuda"), Path("/m/t.gguf"), 1))
    assert "--n-gpu-layers 99" in base and "--spec-draft-ngl" not in base


def test_chain_spec_default_and_detect() -> None:
    chain = _case(
        'spec_type = ["ngram-mod", "draft-mtp"]\nn_max = 3\nmin_accept_rate = 0.1\nmin_accept_len = 1.0\n'
    )
    s = " ".join(server_command(_caps("cpu"), Path("/m/t.gguf"), 1, chain))
    assert "--spec-type ngram-mod,draft-mtp --spec-draft-n-max 3" in s  # a chain's n_max is the draft's
    default = _case("spec_default = true\nmin_accept_rate = 0.1\nmin_accept_len = 1.0\n")
    s = " ".join(server_command(_caps("cpu"), Path("/m/t.gguf"), 1, default))
    assert s.endswith("--spec-default") and "--spec-type" not in s
    detect = _case(
        'spec_type = "detect"\ndraft = "d.gguf"\nn_max = 3\nmin_accept_rate = 0.1\nmin_accept_len = 1.0\n'
    )
    s = " ".join(server_command(_caps("cpu"), Path("/m/t.gguf"), 1, detect, Path("/m/d.gguf")))
    assert "--spec-type" not in s and "--spec-draft-model /m/d.gguf --spec-draft-n-max 3" in s


@pytest.mark.parametrize(
    ("body", "drop", "backend", "reason"),
    [
        (
            'spec_type = "draft-dspark"\ndraft = "d.gguf"\nn_max = 7',
            ("draft-dspark",),
            "cpu",
            "binary_no_dspark",
        ),
        ('spec_type = "draft-mtp"\nn_max = 3', ("draft-mtp",), "cpu", "binary_no_mtp"),
        ('spec_type = ["ngram-mod", "draft-mtp"]\nn_max = 3', ("ngram-mod",), "cpu", "binary_no_ngram-mod"),
        (
            'spec_type = "draft-simple"\ndraft = "d.gguf"\nn_max = 3\nsynth_rates = [1.0, 1.0, 1.0]',
            ("--spec-synth-rates",),
            "cpu",
            "binary_no_synth_rates",
        ),
        (
            'spec_type = "draft-mtp"\nn_max = 3',
            ("--spec-draft-ngl", "--n-gpu-layers-draft", "--gpu-layers-draft", "-ngld"),
            "cuda",
            "binary_no_draft_ngl",
        ),
        ("spec_default = true", ("--spec-default",), "cpu", "binary_no_spec_default"),
        (  # an older binary without ngram-mod's own length flag: a reason, not "harness bug"
            'spec_type = "ngram-mod"\nn_max = 16',
            ("--spec-ngram-mod-n-max", "--spec-draft-n-max", "--draft-max", "--draft-n", "--draft"),
            "cpu",
            "binary_no_draft_n_max",
        ),
    ],
)
def test_missing_flag_is_the_reason(body, drop, backend, reason) -> None:
    case = _case(body + "\nmin_accept_rate = 0.1\nmin_accept_len = 1.0\n")
    caps = _caps(backend, drop)
    with pytest.raises(MissingFlag) as exc:
        server_command(caps, Path("/m/t.gguf"), 1, case, Path("/m/d.gguf") if case.draft else None)
    assert exc.value.reason == reason
    assert missing_reason(caps, case) == reason
    assert missing_reason(_caps(backend), case) is None


def test_resolved_flags_are_checked_against_the_binary() -> None:
    mode = _case('mode = "auto"\nuncalibrated = true\n')
    flags = ("--spec-default",)
    assert server_command(_caps("cpu"), Path("/m/t.gguf"), 1, mode, None, flags)[-1] == "--spec-default"
    with pytest.raises(MissingFlag, match="binary_no_spec_default"):
        server_command(_caps("cpu", ("--spec-default",)), Path("/m/t.gguf"), 1, mode, None, flags)


@pytest.mark.parametrize("how", ["spec_type", "mode", "spec_default"])
def test_a_cases_server_args_come_before_every_flag_of_the_harness(how: str) -> None:
    """llama.cpp takes the last of a repeated flag: whatever a case adds, the harness's own flags win."""
    body = {
        "spec_type": 'spec_type = "draft-simple"\ndraft = "t.gguf"\nn_max = 3\n',
        "mode": 'mode = "auto"\n',
        "spec_default": "spec_default = true\n",
    }[how]
    case = _case(
        body + 'uncalibrated = true\nserver_args = ["--threads", "1", "--spec-ngram-simple-size-n", "4"]\n'
    )
    draft = Path("/m/t.gguf") if how == "spec_type" else None
    resolved = ("--spec-default",) if how == "mode" else None
    cmd = server_command(_caps("cpu"), Path("/m/t.gguf"), 8111, case, draft, resolved)
    assert cmd[:6] == ["/b/llama-server", "--threads", "1", "--spec-ngram-simple-size-n", "4", "-m"]
    assert cmd.count("--threads") == 1 and cmd[cmd.index("--host") + 1] == "127.0.0.1"


def test_slots_grow_the_context_so_each_slot_holds_the_np1_cases() -> None:
    """--parallel N with --ctx-size 1024 N: llama-server divides the context among its slots (measured on
    the pinned build: n_slots = 4, n_ctx_slot = 1024 at np 4)."""
    body = 'spec_type = "ngram-mod"\nn_max = 8\nmin_accept_rate = 0.5\nmin_accept_len = 2.0\n'
    four = _case(body + "parallel = [1, 2, 4]\n")  # the np-1 member
    caps, target = _caps("cpu"), Path("/m/t.gguf")
    assert "--ctx-size 1024 --parallel 1" in " ".join(server_command(caps, target, 1, four))
    assert "--ctx-size 4096 --parallel 4" in " ".join(server_command(caps, target, 1, four, parallel=4))
    assert "--ctx-size 2048 --parallel 2" in " ".join(server_command(caps, target, 1, parallel=2))  # baseline
    eight = _case(body + "parallel = 8\nstreams = 16\n")
    assert "--ctx-size 8192 --parallel 8" in " ".join(server_command(caps, target, 1, eight))
