"""Affinity keys from request bodies."""
import hashlib

from gateway.routing.policies import prefix_key

SYSTEM = {"role": "system", "content": "You are a careful reviewer of Python code. " * 20}


def chat(*messages):
    return {"messages": [SYSTEM, *messages]}


def test_chat_key_is_stable_as_the_conversation_grows():
    first = chat({"role": "user", "content": "Review a.py"})
    later = chat({"role": "user", "content": "Review a.py"}, {"role": "assistant", "content": "ok"},
                 {"role": "user", "content": "and b.py?"})
    assert prefix_key(first, "chat") == prefix_key(later, "chat")


def test_chat_key_differs_for_a_different_system_prompt_or_opening():
    base = prefix_key(chat({"role": "user", "content": "Review a.py"}), "chat")
    assert base != prefix_key(chat({"role": "user", "content": "Review c.py"}), "chat")
    other = {"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "Review a.py"}]}
    assert base != prefix_key(other, "chat")


def test_chat_text_parts_count_like_strings():
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert prefix_key(parts, "chat") == prefix_key({"messages": [{"role": "user", "content": "hi"}]}, "chat")


def test_completion_key_uses_whole_leading_blocks():
    head = "x" * 1024
    assert prefix_key({"prompt": head + "tail one"}, "completion", block_chars=512) == \
        prefix_key({"prompt": head + "another tail"}, "completion", block_chars=512)
    assert prefix_key({"prompt": "a" * 600}, "completion", block_chars=512) != \
        prefix_key({"prompt": "b" + "a" * 599}, "completion", block_chars=512)


def test_completion_key_is_capped_at_max_blocks():
    a = {"prompt": "y" * 4096 + "A"}
    b = {"prompt": "y" * 4096 + "B" * 3000}
    assert prefix_key(a, "completion", block_chars=256, max_blocks=4) == \
        prefix_key(b, "completion", block_chars=256, max_blocks=4)


def test_no_text_no_key():
    assert prefix_key({"prompt": ""}, "completion") is None
    assert prefix_key({"messages": []}, "chat") is None


def blake(text):
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def test_keys_are_the_documented_hash_so_gateways_of_any_version_agree():
    assert prefix_key({"prompt": "def f():"}, "completion") == blake("def f():")
    long = chat({"role": "user", "content": [{"type": "text", "text": "Review a.py"}]})
    whole = "".join(f"{m['role']}\x1f{m['content'] if isinstance(m['content'], str) else 'Review a.py'}\x1e"
                    for m in long["messages"])
    assert prefix_key(long, "chat", block_chars=100, max_blocks=3) == blake(whole[:300])
    assert prefix_key(long, "chat", block_chars=512, max_blocks=8) == blake(whole[:4096])
