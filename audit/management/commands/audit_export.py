"""manage.py audit_export OUT [--format csv|jsonl] [--since --until --tenant --actor --action]"""
import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from rest_framework.exceptions import ValidationError

from audit.actor import Actor
from audit.export import FORMATS, stream_with_manifest
from audit.models import AuditEvent
from audit.selectors import FILTER_NAMES, apply_filters
from audit.services import issue_manifest


class Command(BaseCommand):
    help = ("Export the audit trail to OUT (streamed) and write OUT.manifest.json beside it: signed, naming the "
            "previous manifest and the chain head, and recorded in the chain.")

    def add_arguments(self, parser):
        parser.add_argument("out")
        parser.add_argument("--format", choices=FORMATS, default="jsonl")
        for name in FILTER_NAMES:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name)

    def handle(self, *args, out, format, **options):
        filters = {name: options[name] for name in FILTER_NAMES if options.get(name)}
        try:
            events = apply_filters(AuditEvent.objects.all(), filters)
        except ValidationError as exc:
            raise CommandError(str(exc.detail)) from None
        chunks, builder = stream_with_manifest(events, format, filters)
        with open(out, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
        manifest_path = Path(f"{out}.manifest.json")
        manifest = issue_manifest(builder, actor=Actor.system("manage.py audit_export"))
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
        self.stdout.write(f"exported {builder.row_count} events to {out}; manifest #{manifest['manifest_seq']} "
                          f"{manifest_path}")
