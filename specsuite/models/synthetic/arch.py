"""The synthetic models' architectures: which keys and tensors llama.cpp needs to load and run each one.

Every file uses one tiny shape (64-wide, 4 query heads of 16, 2 KV heads, FFN 128, F32) and the shared
tokenizer, but for two variants: the wide llama target (``WIDE``: 512-wide, FFN 1024) is the speed cases'
target, whose decode step costs about a millisecond on one CPU thread instead of a tenth of one; the
``HEAD32`` files (2 query heads of 32, 1 KV head: the KV axis) have heads that a quantised KV cache accepts
and a stronger attention. Drafts that llama.cpp pairs with a target (eagle3, dflash) leave out
``token_embd``/``output``: the server shares the target's. Shapes are ggml
order {ne0, ne1, ...}. The keys and tensor names are what the loaders in llama.cpp 0c1e570 ask for
(src/llama-model.cpp, src/llama-arch.cpp), checked by loading each file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from specsuite.models.synthetic.tokenizer import (
    MERGES,
    N_VOCAB,
    TEXT_IDS,
    TINY_MERGES,
    TINY_TOKENS,
    TOKENS,
    add_tokenizer,
)
from specsuite.models.synthetic.weights import Weights

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
CTX_TRAIN = 4096
RMS_EPS = 1e-6
ROPE_BASE = 10000.0

# glm4moe: a dense trunk, then one NextN (MTP) block that is a MoE block (the arch requires expert keys).
GLM_TRUNK = 2
GLM_EXPERTS = 2
GLM_EXPERT_FF = 32
GLM_GATING_SIGMOID = 2

EAGLE3_TARGET_LAYERS = (0, 1, 2)  # ids below the target's n_layer: the llama graph exposes those inputs
DFLASH_TARGET_LAYERS = (1, 2, 3)
DFLASH_BLOCK_SIZE = 4
MARKOV_RANK = 16
CONF_BIAS_HIGH = 8.0  # sigmoid(8) = 0.9997: the DSpark confidence head always says "draft"
CONF_BIAS_LOW = -8.0  # sigmoid(-8) = 0.0003: with --spec-draft-p-min > 0 nothing is drafted
# The tiny-vocabulary models' LM head, scaled down: logits of spread about 1 instead of 8, so that at
# temperature 1 the next token is spread over several outcomes rather than nearly always the argmax.
TINY_HEAD_SCALE = np.float32(0.15)

U32 = gguf.GGUFValueType.UINT32


@dataclass(frozen=True)
class Dims:
    """A model's widths: the tiny shape every synthetic file has, or the wide target's."""

    n_embd: int = N_EMBD
    n_head: int = N_HEAD
    n_head_kv: int = N_HEAD_KV
    n_ff: int = N_FF
    attn_std: float = 0.02  # the attention matrices' spread (Weights.normal's default)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


NARROW = Dims()  # every synthetic file's but one
# The speed cases' target: a 4-layer llama of 39 MB (F32) whose decode step costs about 1.1 ms on one
# thread of the 2-core CI machine (0.1 ms for the narrow shape, where a round measures the server's
# overhead more than decoding). Its heads are 64 wide; the fixed weights keep token 0 first by a wide margin.
WIDE = Dims(n_embd=512, n_head=8, n_head_kv=4, n_ff=1024)
# The KV axis's files: heads of 32, the block of every quantised KV type (q8_0, q4_0, ...: llama.cpp refuses
# "K cache type q8_0 with block size 32 does not divide n_embd_head_k=16" for the narrow heads). The same
# widths as NARROW (n_head x head_dim = 64 for Q, n_head_kv x head_dim = 32 for K and V), so every tensor
# has NARROW's shape and a recipe's stream of draws is the same. Their attention is three times as strong
# (std 0.06): at NARROW's 0.02 the residual stream drowns what attention reads from the cache (measured on
# the pinned CPU build: no KV type, q4_0 included, moved a counter of draft-simple, DFlash or DSpark, so a
# broken cache would hardly show); at 0.06 q4_0's rounding moves acceptance by up to an eighth
# (docs/configuration.md).
HEAD32 = Dims(n_head=2, n_head_kv=1, attn_std=0.06)


@dataclass
class Model:
    """One GGUF file's contents before writing: its architecture, extra keys and tensors."""

    arch: str
    name: str
    n_layer: int
    kv: dict[str, tuple[Any, gguf.GGUFValueType]] = field(default_factory=dict)
    tensors: dict[str, Any] = field(default_factory=dict)
    tokens: tuple[str, ...] = TOKENS  # the shared vocabulary, or TINY_TOKENS
    merges: tuple[str, ...] = MERGES
    dims: Dims = NARROW  # the widths: every file's, or the wide target's

    def key(self, suffix: str, value: Any, vtype: gguf.GGUFValueType = U32) -> None:
        self.kv[f"{self.arch}.{suffix}"] = (value, vtype)


