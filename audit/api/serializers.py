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
    # Anchoring of manifests to one another and to the chain head (the i13-audit branch adds them).
    manifest_seq = serializers.IntegerField(required=False)
    previous_manifest_sha256 = serializers.CharField(required=False, allow_null=True,
                                                     help_text="null for the first manifest ever issued.")
    chain_head_seq = serializers.IntegerField(required=False, allow_null=True)
    chain_head_hash = serializers.CharField(required=False, allow_null=True)
    signature = serializers.CharField(help_text="HMAC-SHA256 of the manifest's canonical JSON, signature excluded.")


class ChainVerdictSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    checked = serializers.IntegerField(help_text="Rows checked.")
    first_bad_seq = serializers.IntegerField(allow_null=True, help_text="The first row that does not hold; null when ok.")
    reason = serializers.CharField(allow_blank=True)
