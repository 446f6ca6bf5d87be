"""Create the signed chain head, and on PostgreSQL make audit rows append-only."""
from django.db import migrations

GENESIS_HASH = "0" * 64

# The trigger function on its own: migration 0003 narrows it, and restores this one when reversed.
APPEND_ONLY_FUNCTION_SQL = """
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
    -- Retention pruning (and test-database teardown) opt in explicitly for their transaction.
    IF current_setting('switchyard.audit_maintenance', true) = 'on' THEN
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        IF TG_OP = 'UPDATE' THEN RETURN NEW; END IF;
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'audit events are append-only: %% is not allowed on audit_auditevent', TG_OP;
END;
$$ LANGUAGE plpgsql;
"""
APPEND_ONLY_SQL = APPEND_ONLY_FUNCTION_SQL + """
CREATE TRIGGER audit_event_no_update_or_delete
    BEFORE UPDATE OR DELETE ON audit_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_event_append_only();
CREATE TRIGGER audit_event_no_truncate
    BEFORE TRUNCATE ON audit_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION audit_event_append_only();
"""

DROP_SQL = """
DROP TRIGGER IF EXISTS audit_event_no_truncate ON audit_auditevent;
DROP TRIGGER IF EXISTS audit_event_no_update_or_delete ON audit_auditevent;
DROP FUNCTION IF EXISTS audit_event_append_only();
"""


def create_head(apps, schema_editor):
    from audit.chain import head_message, sign

    Head = apps.get_model("audit", "AuditChainHead")
    Head.objects.get_or_create(pk=1, defaults={"seq": 0, "hash": GENESIS_HASH,
                                               "signature": sign(head_message(0, GENESIS_HASH))})


def add_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ONLY_SQL)


def drop_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_SQL)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [
        migrations.RunPython(create_head, migrations.RunPython.noop),
        migrations.RunPython(add_trigger, drop_trigger),
    ]
