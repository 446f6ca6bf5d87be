import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # The fixtures create users with passwords; the production hasher is slow on purpose.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
