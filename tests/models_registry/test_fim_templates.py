"""Fill-in-the-middle templates: each coder family's documented format, and the per-version ones.

The expected prompts are written out by hand from the families' own documentation (docs/fim.md
cites each), not built from the module's constants.
"""
import pytest

from models_registry.fim import FAMILY_FIM, FAMILY_SENTINELS, TemplateError, parse_template, template_for
from models_registry.models import ModelFamily

PREFIX = "def quick_sort(arr):\n    if len(arr) <= 1:\n        return arr\n"
SUFFIX = "\n    return quick_sort(left) + [pivot] + quick_sort(right)\n"

DOCUMENTED = {
    # deepseek-ai/deepseek-coder-6.7b-base model card, "Code Insertion": full-width bars (U+FF5C), U+2581.
    "deepseek-coder": "<\uff5cfim\u2581begin\uff5c>" + PREFIX + "<\uff5cfim\u2581hole\uff5c>" + SUFFIX
                      + "<\uff5cfim\u2581end\uff5c>",
    # QwenLM/Qwen2.5-Coder README, "File-Level Code Completion (Fill in the middle)".
    "qwen-coder": "<|fim_prefix|>" + PREFIX + "<|fim_suffix|>" + SUFFIX + "<|fim_middle|>",
    # bigcode StarCoder / StarCoder2 model cards, "Fill-in-the-middle".
    "starcoder2": "<fim_prefix>" + PREFIX + "<fim_suffix>" + SUFFIX + "<fim_middle>",
    # facebookresearch/codellama generation.py infilling_prompt_tokens: "<PRE> {pre} <SUF>{suf} <MID>".
    "codellama": "<PRE> " + PREFIX + " <SUF>" + SUFFIX + " <MID>",
}


@pytest.mark.parametrize("family", sorted(DOCUMENTED))
def test_each_coder_family_renders_its_documented_format(family):
    assert template_for(family).render(PREFIX, SUFFIX) == DOCUMENTED[family]


@pytest.mark.parametrize("family", sorted(DOCUMENTED))
def test_empty_prefix_and_suffix_keep_every_sentinel_in_place(family):
    rendered = template_for(family).render("", "")
    assert [s for s in FAMILY_SENTINELS[family] if s in rendered] == list(FAMILY_SENTINELS[family])
    assert rendered == DOCUMENTED[family].replace(PREFIX, "").replace(SUFFIX, "")


def test_the_families_are_registry_families_and_the_others_have_none():
    assert set(FAMILY_FIM) <= set(ModelFamily.values)
    assert template_for(ModelFamily.LLAMA) is None and template_for(ModelFamily.OTHER) is None


def test_a_version_template_wins_over_its_family():
    own = "<|fim▁prefix|>{prefix}<|fim▁suffix|>{suffix}<|fim▁middle|>"
    assert template_for("qwen-coder", own).render("a", "b") == "<|fim▁prefix|>a<|fim▁suffix|>b<|fim▁middle|>"
    assert template_for("other", "[SUFFIX]{suffix}[PREFIX]{prefix}").render("a", "b") == "[SUFFIX]b[PREFIX]a"


def test_a_template_renders_text_that_looks_like_placeholders_literally():
    template = parse_template("<pre>{prefix}<suf>{suffix}<mid>")
    assert template.render("{suffix}", "{prefix}") == "<pre>{suffix}<suf>{prefix}<mid>"


def test_braces_that_name_no_placeholder_are_literal():
    assert parse_template("{<PRE>}{prefix}{ SUF }{suffix}{{MID").render("a", "b") == "{<PRE>}a{ SUF }b{{MID"


@pytest.mark.parametrize("text, says", [
    ("", "non-empty"),
    ("<pre>{prefix}<mid>", "{suffix} exactly once"),
    ("<pre>{prefix}<suf>{suffix}<mid>{prefix}", "{prefix} exactly once"),
    ("<pre>{prefix}<suf>{suffix}<mid>{middle}", "Unknown placeholder {middle}"),
    ("<pre>{Prefix}<suf>{suffix}<mid>", "Unknown placeholder {Prefix}"),
    ("{prefix}{suffix}", "sentinel"),
    (" {prefix} {suffix} ", "sentinel"),
    ("<pre>{prefix}<suf>{suffix}" + "x" * 500, "at most 500"),
])
def test_bad_version_templates_say_what_is_wrong(text, says):
    with pytest.raises(TemplateError) as caught:
        parse_template(text)
    assert says in str(caught.value)


def test_token_bounds_count_sentinels_once_and_other_text_per_byte():
    assert template_for("qwen-coder").token_bound == 3
    assert template_for("deepseek-coder").token_bound == 3
    assert template_for("codellama").token_bound == 6  # three sentinels and three spaces
    assert parse_template("<a>{prefix}<b>{suffix}<c>").token_bound == len("<a><b><c>")
