"""The prefix warm-up's pure parts: which head a request leaves, how many are kept, and which engine each goes to."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.routing.policies import Endpoint, RouteRequest, get_policy
from gateway.routing.prefix_warmup import WARM_CHARS, Head, PrefixMemory, moved_to, warm_body


def test_a_completion_leaves_its_prompt_cut_to_the_warm_length():
    body = warm_body({"model": "m", "prompt": "x" * (WARM_CHARS + 100), "max_tokens": 500, "stream": True},
                     "completion", "m")
    assert body == {"model": "m", "prompt": "x" * WARM_CHARS, "max_tokens": 1, "temperature": 0, "stream": False}


def test_a_chat_leaves_its_leading_messages_up_to_the_first_other_one_cut_to_the_warm_length_in_all():
    messages = [{"role": "system", "content": "s" * 1000}, {"role": "developer", "content": [{"type": "text",
                                                                                              "text": "d" * 1000}]},
                {"role": "user", "content": "u" * 5000}, {"role": "assistant", "content": "a"},
                {"role": "user", "content": "later"}]
    body = warm_body({"model": "m", "messages": messages}, "chat", "m")
    assert body is not None
    assert [m["role"] for m in body["messages"]] == ["system", "developer", "user"]
    assert [len(m["content"]) for m in body["messages"]] == [1000, 1000, WARM_CHARS - 2000]
    assert body["max_tokens"] == 1 and body["stream"] is False


def test_requests_without_text_leave_no_head():
    assert warm_body({"model": "m", "prompt": [1, 2, 3]}, "completion", "m") is None
    assert warm_body({"model": "m", "prompt": ""}, "completion", "m") is None
    assert warm_body({"model": "m", "messages": []}, "chat", "m") is None


def test_the_memory_keeps_the_most_recently_routed_heads_within_its_size():
    memory = PrefixMemory(size=3)
    for key in "abcd":
        memory.remember((1,), "7", key, "completion", {"model": "m", "prompt": key * 10}, None)
    memory.remember((1,), "7", "b", "completion", {"model": "m", "prompt": "changed"}, None)  # routed again
    assert [h.key for h in memory.heads_for((1,))] == ["b", "d", "c"]
    assert memory.heads_for((1,))[0].body["prompt"] == "b" * 10  # the head is kept, not re-cut
    memory.remember((2,), "7", "e", "completion", {"model": "m", "prompt": "e"}, "salt")
    assert [h.key for h in memory.heads_for((1,))] == ["b", "d"] and memory.shapes() == {(1,), (2,)}
    assert memory.heads_for((2,))[0].cache_salt == "salt"


@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=40, unique=True),
       st.integers(min_value=1, max_value=6))
def test_each_head_goes_to_the_engine_prefix_affinity_sends_its_key_to_when_the_pool_grows(keys, engines):
    """Against the routing policy itself: an idle pool of `engines` + 1, every key's pick."""
    members = [str(n) for n in range(engines + 1)]
    newcomer = members[-1]
    heads = [Head("3", key, "completion", {"prompt": key}, None) for key in keys]
    moved = moved_to(heads, members, {newcomer})
    policy = get_policy("prefix_affinity", window=None)
    endpoints = [Endpoint(m, f"http://127.0.0.1:1/{m}", 1.0, 0, None, True, False) for m in members]
    routed_there = [h.key for h in heads
                    if policy.choose(endpoints, RouteRequest("3", "m", None, h.key)).id == newcomer]
    assert [h.key for h in moved.get(newcomer, [])] == routed_there
    assert set(moved) <= {newcomer}
