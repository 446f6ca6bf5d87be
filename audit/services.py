"""Appending to the audit chain. Every other service calls `record_event` inside its transaction."""
import json

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from audit.chain import chain_hash, head_message, row_document, sign
from audit.masking import mask_secrets
from audit.models import AuditChainHead, AuditEvent


def record_event(*, actor: Actor, action: str, tenant=None, target=None, before=None, after=None) -> AuditEvent:
    """Append one event to the chain, in the caller's transaction (or a new one)."""
    with transaction.atomic():
        head = _locked_head()
        event = AuditEvent(
            seq=head.seq + 1,
            occurred_at=timezone.now(),
            actor_id=getattr(actor.user, "pk", None),
            actor_label=actor.label[:200],
            actor_type=actor.type,
            tenant_id=getattr(tenant, "pk", None),
            tenant_slug=getattr(tenant, "slug", "") or "",
            action=action,
            target_type=_target_type(target),
            target_id=str(getattr(target, "pk", "") or ""),
            before=_as_json(before),
            after=_as_json(after),
            request_id=actor.request_id[:128],
            source_ip=(actor.source_ip or "")[:64],
            prev_hash=head.hash,
        )
        event.hash = chain_hash(event.prev_hash, row_document(event))
        event.save(force_insert=True)
        _advance_head(head, event)
    return event


def _locked_head() -> AuditChainHead:
    """Lock the head row: concurrent appenders queue here, so seq and prev_hash never fork."""
    # SQLite has no row locks; its IMMEDIATE transactions (settings) serialise writers instead.
    # The head row itself is created by migration 0002, never here, so first writers cannot race.
    return AuditChainHead.objects.select_for_update().get(pk=1)


def _advance_head(head: AuditChainHead, event: AuditEvent) -> None:
    head.seq = event.seq
    head.hash = event.hash
    head.signature = sign(head_message(event.seq, event.hash))
    head.save(update_fields=["seq", "hash", "signature"])


def _target_type(target) -> str:
    if target is None:
        return ""
    meta = getattr(target, "_meta", None)
    return meta.label_lower if meta else type(target).__name__.lower()


def _as_json(value):
    """Mask secrets, then round-trip through JSON so what is stored is exactly what is hashed."""
    if value is None:
        return None
    return json.loads(json.dumps(mask_secrets(value), cls=DjangoJSONEncoder))
