"""The text-head llama pair (``target-llama-text-random``, ``draft-llama-text-random``): tiny-simple-random's
pair but for the LM head rows of the tokens that are not text, so that its greedy output is printable ASCII.

Why it exists: upstream builds before b11292 ran every answer, /completion's too, through the chat parser,
which refused output that is not valid UTF-8 with HTTP 500 (llama.cpp #27543). The byte-level random pair's
output is such bytes, so on those builds neither server of tiny-simple-random answers; the text pair is
answered by every build (docs/replay.md: b9113 -> b9246). Checked here on the real pinned CPU build.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from fakeserver import real_binary

from specsuite.models.synthetic.generate import generate
from specsuite.models.synthetic.tokenizer import CONTROL, TEXT_IDS, TOKENS
from specsuite.server.process import LlamaServer, start_server

PROMPTS = ("Hello world, the quick brown fox", "1 2 3 4 5 6 7 8", "the the the")  # the "synthetic" set


def _tensors(path: Path) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(path).tensors}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("text-head")
    out = {}
    for recipe in ("target-llama-text-random", "target-llama-random", "draft-llama-text-random"):
        out[recipe] = folder / f"{recipe}.gguf"
        generate(recipe, out[recipe])
    return out


def test_text_ids_are_the_printable_bytes_the_newline_and_the_merges() -> None:
    text = [TOKENS[i] for i in TEXT_IDS]
    assert len(text) == 98 and not set(text) & set(CONTROL)
    assert {"Ġ", "Ċ", "Ġt", "he", "!", "~"} <= set(text)  # space, newline, the two merges, the ends of ASCII
    assert not {"¡", "ÿ", "Ā"} & set(text)  # 0xA1 and 0xFF are no UTF-8 alone, 0x00 is not printable


def test_only_the_heads_rows_of_non_text_tokens_differ_from_the_random_twin(files: dict[str, Path]) -> None:
    text, twin = _tensors(files["target-llama-text-random"]), _tensors(files["target-llama-random"])
    assert text.keys() == twin.keys()
    for name in text:
        if name != "output.weight":
            assert np.array_equal(text[name], twin[name]), name
    head, twin_head = text["output.weight"], twin["output.weight"]  # a row per token
    others = [i for i in range(len(TOKENS)) if i not in TEXT_IDS]
    assert np.array_equal(head[list(TEXT_IDS)], twin_head[list(TEXT_IDS)])
    assert not head[others].any() and twin_head[others].any()


def _greedy(tmp_path: Path, model: Path, prompt: str) -> dict:
    binary = str(real_binary())
    common = ["-c", "256", "--parallel", "1", "--fit", "off", "-t", "1", "--poll", "0", "--no-slots"]
    srv: LlamaServer = start_server(
        lambda port: [binary, "-m", str(model), *common, "--host", "127.0.0.1", "--port", str(port)],
        tmp_path / f"{model.stem}.log",
    )
    try:
        body = {"prompt": prompt, "temperature": 0, "top_k": 1, "n_predict": 32, "cache_prompt": False}
        return srv.post("/completion", {**body, "return_tokens": True})
    finally:
        srv.stop()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_text_target_writes_printable_ascii_where_its_twin_writes_bytes(files, tmp_path, prompt) -> None:
    """On the real build: 32 greedy tokens of the text target are all text tokens and decode to printable
    ASCII; the byte-level twin's, on the same prompt, hold tokens that are not text (bytes of 0x80 and
    more among them: the pin answers U+FFFD for them, builds before b11292 an HTTP 500)."""
    got = _greedy(tmp_path, files["target-llama-text-random"], prompt)
    assert len(got["tokens"]) == 32 and set(got["tokens"]) <= set(TEXT_IDS)
    assert got["content"].isascii() and all(c.isprintable() or c == "\n" for c in got["content"])
    twin = _greedy(tmp_path, files["target-llama-random"], prompt)
    assert not set(twin["tokens"]) <= set(TEXT_IDS) and not twin["content"].isascii()
