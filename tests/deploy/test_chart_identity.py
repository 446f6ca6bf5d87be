"""The chart's single sign-on and e-mail values: OIDC providers, local sign-in off, SMTP — with every secret
(client secrets, SCIM tokens, the SMTP password) taken from a Secret the operator made, mounted as a file
and named by a *_FILE setting, never inline in values, the ConfigMap or the environment. The rendered
ConfigMap and files are then read by Django's own settings, so the chart and the settings agree."""
import json
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.deploy.conftest import CHART, all_containers, named, objects, pod_spec
from tests.deploy.test_chart_renders import KUBERNETES_VERSION

ROOT = Path(__file__).resolve().parents[2]
IDENTITY_DIR = "/run/secrets/switchyard-identity"
SSO_VALUES = {
    "sso": {"localSignin": False, "consoleUrl": "https://switchyard.acme.example", "providers": [
        {"name": "okta", "label": "Okta", "issuer": "https://acme.okta.com/oauth2/default", "clientId": "0oa1b2c3",
         "clientSecret": {"secretName": "switchyard-okta", "key": "client-secret"},
         "scimToken": {"secretName": "switchyard-okta", "key": "scim-token"},
         "scopes": "openid email profile groups"},
        {"name": "entra", "label": "Microsoft", "issuer": "https://login.microsoftonline.com/0000/v2.0",
         "clientId": "11111111-2222", "clientSecret": {"secretName": "switchyard-entra", "key": "secret"},
         "groupsClaim": "roles"}]},
    "email": {"backend": "smtp", "host": "smtp.acme.example", "port": 587, "username": "switchyard",
              "password": {"secretName": "switchyard-smtp", "key": "password"},
              "from": "Switchyard <noreply@acme.example>"},
}
# The files the settings will read, and the (Secret, key) each must come from.
FILES = {
    f"{IDENTITY_DIR}/oidc-okta-client-secret": ("switchyard-okta", "client-secret"),
    f"{IDENTITY_DIR}/oidc-okta-scim-token": ("switchyard-okta", "scim-token"),
    f"{IDENTITY_DIR}/oidc-entra-client-secret": ("switchyard-entra", "secret"),
    f"{IDENTITY_DIR}/EMAIL_HOST_PASSWORD": ("switchyard-smtp", "password"),
}


@pytest.fixture(scope="module")
def values_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("values") / "identity.yaml"
    path.write_text(yaml.safe_dump(SSO_VALUES))
    return path


@pytest.fixture(scope="module")
def docs(render, values_file) -> list[dict]:
    return render("-f", str(values_file))


def _workloads(docs):
    return objects(docs, "Deployment") + objects(docs, "Job")


def test_the_identity_values_render_schema_valid_objects(docs, helm, values_file):
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), "-f", str(values_file)).stdout


def test_the_config_map_names_providers_and_files_but_holds_no_secret(docs):
    config = named(docs, "ConfigMap", "switchyard")["data"]
    providers = json.loads(config["SWITCHYARD_OIDC_PROVIDERS"])
    assert providers == {
        "okta": {"label": "Okta", "issuer": "https://acme.okta.com/oauth2/default", "client_id": "0oa1b2c3",
                 "client_secret_file": f"{IDENTITY_DIR}/oidc-okta-client-secret",
                 "scim_token_file": f"{IDENTITY_DIR}/oidc-okta-scim-token", "scopes": "openid email profile groups"},
        "entra": {"label": "Microsoft", "issuer": "https://login.microsoftonline.com/0000/v2.0",
                  "client_id": "11111111-2222", "client_secret_file": f"{IDENTITY_DIR}/oidc-entra-client-secret",
                  "groups_claim": "roles"}}
    assert config["SWITCHYARD_LOCAL_SIGNIN"] == "false"
    assert config["SWITCHYARD_CONSOLE_URL"] == "https://switchyard.acme.example"
    assert (config["EMAIL_BACKEND"], config["EMAIL_HOST"], config["EMAIL_PORT"], config["EMAIL_USE_TLS"]) == (
        "django.core.mail.backends.smtp.EmailBackend", "smtp.acme.example", "587", "true")
    assert "EMAIL_HOST_PASSWORD" not in config and "EMAIL_HOST_PASSWORD_FILE" not in config


def test_every_pod_mounts_each_secret_where_its_setting_looks(docs):
    for workload in _workloads(docs):
        spec = pod_spec(workload)
        (volume,) = [v for v in spec["volumes"] if v["name"] == "identity-secrets"]
        projected = {f"{IDENTITY_DIR}/{item['path']}": (source["secret"]["name"], item["key"])
                     for source in volume["projected"]["sources"] for item in source["secret"]["items"]}
        assert projected == FILES, workload["metadata"]["name"]
        for container in all_containers(workload):
            mount = next(m for m in container["volumeMounts"] if m["name"] == "identity-secrets")
            assert mount == {"name": "identity-secrets", "mountPath": IDENTITY_DIR, "readOnly": True}
            env = {item["name"]: item for item in container["env"]}
            assert env["EMAIL_HOST_PASSWORD_FILE"] == {"name": "EMAIL_HOST_PASSWORD_FILE",
                                                       "value": f"{IDENTITY_DIR}/EMAIL_HOST_PASSWORD"}
            assert "EMAIL_HOST_PASSWORD" not in env
            assert all("secretKeyRef" not in item.get("valueFrom", {}) for item in env.values())


