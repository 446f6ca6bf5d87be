"""Adding a member invites an address and never looks an account up: whether someone outside the tenant
already has the address changes nothing in the answer (REST and console). The invitee accepts by
signing in with the account that holds the address."""
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from tenants.models import Invitation, InvitationStatus, Membership
from tests.api.conftest import client_for
from tests.factories import make_member, make_user

VARYING = {"id", "email", "created_at", "expires_at"}  # what differs between any two invitations


@pytest.fixture
def outsider(bob):
    """A member of tenant B whose username appears nowhere in their address."""
    user = make_member(bob.tenant, "developer", make_user("hidden-username-b"))
    user.email = "outsider@b.example"
    user.save(update_fields=["email"])
    return user


def _invite(client, tenant, email, role="viewer", **extra):
    return client.post(f"/api/v1/tenants/{tenant.slug}/members/", {"email": email, "role": role, **extra},
                       format="json")


def _shape(response) -> tuple:
    body = response.json()
    return response.status_code, sorted(body), {k: v for k, v in body.items() if k not in VARYING}


@pytest.mark.parametrize("path", ["members", "invitations"])
@pytest.mark.parametrize("cred", ["api_key", "session"])
def test_an_address_with_an_account_elsewhere_answers_like_an_unknown_one(alice, outsider, cred, path):
    client = client_for(cred, alice.user, alice.key)
    url = f"/api/v1/tenants/{alice.tenant.slug}/{path}/"
    users_before = get_user_model().objects.count()
    known = client.post(url, {"email": outsider.email, "role": "developer"}, format="json")
    unknown = client.post(url, {"email": "nobody-has-this@example.test", "role": "developer"}, format="json")
    assert known.status_code == 201, known.content
    assert _shape(known) == _shape(unknown)
    assert outsider.username not in known.content.decode() and outsider.pk not in known.json().values()
    assert not Membership.objects.filter(tenant=alice.tenant, user=outsider).exists()  # nobody joins unasked
    assert get_user_model().objects.count() == users_before  # and no account is made up
    assert known.json()["status"] == "pending" and known.json()["email"] == outsider.email


def test_a_taken_username_is_not_revealed_either(alice, outsider):
    client = client_for("api_key", alice.user, alice.key)
    taken = _invite(client, alice.tenant, "new-one@example.test", username=outsider.username)
    free = _invite(client, alice.tenant, "new-two@example.test", username="nobody-has-this-name")
    assert (taken.status_code, _shape(taken)) == (free.status_code, _shape(free))


def test_the_console_answers_alike_too(alice, outsider):
    client = Client()
    client.force_login(alice.user)
    url = reverse("console:member-add", args=[alice.tenant.slug])
    answers = []
    for email in (outsider.email, "nobody-has-this@example.test"):
        response = client.post(url, {"email": email, "role": "developer"}, follow=True)
        page = response.content.decode().replace(email, "<email>")
        answers.append((response.redirect_chain,
                        [str(m) .replace(email, "<email>") for m in response.context["messages"]],
                        page.count("<email>")))
    assert answers[0] == answers[1]
    assert "is invited as developer" in answers[0][1][0]
    assert outsider.username not in client.get(reverse("console:tenant", args=[alice.tenant.slug])).content.decode()


def test_the_audit_row_names_the_address_and_no_account(alice, outsider):
    client = client_for("api_key", alice.user, alice.key)
    _invite(client, alice.tenant, outsider.email)
    _invite(client, alice.tenant, "nobody-has-this@example.test")
    rows = list(AuditEvent.objects.filter(action="member.invite").order_by("seq"))
    assert [sorted(r.after) for r in rows] == [["email", "expires_at", "role", "status"]] * 2
    assert rows[0].target_type == rows[1].target_type == "tenants.invitation"
    assert outsider.username not in str(rows[0].after)


def test_inviting_a_member_of_the_tenant_is_refused_by_field(alice):
    dev = make_member(alice.tenant, "developer", make_user("dev-a"))
    response = _invite(client_for("api_key", alice.user, alice.key), alice.tenant, dev.email.upper())
    assert response.status_code == 400 and "email" in response.json()


def test_inviting_again_renews_the_pending_invitation(alice):
    client = client_for("api_key", alice.user, alice.key)
    first = _invite(client, alice.tenant, "Dev@Example.TEST", role="viewer")
    again = _invite(client, alice.tenant, "dev@example.test", role="developer")
    assert first.json()["id"] == again.json()["id"] and again.json()["role"] == "developer"
    assert Invitation.objects.filter(tenant=alice.tenant, status="pending").count() == 1
    renewal = AuditEvent.objects.filter(action="member.invite").latest("seq")
    assert (renewal.before["role"], renewal.after["role"]) == ("viewer", "developer")


