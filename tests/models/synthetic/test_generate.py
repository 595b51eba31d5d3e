"""The synthetic-model generator: deterministic bytes, locked checksums, readable GGUF, clear errors.

Files are real GGUF written by the real generator and read back with ``gguf.GGUFReader``; that the server
loads and drafts with them is the synthetic tier's job (tests/spec, ``SPEC_METHODS=synthetic``).
"""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
import pytest
import tomlkit

from specsuite.cases.schema import load_cases, select_cases
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.models import stamps
from specsuite.models.gguf import check_models
from specsuite.models.lock import load_lock
from specsuite.models.synthetic import generate as synthetic
from specsuite.models.synthetic.tokenizer import EOS_ID, MASK_ID, N_VOCAB

# Files generated once per session (in well under a second) and read by the tests below.


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("synth")
    out = {}
    for recipe in synthetic.RECIPES.values():
        out[recipe.id] = folder / recipe.filename
        synthetic.generate(recipe.id, out[recipe.id])
    return out


def _digest(path: Path) -> tuple[int, str]:
    return path.stat().st_size, sha256_file(path)


def _fields(path: Path) -> dict[str, object]:
    reader = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in reader.fields.items()}


def _tensors(path: Path) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(path).tensors}


def test_recipes_cover_every_kind_in_both_modes() -> None:
    kinds = {"target-llama", "draft-llama", "target-glm4moe-mtp", "draft-eagle3", "draft-dflash"}
    kinds |= {"draft-dspark", "draft-dspark-lowconf", "target-glm4moe", "draft-glm4moe-mtp"}
    extra = {"target-llama-tinyvocab-random", "draft-llama-tinyvocab-random"}  # the sampling test's pair
    extra |= {f"{t}-random-{q}" for t in ("target-llama", "target-glm4moe-mtp") for q in ("q8_0", "q4_0")}
    extra |= {"target-llama-wide-fixed"}  # the speed cases' target: fixed weights only
    extra |= {"target-llama-text-random", "draft-llama-text-random"}  # the text-head pair: random only
    extra |= {
        f"{k}-random-head32" for k in ("target-llama", "draft-llama", "target-glm4moe-mtp", "draft-dspark")
    }
    assert set(synthetic.RECIPES) == {f"{k}-{m}" for k in kinds for m in ("fixed", "random")} | extra
    assert synthetic.RECIPES["target-llama-fixed"].filename == "synth-target-llama-fixed.gguf"


def test_generation_is_byte_identical(files: dict[str, Path], tmp_path: Path) -> None:
    # In reverse order: no file's bytes may depend on what was generated before it.
    for recipe, first in reversed(files.items()):
        again = tmp_path / first.name
        synthetic.generate(recipe, again)
        assert again.read_bytes() == first.read_bytes(), recipe


def test_files_match_models_lock(files: dict[str, Path]) -> None:
    locked = synthetic.locked_recipes(paths.MODELS_LOCK)
    assert set(locked) == set(synthetic.RECIPES), "models.lock's generated entries and the recipes differ"
    for recipe, path in files.items():
        entry = locked[recipe]
        assert entry.name == path.name
        assert _digest(path) == (entry.size, entry.sha256), f"{recipe}: generator changed"


def test_metadata_has_no_paths_or_times(files: dict[str, Path]) -> None:
    for recipe, path in files.items():
        fields = _fields(path)
        assert fields["general.name"] == f"synth-{recipe}"
        assert not any(k.startswith("general.") and "date" in k for k in fields)
        strings = [v for k, v in fields.items() if isinstance(v, str)]
        assert not any(str(path.parent) in s for s in strings)


