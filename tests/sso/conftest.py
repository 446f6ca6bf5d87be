"""A real OpenID Connect provider (tests/oidc_provider) in its own process, registered for the live console."""
import pytest

from sso.providers import forget_discovery
from tests.processes import OidcProvider

CLIENT_ID, CLIENT_SECRET = "switchyard-console", "test-client-secret-0123456789"
IDP_PASSWORD = "idp password 123"


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    provider = OidcProvider(tmp_path_factory.mktemp("idp")).start()
    yield provider
    provider.stop()


@pytest.fixture
def sso(idp, live_server, settings):
    """The console trusts the provider as "testidp"; `sso.user(name, *groups)` sets a user's groups there."""
    idp.misbehave("")
    idp.manage("idp_seed", "--client-id", CLIENT_ID, "--client-secret", CLIENT_SECRET,
               "--redirect-uri", f"{live_server.url}/console/sso/callback/",
               "--post-logout-uri", f"{live_server.url}/console/login/")
    settings.SWITCHYARD_OIDC_PROVIDERS = {"testidp": {
        "label": "Test IdP", "issuer": idp.issuer, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
        "scopes": "openid email profile", "groups_claim": "groups", "group_prefix": "switchyard"}}
    settings.SWITCHYARD_CONSOLE_URL = live_server.url
    forget_discovery()

    def user(name: str, *groups: str) -> None:
        idp.manage("idp_seed", "--user", f"{name}:{IDP_PASSWORD}:{name}@idp.example:{','.join(groups)}")

    idp.user = user
    yield idp
    forget_discovery()
