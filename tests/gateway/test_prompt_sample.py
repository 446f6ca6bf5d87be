"""The prompt sample kept for the slow-requests page: the start of the prompt, in either shape."""
from gateway.pipeline.payload import prompt_sample


def test_completions_keep_the_start_of_the_prompt():
    assert prompt_sample({"prompt": "def fib(n):\n    return n"}, "completions", 11) == "def fib(n):"
    assert prompt_sample({"prompt": ["a", "b", 3]}, "completions", 100) == "a\nb"


def test_chat_keeps_roles_and_text_parts():
    body = {"messages": [{"role": "system", "content": "You complete code."},
                         {"role": "user", "content": [{"type": "text", "text": "fix"}, {"type": "image_url"}]}]}
    assert prompt_sample(body, "chat", 100) == "system: You complete code.\nuser: fix"


def test_chat_sample_reads_what_the_model_reads_as_text_and_nothing_else():
    image = {"type": "image_url", "image_url": {"url": "https://x/y.png"}, "text": "not read by vLLM"}
    parts = ["bare", {"type": "input_text", "text": "a"}, {"type": "refusal", "refusal": "b"},
             {"type": "thinking", "thinking": "c"}, image, {"text": "typeless"}, {"type": "text", "text": 5}]
    body = {"messages": [{"role": "user", "content": parts}]}
    assert prompt_sample(body, "chat", 100) == "user: bare a b c typeless"


def test_zero_characters_keeps_nothing():
    assert prompt_sample({"prompt": "secret-free text"}, "completions", 0) == ""


def test_chat_sample_is_cut_at_the_limit_wherever_the_messages_end():
    body = {"messages": [{"role": "system", "content": "abc"}, {"role": "user", "content": "defgh"},
                         {"role": "assistant", "content": "ij"}]}
    whole = "system: abc\nuser: defgh\nassistant: ij"
    assert [prompt_sample(body, "chat", n) for n in range(len(whole) + 3)] == \
        [whole[:n] if n else "" for n in range(len(whole) + 3)]


def test_a_sample_of_an_unchecked_body_never_raises():
    odd = [{"type": ["text"], "text": "x"}, {"type": None}, 5, None, {"type": "text", "text": None}]
    assert prompt_sample({"messages": [{"role": "user", "content": odd}, "not a message"]}, "chat", 50) == "user: "