def test_architectures(files: dict[str, Path]) -> None:
    expected = {
        "target-llama": "llama",
        "draft-llama": "llama",
        "target-glm4moe-mtp": "glm4moe",
        "draft-eagle3": "eagle3",
        "draft-dflash": "dflash",
        "draft-dspark": "dflash",
        "draft-dspark-lowconf": "dflash",
        "target-glm4moe": "glm4moe",
        "draft-glm4moe-mtp": "glm4moe",
        "target-llama-tinyvocab": "llama",
        "draft-llama-tinyvocab": "llama",
        "target-llama-random": "llama",
        "target-glm4moe-mtp-random": "glm4moe",
        "target-llama-wide": "llama",
        "target-llama-text": "llama",
        "draft-llama-text": "llama",
        "draft-llama-random": "llama",
        "draft-dspark-random": "dflash",
    }  # fmt: skip  (the quantised copies and the head32 files: the recipe they copy, less the suffix)
    for recipe, path in files.items():
        kind = recipe.rsplit("-", 1)[0]
        assert _fields(path)["general.architecture"] == expected[kind], recipe
    assert _fields(files["target-llama-fixed"])["llama.block_count"] == 4
    assert _fields(files["draft-llama-fixed"])["llama.block_count"] == 1


def test_separate_drafter_is_the_mtp_targets_tensors_split_in_two(files: dict[str, Path]) -> None:
    """The trunk has no NextN tensors and no nextn_predict_layers; the drafter has only the NextN block
    (plus the shared embeddings); together they hold exactly the MTP target's block tensors."""
    full, trunk, drafter = (_tensors(files[f"{k}-random"]) for k in ("target-glm4moe-mtp", "target-glm4moe",
                                                                        "draft-glm4moe-mtp"))  # fmt: skip
    assert not [t for t in trunk if ".nextn." in t]
    assert "glm4moe.nextn_predict_layers" not in _fields(files["target-glm4moe-random"])
    assert _fields(files["draft-glm4moe-mtp-random"])["glm4moe.nextn_predict_layers"] == 1
    blocks = {t for t in full if t.startswith("blk.")}
    assert blocks == {t for t in trunk if t.startswith("blk.")} | {t for t in drafter if t.startswith("blk.")}
    for name in drafter:
        if name in full:
            assert np.array_equal(drafter[name], full[name]), name


def test_trunk_target_drafts_mtp_only_through_a_drafter(files: dict[str, Path]) -> None:
    f = _fields(files["target-glm4moe-fixed"])
    assert f["glm4moe.block_count"] == 2 and f["glm4moe.leading_dense_block_count"] == 2
    with pytest.raises(UserError, match="draft-mtp needs MTP heads in the target"):
        check_models(("draft-mtp",), files["target-glm4moe-fixed"], None)


def test_drafter_has_the_mtp_only_layout(files: dict[str, Path]) -> None:
    # The pinned loader's mtp_only layout (src/models/glm4-moe.cpp): block_count and the NextN block's index
    # are the target's and blk.0.attn_norm is absent, so the trunk tensors are optional.
    path = files["draft-glm4moe-mtp-fixed"]
    assert _fields(path)["glm4moe.block_count"] == 3
    shapes = {t.name: list(t.shape) for t in gguf.GGUFReader(path).tensors}
    assert not [n for n in shapes if n.startswith(("blk.0.", "blk.1."))]
    assert shapes["blk.2.nextn.eh_proj.weight"] == [128, 64]  # the target's width, n_embd 64
    assert {"token_embd.weight", "output.weight", "output_norm.weight"} <= set(shapes)  # the MTP graph's


def test_shared_tokenizer(files: dict[str, Path]) -> None:
    for recipe, path in files.items():
        if "tinyvocab" in recipe:
            continue  # test_tiny_vocabulary
        f = _fields(path)
        assert f["tokenizer.ggml.model"] == "gpt2", recipe
        tokens = f["tokenizer.ggml.tokens"]
        assert len(tokens) == N_VOCAB == f[f"{f['general.architecture']}.vocab_size"]
        assert tokens[0] == "!" and f["tokenizer.ggml.token_type"][0] == int(gguf.TokenType.NORMAL)
        assert tokens[f["tokenizer.ggml.eos_token_id"]] == "<|endoftext|>" == tokens[EOS_ID]
        assert f["tokenizer.ggml.mask_token_id"] == MASK_ID
        assert f["tokenizer.ggml.merges"] == ["Ġ t", "h e"]


