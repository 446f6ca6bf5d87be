"""Runtime backends come from SWITCHYARD_RUNTIME_BACKENDS: any name, any class, with constructor options."""
import pytest
from django.core import checks

from controlplane.backends_setting import runtime_backends
from controlplane.env import ImproperSetting, env_json_object
from fleet.models import Deployment
from fleet.runtime import backend_choices, get_backend
from tests.fleet.conftest import make_version
from tests.fleet.fake_backends import RecordingBackend, configured


def test_a_configured_backend_is_built_with_its_options_and_name(settings):
    settings.SWITCHYARD_RUNTIME_BACKENDS = configured("gpu-eu", region="eu-west", port_base=9000)
    backend = get_backend("gpu-eu")
    assert isinstance(backend, RecordingBackend)
    assert (backend.name, backend.region, backend.port_base) == ("gpu-eu", "eu-west", 9000)
    assert get_backend("gpu-eu") is backend  # built once per process
    assert ("gpu-eu", "Fake gpu-eu") in backend_choices()


def test_an_unknown_backend_is_a_key_error_naming_it(settings):
    with pytest.raises(KeyError, match="unknown runtime backend 'nope'"):
        get_backend("nope")


@pytest.mark.django_db
def test_the_api_deploys_on_a_configured_backend_and_refuses_an_unknown_one(settings, staff_client, tenant_a):
    settings.SWITCHYARD_RUNTIME_BACKENDS = configured("gpu-eu")
    version = make_version()
    body = {"tenant": tenant_a.slug, "name": "eu", "model_version": version.pk, "min_replicas": 0}
    created = staff_client.post("/api/v1/deployments/", {**body, "runtime_backend": "gpu-eu"}, format="json")
    assert created.status_code == 201, created.content
    assert Deployment.objects.get(name="eu").runtime_backend == "gpu-eu"
    refused = staff_client.post("/api/v1/deployments/", {**body, "name": "x", "runtime_backend": "gpu-us"},
                                format="json")
    assert refused.status_code == 400 and "runtime_backend" in refused.json()


@pytest.mark.django_db
def test_the_console_form_offers_the_configured_backends(settings):
    from console.forms.fleet import DeployForm

    settings.SWITCHYARD_RUNTIME_BACKENDS = configured("gpu-eu")
    assert "gpu-eu" in dict(DeployForm().fields["runtime_backend"].choices)


def test_a_backend_class_that_does_not_import_fails_the_start_up_check(settings):
    settings.SWITCHYARD_RUNTIME_BACKENDS = {
        **configured(), "broken": {"class": "fleet.runtime.nowhere.Backend", "label": "x", "options": {}}}
    errors = [e for e in checks.run_checks() if e.id == "fleet.E001"]
    assert len(errors) == 1 and "'broken'" in errors[0].msg


@pytest.mark.parametrize("raw, message", [
    ({"Bad Name": "a.b.C"}, "backend name"),
    ({"x": "not-dotted"}, "dotted path"),
    ({"x": {"class": "a.b.C", "options": []}}, "options"),
    ({"x": {"class": "a.b.C", "colour": "red"}}, "takes only"),
    ({"local": None}, "at least one"),
])
def test_a_malformed_setting_fails_at_start_naming_the_variable(raw, message):
    with pytest.raises(ImproperSetting, match=message) as caught:
        runtime_backends(raw, "SWITCHYARD_RUNTIME_BACKENDS")
    assert "SWITCHYARD_RUNTIME_BACKENDS" in str(caught.value)


def test_the_environment_variable_adds_replaces_and_removes_entries(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_RUNTIME_BACKENDS", '{"simulator": null, "k": "a.b.C"}')
    raw = env_json_object("SWITCHYARD_RUNTIME_BACKENDS", {"local": "x.y.Z", "simulator": "x.y.S"})
    assert list(runtime_backends(raw, "V")) == ["local", "k"]
    monkeypatch.setenv("SWITCHYARD_RUNTIME_BACKENDS", "[1]")
    with pytest.raises(ImproperSetting, match="SWITCHYARD_RUNTIME_BACKENDS must be a JSON object"):
        env_json_object("SWITCHYARD_RUNTIME_BACKENDS", {})
