"""Who is calling: the Bearer key, checked against the key cache and the snapshot."""
from __future__ import annotations

import time

from apikeys.keyformat import hash_key, is_well_formed
from gateway import errors
from gateway.config.key_cache import MISSING, KeyCache
from gateway.config.snapshot import KeyInfo, Snapshot, TenantInfo
from gateway.pipeline.asgi_io import header

INFERENCE_SCOPE = "inference"


def bearer_token(scope: dict) -> str:
    """The raw key from `Authorization: Bearer <key>`; nothing else is accepted."""
    value = header(scope, b"authorization")
    if not value:
        raise errors.missing_key()
    kind, _, token = value.decode("latin-1").partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise errors.missing_key()
    return token.strip()


async def authenticate(scope: dict, keys: KeyCache) -> KeyInfo:
    """A usable key with the inference scope, or a 401/403 GatewayError."""
    raw = bearer_token(scope)
    key_hash = hash_key(raw)
    key = keys.peek(key_hash)
    if key is MISSING:  # not cached: typos and junk never reach the database
        if not is_well_formed(raw):
            raise errors.invalid_key()
        key = await keys.get(key_hash)
    if key is None:
        raise errors.invalid_key()
    state = key.state(time.time())
    if state == "revoked":
        raise errors.revoked_key()
    if state == "expired":
        raise errors.expired_key()
    if INFERENCE_SCOPE not in key.scopes:
        raise errors.scope_missing()
    return key


async def current_tenant(state, key: KeyInfo) -> TenantInfo:
    """`active_tenant` against the freshest snapshot: a key of a tenant the snapshot has not seen
    yet (created since the last refresh) makes the gateway refresh at once instead of refusing it."""
    if key.tenant_id is not None and key.tenant_id not in state.snapshot.tenants:
        await state.refresh_now()
    return active_tenant(state.snapshot, key)


def active_tenant(snapshot: Snapshot, key: KeyInfo) -> TenantInfo:
    """The key's tenant if it may send traffic; keys bound to no tenant may not."""
    tenant = snapshot.tenants.get(key.tenant_id) if key.tenant_id is not None else None
    if tenant is None:
        raise errors.GatewayError(403, "tenant_required", "This API key is not bound to a tenant.")
    if not tenant.active:
        raise errors.tenant_suspended()
    return tenant