def test_glm4moe_target_has_one_nextn_block(files: dict[str, Path]) -> None:
    path = files["target-glm4moe-mtp-fixed"]
    f = _fields(path)
    assert f["glm4moe.block_count"] == 3
    assert f["glm4moe.nextn_predict_layers"] == 1
    assert f["glm4moe.leading_dense_block_count"] == 2
    names = set(_tensors(path))
    assert {"blk.2.nextn.eh_proj.weight", "blk.2.nextn.enorm.weight", "blk.2.nextn.hnorm.weight"} <= names
    assert not any(n.startswith(("blk.0.nextn", "blk.1.nextn")) for n in names)


def test_eagle3_draft(files: dict[str, Path]) -> None:
    path = files["draft-eagle3-fixed"]
    f = _fields(path)
    assert f["eagle3.block_count"] == 1
    assert f["eagle3.target_layers"] == [0, 1, 2]
    assert f["eagle3.target_hidden_size"] == 64
    shapes = {t.name: list(t.shape) for t in gguf.GGUFReader(path).tensors}
    assert shapes["fc.weight"] == [192, 64]
    assert "token_embd.weight" not in shapes  # shared from the target


def test_dflash_and_dspark_drafts(files: dict[str, Path]) -> None:
    for recipe in ("draft-dflash-fixed", "draft-dspark-fixed", "draft-dspark-lowconf-random"):
        f = _fields(files[recipe])
        assert f["dflash.block_size"] == 4, recipe
        assert f["dflash.target_layers"] == [1, 2, 3], recipe
    assert "markov_w1.weight" not in _tensors(files["draft-dflash-fixed"])
    high, low = _tensors(files["draft-dspark-fixed"]), _tensors(files["draft-dspark-lowconf-fixed"])
    assert {"markov_w1.weight", "markov_w2.weight", "conf_proj.weight", "conf_proj.bias"} <= set(high)
    assert _fields(files["draft-dspark-fixed"])["dflash.has_confidence_head"] is True
    assert high["conf_proj.bias"][0] > 0 > low["conf_proj.bias"][0]
    # The two DSpark drafts differ only in the confidence bias.
    assert all(np.array_equal(high[n], low[n]) for n in high if n != "conf_proj.bias")


def _last_token_logits(t: dict[str, np.ndarray]) -> np.ndarray:
    """Logits of every token when the blocks' small contributions are ignored: head(rmsnorm(embd))."""
    embd = t["token_embd.weight"]  # (n_vocab, n_embd)
    hidden = embd / np.sqrt((embd**2).mean(axis=1, keepdims=True))
    return hidden @ t["output.weight"].T


def test_fixed_weights_predict_token_zero_with_a_wide_margin(files: dict[str, Path]) -> None:
    for recipe in ("target-llama-fixed", "draft-llama-fixed", "target-glm4moe-mtp-fixed"):
        logits = _last_token_logits(_tensors(files[recipe]))
        assert (logits.argmax(axis=1) == 0).all(), recipe
        runner_up = np.sort(logits, axis=1)[:, -2]
        assert (logits[:, 0] - runner_up).min() > 5.0, recipe
    # random weights do not: the target's next token depends on the last one
    logits = _last_token_logits(_tensors(files["target-llama-random"]))
    assert len(set(logits.argmax(axis=1))) > 50


def test_fixed_draft_heads_carry_dim_zero(files: dict[str, Path]) -> None:
    for recipe in ("draft-eagle3-fixed", "draft-dflash-fixed", "draft-dspark-fixed"):
        assert _tensors(files[recipe])["fc.weight"][0, 0] == 1.0, recipe
        assert abs(_tensors(files[recipe.replace("fixed", "random")])["fc.weight"][0, 0]) < 0.5, recipe


