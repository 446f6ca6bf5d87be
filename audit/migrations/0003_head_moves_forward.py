"""The chain head only moves forward (PostgreSQL and SQLite), and the maintenance switch narrows.

Before this, anyone who could write the head table could save the signed head, delete newer rows
and write the old head back: `audit_verify` saw a valid, older chain. Now:

- the head's `UPDATE` must advance `seq` to an existing row with that hash (a statement that
  changes nothing is let through: Django's fixture loading re-saves rows as they are); lowering it,
  or changing its hash or signature in place, is refused — with or without the maintenance switch;
- a head row may be inserted only at genesis on an empty chain (after `flush`);
- on PostgreSQL, `DELETE` of the head is refused and `TRUNCATE` needs the maintenance switch
  (`manage.py flush` and test teardown truncate every table);
- the maintenance switch no longer lets audit rows be updated, and lets `DELETE` remove only rows
  older than the one the head pins (retention prunes the old end; the newest row never goes).

SQLite has no session variable a trigger can read and `flush` deletes rows one table at a time, so
there `DELETE` stays open on both tables; `UPDATE` of the head and of audit rows is guarded.
"""
from importlib import import_module

from django.db import migrations

GENESIS_HASH = "0" * 64

POSTGRES_SQL = f"""
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
DECLARE
    maintenance boolean := coalesce(current_setting('switchyard.audit_maintenance', true), '') = 'on';
BEGIN
    IF TG_OP = 'TRUNCATE' AND maintenance THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' AND maintenance THEN
        IF OLD.seq < (SELECT seq FROM audit_auditchainhead WHERE id = 1) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit events are append-only: retention may delete only rows older than the chain head, not row %%', OLD.seq;
    END IF;
    RAISE EXCEPTION 'audit events are append-only: %% is not allowed on audit_auditevent', TG_OP;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION audit_head_moves_forward() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.id, NEW.seq, NEW.hash, NEW.signature) IS NOT DISTINCT FROM (OLD.id, OLD.seq, OLD.hash, OLD.signature) THEN
            RETURN NEW;
        END IF;
        IF NEW.id <> OLD.id OR NEW.seq <= OLD.seq THEN
            RAISE EXCEPTION 'the audit chain head only moves forward: seq %% -> %% is not allowed', OLD.seq, NEW.seq;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM audit_auditevent WHERE seq = NEW.seq AND hash = NEW.hash) THEN
            RAISE EXCEPTION 'the audit chain head only moves forward: no row %% with that hash to move to', NEW.seq;
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.seq = 0 AND NEW.hash = '{GENESIS_HASH}' AND NOT EXISTS (SELECT 1 FROM audit_auditevent) THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'the audit chain head only moves forward: a new head starts at genesis on an empty chain';
    END IF;
    IF TG_OP = 'TRUNCATE' AND coalesce(current_setting('switchyard.audit_maintenance', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'the audit chain head only moves forward: %% is not allowed on audit_auditchainhead', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_head_moves_forward
    BEFORE INSERT OR UPDATE OR DELETE ON audit_auditchainhead
    FOR EACH ROW EXECUTE FUNCTION audit_head_moves_forward();
CREATE TRIGGER audit_head_no_truncate
    BEFORE TRUNCATE ON audit_auditchainhead
    FOR EACH STATEMENT EXECUTE FUNCTION audit_head_moves_forward();
"""

POSTGRES_DROP_SQL = """
DROP TRIGGER IF EXISTS audit_head_no_truncate ON audit_auditchainhead;
DROP TRIGGER IF EXISTS audit_head_moves_forward ON audit_auditchainhead;
DROP FUNCTION IF EXISTS audit_head_moves_forward();
""" + import_module("audit.migrations.0002_chain_head_and_append_only").APPEND_ONLY_FUNCTION_SQL

SQLITE_TRIGGERS = (
    """CREATE TRIGGER audit_head_moves_forward BEFORE UPDATE ON audit_auditchainhead
    WHEN NOT (NEW.id IS OLD.id AND NEW.seq IS OLD.seq AND NEW.hash IS OLD.hash AND NEW.signature IS OLD.signature)
     AND (NEW.id <> OLD.id OR NEW.seq <= OLD.seq
          OR NOT EXISTS (SELECT 1 FROM audit_auditevent WHERE seq = NEW.seq AND hash = NEW.hash))
    BEGIN SELECT RAISE(ABORT, 'the audit chain head only moves forward'); END""",
    f"""CREATE TRIGGER audit_head_starts_at_genesis BEFORE INSERT ON audit_auditchainhead
    WHEN NOT (NEW.seq = 0 AND NEW.hash = '{GENESIS_HASH}' AND NOT EXISTS (SELECT 1 FROM audit_auditevent))
    BEGIN SELECT RAISE(ABORT, 'the audit chain head only moves forward: a new head starts at genesis on an empty chain'); END""",
    """CREATE TRIGGER audit_event_no_update BEFORE UPDATE ON audit_auditevent
    BEGIN SELECT RAISE(ABORT, 'audit events are append-only: UPDATE is not allowed on audit_auditevent'); END""",
)
SQLITE_DROP = tuple(f"DROP TRIGGER IF EXISTS {name}"
                    for name in ("audit_head_moves_forward", "audit_head_starts_at_genesis", "audit_event_no_update"))


def _for_vendor(postgresql: tuple[str, ...], sqlite: tuple[str, ...]):
    """A RunPython step that executes the statements written for this database (none elsewhere)."""
    def run(apps, schema_editor):
        for statement in {"postgresql": postgresql, "sqlite": sqlite}.get(schema_editor.connection.vendor, ()):
            schema_editor.execute(statement)
    return run


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_chain_head_and_append_only")]

    operations = [migrations.RunPython(_for_vendor((POSTGRES_SQL,), SQLITE_TRIGGERS),
                                       _for_vendor((POSTGRES_DROP_SQL,), SQLITE_DROP))]
