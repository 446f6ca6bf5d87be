"""Appending to the audit chain. Every other service calls `record_event` inside its transaction."""
import json

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from audit.chain import chain_hash, head_message, row_document, sign
from audit.export import MANIFEST_ISSUE, ManifestBuilder, manifest_digest, sign_manifest
from audit.masking import mask_secrets
from audit.models import AuditChainHead, AuditEvent
from audit.witness import SignedHead, witness_on_commit


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
        _announce_on_commit(event)
    return event


def _announce_on_commit(event: AuditEvent) -> None:
    """Tell the gateways what changed once it is committed (controlplane/change_bus.py)."""
    from controlplane.change_bus import publish_change

    change = {"seq": event.seq, "tenant": event.tenant_id, "target_type": event.target_type,
              "target_id": event.target_id}
    transaction.on_commit(lambda: publish_change(event.action, **change))


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
    witness_on_commit(SignedHead(head.seq, head.hash, head.signature))


def issue_manifest(builder: ManifestBuilder, *, actor: Actor) -> dict:
    """Sign an export's manifest, chained to the previous one and to the current head, and record it.

    The manifest names the previous manifest's digest and the signed head at this moment, and the
    issue is itself an audit event (at head seq + 1): whoever holds a manifest can later prove the
    database has not been rolled back to before it (`audit_verify --since-manifest`).
    """
    with transaction.atomic():
        head = _locked_head()  # nothing can append between reading the head and recording the issue
        previous = latest_issued_manifest()
        body = {**builder.body(), "manifest_seq": previous.get("manifest_seq", 0) + 1,
                "previous_manifest_sha256": previous.get("manifest_sha256"),
                "chain_head_seq": head.seq, "chain_head_hash": head.hash}
        manifest = {**body, "signature": sign_manifest(body)}
        record_event(actor=actor, action=MANIFEST_ISSUE, after=issue_record(manifest))
    return manifest


def issue_record(manifest: dict) -> dict:
    """What the issue event keeps of a manifest: enough to recognise it and to chain the next one."""
    names = ("manifest_seq", "previous_manifest_sha256", "chain_head_seq", "chain_head_hash", "format", "filters",
             "row_count", "first_seq", "last_seq", "final_chain_hash", "file_sha256")
    return {**{name: manifest[name] for name in names}, "manifest_sha256": manifest_digest(manifest)}


def latest_issued_manifest() -> dict:
    """The newest issue record in the chain ({} before the first manifest)."""
    event = AuditEvent.objects.filter(action=MANIFEST_ISSUE).order_by("-seq").only("after").first()
    return event.after if event and event.after else {}


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
