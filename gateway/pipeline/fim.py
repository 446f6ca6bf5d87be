"""Fill-in-the-middle: a completions request with `suffix` gets its prompt rendered in the model's template.

vLLM renders FIM only for the few tokenizers that declare it; for code models the gateway does,
from the registry (models_registry/fim.py): the version's own template, else its family's. It runs
before redaction and routing, so prefix affinity keys on the prompt the engine really gets, and
the engine gets that prompt and no `suffix`. The checks mirror vLLM's own for `suffix` (echo,
prompt embeddings, prompt truncation, token-id prompts), so a request means the same whether the
engine or the gateway renders it. docs/fim.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.config.snapshot import Pool, Snapshot
    from models_registry.fim import FimTemplate

# Fields vLLM refuses beside `suffix`; the rendered request would otherwise mean something else.
_REFUSED_WITH_SUFFIX = {
    "echo": "'echo' cannot be combined with 'suffix': the model's prompt is the rendered fill-in-the-middle "
            "template, not the text you sent.",
    "prompt_embeds": "'suffix' needs a text prompt, not 'prompt_embeds'.",
    "truncate_prompt_tokens": "'truncate_prompt_tokens' cannot be combined with 'suffix': truncating would cut "
                              "the template's sentinels.",
}


@dataclass(slots=True)
class Rendered:
    """A FIM request made ready for the engine."""

    payload: dict  # the prompt(s) rendered, no `suffix`
    pools: tuple[Pool, ...]  # the request's pools whose version renders with `template`
    template: FimTemplate
    extra_prompt_tokens: int  # tokens the rendering may add beyond the body's own bytes (admission's bound)


def wants_fim(payload: dict) -> bool:
    """Does this completions request carry a suffix? (`"suffix": null` means none, as in vLLM.)"""
    return payload.get("suffix") is not None


def render_request(payload: dict, pools: tuple[Pool, ...], snapshot: Snapshot, model: str,
                   version: tuple[int, int] | None) -> Rendered:
    """The request with its prompt rendered for the version that will serve it; a 400 when it cannot be.

    `version`: the (deployment, version) a rollout already picked for this request, if any. Otherwise
    the template is that of the first pool able to serve (dedicated before shared, routable before
    asleep), and only the pools rendering the same way stay candidates, so the engine always gets
    the prompt in its own model's format.
    """
    suffix = payload["suffix"]
    if type(suffix) is not str:
        raise _bad("invalid_suffix", "'suffix' must be a string.", "suffix")
    for name, message in _REFUSED_WITH_SUFFIX.items():
        if payload.get(name) not in (None, False):
            raise _bad("unsupported_with_suffix", message, name)
    prompt = payload["prompt"]
    prompts = [prompt] if type(prompt) is str else prompt
    if not prompts or any(type(p) is not str for p in prompts):
        raise _bad("invalid_prompt", "With 'suffix', 'prompt' must be a string or a list of strings "
                                     "(token ids cannot be rendered into a fill-in-the-middle template).", "prompt")
    template, pools = _template(pools, snapshot, model, version)
    rendered = [template.render(p, suffix) for p in prompts]
    body = {name: value for name, value in payload.items() if name != "suffix"}
    body["prompt"] = rendered[0] if type(prompt) is str else rendered
    extra = template.token_bound * len(prompts) + len(suffix.encode("utf-8")) * (len(prompts) - 1)
    return Rendered(body, pools, template, extra)


def renders_alike(snapshot: Snapshot, pools: tuple[Pool, ...], template: FimTemplate) -> bool:
    """Would every version these pools serve render a prompt as `template` does (a fallback's check)?"""
    return all(snapshot.fim_templates.get(pool.model_version_id) == template for pool in pools)


def _template(pools: tuple[Pool, ...], snapshot: Snapshot, model: str,
              version: tuple[int, int] | None) -> tuple[FimTemplate, tuple[Pool, ...]]:
    templates = snapshot.fim_templates
    if version is not None:  # a rollout's pick: that version serves, whatever the pools' default
        template = templates.get(version[1])
        if template is None:
            raise _unsupported(model)
        return template, pools
    ordered = sorted(pools, key=lambda pool: not pool.upstreams)  # stable: dedicated first still
    template = next((t for t in (templates.get(p.model_version_id) for p in ordered) if t is not None), None)
    if template is None:
        raise _unsupported(model)
    alike = tuple(pool for pool in pools if templates.get(pool.model_version_id) == template)
    return template, alike


def _unsupported(model: str) -> GatewayError:
    return _bad("fim_not_supported", f"'{model}' has no fill-in-the-middle template: its family has none and its "
                                     "version names none, so 'suffix' cannot be used with it.", "suffix")


def _bad(code: str, message: str, param: str) -> GatewayError:
    return GatewayError(400, code, message, param=param)
