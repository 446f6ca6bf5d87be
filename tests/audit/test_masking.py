"""Audit rows mask credentials by field name, but keep token counts and limits readable."""
import pytest

from audit.masking import MASK, mask_secrets


@pytest.mark.parametrize("name", ["password", "client_secret", "token", "access_token", "refresh_token", "token_hash",
                                  "key_hash", "hashed_key", "raw_key", "key", "hash", "pepper", "session_token_value"])
def test_credential_fields_are_masked(name):
    assert mask_secrets({name: "s3cr3t", "nested": [{name: "x"}]}) == {name: MASK, "nested": [{name: MASK}]}


@pytest.mark.parametrize("name", ["tokens_per_minute", "monthly_token_budget", "max_tokens", "prompt_tokens",
                                  "completion_tokens", "token_budget", "requests_per_minute", "key_prefix", "name"])
def test_counts_limits_and_prefixes_stay_readable(name):
    assert mask_secrets({name: 1000}) == {name: 1000}


def test_a_switchyard_key_in_any_text_is_cut_to_its_prefix():
    raw = "sy_live_" + "A" * 32 + "abcdef"
    assert mask_secrets({"note": f"rotated {raw} today"}) == {"note": f"rotated {raw[:16]}… today"}
