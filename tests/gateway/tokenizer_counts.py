"""Prompt tokens as vLLM counts them, with a model's real tokenizer: run with the engine venv's Python.

    .venv-engine/bin/python tests/gateway/tokenizer_counts.py MODEL_DIR < requests.jsonl

Each input line is {"kind": "chat"|"completions", "body": {...}}; each output line the prompt
tokens vLLM would report in `usage.prompt_tokens`: chat messages through the model's chat
template (text parts joined by newlines, as vLLM's "string" content format does) and tokenized
without special tokens; completions prompts tokenized with them, summed over a batch. Then a
line with the microseconds one tokenization of each request took (the cost of counting exactly).
Imports nothing from Switchyard (it runs outside Django, in the other venv).
"""
import json
import sys
import time


def messages_of(body: dict) -> list[dict]:
    out = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
        out.append({"role": message["role"], "content": content or ""})
    return out


def prompts_of(body: dict) -> list:
    prompt = body["prompt"]
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        return [prompt]
    return prompt


def count(tokenizer, kind: str, body: dict) -> int:
    if kind == "chat":
        text = tokenizer.apply_chat_template(messages_of(body), add_generation_prompt=True, tokenize=False)
        return len(tokenizer.encode(text, add_special_tokens=False))
    total = 0
    for prompt in prompts_of(body):
        total += len(prompt) if isinstance(prompt, list) else len(tokenizer.encode(prompt, add_special_tokens=True))
    return total


def main() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
    requests = [json.loads(line) for line in sys.stdin if line.strip()]
    counts = [count(tokenizer, r["kind"], r["body"]) for r in requests]
    started = time.perf_counter()
    for r in requests:
        count(tokenizer, r["kind"], r["body"])
    micros = (time.perf_counter() - started) * 1e6 / max(1, len(requests))
    for n in counts:
        print(n)
    print(f"{micros:.1f}")


if __name__ == "__main__":
    main()
