"""The tenant page's "Editor completions" toggle in headless Chromium: it goes through the service (audited)."""
import pytest
from django.urls import reverse

from audit.models import AuditEvent
from tenants.models import Tenant
from tests.console.browser import serious_violations, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
LABEL = "Cancel an editor session's older completion when a newer one arrives"


def test_an_owner_turns_supersession_off_and_on(browser, live_server, world):
    context = browser.new_context(viewport={"width": 1280, "height": 860}, bypass_csp=True)  # axe is injected
    try:
        page = context.new_page()
        sign_in(page, live_server.url, "alice")
        page.goto(f"{live_server.url}{reverse('console:tenant', args=['tenant-a'])}")
        box = page.get_by_label(LABEL)
        assert box.is_checked()
        assert serious_violations(page) == []
        box.uncheck()
        page.locator("section[aria-labelledby=supersession-h]").get_by_role("button", name="Save").click()
        page.get_by_text("Superseded completions are no longer cancelled.").wait_for()
        assert Tenant.objects.get(slug="tenant-a").cancel_superseded is False
        assert not page.get_by_label(LABEL).is_checked()
        event = AuditEvent.objects.filter(action="tenant.update", tenant=world.a).latest("seq")
        assert event.after["cancel_superseded"] is False and event.actor_label == "alice"
        page.get_by_label(LABEL).check()
        page.locator("section[aria-labelledby=supersession-h]").get_by_role("button", name="Save").click()
        page.get_by_text("Superseded completions are now cancelled.").wait_for()
        assert Tenant.objects.get(slug="tenant-a").cancel_superseded is True
    finally:
        context.close()
