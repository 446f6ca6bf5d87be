"""The console's per-request memo of roles and grants answers exactly what a fresh lookup answers.

A page asks ~20 permission questions about the same tenants; the console's principal remembers the
answers for the request, and its navigation looks up every visible tenant's role at once. None of it
may change a decision: same roles, same object grants (user and group), nothing for other tenants.
"""
import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from guardian.shortcuts import assign_perm

from tenants.access import Principal, effective_role, has_perm, prefetch_roles, tenant_permissions
from tenants.models import Tenant
from tenants.roles import Perm, Role
from tests.factories import make_member, make_tenant, make_user

pytestmark = pytest.mark.django_db


def _answers(principal, tenants):
    return {t.slug: (effective_role(principal, t), tenant_permissions(principal, t),
                     {p: has_perm(principal, t, p) for p in Perm.values}) for t in tenants}


def _world():
    """A user with each role in one tenant, guardian grants (direct and through a group), and strangers' tenants."""
    user = make_user("mia")
    tenants = [make_tenant(f"t-{role}") for role in Role.values] + [make_tenant("t-none"), make_tenant("t-granted")]
    for tenant, role in zip(tenants, Role.values):
        make_member(tenant, role, user)
    assign_perm(Perm.VIEW_AUDIT, user, tenants[Role.values.index(Role.VIEWER)])
    group = Group.objects.create(name="auditors")
    user.groups.add(group)
    assign_perm(Perm.EXPORT_AUDIT, group, tenants[Role.values.index(Role.DEVELOPER)])
    assign_perm(Perm.MANAGE_KEYS, user, tenants[-1])  # a grant without membership gives nothing
    return user, list(Tenant.objects.order_by("slug"))


def test_memoized_and_prefetched_answers_equal_fresh_lookups():
    user, tenants = _world()
    fresh = _answers(Principal(user=user), tenants)
    memoized = Principal(user=user, memo={})
    prefetch_roles(memoized, tenants)
    assert _answers(memoized, tenants) == fresh
    assert _answers(memoized, tenants) == fresh  # second read from the memo
    assert fresh["t-viewer"][1] >= {Perm.VIEW_AUDIT} and fresh["t-developer"][1] >= {Perm.EXPORT_AUDIT}
    assert fresh["t-none"] == (None, frozenset(), dict.fromkeys(Perm.values, False))
    assert fresh["t-granted"][1] == frozenset()


@pytest.mark.parametrize("kind", ["inactive", "staff"])
def test_memo_agrees_for_inactive_users_and_platform_admins(kind):
    user, tenants = _world()
    if kind == "inactive":
        user.is_active = False
    else:
        user.is_staff = True
    user.save()
    memoized = Principal(user=user, memo={})
    prefetch_roles(memoized, tenants)
    assert _answers(memoized, tenants) == _answers(Principal(user=user), tenants)


def test_tenant_page_queries_do_not_grow_with_the_users_tenants(client):
    user = make_user("nora")
    home = make_tenant("home")
    make_member(home, Role.ADMIN, user)
    make_member(make_tenant("other"), Role.VIEWER, user)
    client.force_login(user)

    def queries():
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"/console/tenants/{home.slug}/").status_code == 200
        return len(captured)

    one = queries()
    for index in range(4):
        make_member(make_tenant(f"other-{index}"), Role.VIEWER, user)
    assert queries() == one
