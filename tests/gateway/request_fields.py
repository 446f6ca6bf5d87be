"""Every place a request can carry text: one body builder per field of completions and chat.

Each builder plants `text` in one field of an otherwise ordinary request for `model`. The fields
are those of OpenAI's schema and vLLM 0.32's request models (vllm/entrypoints/openai/
{completion,chat_completion}/protocol.py, vllm/renderers/chat_utils.py), removed ones clients
still send (`guided_*`), wrong types, and names the gateway has never heard of. Used by the
redaction corpus (tests/gateway/corpus/generate.py writes bodies.jsonl) and the canary test.
"""
from __future__ import annotations

from typing import Callable

Builder = Callable[[str, str], dict]


def _completion(**fields) -> Builder:
    return lambda t, model: {"model": model, "prompt": "def add(a, b):", "max_tokens": 2,
                             **{name: value(t) if callable(value) else value for name, value in fields.items()}}


def _chat(message: Callable[[str], dict] | None = None, **fields) -> Builder:
    def build(t: str, model: str) -> dict:
        messages = [{"role": "system", "content": "You complete code."},
                    message(t) if message else {"role": "user", "content": "hi"}]
        return {"model": model, "messages": messages, "max_tokens": 2,
                **{name: value(t) if callable(value) else value for name, value in fields.items()}}
    return build


def _part(part: Callable[[str], object]) -> Builder:
    return _chat(lambda t: {"role": "user", "content": ["look:", part(t)]})


def _tool(t: str) -> dict:
    return {"type": "function", "function": {"name": "lookup", "description": t,
                                             "parameters": {"type": "object", "properties": {"q": {
                                                 "type": "string", "description": t}}}}}


def _assistant_calls(t: str, *, name: str = "lookup", call_id: str = "call_1") -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": t}}]}


COMPLETIONS: dict[str, Builder] = {
    "prompt": lambda t, model: {"model": model, "prompt": t, "max_tokens": 2},
    "prompt[]": lambda t, model: {"model": model, "prompt": ["def f():", t], "max_tokens": 2},
    "suffix": _completion(suffix=lambda t: t),
    "stop": _completion(stop=lambda t: t),
    "stop[]": _completion(stop=lambda t: ["\n\n", t]),
    "bad_words": _completion(bad_words=lambda t: [t]),
    "user": _completion(user=lambda t: t),
    "model": lambda t, model: {"model": t, "prompt": "x", "max_tokens": 2},
    "logit_bias key": _completion(logit_bias=lambda t: {t: 1}),
    "response_format.json_schema": _completion(response_format=lambda t: {
        "type": "json_schema", "json_schema": {"name": "answer", "description": t, "schema": {
            "type": "object", "properties": {"code": {"type": "string", "description": t}}}}}),
    "structured_outputs.regex": _completion(structured_outputs=lambda t: {"regex": t}),
    "structured_outputs.choice": _completion(structured_outputs=lambda t: {"choice": ["yes", t]}),
    "structured_outputs.json": _completion(structured_outputs=lambda t: {"json": {"type": "string", "enum": [t]}}),
    "structured_outputs.grammar": _completion(structured_outputs=lambda t: {"grammar": t}),
    "guided_json": _completion(guided_json=lambda t: {"type": "string", "description": t}),
    "guided_regex": _completion(guided_regex=lambda t: t),
    "guided_choice": _completion(guided_choice=lambda t: [t]),
    "guided_grammar": _completion(guided_grammar=lambda t: t),
    "metadata": _completion(metadata=lambda t: {"ticket": t}),
    "request_id": _completion(request_id=lambda t: t),
    "session_id": _completion(session_id=lambda t: t),
    "cache_salt": _completion(cache_salt=lambda t: t),
    "vllm_xargs": _completion(vllm_xargs=lambda t: {"note": t, "list": [t]}),
    "kv_transfer_params": _completion(kv_transfer_params=lambda t: {"remote": t}),
    "prompt_embeds": _completion(prompt_embeds=lambda t: t),
    "seed (a string)": _completion(seed=lambda t: t),
    "temperature (a string)": _completion(temperature=lambda t: t),
    "n (a string)": _completion(n=lambda t: t),
    "max_tokens (a string)": lambda t, model: {"model": model, "prompt": "x", "max_tokens": t},
    "stream_options.*": _completion(stream=True, stream_options=lambda t: {"include_usage": True, "note": t}),
    "echo": lambda t, model: {"model": model, "prompt": t, "max_tokens": 2, "echo": True},
    "an unknown field": _completion(x_trace=lambda t: t),
    "an unknown field's name": lambda t, model: {"model": model, "prompt": "x", "max_tokens": 2, t: 1},
    "deep in an unknown field": _completion(extra=lambda t: {"a": [{"b": {"c": [t]}}]}),
}

