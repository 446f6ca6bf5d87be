"""The append-only, hash-chained audit trail."""
from django.conf import settings
from django.db import models

from audit.actor import ActorType


class AuditEvent(models.Model):
    """One audited action. Rows are never updated or deleted (a PostgreSQL trigger enforces it).

    The actor and tenant references carry no database constraint and are never nulled:
    SET_NULL would rewrite a hash-chained row. A deleted user or tenant stays readable
    through the frozen `actor_label` / `tenant_slug`.
    """

    seq = models.BigIntegerField(unique=True)
    occurred_at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.DO_NOTHING,
        db_constraint=False, related_name="+")
    actor_label = models.CharField(max_length=200)
    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.DO_NOTHING,
        db_constraint=False, related_name="+")
    tenant_slug = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=128, blank=True)
    source_ip = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["seq"]
        indexes = [
            models.Index(fields=["tenant", "seq"]),
            models.Index(fields=["actor_label", "seq"]),
        ]

    def __str__(self):
        return f"#{self.seq} {self.action} by {self.actor_label}"


class AuditChainHead(models.Model):
    """The chain's newest seq and hash, HMAC-signed: reveals a deleted tail, serialises appends."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64)
    signature = models.CharField(max_length=64)

    def __str__(self):
        return f"head #{self.seq}"
