"""Every console page, opened by each kind of user: who gets the page, a 404 or a redirect to sign in."""
import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

OPERATIONAL = ["console:tenants", "console:fleet", "console:models", "console:usage"]


def pages(world) -> dict[str, str]:
    return {
        "overview": reverse("console:home"), "tenants": reverse("console:tenants"),
        "tenant-a": reverse("console:tenant", args=["tenant-a"]),
        "tenant-b": reverse("console:tenant", args=["tenant-b"]),
        "keys": reverse("console:keys"), "fleet": reverse("console:fleet"),
        "deployment-a": reverse("console:deployment", args=[world.dep_a.pk]),
        "deployment-b": reverse("console:deployment", args=[world.dep_b.pk]),
        "instances-a": reverse("console:instances-json", args=[world.dep_a.pk]),
        "instances-b": reverse("console:instances-json", args=[world.dep_b.pk]),
        "models": reverse("console:models"), "usage": reverse("console:usage"),
        "usage-csv": reverse("console:usage") + "?range=7d&format=csv",
        "audit": reverse("console:audit"), "audit-export": reverse("console:audit-export") + "?format=csv",
        "audit-manifest": reverse("console:audit-manifest") + "?format=jsonl",
        "audit-verify": reverse("console:audit-verify"), "slow": reverse("console:slow"),
    }


ALL = ["overview", "tenants", "tenant-a", "tenant-b", "keys", "fleet", "deployment-a", "deployment-b", "instances-a",
       "instances-b", "models", "usage", "usage-csv", "audit", "audit-export", "audit-manifest", "audit-verify", "slow"]
# user → the pages answering 200; every other page must answer 404 (the overview redirects instead).
ALLOWED = {
    "charlie": set(ALL),
    "alice": set(ALL) - {"tenant-b", "deployment-b", "instances-b", "audit-verify"},
    "bob": set(ALL) - {"tenant-a", "deployment-a", "instances-a", "audit-verify"},
    "erin": {"overview", "tenants", "tenant-a", "keys", "fleet", "deployment-a", "instances-a", "models", "usage",
             "usage-csv"},
    "victor": {"overview", "tenants", "tenant-a", "keys", "fleet", "deployment-a", "instances-a", "models", "usage",
               "usage-csv"},
    "dave": {"audit", "audit-export", "audit-manifest"},
    "nobody": set(),
}


@pytest.mark.parametrize("user", sorted(ALLOWED))
def test_each_user_opens_exactly_their_pages(world, login, user):
    client = login(user)
    for name, url in pages(world).items():
        status = client.get(url).status_code
        if name == "overview" and name not in ALLOWED[user]:
            assert status == 302, (user, name)
        else:
            assert status == (200 if name in ALLOWED[user] else 404), (user, name, status)


def test_signed_out_visitors_are_sent_to_sign_in(world, client):
    for url in pages(world).values():
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("console:login"))


def test_an_auditor_lands_on_the_audit_trail(world, login):
    assert login("dave").get(reverse("console:home"))["Location"] == reverse("console:audit")


def test_navigation_lists_only_pages_the_user_may_open(world, login):
    html = login("dave").get(reverse("console:audit")).content.decode()
    assert "Audit" in html and reverse("console:fleet") not in html and reverse("console:tenants") not in html
    html = login("erin").get(reverse("console:tenants")).content.decode()
    assert reverse("console:audit") not in html and reverse("console:slow") not in html


def test_tenant_list_shows_members_only_their_tenants(world, login):
    html = login("alice").get(reverse("console:tenants")).content.decode()
    assert "tenant-a" in html and "tenant-b" not in html
    html = login("charlie").get(reverse("console:tenants")).content.decode()
    assert "tenant-a" in html and "tenant-b" in html


def test_developer_sees_only_their_own_keys(world, login):
    html = login("erin").get(reverse("console:keys")).content.decode()
    assert world.keys["erin"].prefix in html and world.keys["a"].prefix not in html
    html = login("victor").get(reverse("console:keys")).content.decode()
    assert world.keys["erin"].prefix in html and world.keys["a"].prefix in html and world.keys["b"].prefix not in html


def test_audit_pages_show_only_the_users_tenants(world, login):
    from audit.services import record_event
    from tests.factories import SYSTEM

    record_event(actor=SYSTEM, action="tests.only_b", tenant=world.b)
    assert "tests.only_b" not in login("dave").get(reverse("console:audit")).content.decode()
    assert b"tests.only_b" not in login("alice").get(reverse("console:audit-export") + "?format=jsonl").getvalue()
    assert b"tests.only_b" in login("charlie").get(reverse("console:audit-export") + "?format=jsonl").getvalue()


def test_bad_audit_filters_are_a_message_not_an_error(world, login):
    response = login("charlie").get(reverse("console:audit") + "?since=2026-13-45&actor=x")
    assert response.status_code == 200


def test_a_grant_of_members_alone_opens_the_tenant_pages_but_no_usage(world, login):
    """An auditor granted `view_members` on A reads its members, not its traffic: the overview, which is
    usage, sends them on to the tenants instead of counting nothing (or failing)."""
    from guardian.shortcuts import assign_perm

    assign_perm("tenants.view_members", world.users["dave"], world.a)
    client = login("dave")
    assert client.get(reverse("console:home"))["Location"] == reverse("console:tenants")
    assert client.get(reverse("console:tenants")).status_code == 200
    page = client.get(reverse("console:tenant", args=["tenant-a"])).content.decode()
    assert "Usage summary" not in page and "Members" in page
    assert client.get(reverse("console:usage")).status_code == 404
    assert client.get(reverse("console:fleet")).status_code == 404
