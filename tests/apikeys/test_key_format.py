"""The key format: prefixed, ≥128 bits of randomness, a checksum that catches typos before any lookup."""
import math
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apikeys import keyformat
from apikeys.authentication import KeyRejected, resolve_key
from audit.models import AuditEvent
from tests.conftest import bearer
from tests.factories import make_key

KEY_RE = re.compile(r"^sy_(live|test|dev)_[0-9A-Za-z]{32}[0-9A-Za-z]{6}$")


def _typo(raw: str, position: int) -> str:
    """`raw` with one character replaced by a different base62 character."""
    old = raw[position]
    new = keyformat.ALPHABET[(keyformat.ALPHABET.index(old) + 1) % 62]
    return raw[:position] + new + raw[position + 1:]


@pytest.mark.parametrize("env", ["live", "test", "dev"])
def test_generated_key_has_the_documented_shape(env):
    raw = keyformat.generate_key(env)
    assert KEY_RE.match(raw) and raw.startswith(f"sy_{env}_")
    assert keyformat.is_well_formed(raw)
    assert keyformat.display_prefix(raw) == raw[: len(f"sy_{env}_") + 8]


def test_random_part_carries_at_least_128_bits():
    assert keyformat.BODY_LENGTH * math.log2(len(set(keyformat.ALPHABET))) >= 128
    keys = {keyformat.generate_key() for _ in range(2000)}
    bodies = [k[len("sy_live_"):-keyformat.CHECKSUM_LENGTH] for k in keys]
    assert len(keys) == 2000 and len({b[:8] for b in bodies}) == 2000  # no repeats, even in the display prefix
    assert set("".join(bodies)) == set(keyformat.ALPHABET)  # the whole alphabet is in use


def test_every_single_character_typo_fails_the_checksum():
    raw = keyformat.generate_key("live")
    start = len("sy_live_")
    for position in range(start, len(raw)):
        for offset in range(1, 62):
            old = keyformat.ALPHABET.index(raw[position])
            typo = raw[:position] + keyformat.ALPHABET[(old + offset) % 62] + raw[position + 1:]
            assert not keyformat.is_well_formed(typo), (position, offset)


def test_adjacent_transpositions_fail_the_checksum():
    raw = keyformat.generate_key("live")
    for i in range(len("sy_live_"), len(raw) - 1):
        if raw[i] != raw[i + 1]:
            assert not keyformat.is_well_formed(raw[:i] + raw[i + 1] + raw[i] + raw[i + 2:])


@pytest.mark.parametrize("mangle", [
    lambda raw: raw[:-1], lambda raw: raw + "A", lambda raw: raw.replace("sy_live_", "sy_prod_"),
    lambda raw: raw.replace("sy_", "sk_"), lambda raw: " " + raw, lambda raw: raw.upper(), lambda raw: "",
])
def test_malformed_keys_are_not_well_formed(mangle):
    assert not keyformat.is_well_formed(mangle(keyformat.generate_key("live")))


def test_checksum_typo_is_rejected_without_a_database_query(alice, django_assert_num_queries):
    typo = _typo(alice.key, len(alice.key) - 10)
    with django_assert_num_queries(0):
        with pytest.raises(KeyRejected) as rejected:
            resolve_key(typo)
    assert rejected.value.reason == "malformed API key"


def test_well_formed_unknown_key_is_looked_up_then_rejected(db, django_assert_num_queries):
    with django_assert_num_queries(1):
        with pytest.raises(KeyRejected, match="unknown API key"):
            resolve_key(keyformat.generate_key())


def _key_lookups(queries) -> list[str]:
    return [q["sql"] for q in queries if "apikeys_apikey" in q["sql"]]


def test_http_checksum_typo_never_queries_the_key_table(alice):
    typo = _typo(alice.key, len("sy_live_") + 3)
    with CaptureQueriesContext(connection) as ctx:
        response = bearer(typo).get("/api/v1/tenants/")
    assert response.status_code == 401
    assert _key_lookups(ctx.captured_queries) == []
    rejection = AuditEvent.objects.filter(action="auth.api_key_rejected").get()
    assert rejection.after == {"reason": "malformed API key", "prefix": None}


def test_http_well_formed_unknown_key_does_query_the_key_table(db):
    # Control for the test above: the capture does see a key lookup when one happens.
    with CaptureQueriesContext(connection) as ctx:
        response = bearer(keyformat.generate_key()).get("/api/v1/tenants/")
    assert response.status_code == 401
    assert len(_key_lookups(ctx.captured_queries)) == 1


def test_minted_key_is_well_formed_and_prefix_is_stored(tenant_a):
    minted = make_key(tenant_a)
    assert KEY_RE.match(minted.raw)
    assert minted.api_key.prefix == keyformat.display_prefix(minted.raw)
    assert minted.api_key.key_hash == keyformat.hash_key(minted.raw) != minted.raw
