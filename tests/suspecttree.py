"""Small llama.cpp-shaped trees for the suspects' tests (tests/suspects/): the files the real paths.toml
names for the synthetic cases (tiny-ngram-map-k, tiny-simple-fixed), with a speculative.cpp of two
implementation structs and a shared function, so that a change can be made inside one function and found
there. A helper beside the tests, as tests/llamatree.py is (test modules cannot import each other)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SPECULATIVE = """\
#include "speculative.h"

static const std::map<std::string, common_speculative_type> common_speculative_type_from_name_map = {
    {"draft-simple",  COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE},
    {"ngram-map-k",   COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K},
};

struct common_speculative_impl_draft_simple : public common_speculative_impl {
    int n = 0;

    void draft(int x) {
        n += x;
    }
};

struct common_speculative_impl_ngram_map_k : public common_speculative_impl {
    common_ngram_map map;

    void draft(int x) {
        map.n += x;
    }

    void accept(int n) {
        map.n -= n;
    }
};

common_speculative * common_speculative_init(common_params_speculative & params) {
    switch (params.type) {
        case COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE: {
            return new common_speculative_impl_draft_simple();
        }
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K: {
            return new common_speculative_impl_ngram_map_k();
        }
        default:
            break;
    }
    return nullptr;
}

void common_speculative_draft(common_speculative * spec) {
    spec->draft(1);
}
"""

FILES = {
    "CMakeLists.txt": "project(llama)\n",
    "include/llama.h": "int llama_version(void);\n",
    "common/speculative.cpp": SPECULATIVE,
    "common/speculative.h": "struct common_speculative;\nvoid common_speculative_draft(void);\n",
    "common/ngram-map.h": "struct common_ngram_map {\n    int n;\n};\n",
    "common/ngram-map.cpp": "void common_ngram_map_begin(common_ngram_map & map) {\n    map.n = 0;\n}\n",
    "common/arg.cpp": "void common_params_parse() {\n}\n",
    "common/common.h": "struct common_params {\n    int n;\n};\n",
    "src/models/llama.cpp": "void llama_model_llama::graph() {\n}\n",
    "src/llama-vocab.cpp": "int llama_vocab_n() {\n    return 1;\n}\n",
    "tools/server/server-context.cpp": "void server_context_impl::update_slots() {\n}\n",
    "tools/server/server-schema.cpp": "void schema() {\n}\n",
    "tools/server/server-task.cpp": "void task() {\n}\n",
    "ggml/src/ggml-cpu/ops.cpp": "void ggml_compute_forward_add() {\n}\n",
}


def make_tree(root: Path, changes: dict[str, str | None] | None = None) -> Path:
    """The fake tree at ``root``, with ``changes`` (a path -> its new text, or None to leave the file out)."""
    for rel, text in {**FILES, **(changes or {})}.items():
        if text is None:
            continue
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"], "HOME": str(cwd)}  # fmt: skip
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env)
    return res.stdout.strip()
