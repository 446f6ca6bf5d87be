"""Per-object grants over REST: /api/v1/deployments/{id}/grants/ (tenants.object_grants).

The deployment is looked up under the fleet's read rule first, so another tenant's deployment is a 404
for every verb, like a missing one. Listing needs what listing members needs in the deployment's tenant;
granting and revoking need `manage_members` there, the permission the grant stands for (a granter hands
out nothing they lack), and a rank at or above the member's — as for tenant-wide grants.
"""
from django.http import Http404
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response

from audit.actor import Actor
from controlplane.api.viewsets import READ_ACTIONS, PrincipalMixin
from fleet.permissions import readable_deployments, reads_fleet_somewhere
from tenants import services
from tenants.access import grant_refusal, member_role
from tenants.models import Membership
from tenants.object_grants import DEPLOYMENT, grants_on
from tenants.roles import READ_RULES, Perm, Resource


class ObjectGrantSerializer(serializers.Serializer):
    """One member holds `permission` on this one object, whatever their role."""

    id = serializers.IntegerField(read_only=True)
    user_id = serializers.IntegerField(source="user.pk", read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)
    permission = serializers.CharField(source="permission.codename", read_only=True)


@extend_schema_serializer(examples=[OpenApiExample(
    "Let one member operate this deployment", value={"user_id": 42, "permission": "change_deployment"},
    request_only=True)])
class DeploymentGrantCreateSerializer(serializers.Serializer):
    user_id = serializers.IntegerField(min_value=1, max_value=2**63 - 1,
                                       help_text="A member of the deployment's tenant.")
    permission = serializers.ChoiceField(choices=[(code, label) for code, (_, label) in DEPLOYMENT.perms.items()])


class DeploymentGrantViewSet(PrincipalMixin, viewsets.GenericViewSet, mixins.ListModelMixin,
                             mixins.RetrieveModelMixin):
    """Who holds a per-object grant on one deployment; grant and revoke them."""

    serializer_class = ObjectGrantSerializer
    lookup_value_regex = r"[0-9]+"

    def get_deployment(self):
        if not hasattr(self, "_deployment"):
            deployment = (readable_deployments(self.principal).select_related("tenant")
                          .filter(pk=self.kwargs["deployment_pk"]).first())
            if deployment is None:
                raise Http404("No such deployment.")
            self._deployment = deployment
        return self._deployment

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication first: anonymous → 401, never 404
        if not reads_fleet_somewhere(self.principal):  # as the deployment endpoints: 403, not 404
            raise PermissionDenied("Your role does not allow reading this.")
        deployment = self.get_deployment()
        perms = READ_RULES[Resource.MEMBERS] if self.action in READ_ACTIONS else (Perm.MANAGE_MEMBERS,)
        if deployment.tenant is None:  # a shared pool: only platform admins read it, and it has no members
            return
        self.require(deployment.tenant, *perms)

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Membership.objects.none()
        return grants_on(self.get_deployment())

    @extend_schema(request=DeploymentGrantCreateSerializer, responses={201: ObjectGrantSerializer})
    def create(self, request, deployment_pk=None):
        serializer = DeploymentGrantCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        deployment, perm = self.get_deployment(), serializer.validated_data["permission"]
        if deployment.tenant is None:
            raise ValidationError({"deployment": "Shared pools belong to no tenant: they take no per-object grants."})
        membership = (Membership.objects.filter(tenant=deployment.tenant, user_id=serializer.validated_data["user_id"])
                      .select_related("user").first())
        if membership is None:
            raise ValidationError({"user_id": "No such member in this tenant."})
        self._check_may_grant(membership.role, perm)
        grant = services.grant_object_permission(obj=deployment, user=membership.user, perm=perm,
                                                 actor=Actor.from_request(request))
        return Response(ObjectGrantSerializer(grant).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request, deployment_pk=None, pk=None):
        grant = self.get_object()
        self._check_may_grant(member_role(grant.user, self.get_deployment().tenant), grant.permission.codename)
        services.revoke_object_permission(grant, actor=Actor.from_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _check_may_grant(self, member_role: str | None, perm: str) -> None:
        refusal = grant_refusal(self.principal, self.get_deployment().tenant, DEPLOYMENT.stands_for(perm), member_role)
        if refusal:
            raise PermissionDenied(refusal)
