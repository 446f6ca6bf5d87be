"""Fill-in-the-middle through the gateway: `suffix` is rendered into the prompt for the model the request
names, and the engine gets the rendered prompt and no `suffix` (docs/fim.md).

What reached the engine is read from the simulator's request recording (`--record-requests`, streams
too) and from EchoEngines (tests/gateway_app/helpers.py) for the other models.
"""
from __future__ import annotations

import json

import httpx
import pytest

from models_registry.services import update_model
from simulator.recording import read_requests
from tests.factories import SYSTEM
from tests.gateway_app.conftest import client_for, wait_for
from tests.gateway_app.helpers import EchoEngine, add_deployment, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
QWEN = "fim-qwen"  # on a recording simulator
PREFIX, SUFFIX = "def area(r):\n    ", "\n    return result\n"
QWEN_PROMPT = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"


@pytest.fixture
def world(gateway, alice, simulators, tmp_path):
    record_file = tmp_path / "engine-requests.log"
    engine = simulators("--decode-ms-per-token", "1", "--prefill-ms-per-token", "0", "--record-requests",
                        str(record_file), model=QWEN)
    add_deployment(make_model_version(QWEN, family="qwen-coder"), tenant=None, name="fim-qwen", urls=[engine.url])
    echoes = {name: EchoEngine(name) for name in ("fim-star", "fim-plain", "fim-own")}
    add_deployment(make_model_version("fim-star", family="starcoder2"), tenant=None, name="fim-star",
                   urls=[echoes["fim-star"].url])
    add_deployment(make_model_version("fim-plain"), tenant=None, name="fim-plain", urls=[echoes["fim-plain"].url])
    own = make_model_version("fim-own", fim_template="[SUF]{suffix}[PRE]{prefix}[MID]")
    add_deployment(own, tenant=None, name="fim-own", urls=[echoes["fim-own"].url])
    server = gateway()
    for name in (QWEN, *echoes):
        server.wait_until_serving(alice.key.raw, name)
    yield server, record_file, echoes
    for echo in echoes.values():
        echo.stop()


def engine_bodies(record_file) -> list[dict]:
    return [json.loads(body) for _head, body in read_requests(record_file)]


def fim(server, key: str, model: str, **fields) -> httpx.Response:
    return server.post("/v1/completions", key, {"model": model, "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 4,
                                                **fields})


def test_the_official_client_sends_a_fim_request_and_the_engine_gets_the_rendered_prompt(world, alice):
    server, record_file, _ = world
    completion = client_for(server, alice.key.raw).completions.create(model=QWEN, prompt=PREFIX, suffix=SUFFIX,
                                                                      max_tokens=4, n=2)
    assert len(completion.choices) == 2 and completion.usage.prompt_tokens > 0
    [sent] = engine_bodies(record_file)
    assert sent["prompt"] == QWEN_PROMPT and "suffix" not in sent and sent["n"] == 2
    [row] = wait_for(lambda: usage_rows(model_name=QWEN), timeout=5)
    assert row.prompt_tokens == completion.usage.prompt_tokens  # the engine's count of the rendered prompt


def test_a_streamed_fim_request_is_rendered_too(world, alice):
    server, record_file, _ = world
    chunks = list(client_for(server, alice.key.raw).completions.create(
        model=QWEN, prompt=PREFIX, suffix=SUFFIX, max_tokens=4, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    [sent] = engine_bodies(record_file)
    assert sent["prompt"] == QWEN_PROMPT and "suffix" not in sent and sent["stream"] is True


def test_each_model_gets_its_own_template_and_a_model_without_one_is_a_400(world, alice):
    server, _, echoes = world
    assert fim(server, alice.key.raw, "fim-star").status_code == 200
    assert echoes["fim-star"].bodies[-1]["prompt"] == f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>"
    assert fim(server, alice.key.raw, "fim-own").status_code == 200  # the version's own, suffix first
    assert echoes["fim-own"].bodies[-1]["prompt"] == f"[SUF]{SUFFIX}[PRE]{PREFIX}[MID]"
    refused = fim(server, alice.key.raw, "fim-plain")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "fim_not_supported"
    assert refused.json()["error"]["param"] == "suffix" and not echoes["fim-plain"].bodies
    # Without a suffix the same model serves the prompt untouched.
    plain = server.post("/v1/completions", alice.key.raw, {"model": "fim-plain", "prompt": PREFIX, "max_tokens": 4})
    assert plain.status_code == 200 and echoes["fim-plain"].bodies[-1]["prompt"] == PREFIX


def test_a_family_change_reaches_the_gateway(world, alice):
    server, _, echoes = world
    update_model(echoes_model("fim-plain"), family="codellama", actor=SYSTEM)
    assert wait_for(lambda: fim(server, alice.key.raw, "fim-plain").status_code == 200, timeout=10)
    assert echoes["fim-plain"].bodies[-1]["prompt"] == f"<PRE> {PREFIX} <SUF>{SUFFIX} <MID>"


def echoes_model(name: str):
    from models_registry.models import Model

    return Model.objects.get(name=name)


@pytest.mark.parametrize("fields, code, param", [
    ({"prompt": [1, 2, 3]}, "invalid_prompt", "prompt"),
    ({"suffix": 7}, "invalid_suffix", "suffix"),
    ({"echo": True}, "unsupported_with_suffix", "echo"),
])
def test_bad_fim_requests_are_openai_shaped_400s_that_reach_no_engine(world, alice, fields, code, param):
    server, record_file, _ = world
    response = fim(server, alice.key.raw, QWEN, **fields)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    assert not engine_bodies(record_file)


def test_a_list_of_prompts_and_an_empty_suffix(world, alice):
    server, record_file, _ = world
    assert fim(server, alice.key.raw, QWEN, prompt=["a = ", "b = "], suffix="").status_code == 200
    [sent] = engine_bodies(record_file)
    assert sent["prompt"] == ["<|fim_prefix|>a = <|fim_suffix|><|fim_middle|>",
                              "<|fim_prefix|>b = <|fim_suffix|><|fim_middle|>"]


def test_another_tenants_dedicated_coder_is_404_with_or_without_suffix(world, alice, bob):
    server, _, _ = world
    engine = EchoEngine("fim-private")
    try:
        add_deployment(make_model_version("fim-private", family="qwen-coder"), tenant=alice.tenant,
                       name="fim-private", urls=[engine.url])
        server.wait_until_serving(alice.key.raw, "fim-private")
        assert fim(server, alice.key.raw, "fim-private").status_code == 200
        response = fim(server, bob.key.raw, "fim-private")
        assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
        assert len(engine.bodies) == 1
    finally:
        engine.stop()
