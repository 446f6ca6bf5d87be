"""Response bodies of the audit endpoints, for the OpenAPI schema (the views build plain dicts)."""
from rest_framework import serializers

from audit.export import FORMATS


class ExportManifestSerializer(serializers.Serializer):
    """audit.export.ManifestBuilder.manifest(): what an export holds, and its signature."""

    format = serializers.ChoiceField(choices=list(FORMATS))
    filters = serializers.DictField(child=serializers.CharField())
    row_count = serializers.IntegerField()
    first_seq = serializers.IntegerField(allow_null=True, help_text="null for an empty export.")
    last_seq = serializers.IntegerField(allow_null=True)
    final_chain_hash = serializers.CharField(allow_null=True)
    file_sha256 = serializers.CharField()
    generated_at = serializers.DateTimeField()
    whole_chain = serializers.BooleanField(
        help_text="Every row from 1 to last_seq is in the file (then no gap may appear).")
    # Anchoring of manifests to one another and to the chain head (docs/audit.md, "Rollback").
    manifest_seq = serializers.IntegerField(help_text="1 for the first manifest this install issued, then +1 each.")
    previous_manifest_sha256 = serializers.CharField(allow_null=True,
                                                     help_text="null for the first manifest ever issued.")
    chain_head_seq = serializers.IntegerField(help_text="The signed chain head when the manifest was issued.")
    chain_head_hash = serializers.CharField()
    signature = serializers.CharField(help_text="HMAC-SHA256 of the manifest's canonical JSON, signature excluded.")


class VerdictSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    checked = serializers.IntegerField(help_text="Rows re-hashed in order.")
    first_bad_seq = serializers.IntegerField(allow_null=True, help_text="The first row that does not hold.")
    reason = serializers.CharField(allow_blank=True)
    head_seq = serializers.IntegerField(allow_null=True, help_text="The newest row of an intact chain.")
    anchors_checked = serializers.IntegerField(
        help_text="Rows vouched for outside the database (manifest, witness file) that the chain still holds.")


class VerifySinceManifestSerializer(serializers.Serializer):
    since_manifest = serializers.DictField(help_text="A signed manifest issued earlier (as /audit/export/manifest "
                                                     "returned it): the chain must not be behind it or diverge.")
