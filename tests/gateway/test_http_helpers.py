"""gateway.pipeline.asgi_io: header lookup (first value wins, as the linear scan it replaced) and request ids."""
import os
import re

from gateway.pipeline.asgi_io import header, mint_request_id, request_ids


def test_header_returns_the_first_value_of_a_repeated_header_and_none_when_absent():
    scope = {"headers": [(b"authorization", b"Bearer first"), (b"x-a", b"1"), (b"authorization", b"Bearer second")]}
    assert header(scope, b"authorization") == b"Bearer first"
    assert header(scope, b"x-a") == b"1"
    assert header(scope, b"x-missing") is None
    assert header(scope, b"authorization") == b"Bearer first"  # from the table made by the first call


def test_header_of_a_request_without_headers():
    assert header({"headers": []}, b"content-length") is None


def test_request_ids_are_minted_even_when_the_client_sends_one_and_its_own_is_echoed_apart():
    scope = {"headers": [(b"x-request-id", b"trace-123")]}
    first, headers = request_ids(scope)
    second, _ = request_ids({"headers": [(b"x-request-id", b"trace-123")]})
    assert first != second and re.fullmatch(r"[0-9a-f]{32}", first)
    assert headers == [(b"x-request-id", first.encode()), (b"x-client-request-id", b"trace-123")]


def test_an_unsafe_client_request_id_is_not_echoed():
    secrets = (b"sy_live_Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ", b"AKIAQ3EGRTX5ZBN7W4KD")  # an API key "as an id"
    for unsafe in (b"a b", b"x" * 65, b"", b"line\r\nbreak", *secrets):
        rid, headers = request_ids({"headers": [(b"x-request-id", unsafe)]})
        assert headers == [(b"x-request-id", rid.encode())]


def test_minted_ids_are_unique_and_a_forked_child_draws_its_own_prefix():
    ids = {mint_request_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave without running the test session's teardown
        os.write(write, mint_request_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    parent = mint_request_id()
    assert child[:20] != parent[:20]  # 80 random bits per process: parent and child never share ids
