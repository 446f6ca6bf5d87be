"""manage.py audit_verify [--since-manifest FILE …] [--witness FILE …] | --export FILE --manifest FILE"""
import json

from django.core.management.base import BaseCommand, CommandError

from audit.verify import verify_export, verify_trail


class Command(BaseCommand):
    help = ("Verify the audit hash chain, and that it has not been rolled back behind a manifest or a witness "
            "(or verify an exported file against its manifest); exit 1 naming the first bad row.")

    def add_arguments(self, parser):
        parser.add_argument("--since-manifest", action="append", default=[], metavar="FILE",
                            help="A signed export manifest issued earlier: the chain must still reach and hold "
                                 "the head it names. Repeatable.")
        parser.add_argument("--witness", action="append", default=None, metavar="FILE",
                            help="A witness file (JSON Lines of signed heads) to check against; default: "
                                 "SWITCHYARD_AUDIT_WITNESS_FILE when set. Repeatable.")
        parser.add_argument("--export", help="An exported file to verify instead of the database.")
        parser.add_argument("--manifest", help="The manifest written beside that export.")

    def handle(self, *args, since_manifest, witness, export=None, manifest=None, **options):
        if bool(export) != bool(manifest):
            raise CommandError("--export and --manifest go together.")
        if export and (since_manifest or witness):
            raise CommandError("--export checks a file; --since-manifest and --witness check the database.")
        if export:
            verdict = verify_export(export, _load(manifest))
        else:
            verdict = verify_trail(manifests=[_load(path) for path in since_manifest], witness_files=witness)
        if not verdict.ok:
            bad = f" first bad seq: {verdict.first_bad_seq};" if verdict.first_bad_seq else ""
            raise CommandError(f"audit chain BROKEN:{bad} {verdict.reason} ({_checked(verdict)})")
        anchors = f"; {verdict.anchors_checked} anchors outside the database agree" if verdict.anchors_checked else ""
        self.stdout.write(f"audit chain OK: {verdict.checked} rows verified{anchors}")


def _checked(verdict) -> str:
    if verdict.head_seq is None:
        return f"{verdict.checked} rows verified before it"
    # The rows themselves hold together: what broke is agreement with a record kept outside the database.
    return f"all {verdict.checked} rows re-hash and match the signed head"


def _load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read manifest {path}: {exc}") from None
