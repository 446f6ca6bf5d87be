"""Sign-in limits, driven through the real console sign-in view: failures count per username and per
address independently, a success never clears the address's count, and a lock answers the same whether
or not the username exists."""
import re

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from tests.factories import make_user
from tests.own_cache import clear_own_cache

PASSWORD = "correct horse battery 9"
LOGIN = reverse("console:login")


@pytest.fixture(autouse=True)
def limits(settings, db):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.SWITCHYARD_LOGIN_FAILURES_PER_USERNAME = 3
    settings.SWITCHYARD_LOGIN_FAILURES_PER_IP = 5
    settings.SWITCHYARD_LOGIN_LOCK_SECONDS = 600
    clear_own_cache()
    yield settings
    clear_own_cache()


@pytest.fixture
def alice(db):
    return make_user("alice")


def sign_in(username, password="wrong password", ip="198.51.100.7"):
    # `ip` is only REMOTE_ADDR of Django's in-process test client (documentation ranges): no traffic leaves.
    return Client(REMOTE_ADDR=ip).post(LOGIN, {"username": username, "password": password})


def signed_in(response) -> bool:
    return response.status_code == 302


def locked(response) -> bool:
    return response.status_code == 429 and b"Too many failed sign-ins" in response.content


def test_spraying_from_one_address_is_locked_although_a_good_account_signs_in_between(alice):
    """The reported attack: guesses against many usernames, the attacker's own account in between."""
    outcomes = []
    for n in range(4):
        outcomes.append(sign_in(f"victim{n}"))
        outcomes.append(sign_in("alice", PASSWORD))  # a success must not reset the address's count
    assert all(signed_in(r) for r in outcomes[1::2]) and not any(locked(r) for r in outcomes)
    assert not locked(sign_in("victim4"))  # the 5th failure reaches the limit …
    assert locked(sign_in("victim5"))  # … and from then on the address is locked,
    assert locked(sign_in("alice", PASSWORD))  # the right password included
    assert signed_in(sign_in("alice", PASSWORD, ip="203.0.113.9"))  # another address is not affected


def test_twenty_seven_failures_from_one_address_end_in_a_lock(alice, limits):
    limits.SWITCHYARD_LOGIN_FAILURES_PER_IP = 20
    answers = [sign_in(f"user{n}") if n % 3 else sign_in("alice", PASSWORD) for n in range(40)]
    failures_before_lock = 0
    for response in answers:
        if locked(response):
            break
        failures_before_lock += not signed_in(response)
    assert failures_before_lock == 20


def test_a_username_is_locked_from_every_address(alice):
    for n in range(3):
        assert not locked(sign_in("alice", ip=f"192.0.2.{n}"))
    assert locked(sign_in("alice", PASSWORD, ip="192.0.2.200"))
    make_user("bob")
    assert signed_in(sign_in("bob", PASSWORD, ip="192.0.2.201"))  # other usernames are not affected


def test_a_success_clears_only_that_usernames_count(alice):
    make_user("bob")
    for ip in ("192.0.2.1", "192.0.2.2"):
        sign_in("alice", ip=ip)
    assert signed_in(sign_in("alice", PASSWORD, ip="192.0.2.3"))  # alice's count back to zero
    for ip in ("192.0.2.4", "192.0.2.5"):
        assert not locked(sign_in("alice", ip=ip))
    assert signed_in(sign_in("alice", PASSWORD, ip="192.0.2.6"))
    # the address's count is untouched by those successes: 5 failures from one address in all
    for n in range(4):
        sign_in(f"guess{n}", ip="192.0.2.9")
    assert signed_in(sign_in("bob", PASSWORD, ip="192.0.2.9"))
    assert not locked(sign_in("guess4", ip="192.0.2.9"))
    assert locked(sign_in("bob", PASSWORD, ip="192.0.2.9"))


def test_usernames_are_counted_case_insensitively(alice):
    for name, ip in (("alice", "192.0.2.1"), ("ALICE", "192.0.2.2"), (" Alice ", "192.0.2.3")):
        sign_in(name, ip=ip)
    assert locked(sign_in("alice", PASSWORD, ip="192.0.2.4"))