def _attention(w: Weights, t: dict, i: int, n_in: int = N_EMBD, d: Dims = NARROW) -> None:
    t[f"blk.{i}.attn_q.weight"] = w.normal(n_in, d.n_head * d.head_dim, std=d.attn_std)
    t[f"blk.{i}.attn_k.weight"] = w.normal(n_in, d.n_head_kv * d.head_dim, std=d.attn_std)
    t[f"blk.{i}.attn_v.weight"] = w.normal(n_in, d.n_head_kv * d.head_dim, std=d.attn_std)
    t[f"blk.{i}.attn_output.weight"] = w.normal(d.n_head * d.head_dim, d.n_embd, std=d.attn_std)


def _ffn(w: Weights, t: dict, i: int, d: Dims = NARROW) -> None:
    t[f"blk.{i}.ffn_gate.weight"] = w.normal(d.n_embd, d.n_ff)
    t[f"blk.{i}.ffn_up.weight"] = w.normal(d.n_embd, d.n_ff)
    t[f"blk.{i}.ffn_down.weight"] = w.normal(d.n_ff, d.n_embd)


def _embeddings_and_head(w: Weights, t: dict, n_vocab: int = N_VOCAB, d: Dims = NARROW) -> None:
    t["token_embd.weight"] = w.token_embd(d.n_embd, n_vocab)
    t["output_norm.weight"] = w.ones(d.n_embd)
    t["output.weight"] = w.lm_head(d.n_embd, n_vocab)


def llama(
    w: Weights, n_layer: int, name: str, tiny_vocab: bool = False, d: Dims = NARROW, text_head: bool = False
) -> Model:
    """A plain ``llama`` model: the target (4 layers) and its draft-simple draft (1 layer); ``tiny_vocab``:
    with the 12-token vocabulary (the sampling test's models); ``d=WIDE``: the speed cases' target;
    ``text_head``: the LM head's rows of every token but text (``tokenizer.TEXT_IDS``) zeroed, so that a
    random model's greedy output is printable ASCII, as a real model's is valid UTF-8: their logit is 0,
    while the other 98 are N(0, 64) (the hidden state is about 8 long, the rows N(0, 1)): their largest is
    expected near 19 (2.4 standard deviations), and all 98 below 0 has a chance of 2^-98. The same draws
    as without it, so a text-head file is its plain twin but for those rows."""
    m = Model("llama", name, n_layer, dims=d)
    if tiny_vocab:
        m.tokens, m.merges = TINY_TOKENS, TINY_MERGES
    _embeddings_and_head(w, m.tensors, len(m.tokens), d)
    if tiny_vocab:
        m.tensors["output.weight"] = m.tensors["output.weight"] * TINY_HEAD_SCALE
    if text_head:
        head = m.tensors["output.weight"]  # numpy (n_vocab, n_embd): a row per token
        keep = np.zeros(head.shape[0], dtype=bool)
        keep[list(TEXT_IDS)] = True
        head[~keep, :] = 0.0
    for i in range(n_layer):
        m.tensors[f"blk.{i}.attn_norm.weight"] = w.ones(d.n_embd)
        _attention(w, m.tensors, i, d.n_embd, d)
        m.tensors[f"blk.{i}.ffn_norm.weight"] = w.ones(d.n_embd)
        _ffn(w, m.tensors, i, d)
    return m


