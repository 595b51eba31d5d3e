"""The one tiny byte-level ``gpt2`` tokenizer every synthetic model carries (targets and drafts alike).

261 tokens: the 256 GPT-2 byte symbols in GPT-2 id order (so id 0 is ``!``, an ordinary token the fixed
weights predict), two merged tokens (a BPE vocabulary must carry a non-empty merges array), and three control
tokens: BOS, ``<|endoftext|>`` (EOS; llama.cpp recognises this name as end-of-generation) and a mask token
(the DFlash/DSpark driver reads ``tokenizer.ggml.mask_token_id``).
"""

from __future__ import annotations

import gguf


def _byte_symbols() -> list[str]:
    # GPT-2's bytes_to_unicode table, in id order. It is ten lines and lives only in tokenizer libraries
    # (transformers, tiktoken) that this project does not otherwise need, so it is written out here.
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    symbols = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            symbols.append(256 + extra)
            extra += 1
    return [chr(code) for code in symbols]


MERGES = ("Ġ t", "h e")
CONTROL = ("<|bos|>", "<|endoftext|>", "<|mask|>")
TOKENS: tuple[str, ...] = (*_byte_symbols(), *(m.replace(" ", "") for m in MERGES), *CONTROL)
N_VOCAB = len(TOKENS)
BOS_ID, EOS_ID, MASK_ID = (TOKENS.index(t) for t in CONTROL)
TOKEN_TYPES: tuple[int, ...] = tuple(
    int(gguf.TokenType.CONTROL if t in CONTROL else gguf.TokenType.NORMAL) for t in TOKENS
)


def add_tokenizer(writer: gguf.GGUFWriter) -> None:
    """Write the tokenizer keys into a GGUF file."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(list(TOKENS))
    writer.add_token_types(list(TOKEN_TYPES))
    writer.add_token_merges(list(MERGES))
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_uint32(gguf.Keys.Tokenizer.MASK_ID, MASK_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