def test_mtp_head_passes_the_embedding_through(files: dict[str, Path]) -> None:
    for recipe in ("target-glm4moe-mtp-fixed", "target-glm4moe-mtp-random"):
        eh_proj = _tensors(files[recipe])["blk.2.nextn.eh_proj.weight"]  # (n_embd, 2 * n_embd)
        assert np.abs(eh_proj[:, :64] - np.eye(64)).max() < 0.2, recipe
        assert np.abs(eh_proj[:, 64:]).max() < 0.2, recipe


def test_unknown_recipe_lists_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"unknown synthetic recipe 'draft-medusa'.*target-llama-fixed"):
        synthetic.generate("draft-medusa", tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_make_synthetic_models_writes_verified_files(tmp_path: Path) -> None:
    written = synthetic.make_synthetic_models(out=tmp_path)
    lock = load_lock(paths.MODELS_LOCK)
    assert sorted(p.name for p in written) == sorted(r.filename for r in synthetic.RECIPES.values())
    for path in written:
        entry = lock.entries[path.name]
        assert _digest(path) == (entry.size, entry.sha256)
        assert stamps.read_stamp(path) == entry.sha256  # published like a download: stamped
    names = sorted(p.name for p in written)
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith(".")) == names
    extra = {n for n in os.listdir(tmp_path) if n.startswith(".")}
    assert extra == {f".{n}{suffix}" for n in names for suffix in (".stamp", ".lock")}  # no partial left


def test_make_synthetic_models_defaults_to_the_model_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPEC_MODEL_DIR", str(tmp_path / "models"))
    written = synthetic.make_synthetic_models()
    assert all(p.parent == tmp_path / "models" for p in written)


def _edit_lock(tmp_path: Path, which: str, **changes: object) -> Path:
    """A copy of models.lock with one generated entry's fields changed."""
    doc = tomlkit.parse(paths.MODELS_LOCK.read_text(encoding="utf-8"))
    table = next(t for t in doc["model"] if t.get("recipe") == which)
    table.update(changes)
    lock = tmp_path / "models.lock"
    lock.write_text(tomlkit.dumps(doc), encoding="utf-8")
    return lock


def test_changed_generator_is_a_checksum_failure(tmp_path: Path) -> None:
    lock = _edit_lock(tmp_path, "draft-eagle3-fixed", sha256="0" * 64)
    out = tmp_path / "models"
    with pytest.raises(UserError, match=r"synth-draft-eagle3-fixed\.gguf .*The generator changed"):
        synthetic.make_synthetic_models(out=out, lock=lock)
    assert not (out / "synth-draft-eagle3-fixed.gguf").exists()
    assert not any(p.name.endswith((".part", ".part.json")) for p in out.iterdir())


def test_changed_size_is_a_failure_too(tmp_path: Path) -> None:
    lock = _edit_lock(tmp_path, "target-llama-random", size=1)
    with pytest.raises(UserError, match=r"but 1 bytes, sha256 [0-9a-f]{64} were expected"):
        synthetic.make_synthetic_models(out=tmp_path / "models", lock=lock)


def test_missing_lock_entry_is_a_clear_error(tmp_path: Path) -> None:
    lock = _edit_lock(tmp_path, "draft-dflash-random", recipe="gone")
    with pytest.raises(UserError, match="no generated entry for recipe 'draft-dflash-random'"):
        synthetic.make_synthetic_models(out=tmp_path / "models", lock=lock)


def test_output_folder_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("a file")
    with pytest.raises(
        UserError, match=r"^the output folder .*out exists but is not a folder; give a folder"
    ):
        synthetic.make_synthetic_models(out=tmp_path / "out")
    assert (tmp_path / "out").read_text() == "a file"


def test_directory_at_a_model_name(tmp_path: Path) -> None:
    (tmp_path / "synth-target-llama-fixed.gguf").mkdir()
    with pytest.raises(
        UserError, match=r"synth-target-llama-fixed\.gguf is a directory, but the model folder"
    ):
        synthetic.make_synthetic_models(out=tmp_path)
    assert (tmp_path / "synth-target-llama-fixed.gguf").is_dir()


