"""suspects.funcname: what a changed line of C or C++ is in, by git's hunk-header rule (and the method of a
struct), on lines as llama.cpp writes them."""

from __future__ import annotations

import pytest

from specsuite.suspects.funcname import entities, header_name, name_of


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("void common_speculative_draft(common_speculative * spec) {", "common_speculative_draft()"),
        ("static bool common_speculative_are_compatible(", "common_speculative_are_compatible()"),
        ("llama_model_glm4_moe::graph::graph(const llama_model & model, const llm_graph_params & params)",
         "llama_model_glm4_moe::graph::graph()"),
        ("struct common_speculative_impl_ngram_map_k : public common_speculative_impl {",
         "struct common_speculative_impl_ngram_map_k"),
        ("class tinyBLAS_PPC {", "class tinyBLAS_PPC"),
        ("enum class llm_arch {", "enum llm_arch"),
        ("static const std::map<std::string, int> type_map = {", "type_map"),
        ("const std::vector<int> & common_speculative_get_synth_probs(const common_speculative * spec) {",
         "common_speculative_get_synth_probs()"),
        ("template <typename T>", None),
        ('extern "C" {', None),
    ],
)  # fmt: skip
def test_a_top_level_line_is_named_by_what_it_defines(line: str, name: str | None) -> None:
    assert name_of(line) == name


def test_a_line_inside_a_structs_method_names_the_method() -> None:
    src = [
        "#include <x>",  # 0
        "struct impl_a : public base {",  # 1
        "    int n = 0;",  # 2
        "",  # 3
        "    void draft(const std::vector<int> & prompt,",  # 4
        "               int n_max) override {",  # 5
        "        if (n > 0) {",  # 6
        "            helper(n);",  # 7
        "        }",  # 8
        "    }",  # 9
        "    int size;",  # 10
        "};",  # 11
        "void after() {",  # 12
        "    x();",  # 13
        "}",  # 14
    ]
    names = entities(src)
    assert names[0] == "(top of file)"
    assert names[1] == names[2] == "struct impl_a"
    assert names[4:10] == ["impl_a::draft()"] * 6
    assert names[10] == "struct impl_a"  # a member after the method is the struct's again
    assert names[13] == "after()"


def test_a_git_hunk_header_is_named_the_same_way() -> None:
    assert header_name("struct common_speculative_impl_draft_mtp : public common_speculative_impl {") == (
        "struct common_speculative_impl_draft_mtp"
    )
    assert header_name("") is None
    assert header_name("    indented(x)") is None  # git gives only column-0 lines; nothing else is one
