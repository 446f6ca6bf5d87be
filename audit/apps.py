from django.apps import AppConfig
from django.db.models.signals import post_migrate


def ensure_chain_head(sender, using="default", **kwargs):
    """Recreate the genesis head after a flush (test teardown, `manage.py flush`).

    Only an empty chain may start over: with events present and the head gone, nothing is
    created, so appends fail loudly and `audit_verify` reports the missing head.
    """
    from audit.chain import GENESIS_HASH, head_message, sign
    from audit.models import AuditChainHead, AuditEvent

    if AuditChainHead.objects.using(using).exists() or AuditEvent.objects.using(using).exists():
        return
    AuditChainHead.objects.using(using).get_or_create(
        pk=1, defaults={"seq": 0, "hash": GENESIS_HASH, "signature": sign(head_message(0, GENESIS_HASH))})


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail"

    def ready(self):
        from audit import auth_events  # noqa: F401  (connects Django's login signals)

        post_migrate.connect(ensure_chain_head, sender=self, dispatch_uid="audit_ensure_chain_head")
