"""Invitations by e-mail: a one-time, expiring link through Django's mail backend; accepting it by
creating an account (no account has the address) or by signing in (one has). Dead links get a page that
says why. Creating a tenant over REST invites its first owner the same way."""
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from tenants.models import Invitation, InvitationStatus, Membership
from tenants.roles import Role
from tests.conftest import bearer
from tests.factories import make_user

NEW_PASSWORD = "a long new passphrase 42"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def capture(django_capture_on_commit_callbacks):
    """The invitation e-mail is sent after its transaction commits."""
    return django_capture_on_commit_callbacks


def _invite(alice, email, role="developer", capture=None):
    with capture(execute=True):
        response = bearer(alice.key).post(f"/api/v1/tenants/{alice.tenant.slug}/invitations/",
                                          {"email": email, "role": role}, format="json")
    assert response.status_code == 201
    assert "token" not in response.content.decode() and "/console/join/" not in response.content.decode()
    return _link_path(mail.outbox[-1])


def _link_path(message) -> str:
    return re.search(r"https?://[^/\s]+(/console/join/[^/\s]+/)", message.body).group(1)


def test_the_invitation_mail_carries_a_one_time_link_and_only_its_hash_is_stored(alice, capture):
    path = _invite(alice, "New.Person@Example.test", capture=capture)
    message = mail.outbox[-1]
    assert message.to == ["new.person@example.test"] and alice.tenant.name in message.subject
    token = path.rstrip("/").rsplit("/", 1)[1]
    invitation = Invitation.objects.get(email="new.person@example.test")
    assert invitation.token_hash and token not in invitation.token_hash
    audit = str(list(AuditEvent.objects.values("before", "after")))
    assert token not in audit


def test_accepting_by_creating_an_account_signs_in_and_the_link_then_dies(alice, capture):
    path = _invite(alice, "newbie@example.test", capture=capture)
    browser = Client()
    page = browser.get(path)
    assert page.status_code == 200 and b"Create your account" in page.content and b"developer" in page.content
    done = browser.post(path, {"username": "newbie", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD})
    assert done.status_code == 302 and done["Location"] == "/console/"
    user = get_user_model().objects.get(username="newbie")
    assert user.email == "newbie@example.test" and user.check_password(NEW_PASSWORD)
    assert Membership.objects.get(tenant=alice.tenant, user=user).role == Role.DEVELOPER
    assert browser.get("/console/").status_code == 200  # signed in
    actions = list(AuditEvent.objects.order_by("-seq").values_list("action", flat=True)[:4])
    assert actions == ["auth.login", "member.add", "member.invitation_accept", "user.create"]
    again = Client().get(path)
    assert again.status_code == 410 and b"already used" in again.content
    assert Client().post(path, {"username": "other", "password1": NEW_PASSWORD,
                                "password2": NEW_PASSWORD}).status_code == 410


def test_an_expired_link_is_refused_with_a_clear_page(alice, capture):
    path = _invite(alice, "late@example.test", capture=capture)
    Invitation.objects.filter(email="late@example.test").update(expires_at=timezone.now() - timedelta(minutes=1))
    page = Client().get(path)
    assert page.status_code == 410 and b"has expired" in page.content and b"Create your account" not in page.content
    assert not get_user_model().objects.filter(email="late@example.test").exists()


def test_renewing_or_revoking_an_invitation_kills_the_old_link(alice, capture):
    first = _invite(alice, "twice@example.test", capture=capture)
    second = _invite(alice, "twice@example.test", role="viewer", capture=capture)
    assert first != second
    assert Client().get(first).status_code == 404 and Client().get(second).status_code == 200
    invitation = Invitation.objects.get(email="twice@example.test")
    bearer(alice.key).delete(f"/api/v1/tenants/{alice.tenant.slug}/invitations/{invitation.pk}/")
    page = Client().get(second)
    assert page.status_code == 410 and b"withdrawn" in page.content


def test_an_unknown_link_is_a_404_page(db):
    page = Client().get("/console/join/not-a-real-token/")
    assert page.status_code == 404 and b"not valid" in page.content


def test_an_existing_account_signs_in_to_accept_and_its_password_is_never_set(alice, capture):
    existing = make_user("known")  # known@example.test
    path = _invite(alice, "known@example.test", role="viewer", capture=capture)
    page = Client().get(path)
    assert b"Sign in to accept" in page.content and b"Create your account" not in page.content
    refused = Client().post(path, {"username": "x", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD})
    existing.refresh_from_db()
    assert refused.status_code == 200 and not existing.check_password(NEW_PASSWORD)
    someone_else = Client()
    someone_else.force_login(make_user("stranger"))
    assert someone_else.post(path).status_code == 403
    assert Invitation.objects.get(email="known@example.test").status == InvitationStatus.PENDING
    holder = Client()
    holder.force_login(existing)
    assert holder.post(path).status_code == 302
    assert Membership.objects.get(tenant=alice.tenant, user=existing).role == Role.VIEWER


def test_creating_a_tenant_over_rest_invites_its_owner(charlie, capture):
    staff = Client()
    staff.force_login(charlie.user)
    assert staff.post("/api/v1/tenants/", {"slug": "ownerless", "name": "O"},
                      content_type="application/json").status_code == 400  # an owner is required
    with capture(execute=True):
        response = staff.post("/api/v1/tenants/", {"slug": "acme", "name": "Acme", "admin_email": "IT@acme.test"},
                              content_type="application/json")
    assert response.status_code == 201
    assert response.json()["owner_invitation"]["email"] == "it@acme.test"
    assert response.json()["owner_invitation"]["role"] == "owner"
    path = _link_path(mail.outbox[-1])
    browser = Client()
    browser.post(path, {"username": "acme-it", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD})
    assert Membership.objects.get(tenant__slug="acme", user__username="acme-it").role == Role.OWNER