def test_defaults_keep_local_sign_in_and_the_console_mail_backend(rendered):
    config = named(rendered["default"], "ConfigMap", "switchyard")["data"]
    assert config["SWITCHYARD_OIDC_PROVIDERS"] == "{}" and config["SWITCHYARD_LOCAL_SIGNIN"] == "true"
    assert config["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"
    assert "EMAIL_HOST" not in config
    for workload in _workloads(rendered["default"]):
        assert all(v["name"] != "identity-secrets" for v in pod_spec(workload)["volumes"])


@pytest.mark.parametrize("args,message", [
    (["--set", "sso.providers[0].name=okta", "--set", "sso.providers[0].issuer=https://i.example",
      "--set", "sso.providers[0].clientId=c", "--set", "sso.providers[0].clientSecret=s3cret-inline"],
     "clientSecret must name a Secret"),
    (["--set", "sso.providers[0].name=okta", "--set", "sso.providers[0].issuer=https://i.example",
      "--set", "sso.providers[0].clientId=c", "--set", "sso.providers[0].clientSecret.secretName=s",
      "--set", "sso.providers[0].clientSecret.key=k", "--set", "sso.providers[0].scimToken=tok-inline"],
     "scimToken must name a Secret"),
    (["--set", "sso.providers[0].name=Not A Slug", "--set", "sso.providers[0].issuer=https://i.example"],
     "must be a slug"),
    (["--set", "sso.providers[0].name=okta", "--set", "sso.providers[0].issuer=https://i.example"],
     "needs issuer, clientId and clientSecret"),
    (["--set", "email.password=hunter2"], "email.password must name a Secret"),
    (["--set", "config.EMAIL_HOST_PASSWORD=hunter2"], "config.EMAIL_HOST_PASSWORD is a secret setting"),
    (["--set-string", "config.SWITCHYARD_OIDC_PROVIDERS={}"], "comes from the sso / email values"),
    (["--set", "email.backend=smtp"], "email.backend smtp needs email.host"),
    (["--set", "email.backend=sendmail"], "email.backend must be console or smtp"),
])
def test_a_secret_inline_or_a_bad_value_stops_the_render(helm, args, message):
    done = helm("template", "x", str(CHART), *args, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


PROBE = """
import json, django
django.setup()
from django.conf import settings as s
print(json.dumps({"providers": s.SWITCHYARD_OIDC_PROVIDERS, "local": s.SWITCHYARD_LOCAL_SIGNIN,
                  "email": [s.EMAIL_BACKEND, s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_HOST_USER, s.EMAIL_HOST_PASSWORD,
                            s.EMAIL_USE_TLS, s.DEFAULT_FROM_EMAIL], "console": s.SWITCHYARD_CONSOLE_URL}))
"""


def test_django_reads_what_the_chart_renders(docs, tmp_path):
    """The console container's environment (ConfigMap + env), with the mounted files, read by the settings."""
    console = named(docs, "Deployment", "switchyard-console")
    container = pod_spec(console)["containers"][0]
    env = dict(named(docs, "ConfigMap", "switchyard")["data"])
    env.update({item["name"]: item["value"] for item in container["env"]
                if item["name"].startswith(("EMAIL_", "SWITCHYARD_OIDC"))})
    secrets = {"oidc-okta-client-secret": "okta-client-secret-value", "oidc-okta-scim-token": "okta-scim-token-value",
               "oidc-entra-client-secret": "entra-secret-value", "EMAIL_HOST_PASSWORD": "smtp-password-value"}
    for name, value in secrets.items():
        (tmp_path / name).write_text(value + "\n")
    for key, value in list(env.items()):  # the mount point, moved to this test's folder
        env[key] = value.replace(IDENTITY_DIR, str(tmp_path))
    env = {k: v for k, v in env.items() if k in ("SWITCHYARD_OIDC_PROVIDERS", "SWITCHYARD_LOCAL_SIGNIN",
                                                 "SWITCHYARD_CONSOLE_URL", "DEFAULT_FROM_EMAIL")
           or k.startswith("EMAIL_")}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "controlplane.settings",
                               "SWITCHYARD_VAR_DIR": str(tmp_path / "var"), **env})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["providers"]["okta"]["client_secret"] == "okta-client-secret-value"
    assert found["providers"]["okta"]["scim_token"] == "okta-scim-token-value"
    assert found["providers"]["entra"]["client_secret"] == "entra-secret-value"
    assert found["providers"]["entra"]["groups_claim"] == "roles"
    assert found["local"] is False and found["console"] == "https://switchyard.acme.example"
    assert found["email"] == ["django.core.mail.backends.smtp.EmailBackend", "smtp.acme.example", 587, "switchyard",
                              "smtp-password-value", True, "Switchyard <noreply@acme.example>"]
