"""`helm lint` passes and every object `helm template` renders is valid against Kubernetes' own schemas.

Validation is strict (kubernetes-validate's strict schemas: an unknown or misspelt field is an error)
for one supported minor, KUBERNETES_VERSION. Custom resources have no schema there: the chart renders
none today; were it to (a LeaderWorkerSet), CRD_KINDS names them and they are skipped, never passed.
"""
import copy

import kubernetes_validate
import pytest

from tests.deploy.conftest import CHART, VALUES, named

KUBERNETES_VERSION = "1.33.0"
# Kinds whose schema is a CustomResourceDefinition's, not in the core OpenAPI schemas.
CRD_KINDS = {("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")}


def validate(doc: dict) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("values", VALUES)
def test_helm_lint_passes(helm, values):
    done = helm("lint", "--strict", str(CHART), *VALUES[values])
    assert "0 chart(s) failed" in done.stdout, done.stdout


@pytest.mark.parametrize("values", VALUES)
def test_every_rendered_object_is_schema_valid(rendered, values):
    docs = rendered[values]
    checked = [doc for doc in docs if (doc["apiVersion"], doc["kind"]) not in CRD_KINDS]
    errors = []
    for doc in checked:
        try:
            validate(doc)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as error:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {getattr(error, 'message', error)}")
    assert not errors, "\n".join(errors)
    assert len(checked) == len(docs) >= 20  # nothing skipped: the chart renders no custom resource


def test_the_validation_is_strict_about_unknown_fields(rendered):
    """A misspelt field must fail: otherwise the test above would prove nothing."""
    deployment = copy.deepcopy(named(rendered["default"], "Deployment", "switchyard-gateway"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/healthz"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)


def test_production_values_render_what_production_needs(rendered):
    kinds = {doc["kind"] for doc in rendered["production"]}
    assert {"HorizontalPodAutoscaler", "Ingress", "PodDisruptionBudget"} <= kinds
    assert "Secret" not in kinds  # the Secret is made beforehand (existingSecret)
    ingress = named(rendered["production"], "Ingress", "switchyard")
    assert ingress["spec"]["tls"][0]["hosts"] == ["switchyard.example.com"]


def test_a_secret_setting_in_config_stops_the_render(helm):
    for name in ("DATABASE_URL", "SWITCHYARD_KEY_PEPPER", "SECRET_KEY_FILE", "SWITCHYARD_METRICS_TOKEN"):
        done = helm("template", "x", str(CHART), "--set", f"config.{name}=oops", check=False)
        assert done.returncode != 0
        assert f"config.{name} is a secret setting" in done.stderr


def test_trial_mode_refuses_an_existing_secret(helm):
    done = helm("template", "x", str(CHART), "--set", "trial.enabled=true", "--set", "secrets.existingSecret=s",
                check=False)
    assert done.returncode != 0 and "trial.enabled makes its own Secret" in done.stderr
