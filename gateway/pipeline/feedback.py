"""POST /v1/feedback: whether the user kept a completion, stored by the usage app's service.

Only the key's own tenant's request ids are accepted; another tenant's id is answered 404,
exactly like an id that never existed elsewhere, so ids cannot be probed across tenants.
"""
from __future__ import annotations

import json
import re

from gateway import errors
from gateway.pipeline.asgi_io import JSON_HEADERS, ClientGone, read_body, request_ids, send_error, send_response
from gateway.pipeline.auth import authenticate, current_tenant
from gateway.pipeline.payload import json_object

MAX_FEEDBACK_BODY = 4096


# What gateway.pipeline.asgi_io.mint_request_id gives every request (its x-request-id). Nothing else can
# name one, so nothing else is stored: feedback may arrive before its usage row and is kept by id.
REQUEST_ID = re.compile(r"[0-9a-f]{32}")


def parse_feedback(body: bytes) -> tuple[str, bool]:
    """`{"request_id": "<32 hex digits>", "accepted": true|false}`, or a 400."""
    payload = json_object(body)
    rid, accepted = payload.get("request_id"), payload.get("accepted")
    if type(rid) is not str or not REQUEST_ID.fullmatch(rid):
        raise errors.bad_request("invalid_request_id", "'request_id' must be the x-request-id of a completion "
                                                       "(32 hexadecimal digits).")
    if not isinstance(accepted, bool):
        raise errors.bad_request("invalid_accepted", "'accepted' must be true or false.")
    return rid, accepted


def save_feedback(tenant_id: int, rid: str, accepted: bool) -> None:
    """Record it with `usage.services.record_feedback` (sync: runs in the gateway's ORM threads)."""
    from django.core.exceptions import ValidationError
    from django.db import close_old_connections

    from tenants.models import Tenant
    from usage.services import FeedbackNotAllowed, record_feedback

    close_old_connections()
    try:
        record_feedback(rid, accepted, tenant=Tenant(pk=tenant_id))
    except FeedbackNotAllowed:
        raise errors.GatewayError(404, "request_not_found", f"No request '{rid}' for this tenant.") from None
    except ValidationError:
        raise errors.bad_request("invalid_request_id",
                                 "'request_id' must be the x-request-id of a completion.") from None


async def handle_feedback(state, scope: dict, receive, send) -> None:
    """Authenticate, validate, store; answers 200 with what was recorded."""
    _, ids = request_ids(scope)
    try:
        key = await authenticate(scope, state.keys)
        tenant = await current_tenant(state, key)
        target, accepted = parse_feedback(await read_body(scope, receive, MAX_FEEDBACK_BODY))
        await state.db.request(save_feedback, tenant.id, target, accepted)  # 503 while the database is away
    except errors.GatewayError as error:
        return await send_error(send, error, ids)
    except ClientGone:
        return
    body = json.dumps({"object": "feedback", "request_id": target, "accepted": accepted}).encode()
    await send_response(send, 200, body, [*JSON_HEADERS, *ids])
