"""manage.py audit_verify [--export FILE --manifest FILE]"""
import json

from django.core.management.base import BaseCommand, CommandError

from audit.verify import verify_chain, verify_export


class Command(BaseCommand):
    help = "Verify the audit hash chain (or an exported file against its manifest); exit 1 naming the first bad row."

    def add_arguments(self, parser):
        parser.add_argument("--export", help="An exported file to verify instead of the database.")
        parser.add_argument("--manifest", help="The manifest written beside that export.")

    def handle(self, *args, export=None, manifest=None, **options):
        if bool(export) != bool(manifest):
            raise CommandError("--export and --manifest go together.")
        verdict = verify_export(export, _load(manifest)) if export else verify_chain()
        if not verdict.ok:
            bad = f" first bad seq: {verdict.first_bad_seq};" if verdict.first_bad_seq else ""
            raise CommandError(f"audit chain BROKEN:{bad} {verdict.reason} ({verdict.checked} rows verified before it)")
        self.stdout.write(f"audit chain OK: {verdict.checked} rows verified")


def _load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read manifest {path}: {exc}") from None
