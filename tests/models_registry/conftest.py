import pytest
from django.test.utils import override_settings


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """The alice/bob/charlie fixtures hash passwords; hashing strength is not under test here."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield
