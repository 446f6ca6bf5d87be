"""POST /v1/feedback bodies: only a request id the gateway minted is taken, so nothing else is stored."""
import json

import pytest

from gateway.errors import GatewayError
from gateway.pipeline.asgi_io import mint_request_id
from gateway.pipeline.feedback import parse_feedback


def code_of(body: dict | bytes) -> str:
    with pytest.raises(GatewayError) as caught:
        parse_feedback(body if isinstance(body, bytes) else json.dumps(body).encode())
    assert caught.value.status == 400
    return caught.value.code


def test_the_gateways_own_request_ids_are_accepted():
    rid = mint_request_id()
    assert parse_feedback(json.dumps({"request_id": rid, "accepted": False}).encode()) == (rid, False)


@pytest.mark.parametrize("rid", [
    "a\x00b", "0" * 31 + "\x00", "\x00" * 32, "abc", "0" * 31, "0" * 33, "A" * 32, "g" * 32, "0" * 31 + "\u00e9",
    "sy_live_Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ", "AKIAIOSFODNN7EXAMPLE", "", None, 5, ["0" * 32],
])
def test_anything_else_is_invalid_request_id_and_never_echoed(rid):
    with pytest.raises(GatewayError) as caught:
        parse_feedback(json.dumps({"request_id": rid, "accepted": True}).encode())
    assert caught.value.code == "invalid_request_id" and (rid == "" or str(rid) not in caught.value.message)


def test_nul_escape_and_lone_surrogate_ids_are_400_not_500():
    assert code_of(b'{"request_id": "\\u0000", "accepted": true}') == "invalid_request_id"
    assert code_of(b'{"request_id": "\\ud800", "accepted": true}') == "invalid_json"
    assert code_of({"request_id": mint_request_id(), "accepted": "yes"}) == "invalid_accepted"
