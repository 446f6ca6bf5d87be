"""gateway.http's header lookup: first value wins, as the linear scan it replaced."""
from gateway.http import header


def test_header_returns_the_first_value_of_a_repeated_header_and_none_when_absent():
    scope = {"headers": [(b"authorization", b"Bearer first"), (b"x-a", b"1"), (b"authorization", b"Bearer second")]}
    assert header(scope, b"authorization") == b"Bearer first"
    assert header(scope, b"x-a") == b"1"
    assert header(scope, b"x-missing") is None
    assert header(scope, b"authorization") == b"Bearer first"  # from the table made by the first call


def test_header_of_a_request_without_headers():
    assert header({"headers": []}, b"content-length") is None
