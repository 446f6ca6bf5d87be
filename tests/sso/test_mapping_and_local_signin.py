"""The group → role mapping's rules, and turning password sign-in off (no provider process needed)."""
from django.test import Client

from sso.services import roles_from_groups
from tests.console.browser import PASSWORD


def test_groups_name_a_tenant_and_a_role_and_the_highest_role_wins():
    groups = ["switchyard:acme:viewer", "switchyard:acme:admin", "switchyard:beta:developer", "switchyard:beta:boss",
              "other:acme:owner", "switchyard:gamma", "engineering", "switchyard:gamma:owner:extra"]
    assert roles_from_groups(groups, "switchyard") == {"acme": "admin", "beta": "developer"}
    assert roles_from_groups(None, "switchyard") == {}
    assert roles_from_groups(["corp:acme:owner"], "corp") == {"acme": "owner"}


def test_with_local_sign_in_off_no_password_is_checked(alice, settings):
    settings.SWITCHYARD_LOCAL_SIGNIN = False
    client = Client()
    page = client.get("/console/login/")
    assert b'name="password"' not in page.content and b"Password sign-in is turned off" in page.content
    response = client.post("/console/login/", {"username": alice.user.username, "password": PASSWORD})
    assert response.status_code == 403 and "_auth_user_id" not in client.session
    settings.SWITCHYARD_LOCAL_SIGNIN = True
    assert client.post("/console/login/", {"username": alice.user.username, "password": PASSWORD}).status_code == 302


def test_an_unreachable_provider_ends_at_the_sign_in_page(db, settings):
    from bench._procs import free_port
    from sso.providers import forget_discovery

    settings.SWITCHYARD_OIDC_PROVIDERS = {"down": {"label": "Down", "issuer": f"http://127.0.0.1:{free_port()}/o",
                                                   "client_id": "c", "client_secret": "s"}}
    settings.SWITCHYARD_OIDC_TIMEOUT_SECONDS = 2
    forget_discovery()
    response = Client().get("/console/sso/down/")
    assert response.status_code == 302 and response["Location"] == "/console/login/?sso=failed"


def test_several_providers_each_get_a_button(db, settings):
    common = {"client_id": "c", "client_secret": "s"}
    settings.SWITCHYARD_OIDC_PROVIDERS = {"okta": {"label": "Okta", "issuer": "https://okta.example/o", **common},
                                          "entra": {"label": "Microsoft", "issuer": "https://login.example/t/v2.0",
                                                    **common}}
    page = Client().get("/console/login/").content.decode()
    assert 'href="/console/sso/okta/"' in page and 'href="/console/sso/entra/"' in page
    assert "Sign in with Microsoft" in page and "Sign in with Okta" in page
    policy = Client().get("/console/login/")["Content-Security-Policy"]
    assert "form-action 'self' https://login.example https://okta.example" in policy  # the providers' logout