def test_lock_block_matches_models_lock() -> None:
    # What `make-synthetic-models --print-lock` prints is what models.lock holds, entry for entry.
    block = synthetic.lock_block()
    for entry in synthetic.locked_recipes(paths.MODELS_LOCK).values():
        assert f'name = "{entry.name}"\nsource = "generated"\nrecipe = "{entry.recipe}"\n' in block
        assert f'size = {entry.size}\nsha256 = "{entry.sha256}"\n' in block


HEAD32 = ("target-llama-random", "draft-llama-random", "target-glm4moe-mtp-random", "draft-dspark-random")
ATTENTION = ("attn_q.", "attn_k.", "attn_v.", "attn_output.")


@pytest.mark.parametrize("base", HEAD32)
def test_a_head32_file_is_its_namesake_with_heads_of_32_and_three_times_the_attention(files, base) -> None:
    """The KV axis's files: the 16-wide file's tensors and draws, heads of 32 (which every quantised KV
    type's block of 32 divides) and its attention matrices three times as large; nothing else differs."""
    narrow, wide = _fields(files[base]), _fields(files[f"{base}-head32"])
    arch = narrow["general.architecture"]
    assert (narrow[f"{arch}.attention.head_count"], narrow[f"{arch}.attention.head_count_kv"]) == (4, 2)
    assert (wide[f"{arch}.attention.head_count"], wide[f"{arch}.attention.head_count_kv"]) == (2, 1)
    assert wide[f"{arch}.rope.dimension_count"] == 32 and wide[f"{arch}.embedding_length"] == 64
    old, new = _tensors(files[base]), _tensors(files[f"{base}-head32"])
    assert new.keys() == old.keys()
    for name, t in new.items():
        if name.endswith(("attn_q_norm.weight", "attn_k_norm.weight")):  # per head: its width
            assert t.shape == (32,) and old[name].shape == (16,) and (t == 1).all(), name
        elif any(a in name for a in ATTENTION):
            assert t.shape == old[name].shape and np.allclose(t, 3 * old[name], rtol=1e-6), name
        else:
            assert np.array_equal(t, old[name]), name


# The model checks' real positive cases: every pairing the synthetic tier runs passes check_models.
_PAIRS = [
    ("draft-simple", "target-llama", "draft-llama"),
    ("draft-mtp", "target-glm4moe-mtp", None),
    ("draft-mtp", "target-glm4moe", "draft-glm4moe-mtp"),
    ("draft-eagle3", "target-llama", "draft-eagle3"),
    ("draft-dflash", "target-llama", "draft-dflash"),
    ("draft-dspark", "target-llama", "draft-dspark"),
    ("draft-dspark", "target-llama", "draft-dspark-lowconf"),
]


@pytest.mark.parametrize("mode", ["fixed", "random"])
@pytest.mark.parametrize(("spec_type", "target", "draft"), _PAIRS)
def test_model_checks_accept_the_synthetic_pairs(files, mode, spec_type, target, draft) -> None:
    draft_path = files[f"{draft}-{mode}"] if draft else None
    assert check_models((spec_type,), files[f"{target}-{mode}"], draft_path) == []


def test_model_checks_refuse_mismatched_synthetic_files(files: dict[str, Path]) -> None:
    with pytest.raises(UserError, match="draft-mtp needs MTP heads"):
        check_models(("draft-mtp",), files["target-llama-fixed"], None)
    with pytest.raises(UserError, match=r"markov_w1\.weight"):
        check_models(("draft-dspark",), files["target-llama-fixed"], files["draft-dflash-fixed"])
    with pytest.raises(UserError, match="architecture 'eagle3'"):
        check_models(("draft-eagle3",), files["target-llama-fixed"], files["draft-dflash-fixed"])


