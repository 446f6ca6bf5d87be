"""hash_key is HMAC-SHA256 of the key under the pepper, also when the pepper changes."""
import hashlib
import hmac

from django.test import override_settings

from apikeys.keyformat import generate_key, hash_key


def reference(pepper: str, raw: str) -> str:
    return hmac.new(pepper.encode(), raw.encode(), hashlib.sha256).hexdigest()


def test_hash_key_is_the_standard_hmac_of_the_key_under_the_pepper(settings):
    for _ in range(20):
        raw = generate_key("test")
        assert hash_key(raw) == reference(settings.SWITCHYARD_KEY_PEPPER, raw)


def test_a_different_pepper_gives_a_different_hash():
    raw = generate_key("test")
    with override_settings(SWITCHYARD_KEY_PEPPER="pepper-one"):
        one = hash_key(raw)
    with override_settings(SWITCHYARD_KEY_PEPPER="pepper-two"):
        two = hash_key(raw)
    assert one == reference("pepper-one", raw) and two == reference("pepper-two", raw) and one != two
