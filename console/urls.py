"""Console routes (docs/console.md lists who may open each)."""
from django.urls import path, re_path

from console.views import (
    audit,
    auth,
    budgets,
    fleet,
    join,
    keys,
    members,
    overview,
    prices,
    quotas,
    registry,
    rollouts,
    slow,
    tenants,
    usage,
)
from sso import views as sso_views

app_name = "console"

urlpatterns = [
    path("", overview.home, name="home"),
    path("login/", auth.LoginView.as_view(), name="login"),
    path("logout/", auth.LogoutView.as_view(), name="logout"),
    # Single sign-on (docs/sso.md): the start of a provider's flow, and its one redirect URI
    path("sso/callback/", sso_views.SignInCallback.as_view(), name="sso-callback"),
    path("sso/<slug:provider>/", sso_views.SignInStart.as_view(), name="sso-start"),
    path("welcome/", overview.no_access, name="no-access"),
    # Tenants, members, quotas
    path("tenants/", tenants.tenant_list, name="tenants"),
    path("tenants/new", tenants.tenant_create, name="tenant-create"),
    path("tenants/<slug:slug>/", tenants.tenant_detail, name="tenant"),
    re_path(r"^tenants/(?P<slug>[a-z0-9-]+)/(?P<action>suspend|activate)$", tenants.tenant_status,
            name="tenant-status"),
    path("tenants/<slug:slug>/quota", tenants.quota_update, name="quota-update"),
    path("tenants/<slug:slug>/supersession", tenants.tenant_supersession, name="tenant-supersession"),
    path("tenants/<slug:slug>/quotas/new", quotas.policy_create, name="quota-policy-create"),
    path("tenants/<slug:slug>/quotas/<int:policy_id>/", quotas.policy_edit, name="quota-policy"),
    path("tenants/<slug:slug>/quotas/<int:policy_id>/delete", quotas.policy_delete, name="quota-policy-delete"),
    path("tenants/<slug:slug>/members/add", members.member_add, name="member-add"),
    path("tenants/<slug:slug>/members/<int:member_id>/role", members.member_role, name="member-role"),
    path("tenants/<slug:slug>/members/<int:member_id>/remove", members.member_remove, name="member-remove"),
    path("tenants/<slug:slug>/invitations/<int:invitation_id>/revoke", members.invitation_revoke,
         name="invitation-revoke"),
    path("tenants/<slug:slug>/grants/new", members.grant_create, name="grant-create"),
    path("tenants/<slug:slug>/grants/<int:grant_id>/revoke", members.grant_revoke, name="grant-revoke"),
    path("invitations/", members.my_invitations, name="invitations"),
    path("join/<str:token>/", join.join, name="join"),  # public: the one-time token is the credential
    re_path(r"^invitations/(?P<invitation_id>[0-9]+)/(?P<answer>accept|decline)$", members.invitation_answer,
            name="invitation-answer"),
    # API keys
    path("keys/", keys.key_list, name="keys"),
    path("keys/new", keys.key_create, name="key-create"),
    path("keys/platform/new", keys.platform_key_create, name="platform-key-create"),
    path("keys/<int:key_id>/revoke", keys.key_revoke, name="key-revoke"),
    path("keys/<int:key_id>/rotate", keys.key_rotate, name="key-rotate"),
    # Fleet
    path("fleet/", fleet.fleet_list, name="fleet"),
    path("fleet/deploy", fleet.deploy, name="deploy"),
    path("fleet/<int:pk>/", fleet.deployment_detail, name="deployment"),
    path("fleet/<int:pk>/instances.json", fleet.instances_json, name="instances-json"),
    path("fleet/<int:pk>/scale", fleet.scale, name="scale"),
    path("fleet/<int:pk>/scaling", fleet.scaling, name="scaling"),
    path("fleet/<int:pk>/routing", fleet.routing, name="routing"),
    path("fleet/<int:pk>/delete", fleet.delete, name="deployment-delete"),
    re_path(r"^fleet/(?P<pk>[0-9]+)/instances/(?P<instance_id>[0-9]+)/(?P<action>drain|restart)$",
            fleet.instance_action, name="instance-action"),
    path("fleet/<int:pk>/rollout/", rollouts.rollout_page, name="rollout"),
    path("fleet/<int:pk>/rollout/live", rollouts.rollout_live, name="rollout-live"),
    path("fleet/<int:pk>/rollout/start", rollouts.rollout_start, name="rollout-start"),
    re_path(r"^fleet/(?P<pk>[0-9]+)/rollouts/(?P<rollout_id>[0-9]+)/(?P<action>pause|resume|promote|roll-back)$",
            rollouts.rollout_action, name="rollout-action"),
    # Model registry
    path("models/", registry.model_list, name="models"),
    path("models/new", registry.model_create, name="model-create"),
    path("models/<int:model_id>/versions/new", registry.version_create, name="version-create"),
    re_path(r"^models/versions/(?P<version_id>[0-9]+)/(?P<action>publish|deprecate|retire)$",
            registry.version_action, name="version-action"),
    # Usage, budgets, prices, audit, slow requests
    path("usage/", usage.usage_page, name="usage"),
    path("budgets/", budgets.budget_list, name="budgets"),
    path("budgets/<slug:slug>/", budgets.budget_edit, name="budget-edit"),
    path("prices/", prices.price_list, name="prices"),
    path("prices/new", prices.price_create, name="price-create"),
    path("audit/", audit.audit_page, name="audit"),
    path("audit/export", audit.audit_export, name="audit-export"),
    path("audit/export/manifest", audit.audit_manifest, name="audit-manifest"),
    path("audit/verify", audit.audit_verify, name="audit-verify"),
    path("slow/", slow.slow_requests, name="slow"),
]
