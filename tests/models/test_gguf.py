"""GGUF metadata checks on small GGUF files written here with gguf.GGUFWriter (a few KiB each)."""

from __future__ import annotations

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