def _nextn_block(w: Weights, t: dict, i: int) -> None:
    t[f"blk.{i}.ffn_gate_inp.weight"] = w.normal(N_EMBD, GLM_EXPERTS)
    t[f"blk.{i}.exp_probs_b.bias"] = w.zeros(GLM_EXPERTS)
    t[f"blk.{i}.ffn_gate_exps.weight"] = w.normal(N_EMBD, GLM_EXPERT_FF, GLM_EXPERTS)
    t[f"blk.{i}.ffn_up_exps.weight"] = w.normal(N_EMBD, GLM_EXPERT_FF, GLM_EXPERTS)
    t[f"blk.{i}.ffn_down_exps.weight"] = w.normal(GLM_EXPERT_FF, N_EMBD, GLM_EXPERTS)
    t[f"blk.{i}.ffn_gate_shexp.weight"] = w.normal(N_EMBD, GLM_EXPERT_FF)
    t[f"blk.{i}.ffn_up_shexp.weight"] = w.normal(N_EMBD, GLM_EXPERT_FF)
    t[f"blk.{i}.ffn_down_shexp.weight"] = w.normal(GLM_EXPERT_FF, N_EMBD)
    # eh_proj's input is [enorm(embedding of the next token), hnorm(hidden)]. Passing the embedding half
    # through makes the MTP head predict about what the target predicts after that token (in random mode
    # too, where it then agrees on many tokens but not all), and carries e0 onward in fixed mode.
    eh_proj = w.normal(2 * N_EMBD, N_EMBD)
    eh_proj[:, :N_EMBD] += np.eye(N_EMBD, dtype=np.float32)
    t[f"blk.{i}.nextn.eh_proj.weight"] = eh_proj
    for norm in ("enorm", "hnorm", "shared_head_norm"):
        t[f"blk.{i}.nextn.{norm}.weight"] = w.ones(N_EMBD)
    # nextn.embed_tokens / nextn.shared_head_head are optional: the MTP graph then uses token_embd / output.


def glm4moe_mtp(w: Weights, name: str, d: Dims = NARROW) -> Model:
    """A ``glm4moe`` target: 2 dense trunk layers and one NextN block, which draft-mtp drafts with."""
    m = Model("glm4moe", name, GLM_TRUNK + 1, dims=d)
    _embeddings_and_head(w, m.tensors)
    for i in range(m.n_layer):
        m.tensors[f"blk.{i}.attn_norm.weight"] = w.ones(N_EMBD)
        _attention(w, m.tensors, i, d=d)
        m.tensors[f"blk.{i}.post_attention_norm.weight"] = w.ones(N_EMBD)
        if i < GLM_TRUNK:
            _ffn(w, m.tensors, i)
        else:
            _nextn_block(w, m.tensors, i)
    m.key("nextn_predict_layers", 1)  # the MTP graph asserts exactly one
    m.key("leading_dense_block_count", GLM_TRUNK)
    m.key("expert_count", GLM_EXPERTS)
    m.key("expert_used_count", 1)
    m.key("expert_shared_count", 1)
    m.key("expert_feed_forward_length", GLM_EXPERT_FF)
    m.key("expert_weights_scale", 1.0, gguf.GGUFValueType.FLOAT32)
    m.key("expert_weights_norm", True, gguf.GGUFValueType.BOOL)
    m.key("expert_gating_func", GLM_GATING_SIGMOID)
    return m


def _is_nextn(tensor: str) -> bool:
    return tensor.startswith(f"blk.{GLM_TRUNK}.")


def glm4moe_trunk(w: Weights, name: str) -> Model:
    """The MTP target without its NextN block (and no nextn_predict_layers): a target that can draft with
    draft-mtp only through a separate drafter, as front ends ship gemma-4. Same draws as ``glm4moe_mtp``
    with the same seed, so its trunk is that target's, tensor for tensor."""
    full = glm4moe_mtp(w, name)
    kv = {k: v for k, v in full.kv.items() if not k.endswith(".nextn_predict_layers")}
    tensors = {k: v for k, v in full.tensors.items() if not _is_nextn(k)}
    return Model(full.arch, name, GLM_TRUNK, kv, tensors)


def glm4moe_mtp_drafter(w: Weights, name: str) -> Model:
    """A separate MTP drafter: the NextN block of ``glm4moe_mtp`` (same seed: the same tensors) with the
    embeddings, LM head and final norm its graph reads, and no trunk. block_count and the block's index stay
    the target's: without blk.0.attn_norm the pinned loader takes the file as MTP-only and the trunk tensors
    as optional (src/models/glm4-moe.cpp ``mtp_only``); llama-server then creates the MTP context on it."""
    full = glm4moe_mtp(w, name)
    tensors = {k: v for k, v in full.tensors.items() if not k.startswith("blk.") or _is_nextn(k)}
    return Model(full.arch, name, full.n_layer, dict(full.kv), tensors)


def _target_layers(m: Model, layers: tuple[int, ...]) -> None:
    m.kv[f"{m.arch}.target_layers"] = (list(layers), gguf.GGUFValueType.ARRAY)


