"""gateway.pipeline.fim: a completions request with `suffix`, rendered for the version that will serve it."""
from types import MappingProxyType

import pytest

from gateway.config.snapshot import Pool, Snapshot, Upstream
from gateway.errors import GatewayError
from gateway.pipeline.fim import render_request, renders_alike, wants_fim
from models_registry.fim import parse_template, template_for

QWEN, STARCODER = template_for("qwen-coder"), template_for("starcoder2")
SPM = parse_template("<SUF>{suffix}<PRE>{prefix}<MID>")


def pool(deployment: int, version: int, *, tenant: int | None = None, ready: bool = True) -> Pool:
    upstreams = (Upstream(deployment * 10, f"http://127.0.0.1:{9000 + deployment}", deployment, version,
                          tenant is None),) if ready else ()
    return Pool(deployment_id=deployment, tenant_id=tenant, model_version_id=version, upstreams=upstreams)


def snapshot(templates: dict) -> Snapshot:
    return Snapshot(fim_templates=MappingProxyType(templates))


ONE_POOL = (pool(1, 11),)


def render(body: dict, pools=ONE_POOL, templates=None, version=None):
    templates = {11: QWEN} if templates is None else templates
    return render_request({"model": "coder", **body}, tuple(pools), snapshot(templates), "coder", version)


def refused(body: dict, **kwargs) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        render(body, **kwargs)
    assert caught.value.status == 400
    return caught.value


def test_the_prompt_is_rendered_and_the_suffix_removed_everything_else_kept():
    body = {"prompt": "def f(x):\n    ", "suffix": "\n    return y", "max_tokens": 8, "n": 3, "stream": True,
            "temperature": 0.2, "stop": ["\n\n"]}
    rendered = render(body)
    assert rendered.payload == {"model": "coder", "prompt": "<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n    return y"
                                "<|fim_middle|>", "max_tokens": 8, "n": 3, "stream": True, "temperature": 0.2,
                                "stop": ["\n\n"]}
    assert "suffix" in body  # the client's body is not changed in place


def test_an_empty_suffix_is_still_fill_in_the_middle():
    rendered = render({"prompt": "x = ", "suffix": ""})
    assert rendered.payload["prompt"] == "<|fim_prefix|>x = <|fim_suffix|><|fim_middle|>"


def test_a_list_of_prompts_renders_each_with_the_suffix():
    rendered = render({"prompt": ["a", "b"], "suffix": "!"}, templates={11: STARCODER})
    assert rendered.payload["prompt"] == ["<fim_prefix>a<fim_suffix>!<fim_middle>",
                                          "<fim_prefix>b<fim_suffix>!<fim_middle>"]
    # the suffix is sent once but rendered twice: admission reserves its second copy and both templates' text
    assert rendered.extra_prompt_tokens == 2 * STARCODER.token_bound + 1


def test_a_suffix_first_template_puts_the_suffix_first():
    assert render({"prompt": "p", "suffix": "s"}, templates={11: SPM}).payload["prompt"] == "<SUF>s<PRE>p<MID>"


@pytest.mark.parametrize("prompt", [[1, 2, 3], [[1, 2], [3]], ["a", [1, 2]], []])
def test_token_id_prompts_cannot_be_rendered(prompt):
    error = refused({"prompt": prompt, "suffix": "s"})
    assert (error.code, error.param) == ("invalid_prompt", "prompt")


@pytest.mark.parametrize("suffix", [1, ["s"], {"text": "s"}, True])
def test_a_suffix_must_be_a_string(suffix):
    assert refused({"prompt": "p", "suffix": suffix}).code == "invalid_suffix"


@pytest.mark.parametrize("field, value", [("echo", True), ("prompt_embeds", "AAAA"), ("truncate_prompt_tokens", 5)])
def test_fields_the_engine_refuses_beside_a_suffix_are_refused_here_too(field, value):
    error = refused({"prompt": "p", "suffix": "s", field: value})
    assert (error.code, error.param) == ("unsupported_with_suffix", field)


def test_echo_false_is_fine():
    assert render({"prompt": "p", "suffix": "s", "echo": False}).payload["echo"] is False


def test_a_model_without_a_template_is_a_400_naming_it():
    error = refused({"prompt": "p", "suffix": "s"}, templates={11: None})
    assert error.code == "fim_not_supported" and "'coder'" in error.message and error.param == "suffix"
    assert b'"type":"invalid_request_error"' in error.body()


def test_a_null_suffix_is_no_suffix():
    assert not wants_fim({"prompt": "p", "suffix": None}) and not wants_fim({"prompt": "p"})
    assert wants_fim({"prompt": "p", "suffix": ""})


def test_the_first_routable_pool_decides_and_only_pools_rendering_alike_stay():
    dedicated, shared_qwen, shared_star = pool(1, 11, tenant=5), pool(2, 12), pool(3, 13)
    templates = {11: STARCODER, 12: QWEN, 13: STARCODER}
    rendered = render({"prompt": "p", "suffix": "s"}, pools=(dedicated, shared_qwen, shared_star), templates=templates)
    assert rendered.template == STARCODER and rendered.pools == (dedicated, shared_star)


def test_pools_without_fim_are_left_out_when_another_can_render():
    asleep_plain, ready_qwen = pool(1, 11, ready=False), pool(2, 12)
    rendered = render({"prompt": "p", "suffix": "s"}, pools=(asleep_plain, ready_qwen), templates={11: None, 12: QWEN})
    assert rendered.template == QWEN and rendered.pools == (ready_qwen,)


def test_a_version_a_rollout_picked_renders_with_its_own_template():
    split = pool(1, 11)
    rendered = render({"prompt": "p", "suffix": "s"}, pools=(split,), templates={11: QWEN, 12: STARCODER},
                      version=(1, 12))
    assert rendered.payload["prompt"] == "<fim_prefix>p<fim_suffix>s<fim_middle>" and rendered.pools == (split,)
    assert refused({"prompt": "p", "suffix": "s"}, templates={11: QWEN, 12: None}, version=(1, 12)).code == \
        "fim_not_supported"


def test_a_fallback_serves_a_fim_request_only_if_it_renders_alike():
    templates = snapshot({11: QWEN, 12: QWEN, 13: STARCODER, 14: None})
    assert renders_alike(templates, (pool(2, 12),), QWEN)
    assert not renders_alike(templates, (pool(3, 13),), QWEN)
    assert not renders_alike(templates, (pool(4, 14),), QWEN)
