"""Snapshot.model_allowed: every level's allow-list applies; answers are remembered per key and model."""
from gateway.config.snapshot import MAX_MEMO_ENTRIES, KeyInfo, Limits, Pool, Snapshot

KEY = KeyInfo(id=7, prefix="sy_test_abc", tenant_id=1, user_id=3, scopes=frozenset({"inference"}),
              expires_at=None, revoked=False)


def snapshot(**policies) -> Snapshot:
    pools = {name: (Pool(1, None, 1),) for name in ("coder", "chat")}
    return Snapshot(pools=pools, **policies)


def test_each_level_s_allow_list_applies():
    open_all = snapshot(tenant_policies={1: Limits("tenant", 1)})
    assert open_all.model_allowed(KEY, "coder") and open_all.model_allowed(KEY, "chat")
    narrowed = snapshot(tenant_policies={1: Limits("tenant", 1)},
                        key_policies={7: Limits("api_key", 7, allowed_models=frozenset({"coder"}))},
                        user_policies={(1, 3): Limits("user", 3, allowed_models=frozenset({"coder", "chat"}))})
    assert narrowed.model_allowed(KEY, "coder")
    assert not narrowed.model_allowed(KEY, "chat")
    assert not narrowed.model_allowed(KEY, "chat")  # the remembered answer is the same
    other_key = KeyInfo(**{**{f: getattr(KEY, f) for f in KeyInfo.__dataclass_fields__}, "id": 8})
    assert narrowed.model_allowed(other_key, "chat")  # remembered per key, not shared


def test_made_up_model_names_are_not_remembered_and_the_memo_stays_bounded():
    found = snapshot(key_policies={7: Limits("api_key", 7, allowed_models=frozenset({"coder"}))})
    for index in range(100):
        assert not found.model_allowed(KEY, f"made-up-{index}")
    assert len(found._allowed_memo) == 0
    for index in range(MAX_MEMO_ENTRIES + 5):
        key = KeyInfo(**{**{f: getattr(KEY, f) for f in KeyInfo.__dataclass_fields__}, "id": index})
        found.model_allowed(key, "coder")
    assert len(found._allowed_memo) <= MAX_MEMO_ENTRIES
