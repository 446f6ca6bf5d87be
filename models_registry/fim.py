"""Fill-in-the-middle prompt templates: one per coder family, or one a model version names itself.

Pure Python (no Django): the gateway renders these on its hot path and the registry validates
them at registration. A template is text with exactly one `{prefix}` and one `{suffix}`; the
model writes the middle after the template's last character. Every other character is literal
(the sentinels), so braces in a sentinel need no escaping. docs/fim.md lists the formats and
where each comes from.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX, SUFFIX = "{prefix}", "{suffix}"
MAX_TEMPLATE_CHARS = 500
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

# The families' documented formats (prefix-suffix-middle order), keyed by ModelFamily's values.
DEEPSEEK_CODER = "<｜fim▁begin｜>{prefix}<｜fim▁hole｜>{suffix}<｜fim▁end｜>"  # full-width bars, U+2581 "▁"
QWEN_CODER = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"  # Qwen2.5-Coder and Qwen3-Coder
STARCODER2 = "<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>"
CODELLAMA = "<PRE> {prefix} <SUF>{suffix} <MID>"  # Meta's infilling_prompt_tokens, as text
FAMILY_TEMPLATES = {"deepseek-coder": DEEPSEEK_CODER, "qwen-coder": QWEN_CODER, "starcoder2": STARCODER2,
                    "codellama": CODELLAMA}
# The sentinels of each family template: special tokens of the family's tokenizer, one token each.
FAMILY_SENTINELS = {
    "deepseek-coder": ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    "qwen-coder": ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    "starcoder2": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    "codellama": ("<PRE>", "<SUF>", "<MID>"),
}


class TemplateError(ValueError):
    """A per-version template that cannot be rendered; the message says why."""


@dataclass(frozen=True, slots=True)
class FimTemplate:
    """A parsed template: the literal text around the two placeholders, in the order they come."""

    text: str
    head: str
    between: str
    tail: str
    suffix_first: bool  # suffix-prefix-middle (SPM) order
    token_bound: int  # at most this many tokens come from the template's own text

    def render(self, prefix: str, suffix: str) -> str:
        first, second = (suffix, prefix) if self.suffix_first else (prefix, suffix)
        return f"{self.head}{first}{self.between}{second}{self.tail}"


def parse_template(text: str, sentinels: tuple[str, ...] = ()) -> FimTemplate:
    """The template, or TemplateError naming what is wrong. `sentinels`: known one-token strings."""
    if not isinstance(text, str) or not text:
        raise TemplateError("A FIM template must be non-empty text.")
    if len(text) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"A FIM template may be at most {MAX_TEMPLATE_CHARS} characters.")
    unknown = sorted({name for name in _PLACEHOLDER.findall(text) if name not in ("prefix", "suffix")})
    if unknown:
        raise TemplateError(f"Unknown placeholder {{{unknown[0]}}}: a FIM template holds {PREFIX} and {SUFFIX} "
                            "once each; the model writes the middle after the template's end.")
    for placeholder in (PREFIX, SUFFIX):
        if text.count(placeholder) != 1:
            raise TemplateError(f"A FIM template must contain {placeholder} exactly once.")
    suffix_first = text.index(SUFFIX) < text.index(PREFIX)
    first, second = (SUFFIX, PREFIX) if suffix_first else (PREFIX, SUFFIX)
    head, rest = text.split(first)
    between, tail = rest.split(second)
    if not (head or between or tail).strip():
        raise TemplateError("A FIM template needs the model's sentinel tokens around {prefix} and {suffix}.")
    return FimTemplate(text, head, between, tail, suffix_first, _token_bound(head + between + tail, sentinels))


def _token_bound(literal: str, sentinels: tuple[str, ...]) -> int:
    """Sentinels count one token each; any other text at most one token per UTF-8 byte."""
    count = 0
    for sentinel in sentinels:
        count += literal.count(sentinel)
        literal = literal.replace(sentinel, "")
    return count + len(literal.encode("utf-8"))


FAMILY_FIM = {family: parse_template(text, FAMILY_SENTINELS[family]) for family, text in FAMILY_TEMPLATES.items()}


def template_for(family: str, version_template: str = "") -> FimTemplate | None:
    """The version's own template if it names one, else its family's; None: no FIM for it."""
    if version_template:
        return parse_template(version_template)
    return FAMILY_FIM.get(family)
