"""`manage.py seed_demo` (what `make run` starts with): the platform admin it creates or resets is audited."""
from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def seed(*args: str) -> dict:
    out = StringIO()
    call_command("seed_demo", "--no-deploy", *args, stdout=out)
    return dict(line.removeprefix("SEED ").split("=", 1) for line in out.getvalue().splitlines()
                if line.startswith("SEED "))


def admin_events() -> list[str]:
    return list(AuditEvent.objects.filter(action__startswith="platform_admin.").order_by("seq")
                .values_list("action", flat=True))


def test_the_admin_created_then_reset_signs_in_and_both_are_audited():
    first = seed()
    assert authenticate(username="admin", password=first["admin_password"]) is not None
    seed()  # again without a reset: the password stays, nothing is audited
    assert authenticate(username="admin", password=first["admin_password"]) is not None
    second = seed("--reset-admin-password")
    assert authenticate(username="admin", password=second["admin_password"]) is not None
    assert authenticate(username="admin", password=first["admin_password"]) is None
    assert admin_events() == ["platform_admin.create", "platform_admin.password_reset"]
    assert first["admin_password"] not in str(list(AuditEvent.objects.values_list("after", flat=True)))