def test_synthetic_tier_needs_only_generated_models() -> None:
    lock = load_lock(paths.MODELS_LOCK)
    cases = select_cases(load_cases(lock_names=lock.names()), "synthetic")
    assert {t for c in cases for t in c.spec_type} >= {"draft-simple", "draft-mtp", "draft-eagle3",
                                                       "draft-dflash", "draft-dspark", "detect"}  # fmt: skip
    for case in cases:
        assert all(lock.entries[m].source == "generated" for m in case.models), case.name


def test_the_wide_target_is_the_tiny_llama_widened(files: dict[str, Path]) -> None:
    """The speed cases' target: 4 llama layers 512 wide, heads of 64, the shared vocabulary and tokenizer,
    so the tiny 1-layer llama draft pairs with it (draft-simple)."""
    path = files["target-llama-wide-fixed"]
    f = _fields(path)
    assert (f["llama.embedding_length"], f["llama.feed_forward_length"], f["llama.block_count"]) == (
        512,
        1024,
        4,
    )
    assert (f["llama.attention.head_count"], f["llama.attention.head_count_kv"]) == (8, 4)
    assert f["llama.rope.dimension_count"] == 64 and f["llama.vocab_size"] == N_VOCAB
    shapes = {t.name: list(t.shape) for t in gguf.GGUFReader(path).tensors}
    assert shapes["blk.3.attn_k.weight"] == [512, 256] and shapes["output.weight"] == [512, N_VOCAB]
    tiny = _fields(files["draft-llama-fixed"])
    assert f["tokenizer.ggml.tokens"] == tiny["tokenizer.ggml.tokens"]


def test_tiny_vocabulary(files: dict[str, Path]) -> None:
    """The sampling test's pair: 12 tokens (8 letters, one merge, the control tokens), the same in both."""
    for recipe in ("target-llama-tinyvocab-random", "draft-llama-tinyvocab-random"):
        f = _fields(files[recipe])
        tokens = f["tokenizer.ggml.tokens"]
        assert (
            tokens == [*"abcdefgh", "ab", "<|bos|>", "<|endoftext|>", "<|mask|>"]
            and f["llama.vocab_size"] == 12
        )
        assert (
            f["tokenizer.ggml.merges"] == ["a b"]
            and tokens[f["tokenizer.ggml.eos_token_id"]] == "<|endoftext|>"
        )
        assert f["tokenizer.ggml.mask_token_id"] == 11
        shapes = {t.name: list(t.shape) for t in gguf.GGUFReader(files[recipe]).tensors}
        assert shapes["output.weight"] == shapes["token_embd.weight"] == [64, 12]


@pytest.mark.parametrize("q", ["q8_0", "q4_0"])
def test_quantised_copies_are_the_f32_targets_quantised(files: dict[str, Path], q: str) -> None:
    """Every matrix quantised (the MoE router and 1-D tensors stay F32, as llama.cpp's quantiser leaves
    them), each the F32 target's tensor within the format's rounding."""
    qtype = gguf.GGMLQuantizationType[q.upper()]
    for base in ("target-llama-random", "target-glm4moe-mtp-random"):
        f32 = {t.name: t for t in gguf.GGUFReader(files[base]).tensors}
        copy = gguf.GGUFReader(files[f"{base}-{q}"])
        assert _fields(files[f"{base}-{q}"])["general.file_type"] == int(
            gguf.LlamaFileType[f"MOSTLY_{q.upper()}"]
        )
        for t in copy.tensors:
            want = (
                qtype
                if len(f32[t.name].shape) > 1 and "ffn_gate_inp" not in t.name
                else gguf.GGMLQuantizationType.F32
            )
            assert t.tensor_type == want, (base, t.name)
            orig = np.array(f32[t.name].data)
            back = gguf.quants.dequantize(np.array(t.data), t.tensor_type).reshape(orig.shape)
            scale = np.abs(orig).max()
            assert np.abs(back - orig).max() <= (0.01 if q == "q8_0" else 0.15) * scale, (base, t.name)
