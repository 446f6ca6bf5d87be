"""Single sign-on end to end: headless Chromium, the live console and a real OpenID Connect provider
(django-oauth-toolkit in its own process). Sign-in lands with exactly the roles the groups grant; changed
groups change the roles at the next sign-in, a removed group loses the tenant; tokens with a forged
signature, an expired one or another audience are refused; an invitation link is accepted by signing in
through the provider."""
import re

import pytest
from playwright.sync_api import expect

from audit.models import AuditEvent
from sso.models import OidcIdentity
from tenants.models import Membership
from tests.console.browser import ensure_chain_head
from tests.factories import make_member, make_tenant, make_user
from tests.sso.conftest import IDP_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(transactional_db):
    ensure_chain_head()
    a, b = make_tenant("tenant-a"), make_tenant("tenant-b")
    make_member(a, "owner", make_user("alice"))
    make_member(b, "owner", make_user("bob"))
    return a, b


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    yield context.new_page()
    context.close()


def sign_in_through_idp(page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/console/login/")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    if page.get_by_label("IdP username").count():  # not signed in at the provider yet
        page.get_by_label("IdP username").fill(username)
        page.get_by_label("IdP password").fill(IDP_PASSWORD)
        page.get_by_role("button", name="Sign in at the IdP").click()
    page.wait_for_url(lambda url: url.startswith(base_url))


def roles(username: str) -> dict[str, str]:
    return dict(Membership.objects.filter(user__username=username).values_list("tenant__slug", "role"))


def test_groups_become_roles_and_follow_the_provider_at_each_sign_in(world, sso, live_server, page):
    sso.user("ann", "switchyard:tenant-a:developer", "switchyard:tenant-b:viewer", "switchyard:nowhere:owner",
             "engineering")
    sign_in_through_idp(page, live_server.url, "ann")
    assert page.url == f"{live_server.url}/console/"
    identity = OidcIdentity.objects.get(issuer=sso.issuer)
    assert identity.user.username == "ann" and identity.user.email == "ann@idp.example"
    assert not identity.user.has_usable_password()
    assert roles("ann") == {"tenant-a": "developer", "tenant-b": "viewer"}
    page.goto(f"{live_server.url}/console/tenants/")
    expect(page.get_by_role("link", name=re.compile("tenant-b"))).to_be_visible()

    sso.user("ann", "switchyard:tenant-a:admin")  # promoted in A, removed from B's group
    page.get_by_role("button", name="Sign out").click()  # the console's and the provider's session
    page.wait_for_url(f"{live_server.url}/console/login/")
    sign_in_through_idp(page, live_server.url, "ann")
    assert OidcIdentity.objects.get(issuer=sso.issuer).pk == identity.pk  # the same (issuer, subject)
    assert roles("ann") == {"tenant-a": "admin"}
    page.goto(f"{live_server.url}/console/tenants/")
    expect(page.get_by_role("link", name=re.compile("tenant-b"))).to_have_count(0)
    changes = AuditEvent.objects.filter(actor_label="sso:testidp").values_list("action", flat=True)
    assert {"sso.identity_create", "sso.mapping_apply", "member.add", "member.update", "member.remove"} <= set(changes)


@pytest.mark.parametrize("mode,reason", [("forged", "Signature verification failed"),
                                         ("expired", "Signature has expired"),
                                         ("wrong-audience", "Audience doesn't match")])
def test_a_tampered_id_token_is_refused(world, sso, live_server, page, mode, reason):
    sso.user("mallory", "switchyard:tenant-a:owner")
    sso.misbehave(mode)
    sign_in_through_idp(page, live_server.url, "mallory")
    assert page.url == f"{live_server.url}/console/login/?sso=failed"
    expect(page.get_by_role("alert")).to_contain_text("Single sign-on failed")
    page.goto(f"{live_server.url}/console/")
    assert "/console/login/" in page.url  # not signed in
    assert not OidcIdentity.objects.exists() and roles("mallory") == {}
    rejection = AuditEvent.objects.get(action="auth.sso_rejected")
    assert reason.lower() in rejection.after["reason"].lower()


def test_an_invitee_accepts_an_invitation_link_by_signing_in_through_the_provider(world, sso, live_server, page):
    from django.core import mail

    from audit.actor import Actor
    from tenants.services import invite_member

    tenant_a, _ = world
    invite_member(tenant=tenant_a, email="ivy@idp.example", role="viewer", actor=Actor.system("tests"))
    link = re.search(r"(https?://\S+/console/join/\S+/)", mail.outbox[-1].body).group(1)
    sso.user("ivy")  # no groups at all: the invitation alone gives the tenant
    page.goto(link)
    page.get_by_role("link", name="Sign in with Test IdP to accept").click()
    page.get_by_label("IdP username").fill("ivy")
    page.get_by_label("IdP password").fill(IDP_PASSWORD)
    page.get_by_role("button", name="Sign in at the IdP").click()
    page.wait_for_url(link)
    page.get_by_role("button", name="Accept the invitation").click()
    page.wait_for_url(f"{live_server.url}/console/")
    assert roles("ivy") == {"tenant-a": "viewer"}
    assert page.goto(link).status == 410  # used