CHAT: dict[str, Builder] = {
    "messages[].content": _chat(lambda t: {"role": "user", "content": t}),
    "messages[].role": _chat(lambda t: {"role": t, "content": "hi"}),
    "messages[].name": _chat(lambda t: {"role": "user", "name": t, "content": "hi"}),
    "messages[] unknown key": _chat(lambda t: {"role": "user", "content": "hi", "x_note": t}),
    "messages[] unknown key's name": _chat(lambda t: {"role": "user", "content": "hi", t: "x"}),
    "messages[].reasoning": _chat(lambda t: {"role": "assistant", "content": "ok", "reasoning": t}),
    "messages[].reasoning_content": _chat(lambda t: {"role": "assistant", "content": "ok", "reasoning_content": t}),
    "messages[].refusal": _chat(lambda t: {"role": "assistant", "content": None, "refusal": t}),
    "messages[].task": _chat(lambda t: {"role": "user", "content": "hi", "task": t}),
    "messages[].tools (developer)": _chat(lambda t: {"role": "developer", "content": "hi", "tools": [_tool(t)]}),
    "messages[].tool_calls[].function.arguments": _chat(lambda t: _assistant_calls(t)),
    "messages[].tool_calls[].function.name": _chat(lambda t: _assistant_calls("{}", name=t)),
    "messages[].tool_calls[].id": _chat(lambda t: _assistant_calls("{}", call_id=t)),
    "messages[].tool_call_id": _chat(lambda t: {"role": "tool", "tool_call_id": t, "content": "42"}),
    "messages[].function_call": _chat(lambda t: {"role": "assistant", "content": None,
                                                 "function_call": {"name": "f", "arguments": t}}),
    "messages[].audio.id": _chat(lambda t: {"role": "assistant", "content": "ok", "audio": {"id": t}}),
    "content[] bare string": _part(lambda t: t),
    "content[text].text": _part(lambda t: {"type": "text", "text": t}),
    "content[input_text].text": _part(lambda t: {"type": "input_text", "text": t}),
    "content[output_text].text": _part(lambda t: {"type": "output_text", "text": t}),
    "content[refusal].refusal": _part(lambda t: {"type": "refusal", "refusal": t}),
    "content[thinking].thinking": _part(lambda t: {"type": "thinking", "thinking": t, "closed": True}),
    "content[tool_reference].name": _part(lambda t: {"type": "tool_reference", "name": t}),
    "content[text] extra key": _part(lambda t: {"type": "text", "text": "x", "cache_control": {"note": t}}),
    "content[image_url].image_url.url": _part(lambda t: {"type": "image_url", "image_url": {"url": t}}),
    "content[image_url] https URL": _part(lambda t: {"type": "image_url", "image_url": {
        "url": "https://bucket.s3.amazonaws.com/a.png?note=" + t}}),
    "content[image_url] data: URI header": _part(lambda t: {"type": "image_url", "image_url": {
        "url": f"data:image/png;name={t};base64,iVBORw0KGgo="}}),
    "content[image_url] data: URI payload": _part(lambda t: {"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + t}}),
    "content[image_url].image_url.detail": _part(lambda t: {"type": "image_url", "image_url": {
        "url": "https://x/a.png", "detail": t}}),
    "content[image_url].text (ignored by vLLM)": _part(lambda t: {"type": "image_url", "text": t,
                                                                  "image_url": {"url": "https://x/a.png"}}),
    "content[input_image].image_url": _part(lambda t: {"type": "input_image", "image_url": t}),
    "content[audio_url].audio_url.url": _part(lambda t: {"type": "audio_url", "audio_url": {"url": t}}),
    "content[video_url].video_url.url": _part(lambda t: {"type": "video_url", "video_url": {"url": t}}),
    "content[input_audio].input_audio.data": _part(lambda t: {"type": "input_audio",
                                                              "input_audio": {"data": t, "format": "wav"}}),
    "content[input_audio].input_audio.format": _part(lambda t: {"type": "input_audio",
                                                                "input_audio": {"data": "UklGRg==", "format": t}}),
    "content[image_embeds]": _part(lambda t: {"type": "image_embeds", "image_embeds": t}),
    "content[audio_embeds] by name": _part(lambda t: {"type": "audio_embeds", "audio_embeds": {"x": t}}),
    "content[prompt_embeds].data": _part(lambda t: {"type": "prompt_embeds", "data": t}),
    "content[] uuid": _part(lambda t: {"type": "image_url", "image_url": {"url": "https://x/a.png"}, "uuid": t}),
    "content[typeless].image_url": _part(lambda t: {"image_url": t}),
    "content[].type": _part(lambda t: {"type": t, "text": "x"}),
    "content[file]": _part(lambda t: {"type": "file", "file": {"file_data": t}}),
    "tools[].function.description and parameters": _chat(tools=lambda t: [_tool(t)]),
    "tools[].function.name": _chat(tools=lambda t: [{"type": "function", "function": {"name": t}}]),
    "functions (legacy)": _chat(functions=lambda t: [{"name": "f", "description": t, "parameters": {}}]),
    "tool_choice.function.name": _chat(tools=lambda t: [_tool("x")],
                                       tool_choice=lambda t: {"type": "function", "function": {"name": t}}),
    "function_call": _chat(function_call=lambda t: {"name": t}),
    "response_format.json_schema": _chat(response_format=lambda t: {
        "type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object", "description": t}}}),
    "response_format.type": _chat(response_format=lambda t: {"type": t}),
    "structured_outputs.json": _chat(structured_outputs=lambda t: {"json": {"description": t}}),
    "guided_json": _chat(guided_json=lambda t: {"description": t}),
    "stop[]": _chat(stop=lambda t: [t]),
    "user": _chat(user=lambda t: t),
    "model": lambda t, model: {"model": t, "messages": [{"role": "user", "content": "hi"}]},
    "chat_template": _chat(chat_template=lambda t: "{{ messages[0].content }}" + t),
    "chat_template_kwargs": _chat(chat_template_kwargs=lambda t: {"note": t}),
    "documents": _chat(documents=lambda t: [{"title": "notes", "text": t}]),
    "mm_processor_kwargs": _chat(mm_processor_kwargs=lambda t: {"note": t}),
    "media_io_kwargs": _chat(media_io_kwargs=lambda t: {"image": {"note": t}}),
    "metadata": _chat(metadata=lambda t: {"ticket": t}),
    "prediction.content": _chat(prediction=lambda t: {"type": "content", "content": t}),
    "logit_bias key": _chat(logit_bias=lambda t: {t: 5}),
    "reasoning_effort": _chat(reasoning_effort=lambda t: t),
    "an unknown field": _chat(x_trace=lambda t: t),
    "an unknown field's name": lambda t, model: {"model": model, "messages": [{"role": "user", "content": "hi"}], t: 1},
}

FIELDS: dict[str, dict[str, Builder]] = {"completions": COMPLETIONS, "chat": CHAT}
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
