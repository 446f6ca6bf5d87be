"""The OpenAPI schema generates cleanly and documents API key auth."""
import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_schema_is_valid_and_warning_free(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    assert "scheme: bearer" in text
    assert "/api/v1/tenants/{tenant_slug}/keys/{id}/rotate/" in text


def test_schema_and_docs_are_public(client):
    assert client.get("/api/schema/").status_code == 200
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert "cdn" not in docs.content.decode().lower()
