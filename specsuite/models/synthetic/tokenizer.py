"""The one tiny byte-level ``gpt2`` tokenizer every synthetic model carries (targets and drafts alike).

261 tokens: the 256 GPT-2 byte symbols in GPT-2 id order (so id 0 is ``!``, an ordinary token the fixed
weights predict), two merged tokens (a BPE vocabulary must carry a non-empty merges array), and three control
tokens: BOS, ``<|endoftext|>`` (EOS; llama.cpp recognises this name as end-of-generation) and a mask token
(the DFlash/DSpark driver reads ``tokenizer.ggml.mask_token_id``).
"""

from __future__ import annotations

import gguf

# The bytes GPT-2 spells as themselves; the others get the symbols 256, 257, ... in byte order.
_PRINTABLE = (*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1))


def _byte_symbols() -> list[str]:
    # GPT-2's bytes_to_unicode table, in id order. It is ten lines and lives only in tokenizer libraries
    # (transformers, tiktoken) that this project does not otherwise need, so it is written out here.
    printable = list(_PRINTABLE)
    symbols = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            symbols.append(256 + extra)
            extra += 1
    return [chr(code) for code in symbols]


def _symbol_bytes() -> dict[str, int]:
    """Each byte symbol's byte (the table above, inverted)."""
    others = [b for b in range(256) if b not in _PRINTABLE]
    return {chr(b): b for b in _PRINTABLE} | {chr(256 + i): b for i, b in enumerate(others)}


def _is_text(token: str, table: dict[str, int]) -> bool:
    """Whether a token decodes to printable ASCII or newlines: valid UTF-8 whatever comes before or after
    it (a byte of 0x80 or more alone is not; a random model's output of such bytes is refused by the chat
    parser of upstream builds before b11292, on /completion too: docs/replay.md)."""
    return token not in CONTROL and all(
        c in table and (0x20 <= table[c] < 0x7F or table[c] == 0x0A) for c in token
    )


MERGES = ("Ġ t", "h e")
CONTROL = ("<|bos|>", "<|endoftext|>", "<|mask|>")
TOKENS: tuple[str, ...] = (*_byte_symbols(), *(m.replace(" ", "") for m in MERGES), *CONTROL)
N_VOCAB = len(TOKENS)
BOS_ID, EOS_ID, MASK_ID = (TOKENS.index(t) for t in CONTROL)
# The tokens that are text (95 printable bytes, the newline, the two merges): the only ones a text-head
# model's greedy output holds (arch.llama's ``text_head``)
TEXT_IDS: tuple[int, ...] = tuple(i for i, t in enumerate(TOKENS) if _is_text(t, _symbol_bytes()))

# The tiny vocabulary of the sampling test's models: 8 letters, one merge and the control tokens, 12 in
# all, so that a next-token distribution has few outcomes and a chi-square test needs few samples. Text
# made of a-h (and "ab") tokenizes; llama.cpp warns that the vocabulary has no newline token, harmlessly.
TINY_MERGES = ("a b",)
TINY_TOKENS: tuple[str, ...] = (*"abcdefgh", "ab", *CONTROL)


def add_tokenizer(writer: gguf.GGUFWriter, tokens: tuple[str, ...] = TOKENS,
                  merges: tuple[str, ...] = MERGES) -> None:  # fmt: skip
    """Write the tokenizer keys into a GGUF file (the shared vocabulary, or the tiny one)."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(list(tokens))
    writer.add_token_types(
        [int(gguf.TokenType.CONTROL if t in CONTROL else gguf.TokenType.NORMAL) for t in tokens]
    )
    writer.add_token_merges(list(merges))
    writer.add_bos_token_id(tokens.index(CONTROL[0]))
    writer.add_eos_token_id(tokens.index(CONTROL[1]))
    writer.add_uint32(gguf.Keys.Tokenizer.MASK_ID, tokens.index(CONTROL[2]))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
