"""GGUF metadata checks on small GGUF files written here with gguf.GGUFWriter (a few KiB each)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from specsuite.common.errors import UserError
from specsuite.models.gguf import check_models, has_mtp_marker, read_info

W = np.zeros((4, 8), dtype=np.float32)


def write_gguf(
    path: Path, arch: str, tensors: list[str], kv: dict[str, int] | None = None, name: str | None = None
) -> Path:
    writer = gguf.GGUFWriter(path, arch)
    writer.add_uint32(f"{arch}.block_count", 2)
    if name:
        writer.add_name(name)
    for key, value in (kv or {}).items():
        writer.add_uint32(key, value)
    for tensor in tensors:
        writer.add_tensor(tensor, W)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


PLAIN = ["token_embd.weight", "blk.0.attn_q.weight", "blk.1.attn_q.weight"]
NEXTN = ["blk.2.nextn.eh_proj.weight", "blk.2.nextn.enorm.weight"]


@pytest.fixture
def target(tmp_path) -> Path:
    return write_gguf(tmp_path / "target.gguf", "qwen3", PLAIN)


# --- MTP heads -----------------------------------------------------------------------------------------


def test_mtp_heads_from_key_and_tensors(tmp_path):
    t = write_gguf(tmp_path / "t.gguf", "glm4moe", PLAIN + NEXTN, {"glm4moe.nextn_predict_layers": 1})
    assert check_models(["draft-mtp"], t, None) == []
    info = read_info(t)
    assert (info.arch, info.nextn_predict_layers, info.nextn_tensors) == ("glm4moe", 1, 2)


def test_mtp_heads_from_tensors_only(tmp_path):
    t = write_gguf(tmp_path / "t.gguf", "qwen35", PLAIN + NEXTN)
    assert check_models(["draft-mtp"], t, None) == []


def test_mtp_heads_from_key_only(tmp_path):
    t = write_gguf(tmp_path / "t.gguf", "qwen35", PLAIN, {"qwen35.nextn_predict_layers": 1})
    assert check_models(["draft-mtp"], t, None) == []


def test_mtp_heads_absent(target):
    with pytest.raises(UserError, match=r"target\.gguf: draft-mtp needs MTP heads.*'qwen3'") as exc:
        check_models(["draft-mtp"], target, None)
    assert str(target) in str(exc.value)


def test_mtp_heads_zero(tmp_path):
    t = write_gguf(tmp_path / "t.gguf", "qwen3", PLAIN, {"qwen3.nextn_predict_layers": 0})
    assert read_info(t).nextn_predict_layers == 0
    with pytest.raises(UserError, match="nextn_predict_layers absent or 0"):
        check_models(["draft-mtp"], t, None)


def test_separate_mtp_drafter_carries_the_heads(tmp_path, target):
    """draft-mtp with a draft file: llama.cpp builds the MTP context on the draft, so the heads go there."""
    drafter = write_gguf(
        tmp_path / "mtp-drafter.gguf", "qwen35", PLAIN + NEXTN, {"qwen35.nextn_predict_layers": 1}
    )
    assert check_models(["draft-mtp"], target, drafter) == []
    with pytest.raises(UserError, match=r"needs MTP heads in its separate MTP drafter"):
        check_models(["draft-mtp"], drafter, target)


def test_a_chain_is_checked_type_by_type(tmp_path, target):
    mtp = write_gguf(tmp_path / "m.gguf", "glm4moe", PLAIN + NEXTN, {"glm4moe.nextn_predict_layers": 1})
    assert check_models(["ngram-mod", "draft-mtp"], mtp, None) == []
    with pytest.raises(UserError, match="draft-mtp needs MTP heads"):
        check_models(["ngram-mod", "draft-mtp"], target, None)


# --- drafts ----------------------------------------------------------------------------------------------


def test_dflash_draft(tmp_path, target):
    draft = write_gguf(tmp_path / "dflash.gguf", "dflash", ["fc.weight"])
    assert check_models(["draft-dflash"], target, draft) == []


def test_dspark_needs_markov_head(tmp_path, target):
    plain = write_gguf(tmp_path / "dflash.gguf", "dflash", ["fc.weight"])
    with pytest.raises(UserError, match=r"dflash\.gguf: a DSpark draft needs the tensor 'markov_w1\.weight'"):
        check_models(["draft-dspark"], target, plain)
    dspark = write_gguf(tmp_path / "dspark.gguf", "dflash", ["fc.weight", "markov_w1.weight"])
    assert check_models(["draft-dspark"], target, dspark) == []
    assert check_models(["draft-dflash"], target, dspark) == []  # a DSpark file is still a dflash draft


def test_eagle3_draft(tmp_path, target):
    eagle = write_gguf(tmp_path / "eagle3.gguf", "eagle3", ["fc.weight"])
    assert check_models(["draft-eagle3"], target, eagle) == []
    dflash = write_gguf(tmp_path / "dflash.gguf", "dflash", ["fc.weight"])
    with pytest.raises(UserError, match=r"dflash\.gguf: draft-eagle3 needs a draft of architecture 'eagle3'"):
        check_models(["draft-eagle3"], target, dflash)


def test_swapped_target_and_draft(tmp_path, target):
    eagle = write_gguf(tmp_path / "eagle3.gguf", "eagle3", ["fc.weight"])
    with pytest.raises(UserError, match=r"target\.gguf: draft-eagle3 needs .* this file is 'qwen3'"):
        check_models(["draft-eagle3"], eagle, target)


def test_missing_draft(target):
    with pytest.raises(UserError, match="draft-dflash needs a draft model of architecture 'dflash'"):
        check_models(["draft-dflash"], target, None)


def test_draft_simple_and_ngram_read_but_do_not_constrain(tmp_path, target):
    draft = write_gguf(tmp_path / "small.gguf", "qwen3", PLAIN)
    assert check_models(["draft-simple"], target, draft) == []
    assert check_models(["draft-simple"], target, target) == []  # a model drafting for itself
    assert check_models(["ngram-mod"], target, None) == []
    assert check_models(["auto"], target, None) == []


# --- the -MTP name marker ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "marked"),
    [
        ("Qwen3.6-27B-MTP-GGUF", True),
        ("qwen3.6-35b-a3b-mtp-q4_k_m.gguf", True),
        ("Qwen3.5-4B-MTP-Q4_K_M.gguf", True),
        ("model_mtp.gguf", True),
        ("mtp-research/foo", False),
        ("MTPower/bar", False),
        ("qwen3-4b-q4_k_m.gguf", False),
        ("smtp-relay.gguf", False),
    ],
)
def test_mtp_marker(name, marked):
    assert has_mtp_marker(name) is marked


def test_mtp_named_file_without_heads_is_suspicious(tmp_path):
    t = write_gguf(tmp_path / "qwen3.6-35b-a3b-mtp-q4_k_m.gguf", "qwen3moe", PLAIN)
    warnings = check_models(["ngram-mod"], t, None)
    assert len(warnings) == 1 and warnings[0].startswith("suspicious:") and str(t) in warnings[0]
    with pytest.raises(UserError, match="needs MTP heads"):  # for an MTP case it is an error, not a warning
        check_models(["draft-mtp"], t, None)


def test_mtp_in_general_name_without_heads_is_suspicious(tmp_path):
    t = write_gguf(tmp_path / "model.gguf", "qwen3", PLAIN, name="Qwen3.6-27B-MTP")
    assert len(check_models(["draft-simple"], t, t)) == 1


def test_mtp_named_file_with_heads_is_fine(tmp_path):
    t = write_gguf(tmp_path / "Qwen3.5-4B-MTP-Q4_K_M.gguf", "qwen35", PLAIN + NEXTN)
    assert check_models(["draft-mtp"], t, None) == []
    assert check_models(["ngram-mod"], t, None) == []


def test_marker_lookalike_is_not_suspicious(tmp_path):
    t = write_gguf(tmp_path / "MTPower-bar.gguf", "qwen3", PLAIN)
    assert check_models(["ngram-mod"], t, None) == []


# --- unreadable files ------------------------------------------------------------------------------------


def test_not_gguf(tmp_path, target):
    bogus = tmp_path / "model.gguf"
    bogus.write_text("<html>rate limited</html>\n" * 20)
    with pytest.raises(UserError, match=r"model\.gguf: not a readable GGUF file \(GGUF magic invalid\)"):
        check_models(["ngram-mod"], bogus, None)
    with pytest.raises(UserError, match=r"model\.gguf: not a readable GGUF file"):
        check_models(["draft-simple"], target, bogus)


def test_truncated_anywhere(tmp_path):
    # Every prefix of a valid file: header, metadata, tensor infos or data cut short -> one clear UserError.
    whole = write_gguf(tmp_path / "whole.gguf", "glm4moe", PLAIN + NEXTN, {"glm4moe.nextn_predict_layers": 1})
    assert check_models(["draft-mtp"], whole, None) == []
    data = whole.read_bytes()
    cut = tmp_path / "cut.gguf"
    for n in [*range(0, len(data), 7), len(data) - 1]:  # every 7th byte keeps this under a second
        cut.write_bytes(data[:n])
        with pytest.raises(UserError, match=r"cut\.gguf: not a readable GGUF file"):
            check_models(["draft-mtp"], cut, None)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match=r"model file not found: .*absent\.gguf"):
        check_models(["ngram-mod"], tmp_path / "absent.gguf", None)


def test_gguf_without_architecture(tmp_path):
    path = tmp_path / "noarch.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    # Rewrite the key name so the file stays valid GGUF but lacks general.architecture.
    path.write_bytes(path.read_bytes().replace(b"general.architecture", b"general.architectur_"))
    with pytest.raises(UserError, match=r"noarch\.gguf: GGUF file lacks general\.architecture"):
        check_models(["ngram-mod"], path, None)


# --- the per-file cache ---------------------------------------------------------------------------------


def test_unchanged_file_is_read_once_changed_file_again(tmp_path, monkeypatch):
    from specsuite.models import gguf as modelcheck

    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    t = write_gguf(tmp_path / "t.gguf", "qwen35", PLAIN + NEXTN)
    reads = []
    real = modelcheck._read_uncached
    monkeypatch.setattr(modelcheck, "_read_uncached", lambda p: reads.append(p) or real(p))
    assert read_info(t).nextn_tensors == 2
    assert read_info(t).nextn_tensors == 2
    assert len(reads) == 1  # the second answer came from the cache
    write_gguf(t, "qwen35", PLAIN)  # the same path, other bytes: a new identity
    assert read_info(t).nextn_tensors == 0
    assert len(reads) == 2
    t.write_bytes(t.read_bytes()[:40])  # truncated after being cached: read again, and refused
    with pytest.raises(UserError, match="not a readable GGUF file"):
        read_info(t)


# --- hostile headers: every count and length checked against the file's size first ----------------------

U8, STR, ARR = 0, 8, 9  # GGUF value types


def _s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _header(kv: bytes, n_kv: int = 1, n_tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kv


def _arch() -> bytes:
    return _s(b"general.architecture") + struct.pack("<I", STR) + _s(b"llama")


def _nested(depth: int) -> bytes:
    """An array of arrays ``depth`` deep, one element each, the innermost a uint8."""
    body = struct.pack("<IQ", U8, 1) + b"\0"
    for _ in range(depth - 1):
        body = struct.pack("<IQ", ARR, 1) + body
    return _s(b"x") + struct.pack("<I", ARR) + body


HOSTILE = {
    # the issue's 98-byte file: a uint8 array claiming 2^62 elements (the reader spun and grew without end)
    "u8 array of 2^62": _header(_s(b"tokenizer.ggml.token_type") + struct.pack("<IIQ", ARR, U8, 1 << 62)),
    "string array of 2^62": _header(_s(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 1 << 62)),
    "string of 2^63 bytes": _header(_s(b"general.name") + struct.pack("<IQ", STR, 1 << 63)),
    "key of 2^40 bytes": _header(struct.pack("<Q", 1 << 40) + b"k"),
    "2^60 keys": _header(_arch(), n_kv=1 << 60),
    "2^60 tensors": _header(_arch(), n_tensors=1 << 60),
    "a tensor of 2^31 dimensions": _header(_arch(), n_tensors=1) + _s(b"t") + struct.pack("<I", 1 << 31),
    "arrays nested 100 000 deep": _header(_nested(100_000)),
    "unknown value type": _header(_s(b"k") + struct.pack("<I", 99)),
}


def _read_bounded(path: Path) -> subprocess.CompletedProcess[str]:
    """read_info in a child with a memory limit and a timeout: a reader that spins fails the test, not the
    machine."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from specsuite.common.errors import UserError\n"
        "from specsuite.models.gguf import read_info\n"
        "try:\n    read_info(sys.argv[1])\nexcept UserError as exc:\n    print(exc); sys.exit(2)\n"
    )
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SPEC_CACHE_DIR": str(path.parent / "cache")})  # fmt: skip


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_header_is_one_line_at_once(tmp_path: Path, name: str) -> None:
    path = tmp_path / "hostile.gguf"
    path.write_bytes(HOSTILE[name])
    proc = _read_bounded(path)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.startswith(f"{path}: not a readable GGUF file (") and proc.stdout.count("\n") == 1
    assert "delete it and fetch it again" in proc.stdout and proc.stderr == ""


def test_the_issues_file_is_98_bytes(tmp_path: Path) -> None:
    data = HOSTILE["u8 array of 2^62"] + b"\0" * (98 - len(HOSTILE["u8 array of 2^62"]))
    assert len(data) == 98
    path = tmp_path / "x.gguf"
    path.write_bytes(data)
    proc = _read_bounded(path)
    assert proc.returncode == 2 and "2^62" not in proc.stdout and "4611686018427387904" in proc.stdout


def test_valid_files_with_arrays_strings_and_tensors_still_read(tmp_path: Path) -> None:
    """The bounds pass what the gguf writer writes: a vocabulary, nested lists, many tensors."""
    writer = gguf.GGUFWriter(tmp_path / "v.gguf", "llama")
    writer.add_token_list([f"tok{i}" for i in range(5000)])
    writer.add_token_types([1] * 5000)
    writer.add_array("test.nested", [[1, 2], [3, 4]])
    for i in range(300):
        writer.add_tensor(f"blk.{i}.w", W)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    info = read_info(tmp_path / "v.gguf")
    assert info.arch == "llama" and info.nextn_tensors == 0
