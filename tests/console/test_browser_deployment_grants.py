"""Per-object grants on the deployment page, in headless Chromium and with the keyboard only: the owner
grants an auditor (who reads no fleet) `view_deployment` on one deployment; the auditor then finds that
deployment, and no other, on the Fleet page; the owner revokes it and the page is gone for the auditor.
axe-core finds no serious problem on the page with the form."""
import pytest
from playwright.sync_api import expect

from fleet.models import Deployment
from tenants.object_grants import grants_on
from tenants.roles import Role
from tests.console.browser import ensure_chain_head, serious_violations, sign_in
from tests.factories import make_member, make_tenant, make_user
from tests.models_registry.registry_helpers import make_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fleet(transactional_db):
    ensure_chain_head()
    tenant = make_tenant("tenant-a")
    make_member(tenant, Role.OWNER, make_user("alice"))
    auditor = make_member(tenant, Role.AUDITOR, make_user("audra"))
    version = make_version()
    one, two = (Deployment.objects.create(tenant=tenant, name=name, model_version=version, runtime_backend="simulator")
                for name in ("coder-one", "coder-two"))
    return one, two, auditor


@pytest.fixture
def new_page(browser):
    contexts = []

    def open_page(**options):
        context = browser.new_context(viewport={"width": 1280, "height": 900}, **options)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def _focus(page, locator, limit=200):
    """Tab until `locator` has the focus (the form must be reachable by keyboard, in order)."""
    for _ in range(limit):
        if locator.evaluate("element => element === document.activeElement"):
            return
        page.keyboard.press("Tab")
    raise AssertionError("never reached by Tab")


def test_grant_and_revoke_with_the_keyboard(fleet, live_server, new_page):
    one, two, auditor = fleet
    owner = new_page(bypass_csp=True)  # only so that axe-core can be injected, as the console's a11y test does
    sign_in(owner, live_server.url, "alice")
    owner.goto(f"{live_server.url}/console/fleet/{one.pk}/")
    form = owner.get_by_role("form", name="Grant a permission on this deployment")
    expect(form).to_be_visible()
    assert serious_violations(owner) == []
    member = form.get_by_label("Member")
    _focus(owner, member)
    member.select_option(label="audra (auditor)")  # a native <select>: what arrow keys would choose
    owner.keyboard.press("Tab")
    expect(form.get_by_label("Permission on this deployment")).to_be_focused()
    form.get_by_label("Permission on this deployment").select_option("view_deployment")
    owner.keyboard.press("Tab")
    expect(form.get_by_role("button", name="Grant")).to_be_focused()
    owner.keyboard.press("Enter")
    expect(owner.get_by_text("audra now holds view_deployment on coder-one.")).to_be_visible()
    assert [(g.user.username, g.permission.codename) for g in grants_on(one)] == [("audra", "view_deployment")]

    reader = new_page()
    sign_in(reader, live_server.url, auditor.username)
    main_nav = reader.get_by_role("navigation", name="Main")
    expect(main_nav.get_by_role("link", name="Fleet")).to_be_visible()  # the nav offers it
    reader.goto(f"{live_server.url}/console/fleet/")
    expect(reader.get_by_role("link", name="coder-one")).to_be_visible()
    expect(reader.get_by_text("coder-two")).to_have_count(0)
    assert reader.goto(f"{live_server.url}/console/fleet/{two.pk}/").status == 404

    owner.reload()
    revoke = owner.get_by_role("button", name="Revoke view_deployment of audra")
    _focus(owner, revoke)
    owner.keyboard.press("Enter")
    expect(owner.get_by_text("view_deployment of audra on coder-one revoked.")).to_be_visible()
    assert not grants_on(one).exists()
    assert reader.goto(f"{live_server.url}/console/fleet/{one.pk}/").status == 404