def test_an_ipv6_client_is_counted_by_its_64(alice):
    for n in range(5):
        sign_in(f"guess{n}", ip=f"2001:db8:1:2::{n + 1:x}")
    assert locked(sign_in("alice", PASSWORD, ip="2001:db8:1:2:ffff:ffff:ffff:ffff"))
    assert signed_in(sign_in("alice", PASSWORD, ip="2001:db8:1:3::1"))


def _page_without_echoes(response, username) -> bytes:
    body = re.sub(rb'name="csrfmiddlewaretoken" value="[^"]+"', b"", response.content)
    return body.replace(username.encode(), b"<username>")


def test_the_lock_answers_alike_for_an_existing_and_an_unknown_username(alice):
    for n in range(3):
        sign_in("alice", ip=f"192.0.2.{n}")
        sign_in("nosuchuser", ip=f"192.0.2.{n + 10}")
    existing, unknown = sign_in("alice", PASSWORD, ip="192.0.2.50"), sign_in("nosuchuser", PASSWORD, ip="192.0.2.51")
    assert locked(existing) and locked(unknown)
    assert existing["Retry-After"] == unknown["Retry-After"] == "600"
    assert _page_without_echoes(existing, "alice") == _page_without_echoes(unknown, "nosuchuser")
    assert b"Try again in 10 minutes" in existing.content
    rows = {r.after["username"]: r.after for r in AuditEvent.objects.filter(action="auth.login_locked")}
    assert rows["alice"].keys() == rows["nosuchuser"].keys()
    assert {k: v for k, v in rows["alice"].items() if k != "username"} == \
        {k: v for k, v in rows["nosuchuser"].items() if k != "username"}


def test_failures_and_each_lock_are_audited(alice):
    for n in range(5):
        sign_in("alice" if n < 3 else f"guess{n}")
    sign_in("alice", PASSWORD)  # refused while locked: logged, not audited
    failed = AuditEvent.objects.filter(action="auth.login_failed")
    assert failed.count() == 5 and failed.filter(after__username="alice").count() == 3
    locks = list(AuditEvent.objects.filter(action="auth.login_locked").order_by("seq").values_list("after", flat=True))
    assert locks == [
        {"scope": "username", "username": "alice", "failures": 3, "lock_seconds": 600},
        {"scope": "ip", "address": "198.51.100.7", "failures": 5, "lock_seconds": 600},
    ]
    assert AuditEvent.objects.filter(action="auth.login").count() == 0
    assert all(r.source_ip == "198.51.100.7" for r in AuditEvent.objects.filter(action__startswith="auth.login_"))


def test_an_operator_lifts_a_lock(alice):
    for n in range(3):
        sign_in("alice", ip=f"192.0.2.{n}")
    assert locked(sign_in("alice", PASSWORD, ip="192.0.2.9"))
    call_command("login_unlock", username="Alice")
    assert signed_in(sign_in("alice", PASSWORD, ip="192.0.2.9"))
    row = AuditEvent.objects.get(action="auth.login_unlocked")
    assert row.after["was_locked"] == ["username"] and row.actor_type == "system"


# --- the sibling path: the admin's password change checks the old password ---

@pytest.fixture
def staff_client(db):
    user = make_user("root", staff=True)
    client = Client(REMOTE_ADDR="198.51.100.20")
    client.force_login(user)
    return user, client


def _change_password(client, old):
    new = "another horse battery 10"
    return client.post("/admin/password_change/", {"old_password": old, "new_password1": new, "new_password2": new})


def test_the_admin_password_change_is_limited_like_the_sign_in(staff_client):
    user, client = staff_client
    for _ in range(3):
        assert b"Your old password was entered incorrectly" in _change_password(client, "guess").content
    answer = _change_password(client, PASSWORD)
    assert b"Too many failed sign-ins" in answer.content
    user.refresh_from_db()
    assert user.check_password(PASSWORD)  # the right old password was refused while locked
    assert AuditEvent.objects.filter(action="auth.login_failed", after__via="password change").count() == 3
    assert locked(sign_in("root", PASSWORD, ip="192.0.2.77"))  # one lock for the username, wherever it is checked


def test_the_admin_password_change_still_works(staff_client):
    user, client = staff_client
    assert _change_password(client, PASSWORD).status_code == 302
    user.refresh_from_db()
    assert user.check_password("another horse battery 10")
