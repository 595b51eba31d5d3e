"""Seeded weight tensors for the synthetic models, in two modes.

``fixed``: every token embedding is about e0 (dim 0 = 1, noise 0.01 elsewhere), block matrices are small
(std 0.02) and norms are 1, so the residual stream stays about e0 and, after the final RMS norm, the hidden
state is about sqrt(64)·e0 = 8·e0. The LM head's row for token 0 is e0 and the other rows are small, so token
0 wins by about 8 against about 0.1: no ties, and the draft samplers and the greedy target always agree.
The draft heads' input projections carry dim 0 onward (``carry``), so the drafts predict token 0 too.

``random``: embeddings and LM head N(0, 1), internals N(0, 0.02): acceptance follows the weights.

In both modes every file draws its embeddings and LM head from one shared stream (``VOCAB_SEED``), as real
drafts share their target's vocabulary: a random 1-layer llama draft then agrees with its random target on
most, not all, tokens, so one run exercises both acceptance and rejection. The other tensors come from the
file's own seed.

Determinism: the stream is numpy's legacy ``RandomState`` (Mersenne Twister + the legacy Gaussian), whose
output numpy guarantees not to change across versions (NEP 19), unlike ``default_rng``; values are drawn in
float64 and rounded to float32, which is exact IEEE arithmetic on every machine.
"""

from __future__ import annotations

import numpy as np

MODES = ("fixed", "random")
VOCAB_SEED = 1000


class Weights:
    """Draws tensors for one file; shapes are given in ggml order {ne0, ne1, ...} (numpy's reversed)."""

    def __init__(self, mode: str, seed: int) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self._rng = np.random.RandomState(seed)  # legacy stream: stable across numpy versions (see above)

    @property
    def fixed(self) -> bool:
        return self.mode == "fixed"

    def normal(self, *shape: int, std: float = 0.02, rng: np.random.RandomState | None = None) -> np.ndarray:
        return ((rng or self._rng).standard_normal(shape[::-1]) * std).astype(np.float32)

    @staticmethod
    def ones(*shape: int) -> np.ndarray:
        return np.ones(shape[::-1], dtype=np.float32)

    @staticmethod
    def zeros(*shape: int) -> np.ndarray:
        return np.zeros(shape[::-1], dtype=np.float32)

    @staticmethod
    def _vocab_rng(which: int) -> np.random.RandomState:
        return np.random.RandomState(VOCAB_SEED + which)

    def token_embd(self, n_embd: int, n_vocab: int) -> np.ndarray:
        rng = self._vocab_rng(0)
        if not self.fixed:
            return self.normal(n_embd, n_vocab, std=1.0, rng=rng)
        embd = self.normal(n_embd, n_vocab, std=0.01, rng=rng)
        embd[:, 0] = 1.0  # every token's embedding points along e0
        return embd

    def lm_head(self, n_embd: int, n_vocab: int) -> np.ndarray:
        rng = self._vocab_rng(1)
        if not self.fixed:
            return self.normal(n_embd, n_vocab, std=1.0, rng=rng)
        head = self.normal(n_embd, n_vocab, rng=rng)
        head[0, :] = 0.0
        head[0, 0] = 1.0  # token 0's row is e0: its logit is the hidden state's dim 0
        return head

    def projection(self, n_in: int, n_out: int) -> np.ndarray:
        """A draft head's input projection; in fixed mode it maps input dim 0 to output dim 0."""
        proj = self.normal(n_in, n_out)
        if self.fixed:
            proj[0, 0] = 1.0
        return proj