def eagle3(w: Weights, name: str) -> Model:
    """An ``eagle3`` draft: one decoder layer over the concatenated hidden states of 3 target layers."""
    m = Model("eagle3", name, 1)  # the graph asserts one layer
    m.tensors["fc.weight"] = w.projection(len(EAGLE3_TARGET_LAYERS) * N_EMBD, N_EMBD)
    m.tensors["output_norm.weight"] = w.ones(N_EMBD)
    m.tensors["blk.0.attn_norm.weight"] = w.ones(N_EMBD)
    m.tensors["blk.0.attn_norm_2.weight"] = w.ones(N_EMBD)
    _attention(w, m.tensors, 0, n_in=2 * N_EMBD)  # input: token embedding and hidden state side by side
    m.tensors["blk.0.ffn_norm.weight"] = w.ones(N_EMBD)
    _ffn(w, m.tensors, 0)
    _target_layers(m, EAGLE3_TARGET_LAYERS)
    m.key("target_hidden_size", N_EMBD)
    return m


def dflash(w: Weights, name: str, conf_bias: float | None = None, d: Dims = NARROW) -> Model:
    """A ``dflash`` draft (block size 4); with ``conf_bias`` a DSpark draft: Markov and confidence heads.

    The server auto-detects draft-dspark from ``markov_w1.weight``.
    """
    m = Model("dflash", name, 1, dims=d)
    m.tensors["fc.weight"] = w.projection(len(DFLASH_TARGET_LAYERS) * N_EMBD, N_EMBD)
    m.tensors["enc.output_norm.weight"] = w.ones(N_EMBD)
    m.tensors["output_norm.weight"] = w.ones(N_EMBD)
    m.tensors["blk.0.attn_norm.weight"] = w.ones(N_EMBD)
    _attention(w, m.tensors, 0, d=d)
    m.tensors["blk.0.attn_q_norm.weight"] = w.ones(d.head_dim)
    m.tensors["blk.0.attn_k_norm.weight"] = w.ones(d.head_dim)
    m.tensors["blk.0.ffn_norm.weight"] = w.ones(N_EMBD)
    _ffn(w, m.tensors, 0)
    _target_layers(m, DFLASH_TARGET_LAYERS)
    m.key("block_size", DFLASH_BLOCK_SIZE)
    if conf_bias is not None:
        m.tensors["markov_w1.weight"] = w.normal(MARKOV_RANK, N_VOCAB)
        m.tensors["markov_w2.weight"] = w.normal(MARKOV_RANK, N_VOCAB)
        m.tensors["conf_proj.weight"] = w.zeros(N_EMBD + MARKOV_RANK, 1)
        m.tensors["conf_proj.bias"] = w.ones(1) * conf_bias  # confidence = sigmoid(bias)
        m.key("has_confidence_head", True, gguf.GGUFValueType.BOOL)
    return m


# Quantised copies: llama.cpp's own rule for which tensors stay F32 (src/llama-quant.cpp): 1-D tensors
# (norms, biases) and the MoE router (ffn_gate_inp); every row of the rest is a whole number of 32-wide blocks
# (Q8_0, Q4_0; a K-quant would need 256-wide rows, wider than these models).
QTYPES = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}
_FILE_TYPES = {"q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}


def _quantised(name: str, array: np.ndarray, qtype: str | None) -> tuple[np.ndarray, Any]:
    """(data, raw dtype) of one tensor: quantised with gguf's reference quantiser, or as it is."""
    if qtype is None or array.ndim < 2 or "ffn_gate_inp" in name:
        return array, None
    return gguf.quants.quantize(array, QTYPES[qtype]), QTYPES[qtype]


def write_gguf(model: Model, dest: Path, qtype: str | None = None) -> None:
    """Write a model with the common hyper-parameters and its tokenizer; ``qtype`` (q8_0, q4_0): its
    matrices quantised."""
    writer = gguf.GGUFWriter(dest, model.arch)  # writes general.architecture; no timestamps, no paths
    writer.add_name(model.name)
    d = model.dims
    writer.add_context_length(CTX_TRAIN)
    writer.add_embedding_length(d.n_embd)
    writer.add_block_count(model.n_layer)
    writer.add_feed_forward_length(d.n_ff)
    writer.add_head_count(d.n_head)
    writer.add_head_count_kv(d.n_head_kv)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_rope_dimension_count(d.head_dim)
    writer.add_vocab_size(len(model.tokens))
    writer.add_file_type(_FILE_TYPES[qtype] if qtype else gguf.LlamaFileType.ALL_F32)
    for key, (value, vtype) in model.kv.items():
        writer.add_key_value(key, value, vtype)
    add_tokenizer(writer, model.tokens, model.merges)
    for name, array in model.tensors.items():
        data, raw = _quantised(name, array, qtype)
        writer.add_tensor(name, data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
