"""/api/v1/models/: everyone signed in reads the registry; only platform admins change it."""
import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from models_registry.models import ModelVersion, VersionStatus
from tests.conftest import bearer
from tests.models_registry.registry_helpers import HF_URI, make_model, make_version


@pytest.fixture
def admin(charlie):
    client = APIClient()
    client.force_login(charlie.user)
    return client


@pytest.fixture
def qwen(db):
    model = make_model()
    make_version(model, "v1")
    return model


def versions_url(model) -> str:
    return f"/api/v1/models/{model.pk}/versions/"


def test_anonymous_callers_get_401(api, qwen):
    assert api.get("/api/v1/models/").status_code == 401


def test_tenant_users_can_list_and_read_models_and_versions(alice, qwen):
    client = bearer(alice.key)
    listing = client.get("/api/v1/models/")
    assert listing.status_code == 200 and [m["name"] for m in listing.json()["results"]] == ["qwen-coder-7b"]
    version = client.get(versions_url(qwen)).json()["results"][0]
    assert version["status"] == "draft" and version["effective_engine_args"]["enable_prefix_caching"] is True
    assert client.get(f"{versions_url(qwen)}{version['id']}/").json()["model"] == "qwen-coder-7b"


@pytest.mark.parametrize("method,path", [
    ("post", "/api/v1/models/"),
    ("patch", "/api/v1/models/{model}/"),
    ("post", "/api/v1/models/{model}/versions/"),
    ("patch", "/api/v1/models/{model}/versions/{version}/"),
    ("post", "/api/v1/models/{model}/versions/{version}/publish/"),
    ("post", "/api/v1/models/{model}/versions/{version}/deprecate/"),
    ("post", "/api/v1/models/{model}/versions/{version}/retire/"),
])
def test_tenant_owners_cannot_change_the_registry(alice, qwen, method, path):
    version = qwen.versions.get()
    url = path.format(model=qwen.pk, version=version.pk)
    response = getattr(bearer(alice.key), method)(url, {"name": "x", "version": "v2", "artifact_uri": HF_URI},
                                                  format="json")
    assert response.status_code == 403
    assert ModelVersion.objects.get(pk=version.pk).status == VersionStatus.DRAFT
    assert AuditEvent.objects.filter(action="auth.permission_denied").exists()


def test_a_platform_admin_registers_a_model_and_walks_a_version_through_its_life(admin):
    model = admin.post("/api/v1/models/", {"name": "deepseek-coder-6.7b", "family": "deepseek-coder"}, format="json")
    assert model.status_code == 201
    url = f"/api/v1/models/{model.json()['id']}/versions/"
    created = admin.post(url, {"version": "2024-06", "artifact_uri": HF_URI, "quantization": "awq",
                               "engine_args": {"max_num_seqs": 16}}, format="json")
    assert created.status_code == 201, created.json()
    vid = created.json()["id"]
    assert created.json()["effective_engine_args"]["max_num_seqs"] == 16
    for step, status in (("publish", "published"), ("deprecate", "deprecated"), ("retire", "retired")):
        response = admin.post(f"{url}{vid}/{step}/")
        assert response.status_code == 200 and response.json()["status"] == status
    assert AuditEvent.objects.filter(action="model_version.retire", actor_label="charlie").count() == 1


@pytest.mark.parametrize("body,field,text", [
    ({"engine_args": {"max_num_seq": 8}}, "engine_args", "did you mean max_num_seqs?"),
    ({"engine_args": {"max_num_seqs": "8"}}, "engine_args", "must be an integer"),
    ({"artifact_uri": "https://10.0.0.5/w.tar"}, "artifact_uri", "not allowed"),
    ({"artifact_uri": "hf://Qwen/Qwen2.5-Coder-7B"}, "artifact_uri", "revision"),
    ({"quantization": "int3"}, "quantization", "not a valid choice"),
    ({"version": "../x"}, "version", ""),
    ({"fim_template": "<pre>{prefix}<mid>"}, "fim_template", "{suffix} exactly once"),
    ({"fim_template": "<pre>{prefix}<suf>{suffix}{middle}"}, "fim_template", "Unknown placeholder {middle}"),
])
def test_bad_versions_are_400s_naming_the_field(admin, qwen, body, field, text):
    response = admin.post(versions_url(qwen), {"version": "v2", "artifact_uri": HF_URI, **body}, format="json")
    assert response.status_code == 400
    assert text in " ".join(response.json()[field])


def test_a_version_registers_its_own_fim_template(admin, qwen):
    template = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
    response = admin.post(versions_url(qwen), {"version": "v2", "artifact_uri": HF_URI, "fim_template": template},
                          format="json")
    assert response.status_code == 201 and response.json()["fim_template"] == template
    assert ModelVersion.objects.get(pk=response.json()["id"]).fim_template == template


def test_editing_a_published_version_is_a_400(admin, qwen):
    version = qwen.versions.get()
    admin.post(f"{versions_url(qwen)}{version.pk}/publish/")
    response = admin.patch(f"{versions_url(qwen)}{version.pk}/", {"checksum": "sha256:evil"}, format="json")
    assert response.status_code == 400 and "immutable" in response.json()["status"][0]
    assert ModelVersion.objects.get(pk=version.pk).checksum == ""


def test_a_draft_can_be_edited_over_the_api(admin, qwen):
    version = qwen.versions.get()
    response = admin.patch(f"{versions_url(qwen)}{version.pk}/", {"engine_args": {"max_model_len": 2048}},
                           format="json")
    assert response.status_code == 200 and response.json()["max_context"] == 2048


def test_an_illegal_transition_is_a_400(admin, qwen):
    version = qwen.versions.get()
    response = admin.post(f"{versions_url(qwen)}{version.pk}/retire/")
    assert response.status_code == 400 and "draft → published" in response.json()["status"][0]


def test_duplicate_model_names_are_a_400(admin, qwen):
    response = admin.post("/api/v1/models/", {"name": "qwen-coder-7b"}, format="json")
    assert response.status_code == 400 and "name" in response.json()


def test_filters_and_pagination(alice, db):
    for name, family in (("a-qwen", "qwen-coder"), ("b-star", "starcoder2"), ("c-qwen", "qwen-coder")):
        make_model(name, family)
    client = bearer(alice.key)
    qwens = client.get("/api/v1/models/?family=qwen-coder").json()
    assert [m["name"] for m in qwens["results"]] == ["a-qwen", "c-qwen"]
    page = client.get("/api/v1/models/?page_size=2").json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]


def test_versions_filter_by_status(alice, qwen, admin):
    published = make_version(qwen, "v2")
    admin.post(f"{versions_url(qwen)}{published.pk}/publish/")
    rows = bearer(alice.key).get(f"{versions_url(qwen)}?status=published").json()["results"]
    assert [r["version"] for r in rows] == ["v2"]


def test_versions_of_a_missing_model_are_404(alice, db):
    assert bearer(alice.key).get("/api/v1/models/999/versions/").status_code == 404


def test_a_version_is_only_reachable_under_its_own_model(alice, qwen):
    other = make_model("other", "other")
    version = qwen.versions.get()
    assert bearer(alice.key).get(f"{versions_url(other)}{version.pk}/").status_code == 404
