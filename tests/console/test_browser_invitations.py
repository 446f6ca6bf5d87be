"""Invitations end to end in headless Chromium: an owner invites an address from the tenant page, the
e-mail (Django's mail backend) carries a one-time link, the invitee creates an account through it and
lands in the console, signs out and in again with the new password; the used link and an expired one are
refused with a page that says why."""
import re
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone
from playwright.sync_api import expect

from tenants.models import Invitation, Membership
from tests.console.browser import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
NEW_PASSWORD = "a long new passphrase 42"


@pytest.fixture
def world(world, settings, live_server):
    settings.SWITCHYARD_CONSOLE_URL = live_server.url  # the links in e-mails point at this server
    return world


@pytest.fixture
def new_page(browser):
    contexts = []

    def open_page():
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def _invite_from_the_tenant_page(page, base_url, email, role):
    page.goto(f"{base_url}/console/tenants/tenant-a/")
    form = page.locator("form", has=page.get_by_role("button", name="Invite", exact=True))
    form.get_by_label("Email").fill(email)
    form.get_by_label("Role").select_option(role)
    form.get_by_role("button", name="Invite", exact=True).click()
    expect(page.get_by_text(f"{email} is invited as {role}")).to_be_visible()


def _link_in_mail(email) -> str:
    [message] = [m for m in mail.outbox if m.to == [email]]
    return re.search(r"(https?://\S+/console/join/\S+/)", message.body).group(1)


def test_invite_accept_and_sign_in(world, live_server, new_page):
    owner = new_page()
    sign_in(owner, live_server.url, "alice")
    _invite_from_the_tenant_page(owner, live_server.url, "newbie@example.test", "developer")
    link = _link_in_mail("newbie@example.test")

    invitee = new_page()
    invitee.goto(link)
    expect(invitee.get_by_role("heading", name="Join")).to_be_visible()
    invitee.get_by_label("Username").fill("newbie")
    invitee.get_by_label(re.compile(r"^Password:?$")).fill(NEW_PASSWORD)
    invitee.get_by_label("Password again").fill(NEW_PASSWORD)
    invitee.get_by_role("button", name="Create account and join").click()
    invitee.wait_for_url(f"{live_server.url}/console/")
    expect(invitee.get_by_text("you are now developer in tenant-a")).to_be_visible()
    assert Membership.objects.get(user__username="newbie", tenant=world.a).role == "developer"

    invitee.get_by_role("button", name="Sign out").click()
    invitee.goto(f"{live_server.url}/console/login/")
    invitee.get_by_label("Username").fill("newbie")
    invitee.get_by_label("Password").fill(NEW_PASSWORD)
    invitee.keyboard.press("Enter")
    invitee.wait_for_url(f"{live_server.url}/console/")
    invitee.goto(f"{live_server.url}/console/tenants/")
    expect(invitee.get_by_role("link", name=re.compile("tenant-a"))).to_be_visible()

    reused = new_page()
    response = reused.goto(link)
    assert response.status == 410
    expect(reused.get_by_role("alert")).to_contain_text("already used")
    expect(reused.get_by_label("Username")).to_have_count(0)


def test_an_expired_link_is_refused(world, live_server, new_page):
    owner = new_page()
    sign_in(owner, live_server.url, "alice")
    _invite_from_the_tenant_page(owner, live_server.url, "late@example.test", "viewer")
    link = _link_in_mail("late@example.test")
    Invitation.objects.filter(email="late@example.test").update(expires_at=timezone.now() - timedelta(seconds=1))
    page = new_page()
    response = page.goto(link)
    assert response.status == 410
    expect(page.get_by_role("alert")).to_contain_text("has expired")
    expect(page.get_by_role("button", name="Create account and join")).to_have_count(0)