def _console(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_invitee_accepts_and_joins_with_the_role(alice, bob):
    invitation = _invite(client_for("api_key", alice.user, alice.key), alice.tenant, bob.user.email.upper(),
                         role="developer").json()
    client = _console(bob.user)
    page = client.get(reverse("console:invitations")).content.decode()
    assert alice.tenant.slug in page
    answer = client.post(reverse("console:invitation-answer", args=[invitation["id"], "accept"]))
    assert answer.status_code == 302
    assert Membership.objects.get(tenant=alice.tenant, user=bob.user).role == "developer"
    assert Invitation.objects.get(pk=invitation["id"]).status == InvitationStatus.ACCEPTED
    actions = list(AuditEvent.objects.filter(tenant=alice.tenant).order_by("-seq").values_list("action", flat=True)[:2])
    assert actions == ["member.add", "member.invitation_accept"]
    assert "No open invitations" in client.get(reverse("console:invitations")).content.decode()


def test_the_invitee_may_decline(alice, bob):
    invitation = _invite(client_for("api_key", alice.user, alice.key), alice.tenant, bob.user.email).json()
    _console(bob.user).post(reverse("console:invitation-answer", args=[invitation["id"], "decline"]))
    assert Invitation.objects.get(pk=invitation["id"]).status == InvitationStatus.DECLINED
    assert not Membership.objects.filter(tenant=alice.tenant, user=bob.user).exists()


def test_nobody_else_sees_or_answers_an_invitation(alice, bob):
    invitation = _invite(client_for("api_key", alice.user, alice.key), alice.tenant, bob.user.email).json()
    carol = make_user("carol")
    client = _console(carol)
    assert alice.tenant.slug not in client.get(reverse("console:invitations")).content.decode()
    for answer in ("accept", "decline"):
        assert client.post(reverse("console:invitation-answer", args=[invitation["id"], answer])).status_code == 404
    assert Invitation.objects.get(pk=invitation["id"]).status == InvitationStatus.PENDING


def test_an_expired_invitation_can_no_longer_be_accepted(alice, bob):
    invitation = _invite(client_for("api_key", alice.user, alice.key), alice.tenant, bob.user.email).json()
    Invitation.objects.filter(pk=invitation["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _console(bob.user).post(reverse("console:invitation-answer", args=[invitation["id"], "accept"]))
    assert response.status_code == 404
    assert not Membership.objects.filter(tenant=alice.tenant, user=bob.user).exists()


def test_a_revoked_invitation_can_no_longer_be_accepted(alice, bob):
    client = client_for("api_key", alice.user, alice.key)
    invitation = _invite(client, alice.tenant, bob.user.email).json()
    assert client.delete(f"/api/v1/tenants/{alice.tenant.slug}/invitations/{invitation['id']}/").status_code == 204
    assert client.delete(f"/api/v1/tenants/{alice.tenant.slug}/invitations/{invitation['id']}/").status_code == 400
    response = _console(bob.user).post(reverse("console:invitation-answer", args=[invitation["id"], "accept"]))
    assert response.status_code == 404
    assert AuditEvent.objects.filter(action="member.invitation_revoke").count() == 1


def test_an_admin_cannot_revoke_an_owner_invitation(alice):
    from tests.conftest import bearer
    from tests.factories import make_key

    owner_invite = _invite(client_for("api_key", alice.user, alice.key), alice.tenant, "boss@example.test",
                           role="owner")
    admin = make_member(alice.tenant, "admin", make_user("admin-a"))
    response = bearer(make_key(alice.tenant, admin, role="admin").raw).delete(
        f"/api/v1/tenants/{alice.tenant.slug}/invitations/{owner_invite.json()['id']}/")
    assert response.status_code == 403


def test_members_listing_shows_invitations_to_those_who_list_members(alice):
    _invite(client_for("api_key", alice.user, alice.key), alice.tenant, "dev@example.test")
    viewer = make_member(alice.tenant, "viewer", make_user("viewer-a"))
    rows = client_for("session", viewer, None).get(f"/api/v1/tenants/{alice.tenant.slug}/invitations/").json()
    assert [r["email"] for r in rows["results"]] == ["dev@example.test"]
