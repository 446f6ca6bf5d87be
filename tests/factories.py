"""Small factories for tests: real services, so audit rows and invariants come for free."""
import itertools

from django.contrib.auth import get_user_model

from apikeys.scopes import Scope
from apikeys.services import create_api_key
from audit.actor import Actor
from tenants.models import Membership
from tenants.roles import Role
from tenants.services import create_tenant

_counter = itertools.count(1)
SYSTEM = Actor.system("tests")


def make_user(username: str | None = None, *, staff: bool = False, password: str = "correct horse battery 9"):
    username = username or f"user{next(_counter)}"
    user = get_user_model().objects.create_user(username=username, email=f"{username}@example.test", password=password)
    if staff:
        user.is_staff = user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
    return user


def make_tenant(slug: str | None = None, **fields):
    slug = slug or f"tenant-{next(_counter)}"
    return create_tenant(slug=slug, name=fields.pop("name", slug.title()), actor=SYSTEM, **fields)


def make_member(tenant, role: str = Role.ADMIN, user=None):
    user = user or make_user()
    Membership.objects.create(tenant=tenant, user=user, role=role)
    return user


def make_key(tenant, user=None, *, role: str = Role.OWNER, scopes=(Scope.ADMIN,), **fields):
    """Returns the raw key (the minted ApiKey is on `.api_key` of the result of create_api_key)."""
    return create_api_key(tenant=tenant, user=user, role=role, scopes=list(scopes), name=fields.pop("name", "test key"),
                          actor=SYSTEM, **fields)
